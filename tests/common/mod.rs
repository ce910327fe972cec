//! Support shared by the integration tests: the fault-injecting HTTP server, small synthetic GPT
//! images, compressors, root and loop-device helpers.
#![allow(dead_code)]

pub mod http_server;
pub mod images;
pub mod live_ns;
pub mod osmet_pack;
pub mod root;
