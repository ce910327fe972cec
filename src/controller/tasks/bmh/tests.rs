//! The `assisted_installer_controller_test.go` "BMH" checklist on `FakeCluster` and `FakeClock`.

use super::*;
use crate::clock::{FakeClock, NeverStop};
use crate::controller::testing::boom;
use crate::kube::testing::FakeCluster;
use std::collections::BTreeMap;
use std::time::Duration;

const NS: &str = MACHINE_API_NAMESPACE;
const BMH: &str = "openshift-worker-0";
const MACHINE: &str = "xyz-assisted-instal-8p7km-worker-0-25rnh";

fn status_json(last_updated: bool) -> Value {
    let mut s = json!({
        "operationalStatus": "OK",
        "hardwareProfile": "unknown",
        "hardware": {"hostname": BMH, "cpu": {"count": 8}},
        "provisioning": {"state": "externally provisioned", "ID": "abc"},
        "poweredOn": true,
        "errorMessage": "",
    });
    if last_updated {
        s["lastUpdated"] = json!("2020-06-10T10:00:00Z");
    }
    s
}

fn bmh(annotations: Value) -> Value {
    json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": BMH, "namespace": NS, "annotations": annotations},
        "spec": {"online": true, "bootMACAddress": "00:11:22:33:44:55"},
    })
}

fn with_status_annotation(last_updated: bool) -> Value {
    bmh(json!({ STATUS_ANNOTATION: status_json(last_updated).to_string() }))
}

fn machine(name: &str, role: &str) -> Machine {
    Machine {
        api_version: "machine.openshift.io/v1beta1".into(),
        kind: "Machine".into(),
        namespace: NS.into(),
        name: name.into(),
        labels: BTreeMap::from([(MACHINE_ROLE_LABEL.to_string(), role.to_string())]),
    }
}

fn machine_ref(name: &str) -> Value {
    json!({
        "apiVersion": "machine.openshift.io/v1beta1",
        "kind": "Machine",
        "namespace": NS,
        "name": name,
    })
}

fn fixed_now() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000)
}

fn task<'a>(cluster: &'a FakeCluster, clock: &'a FakeClock) -> BmhUpdate<'a> {
    BmhUpdate {
        wall_now: fixed_now,
        ..BmhUpdate::new(cluster, clock)
    }
}

/// The calls of a round over one BMH: the lists and the Provisioning check, then `then` on it.
fn round_calls(then: &[&str]) -> Vec<String> {
    let mut calls = vec![
        format!("list_bmhs({NS})"),
        format!("list_machines({NS})"),
        "provisioning_exists(provisioning-configuration)".into(),
    ];
    calls.extend(then.iter().map(|c| format!("{c}({NS}, {BMH})")));
    calls
}

fn stored(cluster: &FakeCluster) -> Value {
    cluster.bmh(NS, BMH).unwrap()
}

#[test]
fn no_provisioning_and_no_machines() {
    let (cluster, clock) = (FakeCluster::new(), FakeClock::new());
    cluster.set_bmh(with_status_annotation(true));
    cluster.add_machine(machine("a-master", "master"));
    assert!(!task(&cluster, &clock).round());
    let calls = round_calls(&["update_bmh_status", "get_bmh"]);
    assert_eq!(cluster.take_calls(), calls);
    let b = stored(&cluster);
    assert_eq!(b["status"], status_json(true), "copied from the annotation");
    assert!(
        b["metadata"]["annotations"][STATUS_ANNOTATION].is_string(),
        "no UpdateBMH: the annotation is still there"
    );
    assert!(b["spec"].get("consumerRef").is_none());
}

#[test]
fn no_provisioning_with_one_machine() {
    let (cluster, clock) = (FakeCluster::new(), FakeClock::new());
    cluster.set_bmh(with_status_annotation(false));
    cluster.add_machine(machine(MACHINE, "worker"));
    assert!(task(&cluster, &clock).round());
    let calls = round_calls(&["update_bmh_status", "get_bmh", "update_bmh"]);
    assert_eq!(cluster.take_calls(), calls);
    let b = stored(&cluster);
    let mut want_status = status_json(false);
    want_status["lastUpdated"] = json!("2020-09-13T12:26:40Z");
    assert_eq!(b["status"], want_status, "lastUpdated set to now");
    assert!(b["metadata"].get("annotations").is_none(), "{b}");
    assert_eq!(b["spec"]["consumerRef"], machine_ref(MACHINE));
    assert_eq!(b["spec"]["online"], true);
    assert!(b["spec"].get("externallyProvisioned").is_none());
}

#[test]
fn provisioning_with_the_paused_annotation() {
    let (cluster, clock) = (FakeCluster::new(), FakeClock::new());
    let status = status_json(true).to_string();
    cluster.set_bmh(bmh(json!({
        STATUS_ANNOTATION: status,
        PAUSED_ANNOTATION: "",
        "other": "kept",
    })));
    cluster.add_provisioning(PROVISIONING_NAME);
    cluster.add_machine(machine(MACHINE, "worker"));
    assert!(task(&cluster, &clock).round());
    assert_eq!(cluster.take_calls(), round_calls(&["update_bmh"]));
    let b = stored(&cluster);
    assert_eq!(b["spec"]["externallyProvisioned"], true);
    assert_eq!(
        b["metadata"]["annotations"],
        json!({STATUS_ANNOTATION: status, "other": "kept"})
    );
    assert_eq!(b["spec"]["consumerRef"], machine_ref(MACHINE));
    assert!(b.get("status").is_none(), "no status update");
}

#[test]
fn provisioning_leaves_managed_hosts_alone() {
    let (cluster, clock) = (FakeCluster::new(), FakeClock::new());
    let mut b = bmh(json!({ PAUSED_ANNOTATION: "" }));
    b["status"] = json!({"provisioning": {"state": "provisioned"}});
    cluster.set_bmh(b);
    cluster.add_provisioning(PROVISIONING_NAME);
    assert!(task(&cluster, &clock).round());
    assert_eq!(cluster.count("update_bmh"), 0);
    // Unmanaged and paused: only the annotation changes.
    let mut b = bmh(json!({ PAUSED_ANNOTATION: "" }));
    b["spec"]["externallyProvisioned"] = json!(true);
    b["spec"]["consumerRef"] = machine_ref("m");
    b["status"] = json!({"provisioning": {"state": "unmanaged"}});
    cluster.set_bmh(b);
    assert!(task(&cluster, &clock).round());
    assert_eq!(cluster.count("update_bmh"), 1);
    assert!(stored(&cluster)["metadata"].get("annotations").is_none());
    // Unmanaged, already set up: nothing changes, nothing is written.
    assert!(task(&cluster, &clock).round());
    assert_eq!(cluster.count("update_bmh"), 1);
}

#[test]
fn allocated_and_non_worker_machines_are_not_taken() {
    let (cluster, clock) = (FakeCluster::new(), FakeClock::new());
    let mut taken = bmh(json!({}));
    taken["metadata"]["name"] = json!("openshift-worker-1");
    taken["spec"]["consumerRef"] = machine_ref("w-taken");
    cluster.set_bmh(taken);
    cluster.set_bmh(bmh(json!({})));
    cluster.add_machine(machine("w-taken", "worker"));
    cluster.add_machine(machine("m-0", "master"));
    assert!(!task(&cluster, &clock).round(), "no machine left for {BMH}");
    cluster.add_machine(machine("w-free-1", "worker"));
    cluster.add_machine(machine("w-free-2", "worker"));
    assert!(task(&cluster, &clock).round());
    assert_eq!(
        stored(&cluster)["spec"]["consumerRef"],
        machine_ref("w-free-1")
    );
    assert_eq!(
        cluster.bmh(NS, "openshift-worker-1").unwrap()["spec"]["consumerRef"],
        machine_ref("w-taken")
    );
}

#[test]
fn a_bad_status_annotation_is_an_error_for_that_host_only() {
    let (cluster, clock) = (FakeCluster::new(), FakeClock::new());
    cluster.set_bmh(bmh(json!({ STATUS_ANNOTATION: "{not json" })));
    let mut other = bmh(json!({}));
    other["metadata"]["name"] = json!("openshift-worker-1");
    cluster.set_bmh(other);
    cluster.add_machine(machine(MACHINE, "worker"));
    assert!(!task(&cluster, &clock).round());
    assert_eq!(cluster.count("update_bmh_status"), 0);
    assert_eq!(
        cluster.bmh(NS, "openshift-worker-1").unwrap()["spec"]["consumerRef"],
        machine_ref(MACHINE)
    );
}

#[test]
fn run_retries_every_interval_until_all_are_updated() {
    let (cluster, clock) = (FakeCluster::new(), FakeClock::new());
    cluster.set_bmh(with_status_annotation(true));
    cluster.add_machine(machine(MACHINE, "worker"));
    cluster.fail_next("list_bmhs", boom());
    cluster.fail_next("list_machines", boom());
    cluster.fail_next("provisioning_exists", boom());
    task(&cluster, &clock).run(&NeverStop).unwrap();
    assert_eq!(clock.sleeps(), [GENERAL_WAIT; 3]);
    assert_eq!(cluster.count("list_bmhs"), 4);
    assert_eq!(cluster.count("update_bmh"), 1);
}
