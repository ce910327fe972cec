//! Dry mode's pretend cluster (`DRY_ENABLE=true`, §3.16): a [`ClusterApi`] with no API server
//! behind it, so that the controller of a load test drives its cluster's hosts through their
//! stages and completes the install against a real assisted-service. Everything it shows comes
//! from the dry-run hosts (`DRY_CLUSTER_HOSTS_PATH`: hostname, IP, reboot marker) and from the
//! markers each host's dry-run installer touches instead of rebooting. Markers are checked at
//! every call, so hosts show up as they "reboot".
//!
//! What it shows:
//! - **machine-config-server**: one Running pod in `openshift-machine-config-operator`, labelled
//!   `k8s-app=machine-config-server`; its log holds one Ignition request line per rebooted host,
//!   in the MCS's own format (`… requested by address:"<ip>:<port>" User-Agent:"Ignition/…"`,
//!   IPv6 in brackets), which the node-status task's matcher turns into `Configuring`.
//! - **Nodes**: one per rebooted host **whose Ignition request the MCS log has already shown**
//!   (a read of that log records it), named by the hostname, `InternalIP` = the host's IP,
//!   Ready, no taints, labelled `node-role.kubernetes.io/master` and `…/control-plane` (the file
//!   has no roles; Go's dry mock lists every node for master queries too) plus
//!   `kubernetes.io/hostname`. Why the MCS gate: a node-status round updates the matched nodes
//!   *before* it reads the MCS log, so a node visible as soon as the marker exists would take
//!   its host from `Rebooting` to `Joined` and `Done` in one round and `Configuring` would never
//!   be reported. Gated, the service sees a real cluster's order: `Configuring` in the round
//!   that first reads the log after the reboot, `Joined` and `Done` in the next one (as on a
//!   real cluster, a node cannot join before fetching its Ignition). Every task that waits for
//!   nodes runs alongside node status, which reads the log every round.
//! - **Operators**: ClusterVersion `version` and every ClusterOperator (any name asked, and a
//!   list of the usual ones) `Available=True`, `Progressing=False`, `Degraded=False`; the
//!   `Console` capability enabled. OLM: any Subscription exists with a current CSV, and every
//!   CSV is `Succeeded`, so the OLM waits end (applying the operators' manifests is `oc`'s job,
//!   not this API's).
//! - **ConfigMaps**: only `openshift-config-managed/default-ingress-cert`, holding a CA made for
//!   dry mode (`dry/ingress-ca.pem`, a parsable self-signed certificate whose key was thrown
//!   away): post-install waits for it and uploads it to the service. No invoker ConfigMap (so
//!   the invoker is `assisted-service`), no install-config, no OLM manifests ConfigMap.
//! - **Empty**: Proxy `cluster` has no proxy; no Services (the DNS fix is not run in dry mode
//!   anyway), CSRs, Jobs, InstallPlans, BareMetalHosts, Machines or metal3 Provisioning. No
//!   controller pod either: the log upload then falls back to the log file, which in dry mode is
//!   the process's real log (Go's dry mock served a canned one).
//! - **MachineConfigPools** `master` and `worker`, not paused.
//!
//! Writes: the ready Event is recorded (repeats are not refused with AlreadyExists, since the
//! controller treats both alike); node label patches are merged into the nodes and pool pauses
//! kept, so that tasks reading back what they wrote see it. Removing a taint succeeds (the nodes
//! have none; the tasks only ask for taints they found). Deleting Pods succeeds and deletes
//! nothing. Objects that do not exist (a Service, Job, InstallPlan, CSR, BMH, …) are NotFound
//! [`ApiError`]s, as on a real cluster. Unlike a real cluster, nothing else changes on its own:
//! no operator ever degrades, no node goes NotReady.

use anyhow::Result;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

use super::{
    selector_matches, ApiError, ClusterApi, ClusterOperator, ClusterVersion, Condition, Csr,
    CsrApproval, Csv, InstallPlan, Job, Machine, MachineConfigPool, NewEvent, Node, NodeAddress,
    Pod, ProxyStatus, Service, Subscription,
};
use crate::config::cluster_hosts::ClusterHost;
use crate::controller::tasks::completion::{
    INGRESS_CERT_KEY, INGRESS_CERT_NAME, INGRESS_CERT_NAMESPACE,
};
use crate::controller::tasks::nodes::MCS_NAMESPACE;
use crate::controller::tasks::operators::CLUSTER_VERSION_NAME;
use crate::openshift::PROXY_NAME;

/// The pretend machine-config-server pod.
pub const DRY_MCS_POD: &str = "machine-config-server-dry-run";
/// The label that makes it the MCS (the node-status task selects on it).
pub const MCS_APP_LABEL: (&str, &str) = ("k8s-app", "machine-config-server");
/// The client port written in the Ignition request lines.
pub const DRY_IGNITION_PORT: u16 = 40548;
/// The labels every pretend node carries (besides `kubernetes.io/hostname`).
pub const MASTER_LABEL: &str = "node-role.kubernetes.io/master";
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The MachineConfigPools that exist.
pub const DRY_POOLS: [&str; 2] = ["master", "worker"];
/// The router CA of `default-ingress-cert` (see the module documentation).
pub const DRY_INGRESS_CA: &str = include_str!("dry/ingress-ca.pem");
/// The ClusterOperators listed (any other name asked for exists too).
pub const DRY_CLUSTER_OPERATORS: [&str; 31] = [
    "authentication",
    "baremetal",
    "cloud-controller-manager",
    "cloud-credential",
    "cluster-autoscaler",
    "config-operator",
    "console",
    "control-plane-machine-set",
    "csi-snapshot-controller",
    "dns",
    "etcd",
    "image-registry",
    "ingress",
    "insights",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-storage-version-migrator",
    "machine-api",
    "machine-approver",
    "machine-config",
    "marketplace",
    "monitoring",
    "network",
    "node-tuning",
    "openshift-apiserver",
    "openshift-controller-manager",
    "openshift-samples",
    "operator-lifecycle-manager",
    "service-ca",
    "storage",
];

/// What the pretend cluster remembers between calls.
#[derive(Default)]
struct State {
    /// Indexes of the hosts whose Ignition request an MCS log read has shown: their nodes exist.
    ignition_served: BTreeSet<usize>,
    /// Labels patched onto each node, by node name (`null` values removed them).
    patched_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// `spec.paused` of the pools that were patched.
    paused_pools: BTreeMap<String, bool>,
    /// The Events created, with their namespaces.
    events: Vec<(String, NewEvent)>,
}

/// The pretend cluster; see the module documentation.
pub struct DryCluster {
    hosts: Vec<ClusterHost>,
    state: Mutex<State>,
}

impl std::fmt::Debug for DryCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DryCluster")
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

fn not_found(what: &str) -> anyhow::Error {
    anyhow::Error::new(ApiError::new(
        404,
        "NotFound",
        &format!("dry run: {what} not found"),
    ))
}

fn condition(type_: &str, status: &str, message: &str) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: "DryRun".to_string(),
        message: message.to_string(),
    }
}

/// The conditions of every operator and of the ClusterVersion: available, settled, healthy.
fn available_conditions() -> Vec<Condition> {
    vec![
        condition("Available", "True", "Dry run: available"),
        condition("Progressing", "False", ""),
        condition("Degraded", "False", ""),
    ]
}

fn cluster_operator(name: &str) -> ClusterOperator {
    ClusterOperator {
        name: name.to_string(),
        conditions: available_conditions(),
        versions: Vec::new(),
    }
}

/// One MCS log line for an Ignition request from `ip` (bracketed when IPv6).
pub fn ignition_request_line(ip: &str) -> String {
    let address = match ip.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => format!("[{ip}]"),
        _ => ip.to_string(),
    };
    format!(
        "I0101 00:00:00.000000       1 api.go:117] Pool master requested by \
         address:\"{address}:{DRY_IGNITION_PORT}\" User-Agent:\"Ignition/2.16.2\" \
         Accept-Header: \"application/vnd.coreos.ignition+json;version=3.4.0\"\n"
    )
}

impl DryCluster {
    /// The pretend cluster of `hosts` (the parsed `DRY_CLUSTER_HOSTS_PATH`).
    pub fn new(hosts: Vec<ClusterHost>) -> DryCluster {
        DryCluster {
            hosts,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The Events created so far, with their namespaces.
    pub fn events(&self) -> Vec<(String, NewEvent)> {
        self.lock().events.clone()
    }

    fn mcs_pod() -> Pod {
        Pod {
            namespace: MCS_NAMESPACE.to_string(),
            name: DRY_MCS_POD.to_string(),
            phase: "Running".to_string(),
            labels: BTreeMap::from([(MCS_APP_LABEL.0.to_string(), MCS_APP_LABEL.1.to_string())]),
        }
    }

    /// The MCS log: the rebooted hosts' Ignition requests, which makes their nodes exist.
    fn mcs_log(&self) -> String {
        let mut state = self.lock();
        let mut log = String::new();
        for (i, host) in self.hosts.iter().enumerate() {
            if host.rebooted() {
                log.push_str(&ignition_request_line(&host.ip));
                state.ignition_served.insert(i);
            }
        }
        log
    }

    /// The nodes that exist now (see the module documentation), in the hosts' order.
    fn nodes(&self) -> Vec<Node> {
        let state = self.lock();
        self.hosts
            .iter()
            .enumerate()
            .filter(|(i, host)| state.ignition_served.contains(i) && host.rebooted())
            .map(|(_, host)| node(host, state.patched_labels.get(&host.hostname)))
            .collect()
    }

    fn existing_node(&self, name: &str) -> Result<Node> {
        self.nodes()
            .into_iter()
            .find(|n| n.name == name)
            .ok_or_else(|| not_found(&format!("node {name}")))
    }
}

fn node(host: &ClusterHost, patched: Option<&BTreeMap<String, String>>) -> Node {
    let mut labels: BTreeMap<String, String> = [
        (MASTER_LABEL, ""),
        (CONTROL_PLANE_LABEL, ""),
        (HOSTNAME_LABEL, host.hostname.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    labels.extend(
        patched
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    Node {
        name: host.hostname.clone(),
        labels,
        taints: Vec::new(),
        conditions: vec![condition("Ready", "True", "Dry run: the host rebooted")],
        addresses: vec![
            NodeAddress {
                type_: "InternalIP".to_string(),
                address: host.ip.clone(),
            },
            NodeAddress {
                type_: "Hostname".to_string(),
                address: host.hostname.clone(),
            },
        ],
    }
}

impl ClusterApi for DryCluster {
    fn get_proxy(&self, name: &str) -> Result<ProxyStatus> {
        if name != PROXY_NAME {
            return Err(not_found(&format!("proxy {name}")));
        }
        Ok(ProxyStatus::default())
    }

    fn get_cluster_version(&self, name: &str) -> Result<ClusterVersion> {
        if name != CLUSTER_VERSION_NAME {
            return Err(not_found(&format!("clusterversion {name}")));
        }
        Ok(ClusterVersion {
            conditions: available_conditions(),
            enabled_capabilities: vec!["Console".to_string()],
            known_capabilities: vec!["Console".to_string()],
            desired_version: String::new(),
        })
    }

    fn list_cluster_operators(&self) -> Result<Vec<ClusterOperator>> {
        Ok(DRY_CLUSTER_OPERATORS
            .iter()
            .map(|name| cluster_operator(name))
            .collect())
    }

    fn get_cluster_operator(&self, name: &str) -> Result<ClusterOperator> {
        Ok(cluster_operator(name))
    }

    fn get_config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        if (namespace, name) != (INGRESS_CERT_NAMESPACE, INGRESS_CERT_NAME) {
            return Ok(None);
        }
        Ok(Some(BTreeMap::from([(
            INGRESS_CERT_KEY.to_string(),
            DRY_INGRESS_CA.to_string(),
        )])))
    }

    fn create_event(&self, namespace: &str, event: &NewEvent) -> Result<()> {
        tracing::info!("dry run: event {} created in {namespace}", event.name);
        self.lock()
            .events
            .push((namespace.to_string(), event.clone()));
        Ok(())
    }

    fn list_nodes(&self, label_selector: Option<&str>) -> Result<Vec<Node>> {
        Ok(self
            .nodes()
            .into_iter()
            .filter(|n| selector_matches(label_selector, &n.labels))
            .collect())
    }

    fn get_node(&self, name: &str) -> Result<Node> {
        self.existing_node(name)
    }

    fn remove_node_taint(&self, name: &str, _index: usize) -> Result<()> {
        // The pretend nodes have no taints, and the tasks only remove the ones they found.
        self.existing_node(name).map(|_| ())
    }

    fn patch_node_labels(&self, name: &str, labels: &Value) -> Result<()> {
        self.existing_node(name)?;
        let mut state = self.lock();
        let patched = state.patched_labels.entry(name.to_string()).or_default();
        // Merge-patch semantics: a string sets the label, null removes it.
        for (key, value) in labels.as_object().into_iter().flatten() {
            match value {
                Value::String(v) => {
                    patched.insert(key.clone(), v.clone());
                }
                Value::Null => {
                    patched.remove(key);
                }
                other => {
                    let msg = format!("dry run: label {key}: {other} is not a string");
                    return Err(ApiError::new(400, "BadRequest", &msg).into());
                }
            }
        }
        Ok(())
    }

    fn list_services(&self) -> Result<Vec<Service>> {
        Ok(Vec::new())
    }

    fn delete_service(&self, namespace: &str, name: &str) -> Result<()> {
        Err(not_found(&format!("service {namespace}/{name}")))
    }

    fn list_pods(
        &self,
        namespace: &str,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Vec<Pod>> {
        // `status.phase=<phase>` is the only field selector the controller sends.
        let phase = field_selector.and_then(|f| f.strip_prefix("status.phase="));
        Ok([DryCluster::mcs_pod()]
            .into_iter()
            .filter(|p| p.namespace == namespace && selector_matches(label_selector, &p.labels))
            .filter(|p| phase.is_none_or(|ph| p.phase == ph))
            .collect())
    }

    fn pod_log(&self, namespace: &str, name: &str, _since_seconds: Option<i64>) -> Result<String> {
        if (namespace, name) != (MCS_NAMESPACE, DRY_MCS_POD) {
            return Err(not_found(&format!("pod {namespace}/{name}")));
        }
        Ok(self.mcs_log())
    }

    fn delete_pods(&self, _namespace: &str, _label_selector: Option<&str>) -> Result<()> {
        Ok(())
    }

    fn list_csrs(&self) -> Result<Vec<Csr>> {
        Ok(Vec::new())
    }

    fn approve_csr(&self, csr: &Csr, _approval: &CsrApproval) -> Result<()> {
        Err(not_found(&format!(
            "certificatesigningrequest {}",
            csr.name
        )))
    }

    fn get_subscription(&self, namespace: &str, name: &str) -> Result<Option<Subscription>> {
        Ok(Some(Subscription {
            namespace: namespace.to_string(),
            name: name.to_string(),
            current_csv: format!("{name}.dry-run"),
        }))
    }

    fn get_csv(&self, namespace: &str, name: &str) -> Result<Option<Csv>> {
        Ok(Some(Csv {
            namespace: namespace.to_string(),
            name: name.to_string(),
            phase: "Succeeded".to_string(),
            message: "Dry run: install strategy completed".to_string(),
            version: String::new(),
        }))
    }

    fn list_install_plans(&self, _namespace: &str) -> Result<Vec<InstallPlan>> {
        Ok(Vec::new())
    }

    fn delete_install_plan(&self, namespace: &str, name: &str) -> Result<()> {
        Err(not_found(&format!("installplan {namespace}/{name}")))
    }

    fn list_jobs(&self, _namespace: &str) -> Result<Vec<Job>> {
        Ok(Vec::new())
    }

    fn delete_job(&self, namespace: &str, name: &str) -> Result<()> {
        Err(not_found(&format!("job {namespace}/{name}")))
    }

    fn list_bmhs(&self, _namespace: &str) -> Result<Vec<Value>> {
        Ok(Vec::new())
    }

    fn get_bmh(&self, namespace: &str, name: &str) -> Result<Value> {
        Err(not_found(&format!("baremetalhost {namespace}/{name}")))
    }

    fn update_bmh(&self, namespace: &str, bmh: &Value) -> Result<Value> {
        Err(not_found(&format!(
            "baremetalhost {namespace}/{}",
            bmh_name(bmh)
        )))
    }

    fn update_bmh_status(&self, namespace: &str, bmh: &Value) -> Result<Value> {
        Err(not_found(&format!(
            "baremetalhost {namespace}/{}",
            bmh_name(bmh)
        )))
    }

    fn provisioning_exists(&self, _name: &str) -> Result<bool> {
        Ok(false)
    }

    fn list_machines(&self, _namespace: &str) -> Result<Vec<Machine>> {
        Ok(Vec::new())
    }

    fn get_machine_config_pool(&self, name: &str) -> Result<MachineConfigPool> {
        if !DRY_POOLS.contains(&name) {
            return Err(not_found(&format!("machineconfigpool {name}")));
        }
        let paused = self.lock().paused_pools.get(name).copied().unwrap_or(false);
        Ok(MachineConfigPool {
            name: name.to_string(),
            paused,
        })
    }

    fn set_machine_config_pool_paused(&self, name: &str, paused: bool) -> Result<()> {
        if !DRY_POOLS.contains(&name) {
            return Err(not_found(&format!("machineconfigpool {name}")));
        }
        self.lock().paused_pools.insert(name.to_string(), paused);
        Ok(())
    }
}

fn bmh_name(bmh: &Value) -> &str {
    bmh.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

#[cfg(test)]
mod tests;
