//! Logs go to stderr through `tracing` (stdout carries only results, such as the summary).

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

pub fn init(verbose: bool) {
    let default = if verbose { "debug" } else { "info" };
    let filter = EnvFilter::try_from_env("ASSISTED_INSTALLER_LOG")
        .unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for people: journals and CI logs get plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}
