//! `assisted-installer controller`, and the binary run as `assisted-installer-controller`: the
//! assisted-installer-controller Job's process (see `crate::controller`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;

use crate::clock::{Clock, SystemClock};
use crate::controller::bootstrap;
use crate::controller::run::{self, Controller, ExtraTasks, Intervals, LogPaths, Outcome};
use crate::controller::startup::{self, Paths};
use crate::controller::tasks::bmh::BmhUpdate;
use crate::controller::tasks::labels::NodeLabels;
use crate::controller::tasks::logs::{OcMustGather, MUST_GATHER_DIR};
use crate::controller::tasks::olm::{wait_for_olm_operators, OcApplier, OlmSettings};
use crate::controller::tasks::reboots::OcRebootCounter;
use crate::controller::tasks::router_probe::{HttpProbe, ReqwestProbe};
use crate::controller::{self as ctrl};
use crate::host::commands::LocalRunner;
use crate::image::Cancel;
use crate::signals;

/// The file name under which the binary is the controller (the Job's image entrypoint).
pub const ARGV0_NAME: &str = "assisted-installer-controller";

/// Whether the program name `argv0` (a path) makes this process the controller.
pub fn is_controller_argv0(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .is_some_and(|name| name == ARGV0_NAME)
}

/// Runs the controller from the process environment (§3.1), with Go's exit codes: `Ok` is exit
/// 0 (the Job completes), every error is a startup failure (exit 1: the Job restarts the
/// container), and the completion wait's `os.Exit(0)` ends the process here at once.
///
/// Dry mode (`DRY_ENABLE=true`, §3.16): step 5 builds the pretend cluster of the dry-run hosts
/// that startup parsed (`controller::cluster::dry`) instead of a client; the service is real.
///
/// The OLM step (§3.9), the ABI post-install task (§3.10), the BMH task (§3.11) and the node
/// labels (§3.13) are [`ExtraTasks`] of [`run::run`]; those not built yet are not started, and
/// the run logs a warning where Go would start each.
pub fn run() -> Result<()> {
    let env = |name: &str| std::env::var(name).ok();
    let stop = Cancel::new();
    signals::cancel_on_signal(&stop)?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let started = startup::prepare(&env, &Paths::from_env(&env), &*clock, &stop)?;
    ctrl::log::init(started.log_file);
    tracing::info!("{}", startup::config_line(&started.config));
    // Step 4's command executor (`oc` for the reboot count). Its children inherit the process
    // environment, so unlike Go's (which snapshots it here) they also see step 6's proxy
    // variables.
    let runner = Arc::new(LocalRunner::default());
    let router_probe = match ReqwestProbe::new() {
        Ok(probe) => Some(Arc::new(probe) as Arc<dyn HttpProbe>),
        Err(err) => {
            tracing::warn!("no HTTP client for the router probe: {err:#}");
            None
        }
    };
    let config = started.config;
    let dry_hosts = started.dry_hosts;
    let (kube_config, service_config, service_clock) =
        (config.clone(), config.clone(), clock.clone());
    let log_file = Paths::from_env(&env).log_file;
    let controller = Controller {
        config,
        build_cluster: Box::new(move || bootstrap::kube_cluster(&kube_config, &dry_hosts)),
        set_env: Box::new(bootstrap::set_process_env),
        build_service: Box::new(move || bootstrap::service_client(&service_config, service_clock)),
        clock,
        signal: Arc::new(stop.clone()),
        must_gather: Arc::new(OcMustGather),
        reboot_counter: Arc::new(OcRebootCounter {
            runner: runner.clone(),
        }),
        router_probe,
        intervals: Intervals::production(),
        log_paths: LogPaths {
            log_file,
            must_gather_dir: PathBuf::from(MUST_GATHER_DIR),
        },
        extra: ExtraTasks {
            olm: Some(olm_step(runner)),
            bmh: Some(Box::new(|env: &run::TaskEnv| {
                if let Err(e) =
                    BmhUpdate::new(env.cluster.as_ref(), env.clock.as_ref()).run(env.stop.as_ref())
                {
                    tracing::warn!("updating the BareMetalHosts ended: {e}");
                }
            })),
            labels: Some(Box::new(|env: &run::TaskEnv| {
                if let Err(e) = NodeLabels::new(
                    env.cluster.as_ref(),
                    env.service.as_ref(),
                    env.clock.as_ref(),
                )
                .run(env.stop.as_ref())
                {
                    tracing::warn!("updating the node labels ended: {e}");
                }
            })),
            ..ExtraTasks::default()
        },
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

/// §3.9 inside post-install: the OLM operators' manifests applied with `oc` (the admin
/// kubeconfig: the controller's ServiceAccount may not create arbitrary objects) and their
/// CSVs waited for.
fn olm_step(runner: Arc<LocalRunner>) -> run::OlmStep {
    Box::new(move |env: &run::TaskEnv| {
        wait_for_olm_operators(
            env.clock.as_ref(),
            env.stop.as_ref(),
            env.cluster.as_ref(),
            env.service.as_ref(),
            &OcApplier {
                runner: runner.as_ref(),
            },
            &env.status,
            &OlmSettings::new(&env.config.openshift_version),
        )
    })
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
