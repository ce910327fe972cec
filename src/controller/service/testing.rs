//! An in-memory [`ControllerService`] for the controller's task tests: a cluster, its hosts and
//! its monitored operators that the calls update as the service would, every call recorded in
//! order, and injected failures per operation. The monitored-operators cache is the real one
//! ([`OperatorsCache`]) on the test's clock, so call counts match what the REST client makes.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{Context, Result};

use super::{wire_report, ControllerService, OperatorsCache, RebootsEvent};
use crate::clock::Clock;
use crate::service::{
    Cluster, ClusterProgressInfo, CompletionParams, FinalizingStage, HostProgressInfo, HostStage,
    LogsState, MonitoredOperator, OperatorMonitorReport, ServiceError,
};

/// One call as the service received it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ServiceCall {
    GetCluster {
        exclude_hosts: bool,
    },
    UpdateHostStage {
        infra_env_id: String,
        host_id: String,
        stage: HostStage,
    },
    UpdateFinalizingStage(FinalizingStage),
    /// A fetch that reached the service (not one served from the cache).
    ListMonitoredOperators,
    /// The body as sent (after [`wire_report`]).
    ReportOperatorStatus(OperatorMonitorReport),
    UploadIngressCert(String),
    DownloadCustomManifests,
    DownloadKubeconfigNoingress,
    CompleteInstallation(CompletionParams),
    UploadControllerLogs(Vec<u8>),
    UpdateLogsProgress(LogsState),
    TriggerRebootsEvent(RebootsEvent),
}

impl ServiceCall {
    /// The swagger operationId, the key of [`MemoryService::fail`].
    pub(crate) fn operation(&self) -> &'static str {
        match self {
            ServiceCall::GetCluster { .. } => "v2GetCluster",
            ServiceCall::UpdateHostStage { .. } => "v2UpdateHostInstallProgress",
            ServiceCall::UpdateFinalizingStage(_) => "v2UpdateClusterFinalizingProgress",
            ServiceCall::ListMonitoredOperators => "V2ListOfClusterOperators",
            ServiceCall::ReportOperatorStatus(_) => "v2ReportMonitoredOperatorStatus",
            ServiceCall::UploadIngressCert(_) => "v2UploadClusterIngressCert",
            ServiceCall::DownloadCustomManifests => "V2DownloadClusterFiles",
            ServiceCall::DownloadKubeconfigNoingress => "V2DownloadClusterCredentials",
            ServiceCall::CompleteInstallation(_) => "v2CompleteInstallation",
            ServiceCall::UploadControllerLogs(_) => "V2UploadLogs",
            ServiceCall::UpdateLogsProgress(_) => "v2UpdateClusterLogsProgress",
            ServiceCall::TriggerRebootsEvent(_) => "v2TriggerEvent",
        }
    }
}

/// Runs at every call, before it is answered: the call, how many calls came before it, and the
/// service's state to change (the cluster and the operators).
type Hook = Box<dyn FnMut(&ServiceCall, usize, &mut Cluster, &mut Vec<MonitoredOperator>) + Send>;

#[derive(Default)]
struct State {
    hook: Option<Hook>,
    cluster: Cluster,
    operators: Vec<MonitoredOperator>,
    custom_manifests: Vec<u8>,
    kubeconfig: Vec<u8>,
    calls: Vec<ServiceCall>,
    failures: HashMap<&'static str, VecDeque<u16>>,
}

/// See the module documentation. Clones share the state.
#[derive(Clone)]
pub(crate) struct MemoryService {
    state: Arc<Mutex<State>>,
    /// Outside the state's lock so that a call hook can set it.
    cluster_lost: Arc<AtomicBool>,
    clock: Arc<dyn Clock>,
    cache: Arc<OperatorsCache>,
}

impl MemoryService {
    /// A cluster `cluster_id` in status `installing` with no hosts and no operators.
    pub(crate) fn new(cluster_id: &str, clock: Arc<dyn Clock>) -> MemoryService {
        let cluster = Cluster {
            id: cluster_id.to_string(),
            kind: "Cluster".to_string(),
            status: "installing".to_string(),
            ..Cluster::default()
        };
        MemoryService {
            state: Arc::new(Mutex::new(State {
                cluster,
                ..State::default()
            })),
            cluster_lost: Arc::default(),
            clock,
            cache: Arc::new(OperatorsCache::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the cluster in place (its status, its hosts…).
    pub(crate) fn update_cluster(&self, f: impl FnOnce(&mut Cluster)) {
        f(&mut self.state().cluster);
    }

    pub(crate) fn cluster(&self) -> Cluster {
        self.state().cluster.clone()
    }

    pub(crate) fn set_operators(&self, operators: Vec<MonitoredOperator>) {
        self.state().operators = operators;
    }

    pub(crate) fn operators(&self) -> Vec<MonitoredOperator> {
        self.state().operators.clone()
    }

    pub(crate) fn set_custom_manifests(&self, bytes: impl Into<Vec<u8>>) {
        self.state().custom_manifests = bytes.into();
    }

    pub(crate) fn set_kubeconfig(&self, bytes: impl Into<Vec<u8>>) {
        self.state().kubeconfig = bytes.into();
    }

    /// The next `times` calls of `operation` (a swagger operationId, see
    /// [`ServiceCall::operation`]) fail with `status`. A failed call is recorded and changes
    /// nothing.
    pub(crate) fn fail(&self, operation: &'static str, times: usize, status: u16) {
        self.state()
            .failures
            .entry(operation)
            .or_default()
            .extend(std::iter::repeat_n(status, times));
    }

    /// The service deleted the cluster: from now on every call is recorded and answers 404.
    /// A call hook may call this (it takes no lock) to lose the cluster at a given moment.
    pub(crate) fn lose_cluster(&self) {
        self.cluster_lost.store(true, Ordering::SeqCst);
    }

    /// `hook` runs at every call before it is answered (and before an injected failure), e.g.
    /// to move the cluster to `installed` at the n-th call while a task polls.
    pub(crate) fn on_call(
        &self,
        hook: impl FnMut(&ServiceCall, usize, &mut Cluster, &mut Vec<MonitoredOperator>)
            + Send
            + 'static,
    ) {
        self.state().hook = Some(Box::new(hook));
    }

    /// Every call so far, in order.
    pub(crate) fn calls(&self) -> Vec<ServiceCall> {
        self.state().calls.clone()
    }

    /// What `pick` takes from each call so far, in order.
    fn picked<T>(&self, pick: impl Fn(ServiceCall) -> Option<T>) -> Vec<T> {
        self.calls().into_iter().filter_map(pick).collect()
    }

    /// The finalizing stages reported so far, in order.
    pub(crate) fn finalizing_stages(&self) -> Vec<FinalizingStage> {
        self.picked(|c| match c {
            ServiceCall::UpdateFinalizingStage(s) => Some(s),
            _ => None,
        })
    }

    /// The `complete-installation` bodies sent so far, in order.
    pub(crate) fn completions(&self) -> Vec<CompletionParams> {
        self.picked(|c| match c {
            ServiceCall::CompleteInstallation(p) => Some(p),
            _ => None,
        })
    }

    /// The operator reports sent so far, in order.
    pub(crate) fn operator_reports(&self) -> Vec<OperatorMonitorReport> {
        self.picked(|c| match c {
            ServiceCall::ReportOperatorStatus(r) => Some(r),
            _ => None,
        })
    }

    /// The operationIds of the calls so far, in order.
    pub(crate) fn operations(&self) -> Vec<&'static str> {
        self.state()
            .calls
            .iter()
            .map(ServiceCall::operation)
            .collect()
    }

    /// How many calls of `operation` were made so far.
    pub(crate) fn count(&self, operation: &str) -> usize {
        self.operations()
            .iter()
            .filter(|o| **o == operation)
            .count()
    }

    /// Records `call`; an injected failure ends it, otherwise `apply` runs on the state.
    fn call<T>(&self, call: ServiceCall, apply: impl FnOnce(&mut State) -> Result<T>) -> Result<T> {
        let mut state = self.state();
        let operation = call.operation();
        if let Some(mut hook) = state.hook.take() {
            let s = &mut *state;
            hook(&call, s.calls.len(), &mut s.cluster, &mut s.operators);
            s.hook = Some(hook);
        }
        state.calls.push(call);
        assert!(
            state.calls.len() < crate::kube::testing::RUNAWAY_CALLS,
            "the in-memory service received {} calls: a wait of the code under test never ends \
             (on a fake clock such a wait spins and eats memory instead of sleeping)",
            crate::kube::testing::RUNAWAY_CALLS
        );
        let lost = self.cluster_lost.load(Ordering::SeqCst).then_some(404);
        let injected = lost.or_else(|| {
            state
                .failures
                .get_mut(operation)
                .and_then(VecDeque::pop_front)
        });
        if let Some(status) = injected {
            return Err(ServiceError {
                call: operation,
                method: String::new(),
                path: String::new(),
                status: Some(status),
                reason: format!("injected failure {status}"),
                attempts: 1,
            }
            .into());
        }
        apply(&mut state)
    }
}

impl ControllerService for MemoryService {
    fn get_cluster(&self, exclude_hosts: bool) -> Result<Cluster> {
        self.call(ServiceCall::GetCluster { exclude_hosts }, |s| {
            let mut cluster = s.cluster.clone();
            if exclude_hosts {
                cluster.hosts.clear();
            }
            Ok(cluster)
        })
    }

    fn update_host_stage(&self, infra_env_id: &str, host_id: &str, stage: HostStage) -> Result<()> {
        let call = ServiceCall::UpdateHostStage {
            infra_env_id: infra_env_id.to_string(),
            host_id: host_id.to_string(),
            stage,
        };
        self.call(call, |s| {
            let mut hosts = s.cluster.hosts.iter_mut();
            if let Some(host) = hosts.find(|h| h.id == host_id && h.infra_env_id == infra_env_id) {
                let progress = host.progress.get_or_insert_with(HostProgressInfo::default);
                progress.current_stage = Some(stage.to_string());
                progress.progress_info.clear();
            }
            Ok(())
        })
    }

    fn update_finalizing_stage(&self, stage: FinalizingStage) -> Result<()> {
        self.call(ServiceCall::UpdateFinalizingStage(stage), |s| {
            let progress = s
                .cluster
                .progress
                .get_or_insert_with(ClusterProgressInfo::default);
            progress.finalizing_stage = Some(stage.to_string());
            progress.finalizing_stage_timed_out = false;
            Ok(())
        })
    }

    fn monitored_operators(&self, use_cache: bool) -> Result<Vec<MonitoredOperator>> {
        let cluster_id = self.state().cluster.id.clone();
        self.cache
            .fetch_through(&*self.clock, &cluster_id, use_cache, || {
                self.call(ServiceCall::ListMonitoredOperators, |s| {
                    Ok(s.operators.clone())
                })
            })
    }

    fn report_operator_status(&self, report: &OperatorMonitorReport) -> Result<()> {
        let body = wire_report(report);
        self.call(ServiceCall::ReportOperatorStatus(body.clone()), |s| {
            if let Some(op) = s.operators.iter_mut().find(|o| o.name == body.name) {
                if let Some(status) = body.status {
                    op.status = status.to_string();
                }
                op.status_info = body.status_info.clone();
                if !body.version.is_empty() {
                    op.version = body.version.clone();
                }
            }
            Ok(())
        })
    }

    fn upload_ingress_cert(&self, ca_bundle: &str) -> Result<()> {
        self.call(
            ServiceCall::UploadIngressCert(ca_bundle.to_string()),
            |_| Ok(()),
        )
    }

    fn download_custom_manifests(&self, dest: &Path) -> Result<()> {
        let bytes = self.call(ServiceCall::DownloadCustomManifests, |s| {
            Ok(s.custom_manifests.clone())
        })?;
        std::fs::write(dest, bytes).with_context(|| format!("writing {}", dest.display()))
    }

    fn download_kubeconfig_noingress(&self, dest: &Path) -> Result<()> {
        let bytes = self.call(ServiceCall::DownloadKubeconfigNoingress, |s| {
            Ok(s.kubeconfig.clone())
        })?;
        std::fs::write(dest, bytes).with_context(|| format!("writing {}", dest.display()))
    }

    fn complete_installation(&self, params: &CompletionParams) -> Result<()> {
        self.call(
            ServiceCall::CompleteInstallation(params.clone()),
            |_| Ok(()),
        )
    }

    fn upload_controller_logs(&self, archive: Vec<u8>) -> Result<()> {
        self.call(ServiceCall::UploadControllerLogs(archive), |_| Ok(()))
    }

    fn update_logs_progress(&self, state: LogsState) -> Result<()> {
        self.call(ServiceCall::UpdateLogsProgress(state), |_| Ok(()))
    }

    fn trigger_reboots_event(&self, event: &RebootsEvent) -> Result<()> {
        self.call(ServiceCall::TriggerRebootsEvent(event.clone()), |_| Ok(()))
    }
}
