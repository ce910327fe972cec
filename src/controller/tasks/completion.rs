//! The end of the install for the assisted-service invoker: post-install (`PostInstallConfigs`),
//! the `complete-installation` body and its retries, and the completion wait
//! (`waitForInstallation`).
//!
//! Go's completion wait calls `os.Exit(0)` when the service answers 404 once or 401 three
//! times. A library must not end the process, so [`wait_for_installation`] returns
//! [`WaitOutcome::ExitNow`] and the caller exits 0 at once, skipping the final log upload.
//!
//! Go's tests give the main context a deadline, so their router-CA failure reads "context
//! deadline exceeded"; in production the main context is only ever cancelled, which is what the
//! stop token models, so ours reads "context canceled".

use super::{OrLog, GENERAL_WAIT};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::clock::poll;
use crate::clock::{Clock, Stop};
use crate::controller::service::ControllerService;
use crate::controller::status::ControllerStatus;
use crate::controller::tasks::operators::{
    cluster_operators_round, ctx_cause, status_from_conditions, CLUSTER_OPERATORS_INTERVAL,
};
use crate::kube::ClusterApi;
use crate::service::{CompletionParams, FinalizingStage, OperatorMonitorReport, ServiceError};

/// The completion wait's interval (Go's install-status poll).
pub(crate) const INSTALL_STATUS_INTERVAL: Duration = Duration::from_secs(60);
use crate::openshift::{INGRESS_CERT_KEY, INGRESS_CERT_NAME, INGRESS_CERT_NAMESPACE};
/// The `data` key of a failed completion.
pub(crate) const CLUSTER_OPERATORS_REPORT: &str = "CLUSTER_OPERATORS_REPORT";

/// How the completion wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitOutcome {
    /// The cluster is `installed`, `cancelled`, `adding-hosts` or `error` (the error flag set).
    Finished,
    /// The stop token fired first (not a Go outcome: Go's wait has no context).
    Stopped,
    /// Go's `os.Exit(0)`: the service lost the cluster (404) or the token (401 ×3). The caller
    /// exits 0 at once, with no final log upload and no cleanup.
    ExitNow,
}

/// The completion wait's counter: 404 adds 3, 401 adds 1, other errors nothing; a success
/// resets it; 3 or more means exit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExitCounter(u32);

impl ExitCounter {
    /// Counts `err`; whether the process should now exit.
    pub(crate) fn error(&mut self, err: &anyhow::Error) -> bool {
        let status = err
            .chain()
            .find_map(|e| e.downcast_ref::<ServiceError>())
            .and_then(|e| e.status);
        self.0 += match status {
            Some(404) => 3,
            Some(401) => 1,
            _ => 0,
        };
        self.0 >= 3
    }

    pub(crate) fn success(&mut self) {
        self.0 = 0;
    }
}

/// `waitForInstallation`: sleep `interval` first, then `v2GetCluster` (hosts excluded), forever.
pub(crate) fn wait_for_installation(
    clock: &dyn Clock,
    stop: &dyn Stop,
    service: &dyn ControllerService,
    status: &ControllerStatus,
    interval: Duration,
) -> WaitOutcome {
    let mut counter = ExitCounter::default();
    loop {
        if clock.sleep_or_stop(interval, stop) {
            return WaitOutcome::Stopped;
        }
        match service.get_cluster(true) {
            Err(err) => {
                tracing::warn!("getting the cluster's status: {err:#}");
                if counter.error(&err) {
                    tracing::error!(
                        "the service lost the cluster or refuses the token; exiting at once"
                    );
                    return WaitOutcome::ExitNow;
                }
            }
            Ok(cluster) => {
                counter.success();
                match cluster.status.as_str() {
                    "error" => {
                        tracing::error!("the cluster is in error: {}", cluster.status_info);
                        status.error();
                        return WaitOutcome::Finished;
                    }
                    "cancelled" | "installed" | "adding-hosts" => {
                        tracing::info!("the cluster is {}", cluster.status);
                        return WaitOutcome::Finished;
                    }
                    other => tracing::info!("the cluster is {other}; waiting"),
                }
            }
        }
    }
}

/// The master-role selector of the ABI completion wait.
pub(crate) const MASTER_SELECTOR: &str = "node-role.kubernetes.io/master";

/// `waitForInstallationAgentBasedInstaller`, the ABI completion wait: every `interval` from now until it returns or `stop` fires
/// (false). Each round untaints the nodes when asked (`untaint` is the per-node untaint of `WaitAndUpdateNodesStatus`, with
/// its own error logging), then waits for ClusterVersion `Available=True` (latched once seen),
/// then for `expected_masters` master nodes (none expected: done at once).
pub(crate) fn wait_for_installation_abi(
    clock: &dyn Clock,
    stop: &dyn Stop,
    cluster: &dyn ClusterApi,
    interval: Duration,
    expected_masters: i64,
    mut untaint: Option<&mut dyn FnMut(&crate::kube::Node)>,
) -> bool {
    let mut available = false;
    poll(clock, stop, interval, None, || {
        if let Some(untaint) = untaint.as_mut() {
            let nodes = cluster.list_nodes(None).or_warn("listing the nodes");
            nodes.unwrap_or_default().iter().for_each(untaint);
        }
        if !available {
            let cv = cluster.get_cluster_version(crate::openshift::CLUSTER_VERSION_NAME);
            let cv = cv.or_warn("reading ClusterVersion");
            available = cv.is_some_and(|cv| cv.conditions.iter().any(|c| c.is_true("Available")));
            if !available {
                return false;
            }
        }
        if expected_masters <= 0 {
            return true;
        }
        let masters = cluster.list_nodes(Some(MASTER_SELECTOR));
        let Some(n) = masters.or_warn("listing the control-plane nodes") else {
            return false;
        };
        if (n.len() as i64) < expected_masters {
            tracing::info!(
                "{} of {expected_masters} control-plane nodes joined",
                n.len()
            );
        }
        n.len() as i64 >= expected_masters
    })
    .is_ok()
}

/// The operators report of `PostInstallConfigs`: `{"CLUSTER_OPERATORS_REPORT": [{name, status, status_info}…]}` from the
/// ClusterOperators' conditions, or `None` when they cannot be listed.
pub(crate) fn operators_report(cluster: &dyn ClusterApi) -> Option<Map<String, Value>> {
    let operators = cluster
        .list_cluster_operators()
        .or_warn("listing the cluster operators")?;
    let entries = operators.iter().map(|co| {
        tracing::info!("cluster operator {}: {:?}", co.name, co.conditions);
        let (status, message) = status_from_conditions(&co.conditions);
        let entry = OperatorMonitorReport {
            name: co.name.clone(),
            version: String::new(),
            status: Some(status),
            status_info: message,
        };
        serde_json::to_value(entry).unwrap_or(Value::Null)
    });
    let report = (CLUSTER_OPERATORS_REPORT.to_string(), entries.collect());
    Some(Map::from_iter([report]))
}

/// `call` every `interval` until it succeeds or `stop` fires; at least one attempt, even when
/// already stopped. Whether it went through.
fn until_ok(
    clock: &dyn Clock,
    stop: &dyn Stop,
    interval: Duration,
    what: &str,
    call: impl Fn() -> anyhow::Result<()>,
) -> bool {
    poll(clock, stop, interval, None, || {
        call().or_warn(what).is_some()
    })
    .is_ok()
}

/// A finalizing-stage report, retried until it goes through or `stop` fires.
pub(crate) fn report_stage(
    clock: &dyn Clock,
    stop: &dyn Stop,
    service: &dyn ControllerService,
    stage: FinalizingStage,
    interval: Duration,
) {
    let what = format!("reporting finalizing stage {stage}");
    until_ok(clock, stop, interval, &what, || {
        service.update_finalizing_stage(stage)
    });
}

/// One router-CA attempt: read the ConfigMap and upload `ca-bundle.crt` (empty when the key is
/// missing, as Go's map read gives).
pub(crate) fn upload_router_ca(cluster: &dyn ClusterApi, service: &dyn ControllerService) -> bool {
    let data = match cluster.get_config_map(INGRESS_CERT_NAMESPACE, INGRESS_CERT_NAME) {
        Ok(Some(data)) => data,
        Ok(None) => {
            tracing::warn!("ConfigMap {INGRESS_CERT_NAMESPACE}/{INGRESS_CERT_NAME} not found");
            return false;
        }
        Err(err) => {
            tracing::warn!("reading the router CA: {err:#}");
            return false;
        }
    };
    let ca = data.get(INGRESS_CERT_KEY).map(String::as_str).unwrap_or("");
    let uploaded = service.upload_ingress_cert(ca);
    uploaded.or_warn("uploading the router CA").is_some()
}

/// Post-install's router-CA poll.
const ROUTER_CA_INTERVAL: Duration = Duration::from_secs(10);

/// The settings of post-install (its intervals are Go's: waiting for `finalizing` and the stage
/// retries [`GENERAL_WAIT`], the console/CVO poll and the completion retry
/// [`CLUSTER_OPERATORS_INTERVAL`], the router CA [`ROUTER_CA_INTERVAL`]).
#[derive(Debug, Clone)]
pub(crate) struct PostInstallSettings {
    pub(crate) openshift_version: String,
    pub(crate) check_cluster_version: bool,
    /// The console/CVO cap: Go's 10 h, [`super::operators::CVO_MAX_TIMEOUT`].
    pub(crate) cvo_timeout: Duration,
}

/// How post-install ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PostInstallOutcome {
    /// Stopped before the cluster reached `finalizing`: nothing reported.
    Stopped,
    /// The completion that was sent (or last attempted) and whether it went through.
    Completed {
        params: CompletionParams,
        sent: bool,
    },
}

/// `PostInstallConfigs` (assisted-service invoker). `olm` is the OLM step of `waitForOLMOperators`, which reports its own stages;
/// its error is only logged.
pub(crate) fn post_install_configs(
    clock: &dyn Clock,
    stop: &dyn Stop,
    cluster: &dyn ClusterApi,
    service: &dyn ControllerService,
    status: &ControllerStatus,
    settings: &PostInstallSettings,
    olm: &mut dyn FnMut() -> anyhow::Result<()>,
) -> PostInstallOutcome {
    let finalizing = poll(clock, stop, GENERAL_WAIT, None, || {
        let cluster = service.get_cluster(true);
        let cluster = cluster.or_warn("getting the cluster's status");
        cluster.is_some_and(|c| c.status == "finalizing")
    });
    if finalizing.is_err() {
        tracing::info!("stopped before the cluster reached finalizing");
        return PostInstallOutcome::Stopped;
    }

    let stage = |s| report_stage(clock, stop, service, s, GENERAL_WAIT);
    stage(FinalizingStage::WaitingForClusterOperators);
    let (version, check_cv) = (&settings.openshift_version, settings.check_cluster_version);
    let interval = CLUSTER_OPERATORS_INTERVAL;
    let waited = poll(clock, stop, interval, Some(settings.cvo_timeout), || {
        cluster_operators_round(cluster, service, version, check_cv)
    });
    let report = operators_report(cluster);
    // The exact `error_info` Go sends, with the cause as Go's context error.
    let failure = match waited {
        Err(e) => Some(format!(
            "Stopped waiting for cluster operators to be available: {}",
            ctx_cause(e)
        )),
        Ok(()) => {
            stage(FinalizingStage::AddingRouterCa);
            let uploaded = poll(clock, stop, ROUTER_CA_INTERVAL, None, || {
                upload_router_ca(cluster, service)
            });
            let cause = uploaded.err().map(ctx_cause);
            cause.map(|c| format!("Stopped waiting for router ca data: {c}"))
        }
    };
    let params = match failure {
        None => {
            olm().or_warn("Error while initializing OLM operators");
            stage(FinalizingStage::Done);
            CompletionParams {
                is_success: true,
                ..CompletionParams::default()
            }
        }
        Some(error_info) => {
            tracing::error!("post-install failed: {error_info}");
            status.error();
            CompletionParams {
                is_success: false,
                error_info,
                data: report,
            }
        }
    };
    let sent = until_ok(
        clock,
        stop,
        CLUSTER_OPERATORS_INTERVAL,
        "sending complete-installation",
        || service.complete_installation(&params),
    );
    PostInstallOutcome::Completed { params, sent }
}

#[cfg(test)]
mod tests;
