//! Logs go to stderr through `tracing` (stdout carries only results, such as the summary). The
//! installer entrypoint, like the Go installer, also appends them to
//! /var/log/assisted-installer.log and sends them to journald with `TAG=installer` (what the
//! agent's logs_sender collects).

pub(crate) mod journald;

use std::fs::OpenOptions;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Mutex;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer};

pub(crate) fn filter(verbose: bool) -> EnvFilter {
    let default = if verbose { "debug" } else { "info" };
    EnvFilter::try_from_env("ASSISTED_INSTALLER_LOG").unwrap_or_else(|_| EnvFilter::new(default))
}

pub fn init(verbose: bool) {
    init_with_file(verbose, None, None);
}

/// stderr, plus `file` (appended) when given, plus journald with these extra fields when
/// given; a file or journal that cannot be used is skipped, never fatal.
pub(crate) fn init_with_file(
    verbose: bool,
    file: Option<&Path>,
    journal: Option<Vec<(String, String)>>,
) {
    let stderr = fmt::layer()
        .with_writer(std::io::stderr)
        // Colour only for people: journals and CI logs get plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .with_filter(filter(verbose));
    let file_layer =
        file.and_then(
            |path| match OpenOptions::new().create(true).append(true).open(path) {
                Ok(f) => Some(
                    fmt::layer()
                        .with_writer(Mutex::new(f))
                        .with_ansi(false)
                        .with_target(false)
                        .with_filter(filter(verbose)),
                ),
                Err(e) => {
                    eprintln!(
                        "cannot open the log file {}: {e}; logging to stderr only",
                        path.display()
                    );
                    None
                }
            },
        );
    let journal_layer = journal
        .and_then(|fields| journald::JournaldLayer::new(Path::new(journald::SOCKET), fields))
        .map(|l| l.with_filter(filter(verbose)));
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file_layer)
        .with(journal_layer)
        .try_init();
}

/// The warnings logged on this thread while `f` runs, one a line, with its result.
#[cfg(test)]
pub(crate) fn warnings_during<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let file = tempfile::NamedTempFile::new().unwrap();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file.reopen().unwrap()))
        .finish();
    let value = tracing::subscriber::with_default(subscriber, f);
    let text = std::fs::read_to_string(file.path()).unwrap();
    (value, text.lines().map(str::to_string).collect())
}
