//! Dry mode's pretend cluster, for both programs: no API server behind it, so that the
//! installers and the controller of a load test (`--dry-run`, `DRY_ENABLE=true`) drive their
//! hosts through their stages against a real assisted-service. It shows what the dry-run hosts
//! (`DRY_CLUSTER_HOSTS_PATH`: hostname, IP, reboot marker) say, checking the markers at every
//! call, so hosts show up as they "reboot".
//!
//! The controller's view ([`ClusterApi`]):
//! - a Running machine-config-server pod whose log holds an Ignition request line
//!   ([`ignition_request_line`]) per rebooted host;
//! - a Ready node per rebooted host **whose Ignition request that log has already shown**,
//!   labelled master and control-plane (Go's mock lists every node for master queries too).
//!   Why the gate: a node-status round updates the matched nodes *before* it reads the MCS log,
//!   so a node visible as soon as its marker exists would take its host from `Rebooting` to
//!   `Joined` and `Done` in one round, and `Configuring` would never be reported. Gated, the
//!   service sees a real cluster's order;
//! - every operator and the ClusterVersion available, the `Console` capability enabled, every
//!   OLM Subscription with a `Succeeded` CSV; pools `master` and `worker`;
//! - only the ConfigMap `default-ingress-cert`, holding a CA made for dry mode
//!   (`dry/ingress-ca.pem`, self-signed, its key thrown away); so the invoker is
//!   `assisted-service`;
//! - nothing else: no proxy, Services, CSRs, Jobs, InstallPlans, BMHs, Machines, Provisioning
//!   or controller pod (the log upload then falls back to the process's real log).
//!
//! Writes: Events are recorded (repeats are not refused: the controller treats both alike),
//! label patches and pool pauses kept so that tasks read back what they wrote; removing a taint
//! or deleting Pods succeeds; writing an object that does not exist is NotFound.
//!
//! The installer's view ([`DryCluster::from_config`], as Go's dry-run mock): a Ready node per
//! rebooted host (no gate: the installer reads no MCS log), for any role, on one rendered
//! MachineConfig that exists; instead of the controller's ConfigMap and pod, the install-config
//! with `controlPlane.replicas` from `--control-plane-count` and a Running controller pod with
//! a canned log; the controller's ready Event.

use anyhow::Result;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use super::install_config::{INSTALL_CONFIG_KEY, INSTALL_CONFIG_NAME, INSTALL_CONFIG_NAMESPACE};
use super::{
    merge_labels, pod_selected, ApiError, ClusterApi, ClusterOperator, ClusterVersion, Condition,
    Csr, CsrApproval, Csv, Event, InstallPlan, Job, Machine, MachineConfigPool, NewEvent, Node,
    NodeAddress, Pod, ProxyStatus, Service, Subscription,
};
use crate::config::cluster_hosts::{self, ClusterHost};
use crate::config::InstallerConfig;
use crate::openshift::mcs_logs::ignition_request_line;
use crate::openshift::{
    role_label, CLUSTER_VERSION_NAME, CONTROLLER_JOB, CONTROLLER_NAMESPACE, CONTROLLER_READY_EVENT,
    CURRENT_CONFIG_ANNOTATION, DESIRED_CONFIG_ANNOTATION, INGRESS_CERT_KEY, INGRESS_CERT_NAME,
    INGRESS_CERT_NAMESPACE, MCS_NAMESPACE, PROXY_NAME,
};

/// The pretend machine-config-server pod.
const DRY_MCS_POD: &str = "machine-config-server-dry-run";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The MachineConfigPools that exist.
const DRY_POOLS: [&str; 2] = ["master", "worker"];
/// The router CA of `default-ingress-cert` (see the module documentation).
pub(crate) const DRY_INGRESS_CA: &str = include_str!("dry/ingress-ca.pem");
/// The ClusterOperators listed (any other name asked for exists too).
const DRY_CLUSTER_OPERATORS: &str = "\
    authentication baremetal cloud-controller-manager cloud-credential cluster-autoscaler \
     config-operator console control-plane-machine-set csi-snapshot-controller dns etcd \
     image-registry ingress insights kube-apiserver kube-controller-manager kube-scheduler \
     kube-storage-version-migrator machine-api machine-approver machine-config marketplace \
     monitoring network node-tuning openshift-apiserver openshift-controller-manager \
     openshift-samples operator-lifecycle-manager service-ca storage";
/// The one MachineConfig every pretend node is on (installer view).
const DRY_RENDERED_CONFIG: &str = "rendered-master-dry-run";
/// The pretend controller pod (its name has the prefix the bootstrap looks for) and its log.
const DRY_CONTROLLER_POD: &str = "assisted-installer-controller-dry-run";
const DRY_CONTROLLER_LOG: &str = "Dry run: assisted-installer-controller started\n\
     Dry run: assisted-installer-controller is ready\n";

/// What the pretend cluster remembers between calls.
#[derive(Default)]
struct State {
    /// Indexes of the hosts whose Ignition request an MCS log read has shown: their nodes exist.
    ignition_served: BTreeSet<usize>,
    /// Labels patched onto each node, by node name.
    patched_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// `spec.paused` of the pools that were patched.
    paused_pools: BTreeMap<String, bool>,
    /// The Events created, with their namespaces.
    events: Vec<(String, NewEvent)>,
}

/// The pretend cluster; see the module documentation.
pub struct DryCluster {
    hosts: Vec<ClusterHost>,
    /// The installer's view (see the module documentation), with `controlPlane.replicas` of
    /// the install-config it reads; `None`: the controller's.
    installer: Option<i64>,
    state: Mutex<State>,
}

fn not_found<T>(what: String) -> Result<T> {
    let message = format!("dry run: {what} not found");
    Err(ApiError::new(404, "NotFound", &message).into())
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

fn running_pod(namespace: &str, name: &str, label: (&str, &str)) -> Pod {
    Pod {
        namespace: namespace.to_string(),
        name: name.to_string(),
        phase: "Running".to_string(),
        labels: BTreeMap::from([(label.0.to_string(), label.1.to_string())]),
    }
}

fn node(host: &ClusterHost, patched: Option<&BTreeMap<String, String>>) -> Node {
    let (master, control_plane) = (role_label("master"), role_label("control-plane"));
    let mut labels = BTreeMap::from([(master, String::new()), (control_plane, String::new())]);
    labels.insert(HOSTNAME_LABEL.to_string(), host.hostname.clone());
    labels.extend(
        patched
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let annotations = [CURRENT_CONFIG_ANNOTATION, DESIRED_CONFIG_ANNOTATION]
        .into_iter()
        .map(|k| (k.to_string(), DRY_RENDERED_CONFIG.to_string()))
        .collect();
    let address = |type_: &str, address: &str| NodeAddress {
        type_: type_.to_string(),
        address: address.to_string(),
    };
    Node {
        name: host.hostname.clone(),
        labels,
        annotations,
        taints: Vec::new(),
        conditions: vec![condition("Ready", "True", "Dry run: the host rebooted")],
        addresses: vec![
            address("InternalIP", &host.ip),
            address("Hostname", &host.hostname),
        ],
    }
}

impl DryCluster {
    /// The pretend cluster of `hosts` (the parsed `DRY_CLUSTER_HOSTS_PATH`).
    pub(crate) fn new(hosts: Vec<ClusterHost>) -> DryCluster {
        DryCluster {
            hosts,
            installer: None,
            state: Mutex::new(State::default()),
        }
    }

    /// The installer's: from `--dry-run-cluster-hosts-path` (no hosts without it) and
    /// `--control-plane-count`.
    pub fn from_config(cfg: &InstallerConfig) -> Result<DryCluster> {
        let hosts = cluster_hosts::load_optional(cfg.dry_run_cluster_hosts_path.as_deref())?;
        Ok(DryCluster {
            installer: Some(cfg.control_plane_count),
            ..DryCluster::new(hosts)
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The Events created so far, with their namespaces.
    pub fn events(&self) -> Vec<(String, NewEvent)> {
        self.lock().events.clone()
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
        let hosts = self.hosts.iter().enumerate();
        hosts
            .filter(|(i, host)| {
                host.rebooted() && (self.installer.is_some() || state.ignition_served.contains(i))
            })
            .map(|(_, host)| node(host, state.patched_labels.get(&host.hostname)))
            .collect()
    }

    fn pool(&self, name: &str) -> Result<()> {
        match DRY_POOLS.contains(&name) {
            true => Ok(()),
            false => not_found(format!("machineconfigpool {name}")),
        }
    }
}

impl ClusterApi for DryCluster {
    fn get_proxy(&self, name: &str) -> Result<ProxyStatus> {
        match name == PROXY_NAME {
            true => Ok(ProxyStatus::default()),
            false => not_found(format!("proxy {name}")),
        }
    }

    fn get_cluster_version(&self, name: &str) -> Result<ClusterVersion> {
        if name != CLUSTER_VERSION_NAME {
            return not_found(format!("clusterversion {name}"));
        }
        Ok(ClusterVersion {
            conditions: available_conditions(),
            enabled_capabilities: vec!["Console".to_string()],
            known_capabilities: vec!["Console".to_string()],
            desired_version: String::new(),
        })
    }

    fn list_cluster_operators(&self) -> Result<Vec<ClusterOperator>> {
        let names = DRY_CLUSTER_OPERATORS.split_whitespace();
        Ok(names.map(cluster_operator).collect())
    }

    fn get_cluster_operator(&self, name: &str) -> Result<ClusterOperator> {
        Ok(cluster_operator(name))
    }

    fn get_config_map(&self, ns: &str, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        let (want, data) = match self.installer {
            Some(replicas) => (
                (INSTALL_CONFIG_NAMESPACE, INSTALL_CONFIG_NAME),
                (
                    INSTALL_CONFIG_KEY,
                    format!("controlPlane:\n  replicas: {replicas}\n"),
                ),
            ),
            None => (
                (INGRESS_CERT_NAMESPACE, INGRESS_CERT_NAME),
                (INGRESS_CERT_KEY, DRY_INGRESS_CA.to_string()),
            ),
        };
        Ok(((ns, name) == want).then(|| BTreeMap::from([(data.0.to_string(), data.1)])))
    }

    fn create_event(&self, namespace: &str, event: &NewEvent) -> Result<()> {
        tracing::info!("dry run: event {} created in {namespace}", event.name);
        let mut state = self.lock();
        state.events.push((namespace.to_string(), event.clone()));
        Ok(())
    }

    fn list_nodes(&self, label_selector: Option<&str>) -> Result<Vec<Node>> {
        // The installer's view has its nodes for any role, as Go's dry-run mock.
        let selector = label_selector.filter(|_| self.installer.is_none());
        let nodes = self.nodes().into_iter();
        Ok(nodes
            .filter(|n| super::selector_matches(selector, &n.labels))
            .collect())
    }

    fn get_node(&self, name: &str) -> Result<Node> {
        match self.nodes().into_iter().find(|n| n.name == name) {
            Some(node) => Ok(node),
            None => not_found(format!("node {name}")),
        }
    }

    fn remove_node_taint(&self, name: &str, _index: usize, _key: &str) -> Result<()> {
        // The pretend nodes have no taints, and the tasks only remove the ones they found.
        self.get_node(name).map(drop)
    }

    fn patch_node_labels(&self, name: &str, labels: &Value) -> Result<()> {
        self.get_node(name)?;
        let mut state = self.lock();
        merge_labels(
            state.patched_labels.entry(name.to_string()).or_default(),
            labels,
        )
    }

    fn list_services(&self) -> Result<Vec<Service>> {
        Ok(Vec::new())
    }

    fn delete_service(&self, namespace: &str, name: &str) -> Result<()> {
        not_found(format!("service {namespace}/{name}"))
    }

    fn list_pods(&self, ns: &str, label: Option<&str>, field: Option<&str>) -> Result<Vec<Pod>> {
        let pod = match self.installer {
            Some(_) => running_pod(
                CONTROLLER_NAMESPACE,
                DRY_CONTROLLER_POD,
                ("job-name", CONTROLLER_JOB),
            ),
            None => running_pod(
                MCS_NAMESPACE,
                DRY_MCS_POD,
                ("k8s-app", "machine-config-server"),
            ),
        };
        let pods = [pod].into_iter();
        Ok(pods.filter(|p| pod_selected(p, ns, label, field)).collect())
    }

    fn pod_log(&self, namespace: &str, name: &str, _since_seconds: Option<i64>) -> Result<String> {
        match (self.installer, namespace, name) {
            (None, MCS_NAMESPACE, DRY_MCS_POD) => Ok(self.mcs_log()),
            (Some(_), CONTROLLER_NAMESPACE, DRY_CONTROLLER_POD) => Ok(DRY_CONTROLLER_LOG.into()),
            _ => not_found(format!("pod {namespace}/{name}")),
        }
    }

    fn delete_pods(&self, _namespace: &str, _label_selector: Option<&str>) -> Result<()> {
        Ok(())
    }

    fn list_csrs(&self) -> Result<Vec<Csr>> {
        Ok(Vec::new())
    }

    fn approve_csr(&self, csr: &Csr, _approval: &CsrApproval) -> Result<()> {
        not_found(format!("certificatesigningrequest {}", csr.name))
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
        not_found(format!("installplan {namespace}/{name}"))
    }

    fn list_jobs(&self, _namespace: &str) -> Result<Vec<Job>> {
        Ok(Vec::new())
    }

    fn delete_job(&self, namespace: &str, name: &str) -> Result<()> {
        not_found(format!("job {namespace}/{name}"))
    }

    fn list_bmhs(&self, _namespace: &str) -> Result<Vec<Value>> {
        Ok(Vec::new())
    }

    fn get_bmh(&self, namespace: &str, name: &str) -> Result<Value> {
        not_found(format!("baremetalhost {namespace}/{name}"))
    }

    fn update_bmh(&self, namespace: &str, bmh: &Value) -> Result<Value> {
        self.get_bmh(namespace, bmh["metadata"]["name"].as_str().unwrap_or(""))
    }

    fn update_bmh_status(&self, namespace: &str, bmh: &Value) -> Result<Value> {
        self.update_bmh(namespace, bmh)
    }

    fn provisioning_exists(&self, _name: &str) -> Result<bool> {
        Ok(false)
    }

    fn list_machines(&self, _namespace: &str) -> Result<Vec<Machine>> {
        Ok(Vec::new())
    }

    fn get_machine_config_pool(&self, name: &str) -> Result<MachineConfigPool> {
        self.pool(name)?;
        let paused = self.lock().paused_pools.get(name).copied().unwrap_or(false);
        Ok(MachineConfigPool {
            name: name.to_string(),
            paused,
        })
    }

    fn set_machine_config_pool_paused(&self, name: &str, paused: bool) -> Result<()> {
        self.pool(name)?;
        self.lock().paused_pools.insert(name.to_string(), paused);
        Ok(())
    }

    fn list_events(&self, namespace: &str) -> Result<Vec<Event>> {
        let event = Event {
            name: CONTROLLER_READY_EVENT.into(),
            reason: CONTROLLER_READY_EVENT.into(),
            message: "Dry run: the controller is ready".into(),
        };
        Ok((namespace == CONTROLLER_NAMESPACE)
            .then_some(event)
            .into_iter()
            .collect())
    }

    fn machine_config_exists(&self, name: &str) -> Result<bool> {
        Ok(name == DRY_RENDERED_CONFIG)
    }
}

#[cfg(test)]
mod tests;
