//! What the bootstrap and single-node flows ask of the new cluster's Kubernetes API, behind a
//! narrow trait (the real one uses kube-rs with the kubeconfig bootkube writes; tests use a
//! fake API server; dry-run fakes it from the cluster-hosts file).

use anyhow::Result;
use std::collections::BTreeMap;

use crate::config::Role;

pub mod blocking;
pub mod client;
pub mod dry_cluster;
pub mod install_config;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// `NodeInternalIP` addresses.
    pub internal_ips: Vec<String>,
    pub annotations: BTreeMap<String, String>,
    /// Taint keys.
    pub taints: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventInfo {
    pub name: String,
    pub reason: String,
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodInfo {
    pub name: String,
    /// `status.phase`: `Pending`, `Running`, `Succeeded`, `Failed`, `Unknown` (empty if unset).
    pub phase: String,
}

pub trait KubeApi: Send + Sync {
    /// Nodes labelled `node-role.kubernetes.io/<role>`.
    fn list_nodes(&self, role: &Role) -> Result<Vec<NodeInfo>>;
    /// Events of a namespace.
    fn list_events(&self, namespace: &str) -> Result<Vec<EventInfo>>;
    /// The data of a ConfigMap; `None` when it does not exist.
    fn get_config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>>;
    /// Whether the MachineConfig `name` exists.
    fn machine_config_exists(&self, name: &str) -> Result<bool>;
    /// Remove the taint with `key` from a node (no-op when absent).
    fn remove_node_taint(&self, node: &str, key: &str) -> Result<()>;
    /// Pods of a namespace matching a label selector (`key=value`, comma-joined).
    fn list_pods(&self, namespace: &str, label_selector: &str) -> Result<Vec<PodInfo>>;
    /// The log of a pod (its only container); with `since_seconds`, only that recent part.
    fn pod_logs(&self, namespace: &str, pod: &str, since_seconds: Option<i64>) -> Result<String>;
}
