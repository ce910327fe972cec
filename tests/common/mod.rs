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

/// A tracing subscriber writing every event up to `level` (without colours) into a buffer, and
/// the text written so far.
pub(crate) fn log_capture(
    level: tracing::Level,
) -> (impl tracing::Subscriber + Send + Sync, impl Fn() -> String) {
    let buffer = LogBuffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let text = move || String::from_utf8_lossy(&buffer.0.lock().unwrap()).into_owned();
    (subscriber, text)
}

#[derive(Clone, Default)]
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
