//! `assisted_installer_controller_test.go` post-install and `assisted_installer_main_test.go` completion-wait checklist items, on the fake clock, the fake
//! cluster and the in-memory service.

use super::*;
use crate::clock::{FakeClock, NeverStop};
use crate::controller::service::testing::{MemoryService, ServiceCall};
use crate::controller::tasks::operators::CVO_MAX_TIMEOUT;
use crate::controller::testing::{available_version, boom, cond, master, record, stop_at};
use crate::image::Cancel;
use crate::kube::testing::FakeCluster;
use crate::kube::{ClusterOperator, ClusterVersion};
use crate::service::OperatorStatus;
use std::sync::Arc;

struct Fx {
    clock: Arc<FakeClock>,
    svc: MemoryService,
    status: ControllerStatus,
    cluster: FakeCluster,
}

/// The fakes; the cluster's console and CVO are available (the CVO with "done"), its router CA
/// is there.
fn fx() -> Fx {
    let clock = Arc::new(FakeClock::new());
    let svc = MemoryService::new("cluster-id", clock.clone());
    let cluster = FakeCluster::new();
    available_version(&cluster, "done");
    cluster.set_cluster_operator(ClusterOperator {
        name: "console".into(),
        conditions: vec![cond("Available", "True", "")],
        versions: vec![],
    });
    let ca = [(INGRESS_CERT_KEY, "CA")];
    cluster.set_config_map(INGRESS_CERT_NAMESPACE, INGRESS_CERT_NAME, &ca);
    let status = ControllerStatus::default();
    Fx {
        clock,
        svc,
        status,
        cluster,
    }
}

/// The cluster status answered at each `v2GetCluster`, in order; the last one stays.
fn statuses(svc: &MemoryService, list: &'static [&'static str]) {
    let mut n = 0;
    svc.on_call(move |call, _, cluster, _| {
        if matches!(call, ServiceCall::GetCluster { .. }) {
            cluster.status = list[n.min(list.len() - 1)].to_string();
            n += 1;
        }
    });
}

#[test]
fn wait_sleeps_first_and_tolerates_errors() {
    let Fx {
        clock, svc, status, ..
    } = fx();
    // The hook also sees the failed first call.
    statuses(&svc, &["installing", "installing", "installed"]);
    svc.fail("v2GetCluster", 1, 500);
    let out = wait_for_installation(&*clock, &NeverStop, &svc, &status, INSTALL_STATUS_INTERVAL);
    assert_eq!(out, WaitOutcome::Finished);
    // error, installing, installed.
    assert_eq!(svc.count("v2GetCluster"), 3);
    assert_eq!(clock.sleeps(), vec![INSTALL_STATUS_INTERVAL; 3]);
    assert_eq!(
        svc.calls()[0],
        ServiceCall::GetCluster {
            exclude_hosts: true
        }
    );
    assert!(!status.has_error());
}

/// The completion wait on a cluster in a status, behind failed calls (one each): the outcome,
/// the service calls (all GetCluster) and whether the error is flagged; stopped at once
/// ("stopped"), it makes no call.
#[test]
fn wait_outcomes() {
    use WaitOutcome::*;
    let cases: [(&str, &[u16], _, usize, bool); 10] = [
        ("stopped", &[], Stopped, 0, false),
        ("cancelled", &[], Finished, 1, false),
        ("adding-hosts", &[], Finished, 1, false),
        ("installed", &[], Finished, 1, false),
        ("error", &[], Finished, 1, true),
        // Three 401s or one 404 exit.
        ("installed", &[401, 401, 401], ExitNow, 3, false),
        ("installed", &[404, 404, 404], ExitNow, 1, false),
        ("installed", &[404], ExitNow, 1, false),
        ("installed", &[401], Finished, 2, false),
        // Other errors neither add nor reset: the third 401 exits.
        ("installed", &[401, 500, 401, 500, 401], ExitNow, 5, false),
    ];
    for (s, failures, outcome, calls, flagged) in cases {
        let Fx {
            clock, svc, status, ..
        } = fx();
        svc.update_cluster(|c| c.status = s.to_string());
        for code in failures {
            svc.fail("v2GetCluster", 1, *code);
        }
        let stop = Cancel::new();
        if s == "stopped" {
            stop.cancel();
        }
        let out = wait_for_installation(&*clock, &stop, &svc, &status, INSTALL_STATUS_INTERVAL);
        assert_eq!(
            svc.count("v2GetCluster"),
            svc.operations().len(),
            "{s} {failures:?}"
        );
        let got = (out, svc.count("v2GetCluster"), status.has_error());
        assert_eq!(got, (outcome, calls, flagged), "{s} {failures:?}");
    }
}

#[test]
fn exit_counter_resets_on_success_only() {
    let e = |code: u16| -> anyhow::Error {
        ServiceError {
            call: "v2GetCluster",
            method: "GET".into(),
            path: String::new(),
            status: Some(code),
            reason: String::new(),
            attempts: 1,
        }
        .into()
    };
    let mut c = ExitCounter::default();
    assert!(!c.error(&e(401)));
    assert!(!c.error(&e(401)));
    c.success();
    assert!(!c.error(&e(401)));
    assert!(!c.error(&e(500)));
    assert!(!c.error(&anyhow::anyhow!("no answer")));
    assert!(!c.error(&e(401)));
    assert!(c.error(&e(401)), "third 401 since the success");
    let mut c = ExitCounter::default();
    assert!(c.error(&e(404).context("wrapped")), "found under context");
}

fn reports(svc: &MemoryService) -> Vec<(String, Option<OperatorStatus>, String, String)> {
    svc.operator_reports()
        .into_iter()
        .map(|r| (r.name, r.status, r.status_info, r.version))
        .collect()
}

/// Go's settings for OpenShift 4.12, with or without the CVO check.
fn go(check_cvo: bool) -> PostInstallSettings {
    PostInstallSettings {
        openshift_version: "4.12".into(),
        check_cluster_version: check_cvo,
        cvo_timeout: CVO_MAX_TIMEOUT,
    }
}

fn no_olm() -> anyhow::Result<()> {
    panic!("no OLM step after a failure")
}

impl Fx {
    fn post(
        &self,
        stop: &dyn Stop,
        settings: &PostInstallSettings,
        olm: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> PostInstallOutcome {
        let (clock, svc, status) = (&*self.clock, &self.svc, &self.status);
        post_install_configs(clock, stop, &self.cluster, svc, status, settings, olm)
    }

    /// [`Fx::post`], which must have sent a completion: the body and whether it went through.
    fn completed(
        &self,
        stop: &dyn Stop,
        settings: &PostInstallSettings,
        olm: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> (CompletionParams, bool) {
        match self.post(stop, settings, olm) {
            PostInstallOutcome::Completed { params, sent } => (params, sent),
            out => panic!("{out:?}"),
        }
    }
}

#[test]
fn post_install_with_cvo_succeeds() {
    let f = fx();
    let (svc, status) = (&f.svc, &f.status);
    statuses(svc, &["installing", "installing", "finalizing"]);
    let progressing = ["console", "cvo"].map(|name| record(name, "progressing"));
    svc.set_operators(progressing.into());
    svc.fail("v2ReportMonitoredOperatorStatus", 1, 500);
    svc.fail("v2CompleteInstallation", 1, 500);
    let mut olm_calls = 0;
    let out = f.completed(&NeverStop, &go(true), &mut || {
        olm_calls += 1;
        Ok(())
    });
    let ok = CompletionParams {
        is_success: true,
        error_info: String::new(),
        data: None,
    };
    assert_eq!(out, (ok.clone(), true));
    assert_eq!(svc.count("v2GetCluster"), 3);
    assert_eq!(olm_calls, 1);
    assert_eq!(
        svc.finalizing_stages(),
        [
            FinalizingStage::WaitingForClusterOperators,
            FinalizingStage::AddingRouterCa,
            FinalizingStage::Done
        ]
    );
    let a = Some(OperatorStatus::Available);
    assert_eq!(
        reports(svc),
        [
            ("console".into(), a, String::new(), String::new()),
            ("cvo".into(), a, "done".into(), "4.12.0".into()),
            ("console".into(), a, String::new(), String::new()),
        ]
    );
    assert!(svc
        .calls()
        .contains(&ServiceCall::UploadIngressCert("CA".into())));
    assert_eq!(svc.completions(), [ok.clone(), ok]);
    assert!(!status.has_error());
    // Completion comes after the Done stage.
    let ops = svc.operations();
    let done = ops
        .iter()
        .rposition(|o| *o == "v2UpdateClusterFinalizingProgress")
        .unwrap();
    assert!(ops[done..].contains(&"v2CompleteInstallation"));
}

#[test]
fn post_install_without_cvo_never_reads_it_and_olm_errors_do_not_fail() {
    let f = fx();
    let (svc, status, cluster) = (&f.svc, &f.status, &f.cluster);
    svc.update_cluster(|c| c.status = "finalizing".into());
    svc.set_operators(vec![record("console", "available")]);
    let (params, sent) = f.completed(&NeverStop, &go(false), &mut || anyhow::bail!("olm broke"));
    assert!(params.is_success && sent);
    // Only the capability read: no CVO status read, no console read (the record says available).
    assert_eq!(cluster.count("get_cluster_version"), 1);
    assert_eq!(cluster.count("get_cluster_operator"), 0);
    assert!(!status.has_error());
}

#[test]
fn post_install_cluster_operators_timeout_sends_the_report() {
    let f = fx();
    let (svc, status, cluster) = (&f.svc, &f.status, &f.cluster);
    cluster.fail_always("get_cluster_operator", boom());
    cluster.set_cluster_version("version", ClusterVersion::default());
    cluster.set_cluster_operator(ClusterOperator {
        name: "authentication".into(),
        conditions: vec![cond("Available", "False", "This is a test message")],
        versions: vec![],
    });
    svc.update_cluster(|c| c.status = "finalizing".into());
    let progressing = ["console", "cvo"].map(|name| record(name, "progressing"));
    svc.set_operators(progressing.into());
    let settings = PostInstallSettings {
        cvo_timeout: Duration::from_secs(600),
        ..go(true)
    };
    let (params, sent) = f.completed(&NeverStop, &settings, &mut no_olm);
    assert!(sent);
    assert!(!params.is_success);
    assert_eq!(
        params.error_info,
        "Stopped waiting for cluster operators to be available: context deadline exceeded"
    );
    let data = serde_json::Value::Object(params.data.clone().unwrap());
    assert_eq!(
        data[CLUSTER_OPERATORS_REPORT][0],
        serde_json::json!({"name": "authentication", "status": "failed",
            "status_info": "This is a test message"})
    );
    assert_eq!(
        svc.finalizing_stages(),
        [FinalizingStage::WaitingForClusterOperators]
    );
    assert_eq!(svc.completions().len(), 1);
    assert!(status.has_error());
    assert_eq!(cluster.count("get_config_map"), 0);
}

#[test]
fn post_install_router_ca_stopped_still_sends_one_completion() {
    let f = fx();
    let (clock, svc, status, cluster) = (&f.clock, &f.svc, &f.status, &f.cluster);
    cluster.fail_always("get_config_map", boom());
    cluster.fail_always("list_cluster_operators", boom());
    svc.update_cluster(|c| c.status = "finalizing".into());
    svc.set_operators(vec![record("console", "available")]);
    // The main context ends after 5 minutes of router-CA polling.
    let at = stop_at(clock, 300);
    let out = f.post(&at, &go(false), &mut no_olm);
    assert!(at.is_stopped());
    let PostInstallOutcome::Completed { params, sent } = out else {
        panic!("{out:?}")
    };
    assert!(sent, "the one attempt made after the stop went through");
    assert_eq!(
        params,
        CompletionParams {
            is_success: false,
            error_info: "Stopped waiting for router ca data: context canceled".into(),
            data: None,
        }
    );
    assert_eq!(
        svc.finalizing_stages(),
        [
            FinalizingStage::WaitingForClusterOperators,
            FinalizingStage::AddingRouterCa
        ]
    );
    // 0 s, 10 s, … 290 s: 30 reads, then the stop.
    assert_eq!(cluster.count("get_config_map"), 30);
    assert_eq!(svc.completions().len(), 1);
    assert!(status.has_error());
}

#[test]
fn post_install_stopped_before_finalizing_reports_nothing() {
    let f = fx();
    let (svc, status) = (&f.svc, &f.status);
    let stop = Cancel::new();
    stop.cancel();
    let out = f.post(&stop, &go(false), &mut || Ok(()));
    assert_eq!(out, PostInstallOutcome::Stopped);
    assert_eq!(svc.operations(), ["v2GetCluster"]);
    assert!(!status.has_error());
}

#[test]
fn stage_reports_retry_every_30_s_until_they_go_through() {
    let Fx { clock, svc, .. } = fx();
    svc.fail("v2UpdateClusterFinalizingProgress", 3, 500);
    report_stage(
        &*clock,
        &NeverStop,
        &svc,
        FinalizingStage::AddingRouterCa,
        GENERAL_WAIT,
    );
    assert_eq!(svc.finalizing_stages().len(), 4);
    assert_eq!(clock.elapsed(), Duration::from_secs(90));
}

#[test]
fn completion_bodies_on_the_wire() {
    let ok = CompletionParams {
        is_success: true,
        ..CompletionParams::default()
    };
    assert_eq!(
        serde_json::to_value(&ok).unwrap(),
        serde_json::json!({"is_success": true})
    );
    let mut data = Map::new();
    data.insert(CLUSTER_OPERATORS_REPORT.into(), serde_json::json!([]));
    let failed = CompletionParams {
        is_success: false,
        error_info: "Stopped waiting for cluster operators to be available: context canceled"
            .into(),
        data: Some(data),
    };
    assert_eq!(
        serde_json::to_value(&failed).unwrap(),
        serde_json::json!({"is_success": false,
            "error_info": "Stopped waiting for cluster operators to be available: context canceled",
            "data": {"CLUSTER_OPERATORS_REPORT": []}})
    );
}

#[test]
fn abi_wait_untaints_then_returns_with_no_expected_masters() {
    let clock = FakeClock::new();
    let cluster = FakeCluster::new();
    available_version(&cluster, "");
    cluster.set_node(master("node0"));
    let mut untainted = Vec::new();
    let mut untaint = |n: &crate::kube::Node| untainted.push(n.name.clone());
    assert!(wait_for_installation_abi(
        &clock,
        &NeverStop,
        &cluster,
        INSTALL_STATUS_INTERVAL,
        0,
        Some(&mut untaint),
    ));
    assert_eq!(untainted, ["node0"]);
    assert_eq!(
        cluster.take_calls(),
        ["list_nodes(-)", "get_cluster_version(version)"]
    );
}

/// Changes the fake cluster as the fake clock passes whole minutes (checked between rounds), and
/// stops after 10 minutes so a wrong loop cannot hang the test.
struct Script<'a> {
    clock: &'a FakeClock,
    cluster: FakeCluster,
}

impl Stop for Script<'_> {
    fn is_stopped(&self) -> bool {
        let minutes = self.clock.elapsed().as_secs() / 60;
        if minutes >= 1 {
            available_version(&self.cluster, "");
        }
        if minutes >= 2 {
            self.cluster.set_node(master("m2"));
        }
        minutes > 10
    }
    fn sleep(&self, _: Duration) -> bool {
        self.is_stopped()
    }
}

#[test]
fn abi_wait_latches_availability_and_counts_masters() {
    let clock = FakeClock::new();
    let cluster = FakeCluster::new();
    cluster.set_cluster_version("version", ClusterVersion::default());
    cluster.set_node(master("m0"));
    cluster.set_node(master("m1"));
    let script = Script {
        clock: &clock,
        cluster: cluster.clone(),
    };
    assert!(wait_for_installation_abi(
        &clock,
        &script,
        &cluster,
        INSTALL_STATUS_INTERVAL,
        3,
        None
    ));
    // Round 1: not available. Round 2: available, 2 masters. Round 3: 3 masters.
    assert_eq!(
        cluster.take_calls(),
        [
            "get_cluster_version(version)",
            "get_cluster_version(version)",
            "list_nodes(node-role.kubernetes.io/master)",
            "list_nodes(node-role.kubernetes.io/master)",
        ]
    );
    assert_eq!(clock.elapsed(), 2 * INSTALL_STATUS_INTERVAL);
}

#[test]
fn abi_wait_ends_false_on_stop() {
    let clock = FakeClock::new();
    let cluster = FakeCluster::new();
    cluster.fail_always("get_cluster_version", boom());
    let stop = Cancel::new();
    stop.cancel();
    assert!(!wait_for_installation_abi(
        &clock,
        &stop,
        &cluster,
        INSTALL_STATUS_INTERVAL,
        0,
        None
    ));
    let reads = cluster.count("get_cluster_version");
    assert_eq!(reads, 1, "one round even when stopped");
}

#[test]
fn post_install_rides_out_many_console_failures() {
    let f = fx();
    let (clock, svc, status, cluster) = (&f.clock, &f.svc, &f.status, &f.cluster);
    for _ in 0..9 {
        cluster.fail_next("get_cluster_operator", boom());
    }
    svc.update_cluster(|c| c.status = "finalizing".into());
    svc.set_operators(vec![
        record("console", "progressing"),
        record("cvo", "available"),
    ]);
    svc.fail("v2CompleteInstallation", 1, 500);
    let (params, sent) = f.completed(&NeverStop, &go(true), &mut || Ok(()));
    assert!(params.is_success && sent);
    // Ten rounds a minute apart, then the router CA at once; one completion retry.
    assert_eq!(cluster.count("get_cluster_operator"), 10);
    let available = Some(OperatorStatus::Available);
    let console = ("console".into(), available, String::new(), String::new());
    assert_eq!(reports(svc), [console]);
    assert_eq!(svc.completions().len(), 2);
    assert_eq!(
        clock.elapsed(),
        9 * CLUSTER_OPERATORS_INTERVAL + CLUSTER_OPERATORS_INTERVAL,
        "9 min of console rounds, then 1 min before the completion retry"
    );
    assert!(!status.has_error());
}

#[test]
fn post_install_cancelled_during_the_operator_wait_sends_one_failed_completion() {
    let f = fx();
    let (clock, svc, status, cluster) = (&f.clock, &f.svc, &f.status, &f.cluster);
    cluster.fail_always("get_cluster_operator", boom());
    svc.update_cluster(|c| c.status = "finalizing".into());
    svc.set_operators(vec![record("console", "progressing")]);
    svc.fail("v2CompleteInstallation", 5, 500);
    let (params, sent) = f.completed(&stop_at(clock, 30 * 60), &go(false), &mut no_olm);
    assert!(!sent, "the single attempt failed and the context is over");
    assert_eq!(
        params.error_info,
        "Stopped waiting for cluster operators to be available: context canceled"
    );
    assert!(params.data.is_some());
    assert_eq!(svc.completions().len(), 1);
    let reads = cluster.count("get_cluster_operator");
    assert_eq!(reads, 30, "one round a minute");
    assert_eq!(
        svc.finalizing_stages(),
        [FinalizingStage::WaitingForClusterOperators]
    );
    assert!(status.has_error());
}
