//! The controller's log: every line to stdout and to `/tmp/controller_logs.log`, opened
//! for appending (created with mode 0666 less the umask, as Go's `os.OpenFile` does). The file is
//! uploaded as `assisted-installer-controller.logs`; people and triage tools read it, nothing
//! parses it. Opening it is a startup step whose failure ends the process (exit 1).

use anyhow::{Context, Result};
use std::fs::{File, OpenOptions};
use std::io::IsTerminal;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;
use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, Layer};

pub(crate) const LOG_PATH: &str = "/tmp/controller_logs.log";

/// Opens (creating) the log file for appending.
pub(crate) fn open_log_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o666)
        .open(path)
        .with_context(|| format!("opening the log file {}", path.display()))
}

/// The subscriber writing to both: `stdout` (colour when `ansi`) and `file` (plain).
fn subscriber<O, F>(stdout: O, ansi: bool, file: F) -> impl Subscriber + Send + Sync
where
    O: for<'w> MakeWriter<'w> + Send + Sync + 'static,
    F: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::registry()
        .with(
            fmt::layer()
                .with_writer(stdout)
                .with_ansi(ansi)
                .with_target(false)
                .with_filter(crate::logging::filter(false)),
        )
        .with(
            fmt::layer()
                .with_writer(file)
                .with_ansi(false)
                .with_target(false)
                .with_filter(crate::logging::filter(false)),
        )
}

/// Sends the process's logs to stdout and `file` from now on (a no-op when a subscriber is
/// already set).
pub(crate) fn init(file: File) {
    let _ = subscriber(
        std::io::stdout,
        std::io::stdout().is_terminal(),
        Mutex::new(file),
    )
    .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;

    #[test]
    fn appends_to_an_existing_file_and_creates_a_missing_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("controller_logs.log");
        std::fs::write(&path, "earlier run\n").unwrap();
        let mut f = open_log_file(&path).unwrap();
        f.write_all(b"this run\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "earlier run\nthis run\n"
        );
        let fresh = dir.path().join("new.log");
        open_log_file(&fresh).unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & !0o666, 0, "never more than 0666: {mode:o}");
        assert_eq!(mode & 0o600, 0o600, "owner read-write: {mode:o}");
    }

    #[test]
    fn every_line_goes_to_both() {
        let dir = tempfile::tempdir().unwrap();
        let (out, file) = (dir.path().join("stdout"), dir.path().join("file"));
        let create = |p: &Path| Arc::new(File::create(p).unwrap());
        let sub = subscriber(create(&out), false, create(&file));
        tracing::subscriber::with_default(sub, || {
            tracing::info!("first line");
            tracing::warn!("second line");
        });
        for path in [out, file] {
            let text = std::fs::read_to_string(path).unwrap();
            assert!(
                text.contains("INFO") && text.contains("first line"),
                "{text}"
            );
            assert!(
                text.contains("WARN") && text.contains("second line"),
                "{text}"
            );
            assert!(!text.contains('\u{1b}'), "no colour codes: {text:?}");
        }
    }
}
