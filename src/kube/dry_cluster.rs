//! The pretend cluster of dry-run mode (the Go installer's dry-run Kubernetes mock), built from
//! the cluster-hosts file: the bootstrap's waits complete against it without a cluster.
//!
//! - one Ready node per host whose reboot marker exists, named by its hostname, with its IP as
//!   `InternalIP`, listed for any role (as Go's mock does; the bootstrap asks for masters, and
//!   for arbiters only when the install-config wants some, which this one never does);
//! - the install-config (`kube-system/cluster-config-v1`) with `controlPlane.replicas` from
//!   `--control-plane-count`, and no arbiter; no other ConfigMap (the invoker is then
//!   `assisted-service`);
//! - the `AssistedControllerIsReady` event in the controller's namespace;
//! - a Running controller pod with a few canned log lines;
//! - every node on one rendered MachineConfig, which exists.
//!
//! Go's mock answers only some of the calls its bootstrap makes (see the installer reference,
//! §7); this one answers all of them.

use anyhow::{bail, Result};
use std::collections::BTreeMap;

use super::{EventInfo, KubeApi, NodeInfo, PodInfo};
use crate::config::cluster_hosts::{self, ClusterHost};
use crate::config::{InstallerConfig, Role};
use crate::openshift::{
    CONTROLLER_JOB, CONTROLLER_NAMESPACE, CONTROLLER_READY_EVENT, CURRENT_CONFIG_ANNOTATION,
    DESIRED_CONFIG_ANNOTATION,
};

/// The one MachineConfig every pretend node is on.
pub const DRY_RENDERED_CONFIG: &str = "rendered-master-dry-run";
/// The pretend controller pod (its name has the prefix the bootstrap looks for).
pub const DRY_CONTROLLER_POD: &str = "assisted-installer-controller-dry-run";
/// What the pretend controller pod logged.
pub const DRY_CONTROLLER_LOG: &str = "Dry run: assisted-installer-controller started\n\
     Dry run: assisted-installer-controller is ready\n";

#[derive(Debug, Clone)]
pub struct DryCluster {
    hosts: Vec<ClusterHost>,
    control_plane_replicas: i64,
}

impl DryCluster {
    pub fn new(hosts: Vec<ClusterHost>, control_plane_replicas: i64) -> DryCluster {
        DryCluster {
            hosts,
            control_plane_replicas,
        }
    }

    /// From `--dry-run-cluster-hosts-path` (no hosts without it) and `--control-plane-count`.
    pub fn from_config(cfg: &InstallerConfig) -> Result<DryCluster> {
        let hosts = cluster_hosts::load_optional(cfg.dry_run_cluster_hosts_path.as_deref())?;
        Ok(DryCluster::new(hosts, cfg.control_plane_count))
    }

    fn node(host: &ClusterHost) -> NodeInfo {
        let annotations = [CURRENT_CONFIG_ANNOTATION, DESIRED_CONFIG_ANNOTATION]
            .into_iter()
            .map(|k| (k.to_string(), DRY_RENDERED_CONFIG.to_string()))
            .collect();
        NodeInfo {
            name: host.hostname.clone(),
            ready: true,
            internal_ips: vec![host.ip.clone()],
            annotations,
            taints: Vec::new(),
        }
    }
}

impl KubeApi for DryCluster {
    fn list_nodes(&self, _: &Role) -> Result<Vec<NodeInfo>> {
        // The markers are checked on each call: other dry-run installers touch them meanwhile.
        Ok(self
            .hosts
            .iter()
            .filter(|h| h.rebooted())
            .map(DryCluster::node)
            .collect())
    }

    fn list_events(&self, namespace: &str) -> Result<Vec<EventInfo>> {
        if namespace != CONTROLLER_NAMESPACE {
            return Ok(Vec::new());
        }
        Ok(vec![EventInfo {
            name: CONTROLLER_READY_EVENT.into(),
            reason: CONTROLLER_READY_EVENT.into(),
            message: "Dry run: the controller is ready".into(),
        }])
    }

    fn get_config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        if (namespace, name) != ("kube-system", "cluster-config-v1") {
            return Ok(None);
        }
        let install_config = format!(
            "controlPlane:\n  replicas: {}\n",
            self.control_plane_replicas
        );
        Ok(Some(BTreeMap::from([(
            "install-config".to_string(),
            install_config,
        )])))
    }

    fn machine_config_exists(&self, name: &str) -> Result<bool> {
        Ok(name == DRY_RENDERED_CONFIG)
    }

    fn remove_node_taint(&self, _: &str, _: &str) -> Result<()> {
        // The pretend nodes have no taint.
        Ok(())
    }

    fn list_pods(&self, namespace: &str, label_selector: &str) -> Result<Vec<PodInfo>> {
        let controller = format!("job-name={CONTROLLER_JOB}");
        if namespace != CONTROLLER_NAMESPACE || label_selector != controller {
            return Ok(Vec::new());
        }
        Ok(vec![PodInfo {
            name: DRY_CONTROLLER_POD.into(),
            phase: "Running".into(),
        }])
    }

    fn pod_logs(&self, namespace: &str, pod: &str, _: Option<i64>) -> Result<String> {
        if (namespace, pod) != (CONTROLLER_NAMESPACE, DRY_CONTROLLER_POD) {
            bail!("dry run: no pod {namespace}/{pod}");
        }
        Ok(DRY_CONTROLLER_LOG.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::install_config::replicas;

    fn host(dir: &std::path::Path, name: &str, ip: &str) -> ClusterHost {
        ClusterHost {
            hostname: name.into(),
            ip: ip.into(),
            reboot_marker_path: dir.join(format!("{name}.rebooted")),
        }
    }

    #[test]
    fn nodes_appear_as_their_hosts_reboot() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = vec![
            host(dir.path(), "master-1", "192.0.2.11"),
            host(dir.path(), "master-2", "192.0.2.12"),
        ];
        let cluster = DryCluster::new(hosts.clone(), 3);
        assert!(cluster.list_nodes(&Role::Master).unwrap().is_empty());
        std::fs::write(&hosts[1].reboot_marker_path, "").unwrap();
        let nodes = cluster.list_nodes(&Role::Master).unwrap();
        assert_eq!(nodes.len(), 1);
        let node = &nodes[0];
        assert_eq!(node.name, "master-2");
        assert!(node.ready);
        assert_eq!(node.internal_ips, ["192.0.2.12"]);
        for key in [CURRENT_CONFIG_ANNOTATION, DESIRED_CONFIG_ANNOTATION] {
            let config = &node.annotations[key];
            assert!(cluster.machine_config_exists(config).unwrap(), "{key}");
        }
        assert!(!cluster.machine_config_exists("rendered-other").unwrap());
        cluster.remove_node_taint("master-2", "any").unwrap();
    }

    #[test]
    fn the_install_config_wants_the_control_plane_count_and_no_arbiter() {
        let cluster = DryCluster::new(Vec::new(), 3);
        let cm = cluster
            .get_config_map("kube-system", "cluster-config-v1")
            .unwrap()
            .unwrap();
        let r = replicas(&cm["install-config"]).unwrap();
        assert_eq!((r.control_plane, r.arbiter), (Some(3), None));
        assert_eq!(
            cluster
                .get_config_map("openshift-config", "openshift-install-manifests")
                .unwrap(),
            None
        );
    }

    #[test]
    fn the_controller_is_ready_and_running_with_a_log() {
        let cluster = DryCluster::new(Vec::new(), 3);
        let events = cluster.list_events(CONTROLLER_NAMESPACE).unwrap();
        assert!(events.iter().any(|e| e.name == CONTROLLER_READY_EVENT));
        assert!(cluster.list_events("default").unwrap().is_empty());
        let pods = cluster
            .list_pods(
                CONTROLLER_NAMESPACE,
                "job-name=assisted-installer-controller",
            )
            .unwrap();
        assert_eq!(
            pods,
            [PodInfo {
                name: DRY_CONTROLLER_POD.into(),
                phase: "Running".into()
            }]
        );
        assert!(cluster
            .list_pods(CONTROLLER_NAMESPACE, "app=other")
            .unwrap()
            .is_empty());
        let log = cluster
            .pod_logs(CONTROLLER_NAMESPACE, DRY_CONTROLLER_POD, Some(3600))
            .unwrap();
        assert!(log.lines().count() >= 2 && log.starts_with("Dry run"));
        assert!(cluster
            .pod_logs(CONTROLLER_NAMESPACE, "other", None)
            .is_err());
    }

    #[test]
    fn from_config_reads_the_hosts_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hosts.json");
        let marker = dir.path().join("m1");
        std::fs::write(&marker, "").unwrap();
        let json =
            serde_json::json!([{"hostname": "m1", "ip": "192.0.2.11", "rebootMarkerPath": marker}]);
        std::fs::write(&file, json.to_string()).unwrap();
        let cfg = InstallerConfig {
            dry_run: true,
            dry_run_cluster_hosts_path: Some(file.clone()),
            control_plane_count: 3,
            ..InstallerConfig::default()
        };
        let cluster = DryCluster::from_config(&cfg).unwrap();
        assert_eq!(cluster.list_nodes(&Role::Master).unwrap()[0].name, "m1");
        std::fs::write(&file, "not json").unwrap();
        assert!(DryCluster::from_config(&cfg).is_err());
        let none = DryCluster::from_config(&InstallerConfig::default()).unwrap();
        assert!(none.list_nodes(&Role::Master).unwrap().is_empty());
    }
}
