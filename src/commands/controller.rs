//! `assisted-installer controller`, and the binary run as `assisted-installer-controller`: the
//! assisted-installer-controller Job's process (see `crate::controller`).

use anyhow::{anyhow, Result};

use crate::clock::SYSTEM_CLOCK;
use crate::controller::startup::{self, Paths};
use crate::controller::{self as ctrl};
use crate::image::Cancel;
use crate::signals;

/// The file name under which the binary is the controller (the Job's image entrypoint).
pub const ARGV0_NAME: &str = "assisted-installer-controller";

/// What this slice does not build yet; `run` ends with it after the startup steps.
pub const NOT_BUILT: &str = "the assisted-installer-controller is not complete: startup steps \
     1-4 (environment, token, dry mode, log file) ran, but the Kubernetes and service clients \
     and the controller's tasks (issue 13) are not built yet";

/// Whether the program name `argv0` (a path) makes this process the controller.
pub fn is_controller_argv0(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .is_some_and(|name| name == ARGV0_NAME)
}

/// Runs the controller from the process environment. Every error is a startup failure (exit 1).
pub fn run() -> Result<()> {
    let env = |name: &str| std::env::var(name).ok();
    let stop = Cancel::new();
    signals::cancel_on_signal(&stop)?;
    let started = startup::prepare(&env, &Paths::from_env(&env), SYSTEM_CLOCK, &stop)?;
    ctrl::log::init(started.log_file);
    tracing::info!("{}", startup::config_line(&started.config));
    let e = anyhow!(NOT_BUILT);
    tracing::error!("{e}");
    Err(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_controller_name_is_matched_on_the_file_name_only() {
        assert!(is_controller_argv0(OsStr::new(
            "assisted-installer-controller"
        )));
        assert!(is_controller_argv0(OsStr::new(
            "/usr/bin/assisted-installer-controller"
        )));
        assert!(is_controller_argv0(OsStr::new(
            "./assisted-installer-controller"
        )));
        assert!(!is_controller_argv0(OsStr::new("assisted-installer")));
        assert!(!is_controller_argv0(OsStr::new(
            "/assisted-installer-controller/bin/assisted-installer"
        )));
        assert!(!is_controller_argv0(OsStr::new(
            "assisted-installer-controller2"
        )));
        assert!(!is_controller_argv0(OsStr::new("")));
    }
}
