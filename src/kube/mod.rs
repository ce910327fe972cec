//! The Kubernetes API as both programs use it: one object model ([`model`]) and one trait
//! ([`ClusterApi`], the controller's tasks and the installer's bootstrap), implemented by
//! - [`client::KubeClient`]: kube-rs's typed `Api<K>` (k8s-openapi types, and `DynamicObject`
//!   for the OpenShift kinds), from a kubeconfig or a pod's service account;
//! - [`dry::DryCluster`]: dry mode's pretend cluster, built from the dry-run hosts;
//! - `testing::FakeCluster` (tests only): in memory, recording every call.
//!
//! `rbac` (tests only) proves that every request the controller makes is allowed by the ClusterRole the
//! bootstrap deploys. Errors the API server answered carry an [`ApiError`] in their chain, so
//! that a caller can branch on the status code with [`api_error_code`]. A `get_*` returning an
//! `Option` maps NotFound to `None`; the others report it as an error.

use anyhow::Result;
use serde_json::Value;
use std::collections::BTreeMap;

pub mod client;
pub mod dry;
pub(crate) mod install_config;
pub(crate) mod model;
/// Only the tests use the least-privilege proof.
#[cfg(any(test, feature = "test-support"))]
pub mod rbac;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;

pub use model::*;

/// A status the API server answered with (a `Status` object), as a caller branches on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the API server answered {code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code: 404 NotFound, 409 AlreadyExists/Conflict, 422 Invalid, 403, …
    pub code: u16,
    /// The `Status` reason (`NotFound`, `AlreadyExists`, `Forbidden`, …); may be empty.
    pub reason: String,
    pub message: String,
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: &str) -> ApiError {
        ApiError {
            code,
            reason: reason.to_string(),
            message: message.to_string(),
        }
    }
}

/// The status code of the API answer behind an error, if the API server answered at all.
pub fn api_error_code(err: &anyhow::Error) -> Option<u16> {
    err.chain()
        .find_map(|e| e.downcast_ref::<ApiError>())
        .map(|e| e.code)
}

/// Whether `labels` satisfy a label selector of `key` and `key=value` requirements,
/// comma-joined: the forms both programs send (`node-role.kubernetes.io/master`,
/// `k8s-app=machine-config-server`). `None` or "" selects everything. The in-memory clusters
/// filter with it; the real API server does its own.
pub fn selector_matches(selector: Option<&str>, labels: &BTreeMap<String, String>) -> bool {
    selector.unwrap_or("").split(',').all(|req| {
        let req = req.trim();
        match req.split_once('=') {
            _ if req.is_empty() => true,
            Some((k, v)) => labels.get(k.trim()).map(String::as_str) == Some(v.trim()),
            None => labels.contains_key(req),
        }
    })
}

/// Whether the in-memory clusters list `pod` for `namespace` and the selectors; the field
/// selector `status.phase=<phase>` is the only one the controller sends.
pub(crate) fn pod_selected(
    pod: &Pod,
    namespace: &str,
    label: Option<&str>,
    field: Option<&str>,
) -> bool {
    let phase = field.and_then(|f| f.strip_prefix("status.phase="));
    pod.namespace == namespace
        && selector_matches(label, &pod.labels)
        && phase.is_none_or(|ph| pod.phase == ph)
}

/// A merge patch of labels as the in-memory clusters apply it: a string sets, null removes.
pub(crate) fn merge_labels(labels: &mut BTreeMap<String, String>, patch: &Value) -> Result<()> {
    for (k, v) in patch.as_object().into_iter().flatten() {
        match v {
            Value::Null => labels.remove(k),
            Value::String(s) => labels.insert(k.clone(), s.clone()),
            other => {
                let msg = format!("label {k}: {other} is not a string");
                return Err(ApiError::new(400, "BadRequest", &msg).into());
            }
        };
    }
    Ok(())
}

/// The installer's untaint with the controller's: the index of the first taint with `key`, then
/// the guarded patch; no-op when there is none.
pub fn remove_taint_by_key(api: &dyn ClusterApi, node: &str, key: &str) -> Result<()> {
    let taints = api.get_node(node)?.taints;
    match taints.iter().position(|t| t.key == key) {
        Some(i) => api.remove_node_taint(node, i, key),
        None => Ok(()),
    }
}

/// Every Kubernetes operation of the controller's tasks. Each method makes the API requests
/// `rbac` declares for it, all allowed by the controller's ClusterRole. Errors name the object.
pub trait ClusterApi: Send + Sync {
    /// GET `config.openshift.io/v1 Proxy` `name` (`cluster`): its status.
    fn get_proxy(&self, name: &str) -> Result<ProxyStatus>;
    /// GET `config.openshift.io/v1 ClusterVersion` `name` (`version`).
    fn get_cluster_version(&self, name: &str) -> Result<ClusterVersion>;
    fn list_cluster_operators(&self) -> Result<Vec<ClusterOperator>>;
    fn get_cluster_operator(&self, name: &str) -> Result<ClusterOperator>;
    /// GET a ConfigMap's data; `None` when it does not exist.
    fn get_config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>>;
    /// CREATE a `v1 Event` in `namespace`; AlreadyExists is an [`ApiError`] with code 409.
    fn create_event(&self, namespace: &str, event: &NewEvent) -> Result<()>;
    /// LIST Nodes, all or those matching a label selector (`node-role.kubernetes.io/master`).
    fn list_nodes(&self, label_selector: Option<&str>) -> Result<Vec<Node>>;
    fn get_node(&self, name: &str) -> Result<Node>;
    /// Remove taint `index` of a Node, which must still have `key`: as Go's `UntaintNode`, a
    /// JSON patch guarded by a `test` of that taint's key, so that a taint list changed since it
    /// was read fails the patch (422) instead of losing another taint.
    fn remove_node_taint(&self, name: &str, index: usize, key: &str) -> Result<()>;
    /// Merge-patch a Node with `{"metadata":{"labels":<labels>}}`, `labels` sent verbatim.
    fn patch_node_labels(&self, name: &str, labels: &Value) -> Result<()>;
    /// LIST Services in all namespaces.
    fn list_services(&self) -> Result<Vec<Service>>;
    fn delete_service(&self, namespace: &str, name: &str) -> Result<()>;
    fn list_pods(
        &self,
        namespace: &str,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Vec<Pod>>;
    /// GET a Pod's log (its only container); with `since_seconds`, only that recent part.
    fn pod_log(&self, namespace: &str, name: &str, since_seconds: Option<i64>) -> Result<String>;
    fn delete_pods(&self, namespace: &str, label_selector: Option<&str>) -> Result<()>;
    fn list_csrs(&self) -> Result<Vec<Csr>>;
    /// UPDATE the `approval` subresource of a CSR: `csr.object` with `approval` appended to
    /// `status.conditions`.
    fn approve_csr(&self, csr: &Csr, approval: &CsrApproval) -> Result<()>;
    fn get_subscription(&self, namespace: &str, name: &str) -> Result<Option<Subscription>>;
    fn get_csv(&self, namespace: &str, name: &str) -> Result<Option<Csv>>;
    fn list_install_plans(&self, namespace: &str) -> Result<Vec<InstallPlan>>;
    fn delete_install_plan(&self, namespace: &str, name: &str) -> Result<()>;
    fn list_jobs(&self, namespace: &str) -> Result<Vec<Job>>;
    fn delete_job(&self, namespace: &str, name: &str) -> Result<()>;
    /// LIST the BareMetalHosts of a namespace, whole.
    fn list_bmhs(&self, namespace: &str) -> Result<Vec<Value>>;
    fn get_bmh(&self, namespace: &str, name: &str) -> Result<Value>;
    /// UPDATE (PUT) a BareMetalHost (named by its `metadata.name`); returns the stored object.
    fn update_bmh(&self, namespace: &str, bmh: &Value) -> Result<Value>;
    /// UPDATE (PUT) the `status` subresource of a BareMetalHost; returns the stored object.
    fn update_bmh_status(&self, namespace: &str, bmh: &Value) -> Result<Value>;
    /// GET the cluster-scoped metal3 Provisioning `name`: whether it exists.
    fn provisioning_exists(&self, name: &str) -> Result<bool>;
    fn list_machines(&self, namespace: &str) -> Result<Vec<Machine>>;
    fn get_machine_config_pool(&self, name: &str) -> Result<MachineConfigPool>;
    /// Merge-patch a MachineConfigPool with `{"spec":{"paused":<paused>}}`.
    fn set_machine_config_pool_paused(&self, name: &str, paused: bool) -> Result<()>;
    /// LIST the Events of a namespace. This and the next are the installer's bootstrap only
    /// (bootkube's admin kubeconfig), outside the controller's role: see `rbac::INSTALLER_ONLY`.
    fn list_events(&self, namespace: &str) -> Result<Vec<Event>>;
    /// GET the cluster-scoped MachineConfig `name`: whether it exists.
    fn machine_config_exists(&self, name: &str) -> Result<bool>;
}
