//! What the bootstrap and single-node flows ask of the new cluster's Kubernetes API, behind a
//! narrow trait (the real one uses kube-rs with the kubeconfig bootkube writes; tests use a
//! fake API server; dry-run fakes it from the cluster-hosts file).

use anyhow::Result;
use std::collections::BTreeMap;

use crate::config::Role;

pub mod client;
pub mod install_config;

/// Label selecting the nodes of a role (`master`, `arbiter`, `worker`).
pub fn role_label(role: &str) -> String {
    format!("node-role.kubernetes.io/{role}")
}

pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
pub const CURRENT_CONFIG_ANNOTATION: &str = "machineconfiguration.openshift.io/currentConfig";
pub const DESIRED_CONFIG_ANNOTATION: &str = "machineconfiguration.openshift.io/desiredConfig";
pub const CONTROLLER_NAMESPACE: &str = "assisted-installer";
pub const CONTROLLER_READY_EVENT: &str = "AssistedControllerIsReady";

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
}
