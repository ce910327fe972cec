//! `assisted-installer controller`, and the binary run as `assisted-installer-controller`: the
//! assisted-installer-controller Job's process (see `crate::controller`).

use std::sync::Arc;

use anyhow::Result;

use crate::clock::{Clock, SystemClock};
use crate::controller::bootstrap;
use crate::controller::oc::OcRunner;
use crate::controller::run::{self, Controller, Outcome};
use crate::controller::startup::{self, Paths};
use crate::controller::tasks::operators::CVO_MAX_TIMEOUT;
use crate::controller::tasks::router_probe::{HttpProbe, ReqwestProbe};
use crate::controller::{self as ctrl};
use crate::host::commands::HostRunner;
use crate::image::Cancel;
use crate::signals;

/// The file name under which the binary is the controller (the Job's image entrypoint).
const ARGV0_NAME: &str = "assisted-installer-controller";

/// Whether a process started with `args` (argv[0] first) is the controller: its file name is
/// [`ARGV0_NAME`], or it has no argument (how the Job runs the image's entrypoint).
pub fn is_controller_invocation(mut args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    match args.next() {
        Some(argv0) => {
            let name = std::path::Path::new(&argv0).file_name();
            name.is_some_and(|name| name == ARGV0_NAME) || args.next().is_none()
        }
        None => true,
    }
}

/// Runs the controller from the process environment (Go's `main`), with Go's exit codes: `Ok` is exit
/// 0 (the Job completes), every error is a startup failure (exit 1: the Job restarts the
/// container), and the completion wait's `os.Exit(0)` ends the process here at once.
///
/// Dry mode (`DRY_ENABLE=true`, Go's load-testing mode): the Kubernetes client is the pretend cluster of the dry-run hosts
/// that startup parsed (`kube::dry`) instead of a client; the service is real.
pub fn run() -> Result<()> {
    let env = |name: &str| std::env::var(name).ok();
    let stop = Cancel::new();
    signals::cancel_on_signal(&stop)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let paths = Paths::from_env(&env);
    let started = startup::prepare(&env, &paths, &*clock, &stop).map_err(|err| {
        match env("CLUSTER_ID") {
            // Most likely the installer run without its flags, not the Job.
            None => err.context(
                "running as the assisted-installer-controller (no arguments were given) \
                 without the Job's environment; to install this host, pass the installer's \
                 flags (--role, --cluster-id, …)",
            ),
            Some(_) => err,
        }
    })?;
    ctrl::log::init(started.log_file);
    tracing::info!("{}", startup::config_line(&started.config));
    // The command executor (`oc`, `bash`): as Go's, it keeps the proxy variables of now, not
    // those set later from the cluster's Proxy object: `oc` children do not see the cluster proxy.
    let host = Arc::new(HostRunner {
        env: bootstrap::command_proxy_snapshot(&env),
        ..HostRunner::default()
    });
    let runner = Arc::new(OcRunner::new(host, which::which("oc").is_ok()));
    let router_probe = match ReqwestProbe::new() {
        Ok(probe) => Some(Arc::new(probe) as Arc<dyn HttpProbe>),
        Err(err) => {
            tracing::warn!("no HTTP client for the router probe: {err:#}");
            None
        }
    };
    let config = started.config;
    let log_file = paths.log_file.clone();
    let dry_hosts = started.dry_hosts;
    let (kube_config, service_config, service_clock) =
        (config.clone(), config.clone(), clock.clone());
    let controller = Controller {
        config,
        build_cluster: Box::new(move || {
            bootstrap::kube_cluster(&kube_config, &paths.service_account_dir, &dry_hosts)
        }),
        set_env: Box::new(bootstrap::set_process_env),
        build_service: Box::new(move || bootstrap::service_client(&service_config, service_clock)),
        clock,
        signal: stop.clone(),
        oc: runner,
        router_probe,
        cvo_timeout: CVO_MAX_TIMEOUT,
        log_file,
        must_gather_dir: paths.must_gather_dir.clone(),
    };
    match run::run(controller) {
        Ok(Outcome::Done { error }) => {
            tracing::info!("the assisted-installer-controller is done (errors: {error})");
            Ok(())
        }
        Ok(Outcome::ExitNow) => {
            tracing::info!("exiting at once");
            std::process::exit(0)
        }
        Err(err) => {
            tracing::error!("{err:#}");
            Err(err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn the_controller_is_named_by_its_file_name_or_run_without_arguments() {
        let run = |args: &[&str]| is_controller_invocation(args.iter().map(OsString::from));
        for (argv0, controller) in [
            ("assisted-installer-controller", true),
            ("/usr/bin/assisted-installer-controller", true),
            ("./assisted-installer-controller", true),
            ("assisted-installer", false),
            (
                "/assisted-installer-controller/bin/assisted-installer",
                false,
            ),
            ("assisted-installer-controller2", false),
            ("", false),
        ] {
            assert_eq!(run(&[argv0, "--role"]), controller, "{argv0}");
        }
        assert!(run(&["/usr/bin/installer"]));
        assert!(run(&["/usr/bin/assisted-installer-controller"]));
        assert!(!run(&["/usr/bin/installer", "--role", "master"]));
        assert!(!run(&["assisted-installer", "controller"]));
    }
}
