//! The pretend cluster on temp-dir markers: nodes as hosts reboot and their MCS log shows them,
//! operators through the availability rules, and the objects the other tasks read. The
//! node-status rounds over it: controller::run's dry_mode_takes_the_rebooted_hosts_to_done_and_completes.

use super::*;
use crate::clock::FakeClock;
use crate::controller::service::testing::{MemoryService, ServiceCall};
use crate::controller::tasks::completion::{upload_router_ca, MASTER_SELECTOR};
use crate::controller::tasks::nodes::{MCS_LOG_SINCE_SECONDS, MCS_SELECTOR};
use crate::controller::tasks::operators::{
    cluster_operators_round, console_enabled, is_available, olm_status, status_from_conditions,
};
use crate::kube::api_error_code;
use crate::openshift::INVOKER_ASSISTED;
use crate::service::{MonitoredOperator, OperatorStatus};
use serde_json::json;
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
fn nodes_appear_once_the_host_rebooted_and_for_the_controller_fetched_its_ignition() {
    let dir = tempfile::tempdir().unwrap();
    let hosts = vec![
        host(dir.path(), "master-0", "192.0.2.10"),
        host(dir.path(), "master-1", "192.0.2.11"),
    ];
    let cluster = DryCluster::new(hosts.clone());
    let installer = DryCluster {
        installer: Some(3),
        ..DryCluster::new(hosts.clone())
    };
    let workers = Some("node-role.kubernetes.io/worker");
    assert!(installer.list_nodes(workers).unwrap().is_empty());
    assert!(cluster.list_nodes(None).unwrap().is_empty());
    assert_eq!(read_mcs_log(&cluster), "");
    assert!(cluster.list_nodes(None).unwrap().is_empty());

    reboot(&hosts[1]);
    // Rebooted, but its Ignition request not seen yet: no node, none to patch.
    assert!(cluster.list_nodes(None).unwrap().is_empty());
    let early = cluster.patch_node_labels("master-1", &json!({"a": "1"}));
    assert_eq!(
        api_error_code(&early.unwrap_err()),
        Some(404),
        "no node yet"
    );

    // The installer's view. What the dry-run bootstrap needs of it (Ready nodes on a
    // MachineConfig that exists, the install-config's replicas, the ready Event, the controller
    // pod's log) is bootstrap_scenarios' dry_run_bootstrap_completes_against_the_pretend_cluster,
    // which would not complete without them; here the rest: any role before an MCS log read, the
    // nodes' IPs, and what does not exist.
    let kube: &dyn ClusterApi = &installer;
    let nodes = kube.list_nodes(workers).unwrap();
    assert_eq!(names(&nodes), ["master-1"]);
    assert_eq!(nodes[0].internal_ips().collect::<Vec<_>>(), ["192.0.2.11"]);
    assert!(!kube.machine_config_exists("rendered-other").unwrap());
    crate::kube::remove_taint_by_key(kube, "master-1", "any").unwrap();
    let invoker = kube.get_config_map("openshift-config", "openshift-install-manifests");
    assert_eq!(invoker.unwrap(), None);
    assert!(kube.list_events("default").unwrap().is_empty());
    let other = kube.list_pods(CONTROLLER_NAMESPACE, Some("app=other"), None);
    assert!(other.unwrap().is_empty());
    assert!(kube.pod_log(CONTROLLER_NAMESPACE, "other", None).is_err());

    // The controller's view, once the MCS log showed the Ignition request.
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
    let by_name = format!("{HOSTNAME_LABEL}=master-1");
    let worker = role_label("worker");
    let listed = |selector: &str| cluster.list_nodes(Some(selector)).unwrap().len();
    for (selector, want) in [(MASTER_SELECTOR, 1), (&by_name, 1), (&worker, 0)] {
        assert_eq!(listed(selector), want, "{selector}");
    }

    // Label patches are kept.
    let patch = |labels: Value| cluster.patch_node_labels("master-1", &labels);
    patch(json!({"a": "1", "b": "2"})).unwrap();
    patch(json!({"b": null})).unwrap();
    let bad = patch(json!({"c": 1})).unwrap_err();
    assert_eq!(api_error_code(&bad), Some(400));
    let labels = cluster.get_node("master-1").unwrap().labels;
    assert_eq!(labels.get("a").map(String::as_str), Some("1"));
    assert!(!labels.contains_key("b"));
    assert!(labels.contains_key(&role_label("master")));
    assert_eq!(listed("a=1"), 1);
    cluster.remove_node_taint("master-1", 0, "k").unwrap();

    // The markers are read at every call.
    std::fs::remove_file(&hosts[1].reboot_marker_path).unwrap();
    assert!(cluster.list_nodes(None).unwrap().is_empty());
    assert_eq!(read_mcs_log(&cluster), "");
}

#[test]
fn every_operator_is_available_and_the_other_tasks_find_what_they_read() {
    let cluster = DryCluster::new(Vec::new());
    assert_eq!(
        cluster.get_proxy(PROXY_NAME).unwrap(),
        ProxyStatus::default()
    );
    let invoker = crate::controller::tasks::ready::invoker(&cluster);
    assert_eq!(invoker, INVOKER_ASSISTED);
    let service = MemoryService::new("c-1", Arc::new(FakeClock::new()));
    assert!(upload_router_ca(&cluster, &service));
    let upload = ServiceCall::UploadIngressCert(DRY_INGRESS_CA.to_string());
    assert_eq!(service.calls(), [upload]);
    assert!(DRY_INGRESS_CA.starts_with("-----BEGIN CERTIFICATE-----\n"));
    assert!(DRY_INGRESS_CA.ends_with("-----END CERTIFICATE-----\n"));

    let now = std::time::SystemTime::now();
    let event = crate::controller::tasks::ready::ready_event("assisted-installer", now);
    cluster.create_event("assisted-installer", &event).unwrap();
    cluster.create_event("assisted-installer", &event).unwrap();
    assert_eq!(cluster.events().len(), 2);

    // Nothing to fix, approve or update; the controller's own pod is not listed.
    let ns = "openshift-machine-api";
    assert!(cluster.list_services().unwrap().is_empty());
    assert!(cluster.list_csrs().unwrap().is_empty());
    assert!(cluster.list_bmhs(ns).unwrap().is_empty());
    assert!(cluster.list_machines(ns).unwrap().is_empty());
    let provisioning = cluster.provisioning_exists("provisioning-configuration");
    assert!(!provisioning.unwrap());
    let job = "job-name=assisted-installer-controller";
    let running = "status.phase=Running";
    let controller = cluster.list_pods("assisted-installer", Some(job), Some(running));
    assert!(controller.unwrap().is_empty());
    let mcs = cluster.list_pods(MCS_NAMESPACE, Some(MCS_SELECTOR), Some(running));
    assert_eq!(mcs.unwrap().len(), 1);
    let gone = cluster.delete_service("default", "x").unwrap_err();
    assert_eq!(api_error_code(&gone), Some(404));
    let gone = cluster.pod_log("ns", "p", None).unwrap_err();
    assert_eq!(api_error_code(&gone), Some(404));

    // Pools `master` and `worker`, their pauses kept.
    let paused = || cluster.get_machine_config_pool("worker").unwrap().paused;
    assert!(!paused());
    for pause in [true, false] {
        cluster
            .set_machine_config_pool_paused("worker", pause)
            .unwrap();
        assert_eq!(paused(), pause);
    }
    let other = cluster.get_machine_config_pool("infra").unwrap_err();
    assert_eq!(api_error_code(&other), Some(404));

    let operators = cluster.list_cluster_operators().unwrap();
    assert!(operators.iter().any(|co| co.name == "console"));
    let any = cluster.get_cluster_operator("any-operator").unwrap();
    let cv = cluster.get_cluster_version(CLUSTER_VERSION_NAME).unwrap();
    let conditions = operators.iter().chain([&any]).map(|co| &co.conditions);
    for conditions in conditions.chain([&cv.conditions]) {
        let status = status_from_conditions(conditions).0;
        assert_eq!(status, OperatorStatus::Available, "{conditions:?}");
    }
    assert!(console_enabled(&cv));
    let other = cluster.get_cluster_version("other").unwrap_err();
    assert_eq!(api_error_code(&other), Some(404));

    // With the CVO checked: the service's progressing records become available.
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
    let read = || olm_status(&cluster, &service.operators()[2]);
    assert!(is_available(&service, "4.17", "lvm", false, false, read));
    assert!(crate::controller::tasks::olm::is_initialized(
        &cluster,
        &service.operators()[2]
    ));
    let operators = service.operators();
    let available = operators.iter().map(|o| format!("{}={}", o.name, o.status));
    let available: Vec<String> = available.collect();
    assert_eq!(
        available,
        ["console=available", "cvo=available", "lvm=available"]
    );
}
