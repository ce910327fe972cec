//! Support shared by the integration tests: the one test HTTP server and the fakes of the
//! assisted-service and the Kubernetes API (in memory and on that server), the scenario
//! `Flow` builder and disk writer, small synthetic GPT images, root and loop-device helpers, an
//! HTTPS server with a CA of its own, the package's example programs (built on demand), the
//! standalone fake service's report, and the dry-run master install the entrypoint tests run.
#![allow(dead_code)]

pub(crate) mod examples;
pub(crate) mod fake_kube;
pub(crate) mod fake_service;
pub(crate) mod fake_writer;
pub(crate) mod flow_builder;
pub(crate) mod http_server;
pub(crate) mod images;
pub(crate) mod live_ns;
pub(crate) mod master_run;
pub(crate) mod root;
pub(crate) mod service_report;
pub(crate) mod tls_server;
pub(crate) mod untar;
pub(crate) mod vm;
