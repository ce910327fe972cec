//! Go's `main` after startup, over trait objects: [`run`] takes the clients as constructors, the
//! clock, the signal stop token and the `oc` runners, and returns how the process ends. Startup
//! failures (no client, no Proxy object, no cluster within SetReadyState's limit) are errors:
//! the caller exits 1 and the Job restarts the container.
//!
//! Every step is in Go's order. [`Outcome::ExitNow`] is Go's `os.Exit(0)`: nothing joined,
//! nothing finalized. A signal ends the completion wait with an error and no shutdown: Go has no
//! signal handling and dies of SIGTERM, so the Job restarts it; the final log upload (up to
//! 70 min) would only be cut short by the pod's SIGKILL.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::bootstrap;
use super::config::ControllerConfig;
use super::service::ControllerService;
use super::status::ControllerStatus;
use super::tasks::bmh::BmhUpdate;
use super::tasks::completion::{
    post_install_configs, wait_for_installation, wait_for_installation_abi, PostInstallSettings,
    WaitOutcome, INSTALL_STATUS_INTERVAL,
};
use super::tasks::dns_fix;
use super::tasks::labels::NodeLabels;
use super::tasks::logs::{
    LogUploader, LOGS_UPLOAD_PERIOD, RESOLV_CONF_FILES, SUMMARY_LOGS_PERIOD, SUMMARY_LOGS_WINDOW,
};
use super::tasks::nodes::{NodeStatus, GENERAL_WAIT};
use super::tasks::olm::{abi_post_install, wait_for_olm_operators, SNO_KUBECONFIG};
use super::tasks::ready::{ready_phase, ReadyPhase};
use super::tasks::reboots::RebootsNotifier;
use super::tasks::router_probe::HttpProbe;
use super::tasks::OrLog;
use crate::clock::Clock;
use crate::host::commands::CommandRunner;
use crate::image::Cancel;
use crate::kube::install_config::INVOKER_AGENT;
use crate::kube::ClusterApi;

/// The error when the signal token ends the completion wait.
const STOPPED_BY_SIGNAL: &str =
    "stopped by a signal before the installation finished; the tasks are abandoned";
/// The platform type for which the BMH task runs.
const BAREMETAL: &str = "baremetal";

/// How the main sequence ended (startup failures are `Err`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The completion wait returned and the shutdown ran: exit 0. `error` is the shared error
    /// flag at the end (the exit code is 0 either way, as Go).
    Done { error: bool },
    /// The completion wait asked for Go's `os.Exit(0)`: exit 0 at once, no cleanup.
    ExitNow,
}

/// What a task started by main gets.
#[derive(Clone)]
struct TaskEnv {
    config: Arc<ControllerConfig>,
    cluster: Arc<dyn ClusterApi>,
    service: Arc<dyn ControllerService>,
    clock: Arc<dyn Clock>,
    /// Go's main ctx: a child of the signal token, cancelled by the shutdown step.
    stop: Cancel,
    status: Arc<ControllerStatus>,
    cvo_timeout: Duration,
    /// The reboots notifier, whose kubeconfig download the ABI post-install shares.
    notifier: Arc<RebootsNotifier>,
}

impl TaskEnv {
    /// The node-status task (node stages, CSR approval, the taint) over this environment.
    fn node_status(&self, remove_uninitialized_taint: bool) -> NodeStatus<'_> {
        NodeStatus {
            cluster: &*self.cluster,
            service: &*self.service,
            clock: &*self.clock,
            notifier: &*self.notifier,
            remove_uninitialized_taint,
        }
    }
}

/// The setter of a process environment variable (clippy's type-complexity limit).
pub(crate) type SetEnv = Box<dyn FnMut(&str, &str)>;

/// Everything [`run`] needs.
pub(crate) struct Controller {
    pub config: ControllerConfig,
    /// The Kubernetes client.
    pub build_cluster: Box<dyn FnOnce() -> Result<Arc<dyn ClusterApi>>>,
    /// The setter of the proxy variables in the process environment.
    pub set_env: SetEnv,
    /// The service client, built once the proxy environment is set.
    pub build_service: Box<dyn FnOnce() -> Result<Arc<dyn ControllerService>>>,
    pub clock: Arc<dyn Clock>,
    /// The signal stop token.
    pub signal: Cancel,
    /// Runs `oc` (through `bash` as Go does): the reboots count, must-gather, and the OLM
    /// operators' manifests applied with the admin kubeconfig (the controller's ServiceAccount
    /// may not create arbitrary objects).
    pub oc: Arc<dyn CommandRunner>,
    /// The SNO router probe's client (`None`: no probe).
    pub router_probe: Option<Arc<dyn HttpProbe>>,
    /// The console/CVO cap of post-install: Go's 10 h (`CVO_MAX_TIMEOUT`); the tests raise it
    /// out of reach of the fake clock that all threads move. Every other interval is Go's.
    pub cvo_timeout: Duration,
    /// The log file the upload reads, and where must-gather runs.
    pub log_file: PathBuf,
    pub must_gather_dir: PathBuf,
}

fn spawn(
    handles: &mut Vec<(&'static str, JoinHandle<()>)>,
    name: &'static str,
    f: impl FnOnce() + Send + 'static,
) -> Result<()> {
    let handle = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .with_context(|| format!("starting the {name} task"))?;
    handles.push((name, handle));
    Ok(())
}

/// Go's `main` after startup; see the module documentation.
pub(crate) fn run(mut c: Controller) -> Result<Outcome> {
    let (cluster, service) = bootstrap::connect(c.build_cluster, &mut *c.set_env, c.build_service)?;
    let notifier = Arc::new(RebootsNotifier::new(
        c.config.notify_num_reboots,
        service.clone(),
        c.oc.clone(),
        c.clock.clone(),
        std::env::temp_dir(),
    ));
    let stop = c.signal.child();
    let status = Arc::new(ControllerStatus::default());
    let mut dns = None;
    if !c.config.dry_enable {
        dns = Some(dns_fix::spawn(cluster.clone(), c.clock.clone())?);
    }

    let phase = ready_phase(
        &*cluster,
        &*service,
        &*c.clock,
        &stop,
        &c.config.namespace,
        c.config.control_plane_count,
        &c.config.openshift_version,
    )?;
    let env = TaskEnv {
        config: Arc::new(c.config),
        cluster,
        service,
        clock: c.clock,
        stop,
        status,
        cvo_timeout: c.cvo_timeout,
        notifier: notifier.clone(),
    };
    let mut handles = Vec::new();
    let readiness = match phase {
        ReadyPhase::AbiSingleNode => {
            let (env2, oc) = (env.clone(), c.oc.clone());
            spawn(&mut handles, "abi-post-install", move || {
                abi_post_install_task(&env2, &*oc, SNO_KUBECONFIG)
            })?;
            if !wait_for_installation_abi(
                &*env.clock,
                &env.stop,
                &*env.cluster,
                INSTALL_STATUS_INTERVAL,
                0,
                None,
            ) {
                bail!(STOPPED_BY_SIGNAL);
            }
            // Go returns from main here: no thread is waited for.
            notifier.finalize();
            return Ok(Outcome::Done {
                error: env.status.has_error(),
            });
        }
        ReadyPhase::Ready(readiness) => readiness,
    };
    let abi = readiness.invoker == INVOKER_AGENT;
    let untaint = readiness.remove_uninitialized_taint;

    // 1. Node status, with CSR approval.
    {
        let env = env.clone();
        spawn(&mut handles, "node-status", move || {
            let _ = env.node_status(untaint).run(&env.stop);
        })?;
    }
    // 2. Post-install.
    if abi {
        let (env, oc) = (env.clone(), c.oc.clone());
        spawn(&mut handles, "abi-post-install", move || {
            abi_post_install_task(&env, &*oc, "")
        })?;
    } else {
        let (env, oc) = (env.clone(), c.oc.clone());
        spawn(&mut handles, "post-install", move || {
            let settings = PostInstallSettings {
                openshift_version: env.config.openshift_version.clone(),
                check_cluster_version: env.config.check_cluster_version,
                cvo_timeout: env.cvo_timeout,
            };
            let mut step = || {
                wait_for_olm_operators(
                    &*env.clock,
                    &env.stop,
                    &*env.cluster,
                    &*env.service,
                    &*oc,
                    &env.status,
                    &env.config.openshift_version,
                )
            };
            post_install_configs(
                &*env.clock,
                &env.stop,
                &*env.cluster,
                &*env.service,
                &env.status,
                &settings,
                &mut step,
            );
        })?;
    }
    // 3. BMH, only for a bare-metal cluster.
    if readiness.cluster.is_some() && readiness.platform == BAREMETAL {
        let env = env.clone();
        spawn(&mut handles, "bmh", move || {
            let ended = BmhUpdate::new(&*env.cluster, &*env.clock).run(&env.stop);
            ended.or_warn("updating the BareMetalHosts ended");
        })?;
    } else {
        tracing::info!("Cluster platform is not baremetal, skipping BMH");
    }
    // 4. Log upload: periodic until stopped, then the final upload.
    {
        let env = env.clone();
        spawn(&mut handles, "logs", move || {
            let mut uploader = LogUploader {
                cluster: &*env.cluster,
                service: &*env.service,
                status: &env.status,
                oc: &*c.oc,
                namespace: env.config.namespace.clone(),
                must_gather_image: env.config.must_gather_image.clone(),
                log_file: c.log_file,
                must_gather_dir: c.must_gather_dir,
                resolv_conf_files: RESOLV_CONF_FILES.iter().map(PathBuf::from).collect(),
                pod_name: None,
                control_plane_count: env.config.control_plane_count,
                router_probe: c.router_probe.as_deref(),
            };
            uploader.periodic(&*env.clock, &env.stop, LOGS_UPLOAD_PERIOD);
            if abi {
                tracing::info!("assisted-service is offline in agent installer mode. final log uploads skipped.");
            } else {
                uploader.final_upload(&*env.clock, SUMMARY_LOGS_PERIOD, SUMMARY_LOGS_WINDOW);
            }
        })?;
    }
    // 5. Node labels.
    {
        let env = env.clone();
        spawn(&mut handles, "labels", move || {
            let (cluster, service, clock) = (&*env.cluster, &*env.service, &*env.clock);
            let labels = NodeLabels {
                cluster,
                service,
                clock,
            };
            labels
                .run(&env.stop)
                .or_warn("updating the node labels ended");
        })?;
    }

    // The completion wait.
    if abi {
        let mut untaint_node = |node: &crate::kube::Node| {
            let untainted = env.node_status(true).untaint(&node.name);
            untainted.or_warn(format_args!(
                "removing the uninitialized taint of {}",
                node.name
            ));
        };
        let untaint_fn = untaint.then_some(&mut untaint_node as &mut dyn FnMut(&_));
        if !wait_for_installation_abi(
            &*env.clock,
            &env.stop,
            &*env.cluster,
            INSTALL_STATUS_INTERVAL,
            env.config.control_plane_count,
            untaint_fn,
        ) {
            bail!(STOPPED_BY_SIGNAL);
        }
    } else {
        let outcome = wait_for_installation(
            &*env.clock,
            &env.stop,
            &*env.service,
            &env.status,
            INSTALL_STATUS_INTERVAL,
        );
        match outcome {
            WaitOutcome::Finished => {}
            WaitOutcome::ExitNow => return Ok(Outcome::ExitNow),
            WaitOutcome::Stopped => bail!(STOPPED_BY_SIGNAL),
        }
    }

    // The shutdown (the final log upload included), then the notifier.
    tracing::info!("stopping the controller's tasks");
    env.stop.cancel();
    for (name, handle) in handles {
        if handle.join().is_err() {
            tracing::error!("the {name} task panicked");
        }
    }
    if let Some(dns) = dns {
        if dns.join().is_err() {
            tracing::error!("the DNS fix panicked");
        }
    }
    notifier.finalize();
    Ok(Outcome::Done {
        error: env.status.has_error(),
    })
}

/// Go's `PostInstallConfigsK8sClient`, the ABI invoker's post-install: the OLM manifests of the
/// `olm-operator-manifests` ConfigMap applied, every general interval until done. `kubeconfig`
/// is the single-node path, or "" for the reboots notifier's shared download.
fn abi_post_install_task(env: &TaskEnv, oc: &dyn CommandRunner, kubeconfig: &str) {
    let source = || match kubeconfig {
        "" => env.notifier.kubeconfig(),
        path => Ok(PathBuf::from(path)),
    };
    if !abi_post_install(
        &*env.clock,
        &env.stop,
        &*env.cluster,
        oc,
        &env.config.namespace,
        &env.config.openshift_version,
        &source,
        GENERAL_WAIT,
    ) {
        tracing::info!("the ABI post-install task stopped before the manifests were applied");
    }
}

#[cfg(test)]
mod tests;
