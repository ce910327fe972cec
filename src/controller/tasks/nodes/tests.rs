//! The `assisted_installer_controller_test.go` "one round of node status" checklist, and the MCS detection, on `FakeCluster`,
//! `MemoryService` and `FakeClock`.

use super::*;
use crate::clock::FakeClock;
use crate::controller::service::testing::{MemoryService, ServiceCall};
use crate::controller::testing::{self, boom, ip, node};
use crate::kube::testing::FakeCluster;
use crate::kube::{Csr, Pod, Taint};
use crate::service::Host;
use serde_json::json;
use std::sync::{Arc, Mutex};

#[derive(Default)]
struct Notified(Mutex<Vec<[String; 4]>>);

impl RebootsNotify for Notified {
    fn start(&self, node: &str, host: &str, infra_env: &str, cluster: &str) {
        self.0
            .lock()
            .unwrap()
            .push([node, host, infra_env, cluster].map(String::from));
    }
}

impl Notified {
    fn nodes(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|n| n[0].clone())
            .collect()
    }
}

struct Setup {
    clock: Arc<FakeClock>,
    service: MemoryService,
    cluster: FakeCluster,
    notified: Notified,
}

fn host(i: usize, status: &str, stage: &str, ips: &[&str]) -> Host {
    let cidrs: Vec<String> = ips.iter().map(|ip| format!("{ip}/24")).collect();
    let inventory = json!({"interfaces": [{"name": "ens3", "ipv4_addresses": cidrs}]});
    testing::host(
        i,
        json!({"status": status, "progress": {"current_stage": stage},
            "inventory": inventory.to_string()}),
    )
}

/// `n` hosts `node0..` in `status` at `stage`, with IPs 192.168.126.10 + i.
fn setup(n: usize, status: &str, stage: &str) -> Setup {
    let clock = Arc::new(FakeClock::new());
    let service = MemoryService::new("c1", clock.clone());
    service.update_cluster(|c| {
        c.hosts = (0..n).map(|i| host(i, status, stage, &[&ip(i)])).collect();
    });
    Setup {
        clock,
        service,
        cluster: FakeCluster::new(),
        notified: Notified::default(),
    }
}

fn add_nodes(s: &Setup, n: usize, ready: bool) {
    for i in 0..n {
        s.cluster.set_node(node(&format!("node{i}"), ready, &ip(i)));
    }
}

fn task(s: &Setup, untaint: bool) -> NodeStatus<'_> {
    NodeStatus {
        cluster: &s.cluster,
        service: &s.service,
        clock: &*s.clock,
        notifier: &s.notified,
        remove_uninitialized_taint: untaint,
    }
}

/// The stage updates, as (host id, stage), in order.
fn stages(service: &MemoryService) -> Vec<(String, HostStage)> {
    service
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            ServiceCall::UpdateHostStage {
                host_id,
                stage,
                infra_env_id,
            } => {
                assert_eq!(infra_env_id, "ie-1");
                Some((host_id, stage))
            }
            _ => None,
        })
        .collect()
}

fn count_stage(service: &MemoryService, stage: HostStage) -> usize {
    stages(service).iter().filter(|(_, s)| *s == stage).count()
}

/// `v2GetCluster` with hosts (the host map); no call is made without them here.
fn get_hosts(service: &MemoryService) -> usize {
    let calls = service.calls();
    assert!(!calls.contains(&ServiceCall::GetCluster {
        exclude_hosts: true
    }));
    calls
        .iter()
        .filter(|c| {
            **c == ServiceCall::GetCluster {
                exclude_hosts: false,
            }
        })
        .count()
}

#[test]
fn configuring_and_ready_gives_joined_then_done_in_one_round() {
    let s = setup(3, "installing", "Configuring");
    add_nodes(&s, 3, true);
    assert!(!task(&s, false).round());
    use HostStage::{Done, Joined};
    let h = |i: usize| format!("host-{i}");
    assert_eq!(
        stages(&s.service),
        [
            (h(0), Joined),
            (h(0), Done),
            (h(1), Joined),
            (h(1), Done),
            (h(2), Joined),
            (h(2), Done),
        ],
        "the stage snapshot is taken once per round"
    );
    assert_eq!(s.notified.nodes(), ["node0", "node1", "node2"]);
    assert_eq!(
        s.notified.0.lock().unwrap()[0],
        ["node0", "host-0", "ie-1", "c1"].map(String::from)
    );
    assert_eq!(get_hosts(&s.service), 2);
    assert_eq!(s.cluster.count("list_nodes"), 1);
    assert_eq!(s.cluster.count("list_pods"), 1);
}

/// One round over hosts in these statuses, with ready Nodes: it finishes, after one host map
/// and no Node list, when every host is installed or in error (disabled hosts do not count).
#[test]
fn finished_when_no_host_is_left_to_install() {
    let cases: [(&[&str], bool); 5] = [
        (&["installed"; 3], true),
        (&["installed", "installed", "disabled"], true),
        (&["error"; 3], true),
        (&["error", "error", "installing"], false),
        (&["installed", "installed", "error"], true),
    ];
    for (statuses, finished) in cases {
        let s = setup(0, "", "");
        s.service.update_cluster(|c| {
            let hosts = statuses.iter().enumerate();
            c.hosts = hosts
                .map(|(i, st)| host(i, st, "Rebooting", &[&ip(i)]))
                .collect();
        });
        add_nodes(&s, statuses.len(), true);
        assert_eq!(task(&s, false).round(), finished, "{statuses:?}");
        if finished {
            assert_eq!(get_hosts(&s.service), 1);
            assert!(s.cluster.calls().is_empty(), "no node list");
        }
    }
}

#[test]
fn rebooting_not_ready_with_taint_is_joined_and_untainted() {
    let s = setup(1, "installing", "Rebooting");
    let mut n = node("node0", false, &ip(0));
    let other = Taint {
        key: "other".into(),
        ..Taint::default()
    };
    let uninitialized = Taint {
        key: UNINITIALIZED_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    };
    n.taints = vec![other, uninitialized];
    s.cluster.set_node(n);
    assert!(!task(&s, true).round());
    assert_eq!(stages(&s.service), [("host-0".into(), HostStage::Joined)]);
    assert_eq!(s.cluster.count("remove_node_taint"), 1);
    let calls = s.cluster.take_calls();
    assert_eq!(
        calls[..3],
        [
            "list_nodes(-)",
            "get_node(node0)",
            "remove_node_taint(node0, 1)"
        ]
    );
    assert_eq!(s.cluster.node("node0").unwrap().taints.len(), 1);
    // Untaint off: no Node read; an untaint failure skips the rest of the node.
    for untaint in [false, true] {
        let s = setup(1, "installing", "Rebooting");
        s.cluster.set_node(node("node0", false, &ip(0)));
        s.cluster.fail_next("get_node", boom());
        assert!(!task(&s, untaint).round());
        assert_eq!(s.cluster.count("get_node"), usize::from(untaint));
        assert_eq!(count_stage(&s.service, HostStage::Joined), 1);
    }
}

/// One round over `n` hosts at `stage` and their Nodes: the stages sent (all the same, `n` of
/// them, or none) and whether the reboots notifier was started for each.
#[test]
fn one_stage_per_host_by_stage_and_readiness() {
    use HostStage::{Done, Joined};
    let cases: [(usize, &str, bool, Option<HostStage>); 5] = [
        (3, "Configuring", false, Some(Joined)),
        (3, "Rebooting", false, Some(Joined)),
        (1, "Rebooting", false, Some(Joined)),
        (3, "Joined", true, Some(Done)),
        (3, "Done", true, None),
    ];
    for (n, stage, ready, want) in cases {
        let s = setup(n, "installing", stage);
        add_nodes(&s, n, ready);
        assert!(!task(&s, false).round());
        let sent: Vec<HostStage> = stages(&s.service).into_iter().map(|(_, st)| st).collect();
        let want: Vec<HostStage> = want.into_iter().flat_map(|w| vec![w; n]).collect();
        assert_eq!(sent, want, "{n} hosts at {stage}, ready: {ready}");
        let notified = if want.contains(&Done) { n } else { 0 };
        assert_eq!(s.notified.nodes().len(), notified, "{stage}");
    }
}

#[test]
fn a_host_map_error_ends_the_round() {
    let s = setup(3, "installing", "Joined");
    add_nodes(&s, 3, true);
    s.service.fail("v2GetCluster", 1, 500);
    assert!(!task(&s, false).round());
    assert_eq!(get_hosts(&s.service), 1);
    assert!(s.cluster.calls().is_empty());
    // A bad inventory fails the map the same way.
    let s = setup(1, "installing", "Joined");
    s.service
        .update_cluster(|c| c.hosts[0].inventory = Some("{".into()));
    assert!(!task(&s, false).round());
    assert!(s.cluster.calls().is_empty());
}

/// "Done" makes the service mark the host installed, as it does.
fn installed_when_done(service: &MemoryService) {
    service.on_call(|call, _, cluster, _| {
        if let ServiceCall::UpdateHostStage {
            host_id,
            stage: HostStage::Done,
            ..
        } = call
        {
            if let Some(h) = cluster.hosts.iter_mut().find(|h| &h.id == host_id) {
                h.status = Some(HostStatus::Installed);
            }
        }
    });
}

#[test]
fn nodes_appearing_one_by_one() {
    let s = setup(3, "installing", "Joined");
    installed_when_done(&s.service);
    let t = task(&s, false);
    for i in 0..3 {
        s.cluster.set_node(node(&format!("node{i}"), true, &ip(i)));
        assert!(!t.round(), "round {i}");
        assert_eq!(count_stage(&s.service, HostStage::Done), i + 1);
    }
    assert!(t.round());
    assert_eq!(s.notified.nodes(), ["node0", "node1", "node2"]);
    assert_eq!(s.cluster.count("list_nodes"), 3);
}

/// A fake that fails the first `Done` of each host (as the Go test does, with a failing
/// update the service does not apply). The rounds alone: CSR approval's thread would move the
/// fake clock too (its failing list is `csr::tests::errors_are_tolerated`).
#[test]
fn the_rounds_with_failing_done_updates_then_success() {
    let s = setup(3, "installing", "Joined");
    add_nodes(&s, 3, true);
    // The hook runs before the injected failure: the first three updates fail and change
    // nothing.
    let failed = Arc::new(Mutex::new(0));
    let f = failed.clone();
    s.service.on_call(move |call, _, cluster, _| {
        if let ServiceCall::UpdateHostStage {
            host_id,
            stage: HostStage::Done,
            ..
        } = call
        {
            let mut failed = f.lock().unwrap();
            if *failed < 3 {
                *failed += 1;
            } else if let Some(h) = cluster.hosts.iter_mut().find(|h| &h.id == host_id) {
                h.status = Some(HostStatus::Installed);
            }
        }
    });
    s.service.fail("v2UpdateHostInstallProgress", 3, 500);
    assert_eq!(task(&s, false).rounds(&Cancel::new()), Ok(()));
    assert_eq!(s.cluster.count("list_nodes"), 2);
    assert_eq!(get_hosts(&s.service), 5, "2 per round for 2 rounds, then 1");
    assert_eq!(count_stage(&s.service, HostStage::Done), 6);
    assert_eq!(
        s.notified.nodes().len(),
        3,
        "only successful updates notify"
    );
    assert_eq!(s.clock.sleeps(), vec![GENERAL_WAIT; 2]);
}

#[test]
fn the_task_with_a_failing_node_list() {
    let s = setup(3, "installing", "Joined");
    add_nodes(&s, 3, true);
    installed_when_done(&s.service);
    s.cluster.fail_next("list_nodes", boom());
    assert_eq!(task(&s, false).run(&Cancel::new()), Ok(()));
    assert_eq!(s.cluster.count("list_nodes"), 2);
    // Round 1: map, failed list (no second map); round 2: map, list, map; round 3: map.
    assert_eq!(get_hosts(&s.service), 4);
}

#[test]
fn the_task_ends_on_stop_and_approves_csrs_meanwhile() {
    let s = setup(1, "installing", "Rebooting");
    s.cluster.set_csr(Csr {
        name: "csr-1".into(),
        ..Csr::default()
    });
    // The rounds never finish: the first round's host map after an approval fires the stop.
    let stop = Cancel::new();
    let (cluster, fire) = (s.cluster.clone(), stop.clone());
    s.service.on_call(move |_, _, _, _| {
        if cluster.count("approve_csr") > 0 {
            fire.cancel();
        }
    });
    assert_eq!(task(&s, false).run(&stop), Err(PollError::Canceled));
    assert_eq!(s.cluster.count("approve_csr"), 1);
    let approved = s.cluster.csr("csr-1").unwrap();
    assert_eq!(approved.conditions[0].reason, "NodeCSRApprove");
}

#[test]
fn matching_by_name_among_unfinished_and_by_ip_among_all() {
    let s = setup(2, "installing", "Joined");
    s.service
        .update_cluster(|c| c.hosts[1].status = Some(HostStatus::Installed));
    // node1's host is installed: its name does not match, but node1's IP does.
    s.cluster.set_node(node("NODE0", true, "10.9.9.9"));
    s.cluster.set_node(node("node1", true, &ip(1)));
    s.cluster.set_node(node("some-fake-name", true, &ip(0)));
    s.cluster.set_node(node("stranger", true, "10.1.1.1"));
    assert!(!task(&s, false).round());
    let ids: Vec<String> = stages(&s.service).into_iter().map(|(h, _)| h).collect();
    // Sorted node names: NODE0 (name), node1 (IP → host-1), some-fake-name (IP → host-0).
    assert_eq!(ids, ["host-0", "host-1", "host-0"]);
    assert_eq!(
        s.notified.nodes(),
        ["NODE0", "node1", "some-fake-name"],
        "stranger is not in inventory hosts"
    );
}

const MCS_LOG: &str = concat!(
    "I1121 api.go:117] Pool master requested by address:\"192.168.126.100:52428\" User-Agent:\"Ignition/2.16.2\"\n",
    "I1121 api.go:117] Pool master requested by address:\"[fe80::5054:ff:fe9a:4739%ens3]:40548\" User-Agent:\"Ignition/2.16.2\"\n",
);

fn mcs_pods(s: &Setup, logs: &[&str]) {
    for (i, log) in logs.iter().enumerate() {
        let pod = Pod {
            namespace: MCS_NAMESPACE.into(),
            name: format!("machine-config-server-{i}"),
            labels: [("k8s-app".to_string(), "machine-config-server".to_string())].into(),
            ..Pod::default()
        };
        s.cluster.add_pod(pod, log);
    }
}

/// Hosts for the MCS tests: 0 at .10 (only .100 in the log), 1 IPv6 (zone in the log),
/// 2 at .100 but already Joined, 3 at .100 Rebooting, all without nodes.
fn mcs_setup() -> Setup {
    let s = setup(0, "installing", "Rebooting");
    let at = |i, stage, ip| host(i, "installing", stage, &[ip]);
    s.service.update_cluster(|c| {
        c.hosts = vec![
            at(0, "Rebooting", "192.168.126.10"),
            at(1, "Rebooting", "fe80::5054:ff:fe9a:4739"),
            at(2, "Joined", "192.168.126.100"),
            at(3, "Waiting for ignition", "192.168.126.100"),
        ];
    });
    s
}

#[test]
fn configuring_from_the_machine_config_server_logs() {
    let s = mcs_setup();
    // The log is split over two pods: they are read as one text.
    let (a, b) = MCS_LOG.split_at(MCS_LOG.find('\n').unwrap() + 1);
    mcs_pods(&s, &[a, b]);
    assert!(!task(&s, false).round());
    assert_eq!(
        stages(&s.service),
        [
            ("host-1".into(), HostStage::Configuring),
            ("host-3".into(), HostStage::Configuring),
        ]
    );
    let calls = s.cluster.take_calls();
    assert_eq!(
        calls,
        [
            "list_nodes(-)",
            "list_pods(openshift-machine-config-operator, k8s-app=machine-config-server, -)",
            "pod_log(openshift-machine-config-operator, machine-config-server-0, 300)",
            "pod_log(openshift-machine-config-operator, machine-config-server-1, 300)",
        ]
    );
}

#[test]
fn a_failed_log_read_or_list_means_an_empty_log() {
    let s = mcs_setup();
    mcs_pods(&s, &[MCS_LOG, MCS_LOG]);
    s.cluster.fail_next("pod_log", boom());
    assert!(!task(&s, false).round());
    assert!(stages(&s.service).is_empty());
    assert_eq!(
        s.cluster.count("pod_log"),
        1,
        "the first failure ends the reads"
    );
    let s = mcs_setup();
    mcs_pods(&s, &[MCS_LOG]);
    s.cluster.fail_next("list_pods", boom());
    assert!(!task(&s, false).round());
    assert!(stages(&s.service).is_empty());
}

#[test]
fn a_host_without_ips_matches_any_ignition_request() {
    let s = mcs_setup();
    s.service
        .update_cluster(|c| c.hosts = vec![host(5, "installing", "Rebooting", &[])]);
    mcs_pods(&s, &["no request here\n"]);
    assert!(!task(&s, false).round());
    assert!(stages(&s.service).is_empty());
    let s = mcs_setup();
    s.service
        .update_cluster(|c| c.hosts = vec![host(5, "installing", "Rebooting", &[])]);
    mcs_pods(&s, &[MCS_LOG]);
    assert!(!task(&s, false).round());
    assert_eq!(
        stages(&s.service),
        [("host-5".into(), HostStage::Configuring)]
    );
}

#[test]
fn configuring_uses_the_second_host_map_and_failures_continue() {
    let s = mcs_setup();
    mcs_pods(&s, &[MCS_LOG]);
    // The second map is the one read: host-3 has moved to Configuring meanwhile.
    s.service.on_call(|call, n, cluster, _| {
        if n == 1
            && *call
                == (ServiceCall::GetCluster {
                    exclude_hosts: false,
                })
        {
            let p = cluster.hosts[3].progress.as_mut().unwrap();
            p.current_stage = Some("Configuring".into());
        }
    });
    s.service.fail("v2UpdateHostInstallProgress", 1, 500);
    assert!(!task(&s, false).round());
    // host-1 failed (recorded), host-3 was skipped as already Configuring.
    assert_eq!(
        stages(&s.service),
        [("host-1".into(), HostStage::Configuring)]
    );
    // A second-map failure (here a bad inventory) skips the detection.
    let s = mcs_setup();
    mcs_pods(&s, &[MCS_LOG]);
    s.service.on_call(|_, n, cluster, _| {
        if n == 1 {
            cluster.hosts[0].inventory = Some("{".into());
        }
    });
    assert!(!task(&s, false).round());
    assert_eq!(get_hosts(&s.service), 2);
    assert!(stages(&s.service).is_empty());
    assert_eq!(s.cluster.count("list_pods"), 0);
}

/// A real single-node service answered `Configuring` for its host with 409 ("Stages
/// Configuring isn't available for host role master bootstrap true"): not sent, while its
/// node is missing; `Joined` and `Done` are, once it is there. On a cluster of three, the same
/// bootstrap host is reported `Configuring`.
#[test]
fn a_single_node_host_is_never_reported_configuring() {
    for (control_plane_count, want) in [(1, vec![]), (3, vec![HostStage::Configuring])] {
        let s = setup(0, "installing", "Rebooting");
        s.service.update_cluster(|c| {
            let mut h = host(0, "installing", "Rebooting", &["192.168.126.100"]);
            h.bootstrap = true;
            c.hosts = vec![h];
            c.control_plane_count = Some(control_plane_count);
        });
        mcs_pods(&s, &[MCS_LOG]);
        assert!(!task(&s, false).round());
        let sent: Vec<HostStage> = stages(&s.service).into_iter().map(|(_, s)| s).collect();
        assert_eq!(sent, want, "{control_plane_count} control-plane nodes");
    }
    let s = setup(1, "installing", "Rebooting");
    s.service.update_cluster(|c| {
        c.hosts[0].bootstrap = true;
        c.high_availability_mode = Some("None".into());
    });
    add_nodes(&s, 1, true);
    mcs_pods(&s, &[MCS_LOG]);
    assert!(!task(&s, false).round());
    let h0 = || "host-0".to_string();
    assert_eq!(
        stages(&s.service),
        [(h0(), HostStage::Joined), (h0(), HostStage::Done)]
    );
}

/// The service refuses a stage before the host's current one ("Can't assign lower stage"): the
/// host list's stage holds such a report back.
#[test]
fn a_stage_before_the_hosts_current_one_is_not_sent() {
    let s = setup(1, "installing", "Joined");
    let hosts = HostMap::fetch(&s.service, NODE_STATUS_SKIP).unwrap();
    let (_, host) = hosts.iter().next().unwrap();
    let t = task(&s, false);
    for stage in [
        HostStage::Configuring,
        HostStage::Rebooting,
        HostStage::WaitingForIgnition,
    ] {
        t.set_stage(&hosts, host, stage).unwrap();
    }
    assert!(stages(&s.service).is_empty());
    t.set_stage(&hosts, host, HostStage::Joined).unwrap();
    t.set_stage(&hosts, host, HostStage::Done).unwrap();
    let h0 = || "host-0".to_string();
    assert_eq!(
        stages(&s.service),
        [(h0(), HostStage::Joined), (h0(), HostStage::Done)]
    );
}
