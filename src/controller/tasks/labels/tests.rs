//! The `assisted_installer_controller_test.go` "node labels" checklist on `FakeCluster`, `MemoryService` and `FakeClock`.

use super::*;
use crate::clock::{FakeClock, NeverStop};
use crate::controller::service::testing::{MemoryService, ServiceCall};
use crate::controller::testing::{self, boom, ip};
use crate::kube::testing::FakeCluster;
use crate::kube::MachineConfigPool;
use crate::service::Host;
use serde_json::json;
use std::sync::Arc;

const LABELS: &str = r#"{"node.ocs.openshift.io/storage":""}"#;
const ROLE_LABELS: &str = r#"{"node-role.kubernetes.io":"infra"}"#;

struct Setup {
    clock: Arc<FakeClock>,
    service: MemoryService,
    cluster: FakeCluster,
}

fn host(i: usize, status: &str, role: &str, labels: &str, pool: &str) -> Host {
    testing::host(
        i,
        json!({"status": status, "role": role, "node_labels": labels,
            "machine_config_pool_name": pool}),
    )
}

/// Hosts `node0..` as given, plus a `disabled` and an `error` host with labels (skipped).
fn setup(hosts: Vec<Host>) -> Setup {
    let clock = Arc::new(FakeClock::new());
    let service = MemoryService::new("c1", clock.clone());
    let n = hosts.len();
    service.update_cluster(|c| {
        c.hosts = hosts;
        c.hosts.push(host(n, "disabled", "master", LABELS, ""));
        c.hosts.push(host(n + 1, "error", "master", LABELS, ""));
    });
    let cluster = FakeCluster::new();
    cluster.set_machine_config_pool(MachineConfigPool {
        name: "worker".into(),
        paused: false,
    });
    Setup {
        clock,
        service,
        cluster,
    }
}

fn labelled(n: usize) -> Vec<Host> {
    (0..n)
        .map(|i| host(i, "installing", "master", LABELS, ""))
        .collect()
}

/// Three labelled hosts, host `i` a worker of pool `infra` with `labels`, and `nodes` Nodes.
fn with_worker(i: usize, labels: &str, nodes: usize) -> Setup {
    let mut hosts = labelled(3);
    hosts[i] = host(i, "installing", "worker", labels, "infra");
    let s = setup(hosts);
    add_nodes(&s.cluster, nodes);
    s
}

fn node(i: usize, ready: bool) -> Node {
    testing::node(&format!("node{i}"), ready, &ip(i))
}

fn add_nodes(cluster: &FakeCluster, n: usize) {
    for i in 0..n {
        cluster.set_node(node(i, true));
    }
}

fn task(s: &Setup) -> NodeLabels<'_> {
    let (cluster, service, clock) = (&s.cluster, &s.service, &*s.clock);
    NodeLabels {
        cluster,
        service,
        clock,
    }
}

/// `v2GetCluster` calls: the task only makes them with hosts (`HostMap::fetch`).
fn host_maps(s: &Setup) -> usize {
    s.service.count("v2GetCluster")
}

fn patches(s: &Setup) -> Vec<String> {
    s.cluster
        .calls()
        .into_iter()
        .filter(|c| c.method == "patch_node_labels")
        .map(|c| c.to_string())
        .collect()
}

fn patch(i: usize, labels: &str) -> String {
    format!("patch_node_labels(node{i}, {labels})")
}

fn mcp_calls(s: &Setup) -> Vec<String> {
    s.cluster
        .calls()
        .into_iter()
        .filter(|c| c.method.contains("machine_config_pool"))
        .map(|c| c.to_string())
        .collect()
}

/// One round over labelled hosts and their ready Nodes (`name` at [`ip`]`(i)`): one host map,
/// the patches, no pool calls. A host without labels is skipped, a Node whose name is no host's
/// is matched by its InternalIP, and malformed labels count as applied.
#[test]
fn one_round_patches_the_labelled_hosts_nodes() {
    let mut one_unlabelled = labelled(3);
    one_unlabelled[1] = host(1, "installing", "master", "", "");
    let malformed = vec![host(0, "installing", "master", "{not json", "")];
    let p = |i| patch(i, LABELS);
    let renamed = format!("patch_node_labels(some-fake-name, {LABELS})");
    let three: &[&str] = &["node0", "node1", "node2"];
    let cases: [(Vec<Host>, &[&str], Vec<String>); 4] = [
        (labelled(3), three, vec![p(0), p(1), p(2)]),
        (one_unlabelled, three, vec![p(0), p(2)]),
        (labelled(1), &["some-fake-name"], vec![renamed]),
        (malformed, &["node0"], vec![]),
    ];
    for (hosts, nodes, want) in cases {
        let s = setup(hosts);
        for (i, name) in nodes.iter().enumerate() {
            s.cluster.set_node(testing::node(name, true, &ip(i)));
        }
        assert!(task(&s).round(), "{nodes:?}");
        assert_eq!(patches(&s), want);
        assert_eq!(host_maps(&s), 1);
        assert_eq!(s.service.calls().len(), 1);
        assert!(mcp_calls(&s).is_empty());
        for name in nodes
            .iter()
            .filter(|n| want.iter().any(|p| p.contains(&format!("({n},"))))
        {
            let labels = s.cluster.node(name).unwrap().labels;
            assert_eq!(labels["node.ocs.openshift.io/storage"], "", "{name}");
        }
    }
}

/// Failed host maps or node lists: the rounds a minute apart until every node is patched.
#[test]
fn failed_rounds_are_tried_again() {
    let cases: [(usize, usize, usize); 2] = [(1, 0, 2), (0, 2, 3)];
    for (map_failures, list_failures, rounds) in cases {
        let s = setup(labelled(3));
        add_nodes(&s.cluster, 3);
        s.service.fail("v2GetCluster", map_failures, 500);
        for _ in 0..list_failures {
            s.cluster.fail_next("list_nodes", boom());
        }
        task(&s).run(&NeverStop).unwrap();
        assert_eq!(host_maps(&s), rounds);
        assert_eq!(s.cluster.count("list_nodes"), list_failures + 1);
        assert_eq!(patches(&s).len(), 3);
        assert_eq!(s.clock.sleeps(), vec![GENERAL_WAIT; rounds - 1]);
    }
}

#[test]
fn empty_node_list_then_the_full_list() {
    let s = setup(labelled(3));
    let cluster = s.cluster.clone();
    // The nodes appear when the second round asks for the hosts.
    s.service.on_call(move |call, before, _, _| {
        if matches!(call, ServiceCall::GetCluster { .. }) && before == 1 {
            add_nodes(&cluster, 3);
        }
    });
    task(&s).run(&NeverStop).unwrap();
    assert_eq!(host_maps(&s), 2);
    assert_eq!(patches(&s).len(), 3);
}

#[test]
fn no_labelled_hosts_lists_no_nodes() {
    let s = setup(
        (0..3)
            .map(|i| host(i, "installing", "worker", "", "infra"))
            .collect(),
    );
    add_nodes(&s.cluster, 3);
    // Only skipped hosts carry labels: L is empty.
    task(&s).run(&NeverStop).unwrap();
    assert_eq!(host_maps(&s), 1);
    assert_eq!(s.cluster.calls(), []);
}

#[test]
fn a_node_not_ready_is_patched_in_the_next_round() {
    let s = setup(labelled(3));
    add_nodes(&s.cluster, 3);
    let mut not_ready = node(1, false);
    not_ready.labels.clear();
    s.cluster.set_node(not_ready);
    for i in [0, 2] {
        let mut n = node(i, true);
        n.labels
            .insert("node.ocs.openshift.io/storage".into(), String::new());
        s.cluster.set_node(n);
    }
    let t = task(&s);
    assert!(!t.round());
    assert_eq!(
        patches(&s),
        Vec::<String>::new(),
        "the two are counted unpatched"
    );
    s.cluster.set_node(node(1, true));
    assert!(t.round());
    assert_eq!(patches(&s), [patch(1, LABELS)]);
}

/// Role labels on masters, or on a worker without a pool name: no pool calls.
#[test]
fn role_labels_without_a_worker_pool_make_no_pool_calls() {
    let masters = (0..3)
        .map(|i| host(i, "installing", "master", ROLE_LABELS, "infra"))
        .collect();
    let mut poolless = labelled(3);
    poolless[2] = host(2, "installing", "worker", ROLE_LABELS, "");
    for hosts in [masters, poolless] {
        let s = setup(hosts);
        add_nodes(&s.cluster, 3);
        assert!(task(&s).round());
        assert_eq!(patches(&s).len(), 3);
        assert!(mcp_calls(&s).is_empty());
    }
}

#[test]
fn a_worker_in_a_pool_pauses_the_worker_pool_around_the_patches() {
    let s = with_worker(2, ROLE_LABELS, 3);
    assert!(task(&s).round());
    let calls: Vec<String> = s
        .cluster
        .take_calls()
        .into_iter()
        .filter(|c| !c.starts_with("list_nodes"))
        .collect();
    assert_eq!(
        calls,
        [
            "get_machine_config_pool(worker)".to_string(),
            "set_machine_config_pool_paused(worker, true)".into(),
            patch(0, LABELS),
            patch(1, LABELS),
            patch(2, ROLE_LABELS),
            "get_machine_config_pool(worker)".into(),
            "set_machine_config_pool_paused(worker, false)".into(),
        ]
    );
    assert!(!s.cluster.machine_config_pool("worker").unwrap().paused);
}

#[test]
fn the_pool_stays_paused_while_nodes_are_missing() {
    let s = with_worker(2, ROLE_LABELS, 2);
    let t = task(&s);
    assert!(!t.round());
    assert!(s.cluster.machine_config_pool("worker").unwrap().paused);
    assert_eq!(
        mcp_calls(&s),
        [
            "get_machine_config_pool(worker)",
            "set_machine_config_pool_paused(worker, true)"
        ]
    );
    add_nodes(&s.cluster, 3);
    s.cluster.take_calls();
    assert!(t.round());
    // Already paused: no second pause patch, then the unpause.
    assert_eq!(
        mcp_calls(&s),
        [
            "get_machine_config_pool(worker)",
            "get_machine_config_pool(worker)",
            "set_machine_config_pool_paused(worker, false)"
        ]
    );
}

#[test]
fn pause_failure_ends_the_round() {
    let s = with_worker(0, LABELS, 3);
    s.cluster
        .fail_next("set_machine_config_pool_paused", boom());
    assert!(!task(&s).round());
    assert_eq!(s.cluster.count("list_nodes"), 0);
    assert!(patches(&s).is_empty());
}

#[test]
fn unpause_failure_ends_the_round() {
    let s = with_worker(0, LABELS, 3);
    // Already paused: the pause is a GET only, the unpause patch is the one that fails.
    s.cluster.set_machine_config_pool(MachineConfigPool {
        name: "worker".into(),
        paused: true,
    });
    s.cluster
        .fail_next("set_machine_config_pool_paused", boom());
    let t = task(&s);
    assert!(!t.round());
    assert_eq!(patches(&s).len(), 3);
    assert_eq!(s.cluster.count("set_machine_config_pool_paused"), 1);
    // The next round retries and finishes.
    assert!(t.round());
    assert!(!s.cluster.machine_config_pool("worker").unwrap().paused);
}

#[test]
fn run_ends_on_stop() {
    let s = setup(labelled(3));
    let stop = crate::image::Cancel::new();
    stop.cancel();
    assert_eq!(task(&s).run(&stop), Err(PollError::Canceled));
    assert_eq!(host_maps(&s), 1, "one round even when stopped");
}
