//! Support shared by the integration tests, one subject a module.
#![allow(dead_code)]

pub(crate) mod examples;
pub(crate) mod fake_kube;
pub(crate) mod fake_service;
pub(crate) mod firmware;
pub(crate) mod flow_builder;
pub(crate) mod http_proxy;
pub(crate) mod http_server;
pub(crate) mod images;
pub(crate) mod kexec_guest;
pub(crate) mod live_ns;
pub(crate) mod master_run;
pub(crate) mod podman;
pub(crate) mod root;
pub(crate) mod service_report;
pub(crate) mod tls_server;
pub(crate) mod vm;

/// A tracing subscriber writing every event up to `level` (without colours) into a temporary
/// file, and the text written so far.
pub(crate) fn log_capture(
    level: tracing::Level,
) -> (impl tracing::Subscriber + Send + Sync, impl Fn() -> String) {
    let file = tempfile::NamedTempFile::new().expect("a temporary log file");
    let writer = std::sync::Mutex::new(file.reopen().expect("the log file"));
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(writer)
        .with_ansi(false)
        .finish();
    (subscriber, move || {
        std::fs::read_to_string(file.path()).unwrap()
    })
}

/// The entries of a tar.gz the programs upload (controller logs, must-gather), in order:
/// (name, bytes); directories have no bytes.
pub(crate) fn untar_gz(archive: &[u8]) -> Vec<(String, Vec<u8>)> {
    use std::io::Read;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    let entries = tar.entries().expect("a tar.gz stream");
    entries
        .map(|entry| {
            let mut entry = entry.expect("a valid tar entry");
            let name = entry.path().expect("a path").to_string_lossy().into_owned();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).expect("the entry's bytes");
            (name, data)
        })
        .collect()
}
