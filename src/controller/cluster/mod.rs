//! What the controller asks of the new cluster's Kubernetes API (the controller reference,
//! §5.1), behind one narrow trait, [`ClusterApi`]: one method per operation its tasks make, over
//! small typed structs holding only the fields the tasks read. BareMetalHosts stay whole JSON
//! objects, since the BMH task rewrites their annotations, spec and status and puts them back.
//!
//! - [`kube_impl::KubeCluster`]: the real one (kube-rs transport, in-cluster service account or a
//!   kubeconfig);
//! - [`fake::FakeCluster`]: in memory, recording every call in order (task tests);
//! - [`dry::DryCluster`]: dry mode's pretend cluster (`DRY_ENABLE`, §3.16), built from the
//!   dry-run hosts and their reboot markers;
//! - [`rbac`]: the API requests each method makes, checked against the controller's ClusterRole.
//!
//! Errors the API server answered carry an [`ApiError`] in their chain, so that a task can branch
//! on the status code (AlreadyExists, Forbidden, …) with [`api_error_code`]. A `get_*` returning
//! an `Option` maps NotFound to `None`; the others report it as an error.

use anyhow::Result;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::SystemTime;

pub mod dry;
pub mod fake;
pub mod kube_impl;
pub mod rbac;

/// A status the API server answered with (a `Status` object), as a task branches on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the API server answered {code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code: 404 NotFound, 409 AlreadyExists/Conflict, 401, 403, …
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
/// comma-joined: the forms the controller sends (`node-role.kubernetes.io/master`,
/// `k8s-app=machine-config-server`). `None` or "" selects everything. The in-memory clusters
/// (the fake and dry mode's) filter with it; the real API server does its own.
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

/// A condition of a Node, ClusterOperator, ClusterVersion, CSR or Job (absent fields empty).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl Condition {
    /// Whether this is a condition of `type_` with status `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.type_ == type_ && self.status == "True"
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAddress {
    /// `InternalIP`, `ExternalIP`, `Hostname`, …
    pub type_: String,
    pub address: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

/// A `v1 Node`: `spec.taints` keep their order (the untaint patch removes one by index).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub conditions: Vec<Condition>,
    pub addresses: Vec<NodeAddress>,
}

impl Node {
    /// A condition `Ready` with status `True`.
    pub fn is_ready(&self) -> bool {
        self.conditions.iter().any(|c| c.is_true("Ready"))
    }

    /// The `InternalIP` addresses, in order.
    pub fn internal_ips(&self) -> impl Iterator<Item = &str> {
        self.addresses
            .iter()
            .filter(|a| a.type_ == "InternalIP")
            .map(|a| a.address.as_str())
    }
}

/// A `certificates.k8s.io/v1 CertificateSigningRequest`. `object` is the whole object as
/// listed: the approval puts it back with one more condition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Csr {
    pub name: String,
    pub conditions: Vec<Condition>,
    pub object: Value,
}

/// The condition an approval appends to a CSR's `status.conditions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsrApproval {
    pub condition: Condition,
    /// Its `lastUpdateTime`.
    pub time: SystemTime,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorVersion {
    pub name: String,
    pub version: String,
}

/// A `config.openshift.io/v1 ClusterOperator`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterOperator {
    pub name: String,
    pub conditions: Vec<Condition>,
    /// `status.versions`, in order.
    pub versions: Vec<OperatorVersion>,
}

/// `config.openshift.io/v1 ClusterVersion version`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterVersion {
    pub conditions: Vec<Condition>,
    /// `status.capabilities.enabledCapabilities`.
    pub enabled_capabilities: Vec<String>,
    /// `status.capabilities.knownCapabilities`.
    pub known_capabilities: Vec<String>,
    /// `status.desired.version` (empty when unset).
    pub desired_version: String,
}

/// `status` of `config.openshift.io/v1 Proxy cluster` (empty when unset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyStatus {
    pub http_proxy: String,
    pub https_proxy: String,
    pub no_proxy: String,
}

/// A `v1 Event` to create: `count` 1, first and last timestamps both `time`, and an involved
/// object with only a namespace and a name (no kind), as the ready Event is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub name: String,
    pub reason: String,
    /// `Normal` or `Warning`.
    pub type_: String,
    pub message: String,
    pub involved_namespace: String,
    pub involved_name: String,
    pub time: SystemTime,
}

/// A `v1 Pod`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    /// `status.phase` (empty when unset).
    pub phase: String,
    pub labels: BTreeMap<String, String>,
}

/// A `v1 Service`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Service {
    pub namespace: String,
    pub name: String,
    /// `spec.clusterIP` as written (empty when unset).
    pub cluster_ip: String,
}

/// An OLM `operators.coreos.com/v1alpha1 Subscription`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    pub namespace: String,
    pub name: String,
    /// `status.currentCSV` (empty when unset).
    pub current_csv: String,
}

/// An OLM `operators.coreos.com/v1alpha1 ClusterServiceVersion`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Csv {
    pub namespace: String,
    pub name: String,
    /// `status.phase` (`Succeeded`, `Failed`, …; empty when unset).
    pub phase: String,
    /// `status.message`.
    pub message: String,
    /// `spec.version` as written (empty when unset).
    pub version: String,
}

/// An OLM `operators.coreos.com/v1alpha1 InstallPlan`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstallPlan {
    pub namespace: String,
    pub name: String,
    /// `metadata.ownerReferences[].name`, in order.
    pub owner_names: Vec<String>,
    /// `status.phase`.
    pub phase: String,
}

/// A `batch/v1 Job`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Job {
    pub namespace: String,
    pub name: String,
    /// `status.failed` (0 when unset).
    pub failed: i64,
    pub conditions: Vec<Condition>,
}

/// A `machine.openshift.io/v1beta1 Machine`: what a BareMetalHost's `consumerRef` names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Machine {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// A `machineconfiguration.openshift.io/v1 MachineConfigPool`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineConfigPool {
    pub name: String,
    /// `spec.paused` (false when unset).
    pub paused: bool,
}

/// Every Kubernetes operation of the controller's tasks (the controller reference, §5.1). Each
/// method makes the API requests [`rbac::requests`] declares for it, all allowed by the
/// controller's ClusterRole. Errors name the object.
pub trait ClusterApi: Send + Sync {
    /// GET `config.openshift.io/v1 Proxy` `name` (`cluster`): its status.
    fn get_proxy(&self, name: &str) -> Result<ProxyStatus>;
    /// GET `config.openshift.io/v1 ClusterVersion` `name` (`version`).
    fn get_cluster_version(&self, name: &str) -> Result<ClusterVersion>;
    /// LIST `config.openshift.io/v1 ClusterOperator`.
    fn list_cluster_operators(&self) -> Result<Vec<ClusterOperator>>;
    /// GET `config.openshift.io/v1 ClusterOperator` `name`.
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
    /// GET a Node.
    fn get_node(&self, name: &str) -> Result<Node>;
    /// JSON-patch a Node: `[{"op":"remove","path":"/spec/taints/<index>"}]`.
    fn remove_node_taint(&self, name: &str, index: usize) -> Result<()>;
    /// Merge-patch a Node with `{"metadata":{"labels":<labels>}}`, `labels` sent verbatim.
    fn patch_node_labels(&self, name: &str, labels: &Value) -> Result<()>;
    /// LIST Services in all namespaces.
    fn list_services(&self) -> Result<Vec<Service>>;
    /// DELETE a Service.
    fn delete_service(&self, namespace: &str, name: &str) -> Result<()>;
    /// LIST Pods of a namespace, optionally by label and field selectors.
    fn list_pods(
        &self,
        namespace: &str,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Vec<Pod>>;
    /// GET a Pod's log (its only container); with `since_seconds`, only that recent part.
    fn pod_log(&self, namespace: &str, name: &str, since_seconds: Option<i64>) -> Result<String>;
    /// DELETECOLLECTION the Pods of a namespace, optionally by label selector.
    fn delete_pods(&self, namespace: &str, label_selector: Option<&str>) -> Result<()>;
    /// LIST CertificateSigningRequests.
    fn list_csrs(&self) -> Result<Vec<Csr>>;
    /// UPDATE the `approval` subresource of a CSR: `csr.object` with `approval` appended to
    /// `status.conditions`.
    fn approve_csr(&self, csr: &Csr, approval: &CsrApproval) -> Result<()>;
    /// GET an OLM Subscription; `None` when it does not exist.
    fn get_subscription(&self, namespace: &str, name: &str) -> Result<Option<Subscription>>;
    /// GET an OLM ClusterServiceVersion; `None` when it does not exist.
    fn get_csv(&self, namespace: &str, name: &str) -> Result<Option<Csv>>;
    /// LIST the OLM InstallPlans of a namespace.
    fn list_install_plans(&self, namespace: &str) -> Result<Vec<InstallPlan>>;
    /// DELETE an OLM InstallPlan.
    fn delete_install_plan(&self, namespace: &str, name: &str) -> Result<()>;
    /// LIST the Jobs of a namespace.
    fn list_jobs(&self, namespace: &str) -> Result<Vec<Job>>;
    /// DELETE a Job (default options).
    fn delete_job(&self, namespace: &str, name: &str) -> Result<()>;
    /// LIST the BareMetalHosts of a namespace, whole.
    fn list_bmhs(&self, namespace: &str) -> Result<Vec<Value>>;
    /// GET a BareMetalHost, whole.
    fn get_bmh(&self, namespace: &str, name: &str) -> Result<Value>;
    /// UPDATE (PUT) a BareMetalHost (named by its `metadata.name`); returns the stored object.
    fn update_bmh(&self, namespace: &str, bmh: &Value) -> Result<Value>;
    /// UPDATE (PUT) the `status` subresource of a BareMetalHost; returns the stored object.
    fn update_bmh_status(&self, namespace: &str, bmh: &Value) -> Result<Value>;
    /// GET the cluster-scoped metal3 Provisioning `name`: whether it exists.
    fn provisioning_exists(&self, name: &str) -> Result<bool>;
    /// LIST the Machines of a namespace.
    fn list_machines(&self, namespace: &str) -> Result<Vec<Machine>>;
    /// GET a MachineConfigPool.
    fn get_machine_config_pool(&self, name: &str) -> Result<MachineConfigPool>;
    /// Merge-patch a MachineConfigPool with `{"spec":{"paused":<paused>}}`.
    fn set_machine_config_pool_paused(&self, name: &str, paused: bool) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn api_error_code_is_found_under_context() {
        let err = anyhow::Error::new(ApiError::new(409, "AlreadyExists", "exists"))
            .context("creating event x");
        assert_eq!(api_error_code(&err), Some(409));
        let other: Result<()> = Err(anyhow::anyhow!("connection refused")).context("listing");
        assert_eq!(api_error_code(&other.unwrap_err()), None);
    }

    #[test]
    fn node_readiness_and_internal_ips() {
        let mut node = Node {
            addresses: vec![
                NodeAddress {
                    type_: "Hostname".into(),
                    address: "m0".into(),
                },
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: "10.0.0.1".into(),
                },
            ],
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "False".into(),
                ..Condition::default()
            }],
            ..Node::default()
        };
        assert!(!node.is_ready());
        assert_eq!(node.internal_ips().collect::<Vec<_>>(), vec!["10.0.0.1"]);
        node.conditions[0].status = "True".into();
        assert!(node.is_ready());
    }
}
