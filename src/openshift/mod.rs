//! OpenShift's names and formats that both programs share: the labels, annotations and taints
//! they read, the controller's namespace and Job, and the machine-config-server's log.

pub(crate) mod mcs_logs;

/// Label selecting the nodes of a role (`master`, `arbiter`, `worker`).
pub(crate) fn role_label(role: &str) -> String {
    format!("node-role.kubernetes.io/{role}")
}

pub const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";
pub const CURRENT_CONFIG_ANNOTATION: &str = "machineconfiguration.openshift.io/currentConfig";
pub(crate) const DESIRED_CONFIG_ANNOTATION: &str =
    "machineconfiguration.openshift.io/desiredConfig";
pub const CONTROLLER_NAMESPACE: &str = "assisted-installer";
pub(crate) const CONTROLLER_READY_EVENT: &str = "AssistedControllerIsReady";
/// The controller's Job name: the `job-name` label of its pod and the prefix of the pod's name.
pub(crate) const CONTROLLER_JOB: &str = "assisted-installer-controller";

/// The ConfigMap naming who invoked the OpenShift installer, and its key.
pub const INVOKER_NAMESPACE: &str = "openshift-config";
pub const INVOKER_CONFIG_MAP: &str = "openshift-install-manifests";
pub const INVOKER_KEY: &str = "invoker";
/// The invoker when that ConfigMap cannot be read.
pub(crate) const INVOKER_ASSISTED: &str = "assisted-service";
/// The agent-based installer.
pub const INVOKER_AGENT: &str = "agent-installer";

/// Who invoked the OpenShift installer, from the data of the invoker ConfigMap (`None` when it
/// does not exist or cannot be read): its `invoker` value, empty when the key is missing.
pub fn invoker(config_map_data: Option<&std::collections::BTreeMap<String, String>>) -> String {
    match config_map_data {
        None => INVOKER_ASSISTED.to_string(),
        Some(data) => data.get(INVOKER_KEY).cloned().unwrap_or_default(),
    }
}

/// The file name of the controller's log upload (`logs_type=controller`).
pub(crate) const CONTROLLER_LOGS_ARCHIVE: &str = "controller_logs.tar.gz";

/// The cluster-scoped Proxy and ClusterVersion objects OpenShift keeps one of, by these names.
pub(crate) const PROXY_NAME: &str = "cluster";
pub(crate) const CLUSTER_VERSION_NAME: &str = "version";
/// The ConfigMap holding the router's CA, and its key.
pub(crate) const INGRESS_CERT_NAMESPACE: &str = "openshift-config-managed";
pub(crate) const INGRESS_CERT_NAME: &str = "default-ingress-cert";
pub(crate) const INGRESS_CERT_KEY: &str = "ca-bundle.crt";
/// The namespace of the machine-config-server pods.
pub(crate) const MCS_NAMESPACE: &str = "openshift-machine-config-operator";
