//! Support shared by the integration tests: the one test HTTP server and the fakes of the
//! assisted-service and the Kubernetes API (in memory and on that server), the scenario
//! `Flow` builder and disk writer, small synthetic GPT images, root and loop-device helpers.
#![allow(dead_code)]

pub mod fake_kube;
pub mod fake_service;
pub mod fake_writer;
pub mod flow_builder;
pub mod http_server;
pub mod images;
pub mod live_ns;
pub mod osmet_pack;
pub mod root;
