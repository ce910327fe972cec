//! OpenShift's names and formats that both programs share: the labels, annotations and taints
//! they read, the controller's namespace and Job, and the machine-config-server's log.

pub(crate) mod mcs_logs;

/// Label selecting the nodes of a role (`master`, `arbiter`, `worker`).
pub fn role_label(role: &str) -> String {
    format!("node-role.kubernetes.io/{role}")
}

pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
pub const CURRENT_CONFIG_ANNOTATION: &str = "machineconfiguration.openshift.io/currentConfig";
pub const DESIRED_CONFIG_ANNOTATION: &str = "machineconfiguration.openshift.io/desiredConfig";
pub const CONTROLLER_NAMESPACE: &str = "assisted-installer";
pub const CONTROLLER_READY_EVENT: &str = "AssistedControllerIsReady";
/// The controller's Job name: the `job-name` label of its pod and the prefix of the pod's name.
pub const CONTROLLER_JOB: &str = "assisted-installer-controller";
/// The cluster-scoped `config.openshift.io/v1 Proxy` whose status the controller reads.
pub const PROXY_NAME: &str = "cluster";
