//! The assisted-service calls the controller makes, as one narrow
//! trait, [`ControllerService`], bound to the controller's cluster (`CLUSTER_ID`).
//!
//! [`ControllerClient`] implements it over the installer's REST client
//! ([`ServiceClient`]): same base path, `X-Secret-Key` (never logged) and a fresh `X-Request-ID`
//! per call (shared by that call's retries), same retry loop with the controller's budget
//! (`ClientRetry::controller`: 404/423/425 retried while attempt < 10, 408/429/5xx and
//! failures without an answer while attempt < 15, full-jitter delays from 2 s capped at 10 s).
//! `testing::MemoryService` implements it in memory for the task tests.
//!
//! Where it differs from Go, knowingly:
//! - **Request ids.** Every call sends its own `X-Request-ID`; Go sends none on a few calls and
//!   one id for the whole completion-wait loop. The service only logs the id.
//! - **Proxy.** reqwest reads `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` when the client is built,
//!   Go's transport at the first request. Main copies the cluster Proxy status into the env
//!   before it builds the client, so both see the same values; like Go,
//!   later changes to the env are not seen. Loopback URLs never go through a proxy.
//! - **Transport errors.** Every failure without an answer that is not a TLS or request-building
//!   error is retried (Go: "temporary" net errors and ECONNREFUSED).
//!
//! The client has no stop token: its retries run to the end of their budget even after the
//! tasks are told to stop, because the final calls (the last log upload, `logs_state`
//! `completed`, a completion attempt after a cancellation) must still reach the service.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;
use reqwest::Method;

use crate::clock::Clock;
use crate::service::client::encode;
use crate::service::{
    ClientConfig, Cluster, ClusterFinalizingProgress, CompletionParams, EventParams,
    FinalizingStage, HostStage, InventoryClient, LogsState, LogsType, LogsUpload,
    MonitoredOperator, OperatorMonitorReport, ServiceClient,
};

/// How long a fetched monitored-operators list may be served from the cache.
pub(crate) const MONITORED_OPERATORS_TTL: Duration = Duration::from_secs(20);
/// `V2DownloadClusterFiles` file with the OLM operators' manifests.
pub(crate) const CUSTOM_MANIFESTS_FILE: &str = "custom_manifests.json";
/// `V2DownloadClusterCredentials` file the controller uses to run `oc`.
pub(crate) const KUBECONFIG_NOINGRESS: &str = "kubeconfig-noingress";
/// File name of the controller's log archive (`logs_type=controller`).
pub(crate) const CONTROLLER_LOGS_FILE: &str = "controller_logs.tar.gz";
/// `name` of the reboots-notifier event.
pub(crate) const REBOOTS_EVENT_NAME: &str = "reboots_for_node";

/// The calls of the service API, bound to one cluster. Every error is the [`crate::service::ServiceError`]
/// of the REST client (after its retries), so callers can branch on its `status` (the
/// completion wait counts 404 and 401).
///
/// Each method is the swagger operation its client implementation names.
pub trait ControllerService: Send + Sync {
    fn get_cluster(&self, exclude_hosts: bool) -> Result<Cluster>;
    /// `{"current_stage": stage}` only (no `progress_info`).
    fn update_host_stage(&self, infra_env_id: &str, host_id: &str, stage: HostStage) -> Result<()>;
    fn update_finalizing_stage(&self, stage: FinalizingStage) -> Result<()>;
    /// With `use_cache`, a list fetched less than [`MONITORED_OPERATORS_TTL`] ago is returned
    /// without a request; every fetch (cached or not) refreshes the cache.
    fn monitored_operators(&self, use_cache: bool) -> Result<Vec<MonitoredOperator>>;
    /// Sends the body of [`wire_report`] (empty fields left out, `ocs` sent as `odf`).
    fn report_operator_status(&self, report: &OperatorMonitorReport) -> Result<()>;
    fn upload_ingress_cert(&self, ca_bundle: &str) -> Result<()>;
    fn download_custom_manifests(&self, dest: &Path) -> Result<()>;
    /// Into `dest` (0600).
    fn download_kubeconfig_noingress(&self, dest: &Path) -> Result<()>;
    fn complete_installation(&self, params: &CompletionParams) -> Result<()>;
    fn upload_controller_logs(&self, archive: Vec<u8>) -> Result<()>;
    fn update_logs_progress(&self, state: LogsState) -> Result<()>;
    fn trigger_reboots_event(&self, event: &RebootsEvent) -> Result<()>;
}

/// The body sent for `report`: the name `ocs` becomes `odf` (the service knows the operator as
/// `odf`; the controller may have renamed it `ocs` for 4.8 clusters), the rest as given (empty
/// fields are left out by the model).
pub(crate) fn wire_report(report: &OperatorMonitorReport) -> OperatorMonitorReport {
    let mut body = report.clone();
    if body.name == "ocs" {
        body.name = "odf".to_string();
    }
    body
}

/// The monitored operators as the availability checks and the OLM list look them up (the availability check,
/// `waitForOLMOperators`): on OpenShift 4.8 (`>= 4.8, < 4.9`) the service's `odf` is known in the cluster as
/// `ocs`, with subscription `ocs-operator`; other versions are unchanged. `OPENSHIFT_VERSION`
/// must parse (`4.8`, `v4.8.2`, `4.8.0-rc.1`…) unless the list is empty, as in Go.
///
/// A pre-release suffix is ignored here (`4.9.0-rc.1` is 4.9); Go's version library may order
/// pre-releases differently at the 4.8/4.9 bounds, which only matters for 4.8/4.9 release
/// candidates.
pub(crate) fn operators_for_version(
    mut list: Vec<MonitoredOperator>,
    openshift_version: &str,
) -> Result<Vec<MonitoredOperator>> {
    if list.is_empty() {
        return Ok(list);
    }
    let Some((major, minor, _)) = crate::kube::install_config::parse_version(openshift_version)
    else {
        anyhow::bail!("invalid OPENSHIFT_VERSION {openshift_version:?}");
    };
    if (major, minor) == (4, 8) {
        for op in list.iter_mut().filter(|o| o.name == "odf") {
            op.name = "ocs".to_string();
            op.subscription_name = "ocs-operator".to_string();
        }
    }
    Ok(list)
}

/// What the reboots notifier reports for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootsEvent {
    pub cluster_id: String,
    pub host_id: String,
    pub infra_env_id: String,
    pub node_name: String,
    pub reboots: u32,
}

impl RebootsEvent {
    /// The exact message the service shows.
    pub fn message(&self) -> String {
        format!(
            "Node {} has been rebooted {} times before completing installation",
            self.node_name, self.reboots
        )
    }

    /// The `event` body, with `event_time` as RFC 3339 UTC.
    pub fn params(&self, event_time: SystemTime) -> EventParams {
        EventParams {
            cluster_id: non_empty(&self.cluster_id),
            host_id: non_empty(&self.host_id),
            infra_env_id: non_empty(&self.infra_env_id),
            name: REBOOTS_EVENT_NAME.to_string(),
            category: "user".to_string(),
            severity: "info".to_string(),
            message: self.message(),
            event_time: rfc3339(event_time),
        }
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// `t` as RFC 3339 UTC with whole seconds (`2026-11-23T19:35:44Z`).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let secs = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    let stamp = k8s_openapi::jiff::Timestamp::from_second(secs);
    stamp.map(|t| t.to_string()).unwrap_or_default()
}

/// The per-cluster monitored-operators cache (Go: a TTL cache keyed by cluster id), on the
/// controller's clock.
#[derive(Debug, Default)]
pub(crate) struct OperatorsCache(Mutex<HashMap<String, (Instant, Vec<MonitoredOperator>)>>);

impl OperatorsCache {
    /// With `use_cache`, the list fetched for `cluster_id` less than [`MONITORED_OPERATORS_TTL`]
    /// ago (reading it does not extend its life); otherwise `fetch`, whose success is stored. A
    /// failed fetch leaves the cache as it was.
    pub(crate) fn fetch_through(
        &self,
        clock: &dyn Clock,
        cluster_id: &str,
        use_cache: bool,
        fetch: impl FnOnce() -> Result<Vec<MonitoredOperator>>,
    ) -> Result<Vec<MonitoredOperator>> {
        let entries = || self.0.lock().unwrap_or_else(|p| p.into_inner());
        if use_cache {
            if let Some((stored, list)) = entries().get(cluster_id) {
                if clock.now().saturating_duration_since(*stored) < MONITORED_OPERATORS_TTL {
                    return Ok(list.clone());
                }
            }
        }
        let list = fetch()?;
        entries().insert(cluster_id.to_string(), (clock.now(), list.clone()));
        Ok(list)
    }
}

/// The controller's empty token, as the error of a 401 to a call sent without one names it
/// (startup reads it from the Job's Secret's file, else the environment).
const TOKEN_SOURCE: &str = "the controller's token is empty (the file \
    /etc/assisted-installer-controller/token, from the pull-secret-token item of its Secret, \
    else PULL_SECRET_TOKEN)";

/// [`ControllerService`] over the REST client.
pub struct ControllerClient {
    client: ServiceClient,
    cluster_id: String,
    clock: Arc<dyn Clock>,
    cache: OperatorsCache,
}

impl ControllerClient {
    /// Builds the REST client from `config` (a bad URL, token or CA file is an error: fatal at
    /// startup). `clock` times the operators cache and the waits between retries.
    pub fn new(
        config: ClientConfig,
        cluster_id: &str,
        clock: Arc<dyn Clock>,
    ) -> Result<ControllerClient> {
        let client = ServiceClient::new(config)?.with_clock(clock.clone());
        Ok(ControllerClient {
            client: client.with_token_source(TOKEN_SOURCE),
            cluster_id: cluster_id.to_string(),
            clock,
            cache: OperatorsCache::default(),
        })
    }

    fn cluster_path(&self, rest: &str) -> String {
        format!("/v2/clusters/{}{rest}", encode(&self.cluster_id))
    }
}

impl ControllerService for ControllerClient {
    fn get_cluster(&self, exclude_hosts: bool) -> Result<Cluster> {
        InventoryClient::get_cluster(&self.client, &self.cluster_id, exclude_hosts)
    }

    fn update_host_stage(&self, infra_env_id: &str, host_id: &str, stage: HostStage) -> Result<()> {
        // An empty info is left out of the body: `{"current_stage": …}` only.
        self.client
            .update_host_progress(infra_env_id, host_id, stage, "")
    }

    fn update_finalizing_stage(&self, stage: FinalizingStage) -> Result<()> {
        let body = ClusterFinalizingProgress {
            finalizing_stage: stage,
        };
        let path = self.cluster_path("/progress");
        self.client.send_json(
            "V2UpdateClusterFinalizingProgress",
            Method::PUT,
            path,
            &body,
        )
    }

    fn monitored_operators(&self, use_cache: bool) -> Result<Vec<MonitoredOperator>> {
        self.cache
            .fetch_through(&*self.clock, &self.cluster_id, use_cache, || {
                let path = self.cluster_path("/monitored-operators");
                self.client.get_json("V2ListOfClusterOperators", path)
            })
    }

    fn report_operator_status(&self, report: &OperatorMonitorReport) -> Result<()> {
        let path = self.cluster_path("/monitored-operators");
        self.client.send_json(
            "V2ReportMonitoredOperatorStatus",
            Method::PUT,
            path,
            &wire_report(report),
        )
    }

    fn upload_ingress_cert(&self, ca_bundle: &str) -> Result<()> {
        let path = self.cluster_path("/uploads/ingress-cert");
        self.client
            .send_json("V2UploadClusterIngressCert", Method::POST, path, &ca_bundle)
    }

    fn download_custom_manifests(&self, dest: &Path) -> Result<()> {
        let path = format!(
            "{}?file_name={CUSTOM_MANIFESTS_FILE}",
            self.cluster_path("/downloads/files")
        );
        self.client.download("V2DownloadClusterFiles", path, dest)
    }

    fn download_kubeconfig_noingress(&self, dest: &Path) -> Result<()> {
        let path = format!(
            "{}?file_name={KUBECONFIG_NOINGRESS}",
            self.cluster_path("/downloads/credentials")
        );
        self.client
            .download("V2DownloadClusterCredentials", path, dest)
    }

    fn complete_installation(&self, params: &CompletionParams) -> Result<()> {
        let path = self.cluster_path("/actions/complete-installation");
        self.client
            .send_json("V2CompleteInstallation", Method::POST, path, params)
    }

    fn upload_controller_logs(&self, archive: Vec<u8>) -> Result<()> {
        self.client.upload_logs(&LogsUpload {
            cluster_id: self.cluster_id.clone(),
            logs_type: LogsType::Controller,
            host: None,
            file_name: CONTROLLER_LOGS_FILE.to_string(),
            data: archive,
        })
    }

    fn update_logs_progress(&self, state: LogsState) -> Result<()> {
        self.client
            .update_cluster_logs_progress(&self.cluster_id, state)
    }

    fn trigger_reboots_event(&self, event: &RebootsEvent) -> Result<()> {
        let body = event.params(SystemTime::now());
        self.client.send_json(
            "V2TriggerEvent",
            Method::POST,
            "/v2/events".to_string(),
            &body,
        )
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) mod testing;
