//! The pretend cluster on temp-dir markers: nodes as hosts reboot, the MCS log read by the
//! node-status task's own matcher and rounds, operators through the availability rules, and the
//! objects the other tasks read.

use super::*;
use crate::clock::FakeClock;
use crate::controller::service::testing::{MemoryService, ServiceCall};
use crate::controller::tasks::completion::{upload_router_ca, MASTER_SELECTOR};
use crate::controller::tasks::nodes::{NodeStatus, MCS_LOG_SINCE_SECONDS, MCS_SELECTOR};
use crate::controller::tasks::operators::{
    cluster_operators_round, console_enabled, is_available, status_from_conditions, OlmHandler,
};
use crate::controller::tasks::reboots::RebootsNotify;
use crate::kube::api_error_code;
use crate::kube::install_config::replicas;
use crate::kube::install_config::INVOKER_ASSISTED;
use crate::openshift::mcs_logs::{hosts_that_fetched_ignition, ignition_fetch_addresses, McsHost};
use crate::service::{HostStage, MonitoredOperator, OperatorStatus};
use serde_json::json;
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

fn host(dir: &Path, name: &str, ip: &str) -> ClusterHost {
    ClusterHost {
        hostname: name.into(),
        ip: ip.into(),
        reboot_marker_path: dir.join(format!("{name}.rebooted")),
    }
}

fn reboot(host: &ClusterHost) {
    std::fs::write(&host.reboot_marker_path, "").unwrap();
}

/// Reads the MCS log as the node-status task does: list the MCS pods, read each log.
fn read_mcs_log(cluster: &DryCluster) -> String {
    let pods = cluster
        .list_pods(MCS_NAMESPACE, Some(MCS_SELECTOR), None)
        .unwrap();
    assert_eq!(pods.len(), 1, "{pods:?}");
    cluster
        .pod_log(MCS_NAMESPACE, &pods[0].name, Some(MCS_LOG_SINCE_SECONDS))
        .unwrap()
}

fn names(nodes: &[Node]) -> Vec<&str> {
    nodes.iter().map(|n| n.name.as_str()).collect()
}

#[test]
fn nodes_appear_once_the_host_rebooted_and_fetched_its_ignition() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = vec![
        host(dir.path(), "master-0", "192.0.2.10"),
        host(dir.path(), "master-1", "192.0.2.11"),
    ];
    let cluster = DryCluster::new(hosts.clone());
    assert!(cluster.list_nodes(None).unwrap().is_empty());
    assert_eq!(read_mcs_log(&cluster), "");
    assert!(cluster.list_nodes(None).unwrap().is_empty());

    reboot(&hosts[1]);
    // Rebooted, but its Ignition request not seen yet: no node.
    assert!(cluster.list_nodes(None).unwrap().is_empty());
    assert_eq!(read_mcs_log(&cluster).lines().count(), 1);
    let nodes = cluster.list_nodes(None).unwrap();
    assert_eq!(names(&nodes), ["master-1"]);
    let node = &nodes[0];
    assert!(node.is_ready());
    assert_eq!(node.internal_ips().collect::<Vec<_>>(), ["192.0.2.11"]);
    assert!(node.taints.is_empty());
    assert_eq!(cluster.get_node("master-1").unwrap(), *node);
    let missing = cluster.get_node("master-0").unwrap_err();
    assert_eq!(api_error_code(&missing), Some(404), "{missing:#}");

    // Selectors: masters (as the ABI wait asks) match, other roles do not.
    assert_eq!(
        names(&cluster.list_nodes(Some(MASTER_SELECTOR)).unwrap()),
        ["master-1"]
    );
    let by_name = format!("{HOSTNAME_LABEL}=master-1");
    assert_eq!(cluster.list_nodes(Some(&by_name)).unwrap().len(), 1);
    let workers = cluster
        .list_nodes(Some("node-role.kubernetes.io/worker"))
        .unwrap();
    assert!(workers.is_empty());

    // The markers are read at every call.
    std::fs::remove_file(&hosts[1].reboot_marker_path).unwrap();
    assert!(cluster.list_nodes(None).unwrap().is_empty());
    assert_eq!(read_mcs_log(&cluster), "");
}

#[test]
fn the_mcs_log_names_the_rebooted_hosts_for_the_matcher() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = vec![
        host(dir.path(), "m0", "192.0.2.10"),
        host(dir.path(), "m1", "fd00:1::11"),
        host(dir.path(), "m2", "192.0.2.12"),
    ];
    reboot(&hosts[0]);
    reboot(&hosts[1]);
    let cluster = DryCluster::new(hosts);
    let log = read_mcs_log(&cluster);
    let addresses = ignition_fetch_addresses(&log);
    let expected: HashSet<IpAddr> = ["192.0.2.10", "fd00:1::11"]
        .iter()
        .map(|ip| ip.parse().unwrap())
        .collect();
    assert_eq!(addresses, expected, "{log}");
    let watched: Vec<McsHost> = [
        ("h0", "192.0.2.10/24"),
        ("h1", "fd00:1::11/64"),
        ("h2", "192.0.2.12/24"),
    ]
    .iter()
    .map(|(id, ip)| McsHost {
        id: id.to_string(),
        role: None,
        ips: vec![ip.to_string()],
    })
    .collect();
    let fetched: Vec<&str> = hosts_that_fetched_ignition(&log, &watched)
        .iter()
        .map(|h| h.id.as_str())
        .collect();
    assert_eq!(fetched, ["h0", "h1"]);
}

struct NoNotify;
impl RebootsNotify for NoNotify {
    fn start(&self, _: &str, _: &str, _: &str, _: &str) {}
}

/// A service host `name` at `Rebooting`, its inventory holding `ip`.
fn service_host(i: usize, name: &str, ip: &str) -> crate::service::Host {
    let inventory =
        json!({"interfaces": [{"name": "ens3", "ipv4_addresses": [format!("{ip}/24")]}]});
    serde_json::from_value(json!({
        "id": format!("host-{i}"),
        "infra_env_id": "ie-1",
        "cluster_id": "c-1",
        "status": "installing-in-progress",
        "role": "master",
        "requested_hostname": name,
        "progress": {"current_stage": "Rebooting"},
        "inventory": inventory.to_string(),
    }))
    .unwrap()
}

/// The stage updates the service received, as (host id, stage), in order.
fn stages(service: &MemoryService) -> Vec<(String, HostStage)> {
    service
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            ServiceCall::UpdateHostStage { host_id, stage, .. } => Some((host_id, stage)),
            _ => None,
        })
        .collect()
}

#[test]
fn node_status_rounds_report_configuring_then_joined_and_done() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = vec![
        host(dir.path(), "master-0", "192.0.2.10"),
        host(dir.path(), "master-1", "192.0.2.11"),
    ];
    let service = MemoryService::new("c-1", Arc::new(FakeClock::new()));
    service.update_cluster(|c| {
        c.hosts = vec![
            service_host(0, "master-0", "192.0.2.10"),
            service_host(1, "master-1", "192.0.2.11"),
        ];
    });
    let cluster = DryCluster::new(hosts.clone());
    let clock = FakeClock::new();
    let task = NodeStatus::new(&cluster, &service, &clock, &NoNotify, false);
    assert!(!task.round());
    assert!(stages(&service).is_empty(), "nothing rebooted yet");

    reboot(&hosts[0]);
    assert!(!task.round());
    let host0 = |s| ("host-0".to_string(), s);
    assert_eq!(stages(&service), [host0(HostStage::Configuring)]);
    assert!(!task.round());
    assert_eq!(
        stages(&service),
        [
            host0(HostStage::Configuring),
            host0(HostStage::Joined),
            host0(HostStage::Done)
        ]
    );
    assert!(!task.round());
    assert_eq!(
        stages(&service).len(),
        3,
        "nothing more for host-0, host-1 not rebooted"
    );
}

#[test]
fn every_operator_is_available() {
    let cluster = DryCluster::new(Vec::new());
    let operators = cluster.list_cluster_operators().unwrap();
    assert!(operators.iter().any(|co| co.name == "console"));
    for co in operators
        .iter()
        .chain([&cluster.get_cluster_operator("any-operator").unwrap()])
    {
        assert_eq!(
            status_from_conditions(&co.conditions).0,
            OperatorStatus::Available,
            "{}",
            co.name
        );
    }
    let cv = cluster.get_cluster_version(CLUSTER_VERSION_NAME).unwrap();
    assert_eq!(
        status_from_conditions(&cv.conditions).0,
        OperatorStatus::Available
    );
    assert!(console_enabled(&cv));
    assert!(cv.conditions.iter().any(|c| c.is_true("Available")));
    assert_eq!(
        api_error_code(&cluster.get_cluster_version("other").unwrap_err()),
        Some(404)
    );

    // With the CVO checked: the service's progressing records become available.
    let service = MemoryService::new("c-1", Arc::new(FakeClock::new()));
    let record = |name: &str, operator_type: &str| MonitoredOperator {
        name: name.into(),
        status: "progressing".into(),
        operator_type: operator_type.into(),
        namespace: "openshift-lvm".into(),
        subscription_name: "lvms-operator".into(),
        ..MonitoredOperator::default()
    };
    service.set_operators(vec![
        record("console", "builtin"),
        record("cvo", "builtin"),
        record("lvm", "olm"),
    ]);
    assert!(cluster_operators_round(&cluster, &service, "4.17", true));
    // An OLM operator's CSV exists and succeeded.
    let mut olm = OlmHandler {
        cluster: &cluster,
        name: "lvm".into(),
        namespace: "openshift-lvm".into(),
        subscription: "lvms-operator".into(),
    };
    assert!(is_available(&service, "4.17", &mut olm, false));
    assert!(crate::controller::tasks::olm::is_initialized(
        &cluster,
        &service.operators()[2]
    ));
    let available: Vec<String> = service
        .operators()
        .iter()
        .map(|o| format!("{}={}", o.name, o.status))
        .collect();
    assert_eq!(
        available,
        ["console=available", "cvo=available", "lvm=available"]
    );
}

#[test]
fn the_ready_and_post_install_reads_find_what_they_need() {
    let cluster = DryCluster::new(Vec::new());
    assert_eq!(
        cluster.get_proxy(PROXY_NAME).unwrap(),
        ProxyStatus::default()
    );
    assert_eq!(
        crate::controller::tasks::ready::invoker(&cluster),
        INVOKER_ASSISTED
    );
    let service = MemoryService::new("c-1", Arc::new(FakeClock::new()));
    assert!(upload_router_ca(&cluster, &service));
    assert_eq!(
        service.calls(),
        [ServiceCall::UploadIngressCert(DRY_INGRESS_CA.to_string())]
    );
    assert!(DRY_INGRESS_CA.starts_with("-----BEGIN CERTIFICATE-----\n"));
    assert!(DRY_INGRESS_CA.ends_with("-----END CERTIFICATE-----\n"));

    let event = crate::controller::tasks::ready::ready_event(
        "assisted-installer",
        std::time::SystemTime::now(),
    );
    cluster.create_event("assisted-installer", &event).unwrap();
    cluster.create_event("assisted-installer", &event).unwrap();
    assert_eq!(cluster.events().len(), 2);

    // Nothing to fix, approve or update; the controller's own pod is not listed.
    assert!(cluster.list_services().unwrap().is_empty());
    assert!(cluster.list_csrs().unwrap().is_empty());
    assert!(cluster
        .list_bmhs("openshift-machine-api")
        .unwrap()
        .is_empty());
    assert!(cluster
        .list_machines("openshift-machine-api")
        .unwrap()
        .is_empty());
    assert!(!cluster
        .provisioning_exists("provisioning-configuration")
        .unwrap());
    assert!(cluster
        .list_pods(
            "assisted-installer",
            Some("job-name=assisted-installer-controller"),
            Some("status.phase=Running")
        )
        .unwrap()
        .is_empty());
    let running = cluster
        .list_pods(
            MCS_NAMESPACE,
            Some(MCS_SELECTOR),
            Some("status.phase=Running"),
        )
        .unwrap();
    assert_eq!(running.len(), 1);
    let gone = cluster.delete_service("default", "x").unwrap_err();
    assert_eq!(api_error_code(&gone), Some(404));
    assert_eq!(
        api_error_code(&cluster.pod_log("ns", "p", None).unwrap_err()),
        Some(404)
    );
}

#[test]
fn label_patches_and_pool_pauses_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = vec![host(dir.path(), "master-0", "192.0.2.10")];
    reboot(&hosts[0]);
    let cluster = DryCluster::new(hosts);
    let missing = cluster.patch_node_labels("master-0", &json!({"a": "1"}));
    assert_eq!(
        api_error_code(&missing.unwrap_err()),
        Some(404),
        "no node yet"
    );
    read_mcs_log(&cluster);
    cluster
        .patch_node_labels("master-0", &json!({"a": "1", "b": "2"}))
        .unwrap();
    cluster
        .patch_node_labels("master-0", &json!({"b": null}))
        .unwrap();
    let labels = cluster.get_node("master-0").unwrap().labels;
    assert_eq!(labels.get("a").map(String::as_str), Some("1"));
    assert!(!labels.contains_key("b"));
    assert!(labels.contains_key(MASTER_LABEL));
    assert_eq!(cluster.list_nodes(Some("a=1")).unwrap().len(), 1);
    cluster.remove_node_taint("master-0", 0, "k").unwrap();

    assert!(!cluster.get_machine_config_pool("worker").unwrap().paused);
    cluster
        .set_machine_config_pool_paused("worker", true)
        .unwrap();
    assert!(cluster.get_machine_config_pool("worker").unwrap().paused);
    cluster
        .set_machine_config_pool_paused("worker", false)
        .unwrap();
    assert!(!cluster.get_machine_config_pool("worker").unwrap().paused);
    let other = cluster.get_machine_config_pool("infra").unwrap_err();
    assert_eq!(api_error_code(&other), Some(404));
}

/// The installer's view of a cluster with no hosts and `replicas` control-plane nodes.
fn installer_cluster(replicas: i64) -> DryCluster {
    let cfg = InstallerConfig {
        control_plane_count: replicas,
        ..InstallerConfig::default()
    };
    DryCluster::from_config(&cfg).unwrap()
}

#[test]
fn installer_nodes_appear_as_their_hosts_reboot() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = vec![
        host(dir.path(), "master-1", "192.0.2.11"),
        host(dir.path(), "master-2", "192.0.2.12"),
    ];
    let cluster = DryCluster::new(hosts.clone());
    assert!(crate::kube::KubeApi::list_nodes(&cluster, &Role::Master)
        .unwrap()
        .is_empty());
    std::fs::write(&hosts[1].reboot_marker_path, "").unwrap();
    let nodes = crate::kube::KubeApi::list_nodes(&cluster, &Role::Master).unwrap();
    assert_eq!(nodes.len(), 1);
    let node = &nodes[0];
    assert_eq!(node.name, "master-2");
    assert!(node.is_ready());
    assert_eq!(node.internal_ips().collect::<Vec<_>>(), ["192.0.2.12"]);
    for key in [CURRENT_CONFIG_ANNOTATION, DESIRED_CONFIG_ANNOTATION] {
        let config = &node.annotations[key];
        assert!(
            crate::kube::KubeApi::machine_config_exists(&cluster, config).unwrap(),
            "{key}"
        );
    }
    assert!(!crate::kube::KubeApi::machine_config_exists(&cluster, "rendered-other").unwrap());
    crate::kube::KubeApi::remove_node_taint(&cluster, "master-2", "any").unwrap();
}

#[test]
fn the_install_config_wants_the_control_plane_count_and_no_arbiter() {
    let cluster = installer_cluster(3);
    let cm = crate::kube::KubeApi::get_config_map(&cluster, "kube-system", "cluster-config-v1")
        .unwrap()
        .unwrap();
    let r = replicas(&cm["install-config"]).unwrap();
    assert_eq!((r.control_plane, r.arbiter), (Some(3), None));
    let invoker = crate::kube::KubeApi::get_config_map(
        &cluster,
        "openshift-config",
        "openshift-install-manifests",
    );
    assert_eq!(invoker.unwrap(), None);
}

#[test]
fn the_controller_is_ready_and_running_with_a_log() {
    let cluster = installer_cluster(3);
    let events = crate::kube::KubeApi::list_events(&cluster, CONTROLLER_NAMESPACE).unwrap();
    assert!(events.iter().any(|e| e.name == CONTROLLER_READY_EVENT));
    assert!(crate::kube::KubeApi::list_events(&cluster, "default")
        .unwrap()
        .is_empty());
    let pods = crate::kube::KubeApi::list_pods(
        &cluster,
        CONTROLLER_NAMESPACE,
        "job-name=assisted-installer-controller",
    )
    .unwrap();
    assert_eq!(pods.len(), 1);
    assert_eq!(
        (pods[0].name.as_str(), pods[0].phase.as_str()),
        (DRY_CONTROLLER_POD, "Running")
    );
    assert!(
        crate::kube::KubeApi::list_pods(&cluster, CONTROLLER_NAMESPACE, "app=other")
            .unwrap()
            .is_empty()
    );
    let log = crate::kube::KubeApi::pod_logs(
        &cluster,
        CONTROLLER_NAMESPACE,
        DRY_CONTROLLER_POD,
        Some(3600),
    )
    .unwrap();
    assert!(log.lines().count() >= 2 && log.starts_with("Dry run"));
    assert!(crate::kube::KubeApi::pod_logs(&cluster, CONTROLLER_NAMESPACE, "other", None).is_err());
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
    assert_eq!(
        crate::kube::KubeApi::list_nodes(&cluster, &Role::Master).unwrap()[0].name,
        "m1"
    );
    std::fs::write(&file, "not json").unwrap();
    assert!(DryCluster::from_config(&cfg).is_err());
    let none = DryCluster::from_config(&InstallerConfig::default()).unwrap();
    assert!(crate::kube::KubeApi::list_nodes(&none, &Role::Master)
        .unwrap()
        .is_empty());
}
