//! `assisted_installer_controller_test.go` "CSVs created", "Post-install with OLM" and "OLM waits", on FakeCluster, MemoryService
//! and FakeClock.

use std::path::PathBuf;
use std::sync::Arc;

use super::*;
use crate::clock::{FakeClock, NeverStop};
use crate::controller::service::testing::{MemoryService, ServiceCall};
use crate::controller::testing::{self, abi_operators_initialized, apply_kubeconfigs, b64, boom};
use crate::controller::testing::{fake_oc, stop_at, Applied};
use crate::controller::testing::{lso_csv as with_csv, LSO_NS as NS, LSO_SUB as SUB};
use crate::host::commands::RecordingRunner;
use crate::kube::testing::FakeCluster;
use crate::kube::{ApiError, Condition, InstallPlan, Job, Subscription};

fn lso(status: &str) -> MonitoredOperator {
    MonitoredOperator {
        name: "lso".into(),
        namespace: NS.into(),
        subscription_name: SUB.into(),
        operator_type: OLM_TYPE.into(),
        status: status.into(),
        ..Default::default()
    }
}

struct Fx {
    clock: Arc<FakeClock>,
    svc: MemoryService,
    cluster: FakeCluster,
    status: ControllerStatus,
    rec: RecordingRunner,
    applied: Applied,
}

fn fx() -> Fx {
    let clock = Arc::new(FakeClock::new());
    let svc = MemoryService::new("c", clock.clone());
    let (cluster, status) = (FakeCluster::new(), ControllerStatus::default());
    let (rec, applied) = fake_oc(false, 0);
    Fx {
        clock,
        svc,
        cluster,
        status,
        rec,
        applied,
    }
}

impl Fx {
    /// The OLM step on OpenShift 4.12.
    fn wait(&self, stop: &dyn Stop) -> Result<()> {
        let (clock, cluster, svc) = (&*self.clock, &self.cluster, &self.svc);
        wait_for_olm_operators(clock, stop, cluster, svc, &self.rec, &self.status, "4.12")
    }
}

/// The service times the current stage out whenever asked after a stage report.
fn stages_time_out(svc: &MemoryService) {
    svc.on_call(|call, _, cluster, _| {
        if matches!(call, ServiceCall::GetCluster { .. }) {
            if let Some(p) = cluster.progress.as_mut() {
                p.finalizing_stage_timed_out = true;
            }
        }
    });
}

// --- CSVs created ---

#[test]
fn subscription_error_is_false_after_one_cleanup() {
    let cluster = FakeCluster::new();
    cluster.fail_always("get_subscription", boom());
    assert!(!is_initialized(&cluster, &lso("")));
    assert_eq!(
        cluster.take_calls(),
        [
            format!("list_jobs({MARKETPLACE_NAMESPACE})"),
            format!("list_install_plans({NS})"),
            format!("get_subscription({NS}, {SUB})"),
        ]
    );
}

#[test]
fn no_current_csv_or_a_csv_not_found_or_unread_is_false_and_an_existing_csv_is_true() {
    let cluster = FakeCluster::new();
    let subscribe = |current_csv: &str| {
        cluster.set_subscription(Subscription {
            namespace: NS.into(),
            name: SUB.into(),
            current_csv: current_csv.into(),
        })
    };
    subscribe("");
    assert!(!is_initialized(&cluster, &lso("")), "no current CSV");
    assert_eq!(cluster.count("get_csv"), 0);
    subscribe("lso.v4.12.0");
    assert!(!is_initialized(&cluster, &lso("")), "CSV not found");
    cluster.fail_next("get_csv", boom());
    with_csv(&cluster, "", "");
    assert!(!is_initialized(&cluster, &lso("")), "CSV GET error");
    assert!(is_initialized(&cluster, &lso("")), "CSV exists, any phase");
    assert_eq!(cluster.count("get_csv"), 3);
    // The cleanup's errors are only warnings.
    cluster.fail_always("list_jobs", boom());
    cluster.fail_always("list_install_plans", boom());
    assert!(is_initialized(&cluster, &lso("")));
}

#[test]
fn cleanup_deletes_failed_jobs_and_failed_owned_install_plans() {
    let cluster = FakeCluster::new();
    let job = |name: &str, failed: i64, cond: Option<&str>| Job {
        namespace: MARKETPLACE_NAMESPACE.into(),
        name: name.into(),
        failed,
        conditions: cond
            .map(|s| {
                vec![Condition {
                    type_: "Failed".into(),
                    status: s.into(),
                    ..Default::default()
                }]
            })
            .unwrap_or_default(),
    };
    cluster.add_job(job("failed-count", 1, None));
    cluster.add_job(job("succeeded", 0, Some("False")));
    cluster.add_job(job("failed-cond", 0, Some("True")));
    let plan = |name: &str, owner: &str, phase: &str| InstallPlan {
        namespace: "test".into(),
        name: name.into(),
        owner_names: vec![owner.into()],
        phase: phase.into(),
    };
    cluster.add_install_plan(plan("test-name", "test-sub", "Failed"));
    cluster.add_install_plan(plan("complete", "test-sub", "Complete"));
    cluster.add_install_plan(plan("installing", "test-sub", "Installing"));
    cluster.add_install_plan(plan("other-owner", "someone-else", "Failed"));
    let op = MonitoredOperator {
        name: "test".into(),
        namespace: "test".into(),
        subscription_name: "test-sub".into(),
        operator_type: OLM_TYPE.into(),
        ..Default::default()
    };
    assert!(!is_initialized(&cluster, &op), "no subscription");
    let deletes: Vec<String> = cluster
        .take_calls()
        .into_iter()
        .filter(|c| c.starts_with("delete_"))
        .collect();
    assert_eq!(
        deletes,
        [
            format!("delete_job({MARKETPLACE_NAMESPACE}, failed-count)"),
            format!("delete_job({MARKETPLACE_NAMESPACE}, failed-cond)"),
            "delete_install_plan(test, test-name)".to_string(),
        ]
    );
}

// --- manifests ---

#[test]
fn custom_manifests_keys_are_case_insensitive() {
    let parsed = parse_custom_manifests(
        br#"[{"Name":"lso","Content":"YQ=="},{"name":"x","content":"Yg=="}]"#,
    )
    .unwrap();
    assert_eq!(
        parsed,
        [
            ("lso".to_string(), "YQ==".to_string()),
            ("x".to_string(), "Yg==".to_string())
        ]
    );
    assert!(parse_custom_manifests(b"{}").is_err());
    assert!(parse_custom_manifests(br#"[{"Name":1}]"#).is_err());
}

#[test]
fn apply_manifests_skips_unknown_operators_and_goes_on_after_a_bad_one() {
    let cluster = FakeCluster::new();
    let (rec, applied) = fake_oc(false, 0);
    let kubeconfig = Path::new("/k/kubeconfig-noingress");
    let apply = |rec: &RecordingRunner, version: &str, m: &[(String, String)]| {
        apply_manifests(&cluster, rec, version, &[lso("")], m, kubeconfig)
    };
    let good = vec![("lso".to_string(), b64("kind: LocalVolume"))];
    assert!(!apply(&rec, "4.12", &good), "not initialized");
    assert!(applied.lock().unwrap().is_empty());
    with_csv(&cluster, "Installing", "");
    let manifests = vec![
        ("lso".to_string(), "not base64!!".to_string()),
        ("cnv".to_string(), b64("kind: Other")),
        ("lso".to_string(), b64("kind: LocalVolume")),
    ];
    assert!(!apply(&rec, "4.12", &manifests));
    assert_eq!(*applied.lock().unwrap(), ["kind: LocalVolume"]);
    assert_eq!(apply_kubeconfigs(&rec), [kubeconfig]);
    assert!(apply(&rec, "4.12", &good));
    assert!(!apply(&rec, "bad", &good));
    assert!(!apply(&fake_oc(true, 0).0, "4.12", &good));
    assert!(apply(&rec, "4.12", &[]));
}

#[test]
fn odf_manifest_is_renamed_ocs_on_4_8() {
    let cluster = FakeCluster::new();
    let mut ocs = lso("");
    ocs.name = "ocs".into();
    with_csv(&cluster, "", "");
    let (rec, applied) = fake_oc(false, 0);
    let m = vec![("odf".to_string(), b64("kind: StorageCluster"))];
    let k = Path::new("/k");
    assert!(apply_manifests(
        &cluster,
        &rec,
        "4.8.2",
        &[ocs.clone()],
        &m,
        k
    ));
    assert_eq!(applied.lock().unwrap().len(), 1);
    assert!(apply_manifests(&cluster, &rec, "4.9.0", &[ocs], &m, k));
    assert_eq!(
        applied.lock().unwrap().len(),
        1,
        "no rename on 4.9: skipped"
    );
}

#[test]
fn apply_from_service_downloads_both_files() {
    let f = fx();
    let (svc, cluster, rec, applied) = (&f.svc, &f.cluster, &f.rec, &f.applied);
    with_csv(cluster, "", "");
    svc.set_custom_manifests(format!(
        r#"[{{"Name":"lso","Content":"{}"}}]"#,
        b64("kind: X")
    ));
    svc.set_kubeconfig("kubeconfig");
    let apply = || apply_from_service(cluster, svc, rec, "4.12", &[lso("")]);
    assert!(apply());
    assert_eq!(
        svc.operations(),
        ["V2DownloadClusterFiles", "V2DownloadClusterCredentials"]
    );
    assert_eq!(*applied.lock().unwrap(), ["kind: X"]);
    let k = apply_kubeconfigs(rec).remove(0);
    assert!(k.ends_with(crate::controller::service::KUBECONFIG_NOINGRESS));
    assert!(!k.exists(), "the temp dir is removed");

    svc.fail("V2DownloadClusterCredentials", 1, 500);
    assert!(!apply());
    svc.set_custom_manifests("not json");
    assert!(!apply());
}

// --- the OLM step ---

#[test]
fn empty_olm_list_reports_only_the_initialization_stage() {
    let f = fx();
    f.svc.set_operators(vec![testing::record("console", "")]);
    assert!(f.wait(&NeverStop).is_ok());
    assert_eq!(
        f.svc.finalizing_stages(),
        [FinalizingStage::WaitingForOlmOperatorsCsvInitialization]
    );
    assert!(f.cluster.calls().is_empty());
}

#[test]
fn single_operator_goes_installing_then_succeeded() {
    let f = fx();
    let (svc, cluster, status) = (&f.svc, &f.cluster, &f.status);
    with_csv(cluster, "Installing", "installing");
    svc.set_operators(vec![lso("")]);
    svc.set_custom_manifests(format!(
        r#"[{{"Name":"lso","Content":"{}"}}]"#,
        b64("kind: X")
    ));
    // The CSV succeeds once the progressing status has been reported.
    let c = cluster.clone();
    svc.on_call(move |call, _, _, _| {
        if let ServiceCall::ReportOperatorStatus(r) = call {
            if r.status == Some(OperatorStatus::Progressing) {
                with_csv(&c, "Succeeded", "done");
            }
        }
    });
    let out = f.wait(&NeverStop);
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(
        svc.finalizing_stages(),
        [
            FinalizingStage::WaitingForOlmOperatorsCsvInitialization,
            FinalizingStage::ApplyingOlmManifests,
            FinalizingStage::WaitingForOlmOperatorsCsv,
        ]
    );
    let r: Vec<_> = svc
        .operator_reports()
        .into_iter()
        .map(|r| (r.name, r.version, r.status.unwrap(), r.status_info))
        .collect();
    let lso = |status, info: &str| ("lso".into(), "4.12.0".into(), status, info.into());
    let progressing = lso(OperatorStatus::Progressing, "installing");
    assert_eq!(r, [progressing, lso(OperatorStatus::Available, "done")]);
    assert_eq!(*f.applied.lock().unwrap(), ["kind: X"]);
    assert!(!status.has_operator_error());
    assert!(!status.has_error());
}

/// An operator whose CSV never succeeds is marked failed once, whether the main context ends
/// or the service times the stage out.
#[test]
fn operator_that_never_succeeds_is_marked_failed() {
    for by_service in [false, true] {
        let f = fx();
        f.svc.set_operators(vec![lso("progressing")]);
        f.svc.set_custom_manifests("[]");
        with_csv(&f.cluster, "Installing", "");
        let deadline = stop_at(&f.clock, 100);
        let stop: &dyn Stop = if by_service {
            stages_time_out(&f.svc);
            &NeverStop
        } else {
            &deadline
        };
        let err = f.wait(stop).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Stopped waiting for OLM operators be installed: context canceled"
        );
        assert_eq!(
            f.svc.operator_reports(),
            [OperatorMonitorReport {
                name: "lso".into(),
                version: String::new(),
                status: Some(OperatorStatus::Failed),
                status_info: TIMED_OUT_INFO.into(),
            }]
        );
        assert_eq!(f.svc.finalizing_stages().len(), 3);
        assert_eq!(f.status.operators_in_error(), ["lso"]);
        assert!(!f.status.has_error());
        if by_service {
            let gets = f.svc.count("v2GetCluster");
            assert_eq!(gets, 1, "only the CSV wait's stage-timeout check");
        }
    }
}

#[test]
fn csvs_never_created_remembers_every_failure_and_marks() {
    let f = fx();
    f.svc.set_operators(vec![lso("")]);
    stages_time_out(&f.svc);
    let err = f.wait(&NeverStop).unwrap_err().to_string();
    assert_eq!(
        err.lines().collect::<Vec<_>>(),
        [
            "Failed to wait for some of the OLM operators to be initialized: context canceled",
            "Stopped applying post manifests: context canceled",
            "Stopped waiting for OLM operators be installed: context canceled",
        ]
    );
    assert_eq!(f.status.operators_in_error(), ["lso"]);
    assert!(f.applied.lock().unwrap().is_empty());
}

#[test]
fn marking_skips_available_and_failed_operators() {
    let Fx { svc, status, .. } = fx();
    svc.set_operators(vec![lso("progressing")]);
    svc.fail("V2ListOfClusterOperators", 1, 500);
    assert!(mark_timed_out(&svc, &status, "4.12").is_err());
    assert!(
        status.operators_in_error().is_empty(),
        "a list error marks nothing"
    );
    let mut a = lso("available");
    a.name = "a".into();
    let mut f = lso("failed");
    f.name = "f".into();
    let mut p = lso("");
    p.name = "p".into();
    p.version = "1.0".into();
    svc.set_operators(vec![a, f, p]);
    mark_timed_out(&svc, &status, "4.12").unwrap();
    assert_eq!(status.operators_in_error(), ["p"]);
    let r = svc.operator_reports();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].version, "1.0");
}

#[test]
fn failed_fetch_returns_without_marking() {
    let f = fx();
    let (clock, svc, status) = (&f.clock, &f.svc, &f.status);
    svc.fail("V2ListOfClusterOperators", 100, 500);
    let err = f.wait(&stop_at(clock, 25)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Failed to fetch monitored operators: context canceled"
    );
    assert!(svc.operator_reports().is_empty());
    assert!(status.operators_in_error().is_empty());
    assert_eq!(clock.elapsed(), Duration::from_secs(30), "10 s fetch polls");
}

// --- ABI post-install (`PostInstallConfigsK8sClient`) ---

const CTRL_NS: &str = "assisted-installer";

/// `PostInstallConfigsK8sClient` on a cluster: the ConfigMap states, the kubeconfig (fixed, or
/// downloaded after `n` failures), the stop, and what it did.
#[test]
fn abi_post_install_table() {
    let initialized = |files: bool| {
        move |c: &FakeCluster| {
            abi_operators_initialized(c);
            testing::abi_config_map(c, CTRL_NS, files);
        }
    };
    let subs_fail = |c: &FakeCluster| {
        initialized(true)(c);
        c.fail_always("get_subscription", boom());
    };
    let forbidden = |c: &FakeCluster| {
        c.fail_always("get_config_map", ApiError::new(403, "Forbidden", "no"));
    };
    let malformed = |c: &FakeCluster| {
        let data = [("x.metadata.yaml", "manifests: {{{")];
        c.set_config_map(CTRL_NS, OLM_MANIFESTS_CONFIG_MAP, &data);
    };
    let empty = |c: &FakeCluster| c.set_config_map(CTRL_NS, OLM_MANIFESTS_CONFIG_MAP, &[]);
    let (ok, missing_file) = (initialized(true), initialized(false));
    let none = |_: &FakeCluster| {};
    let both: &[&str] = &["kind: KubeDescheduler", "kind: NMState"];
    // (case, set-up, download failures (None: the fixed SNO file), stop after s (0: never),
    //  done, ConfigMap reads, other cluster calls, applied)
    type Row<'a> = (
        &'a str,
        &'a dyn Fn(&FakeCluster),
        Option<usize>,
        u64,
        bool,
        usize,
        Option<usize>,
        &'a [&'a str],
    );
    let cases: [Row; 8] = [
        // Each operator: list_jobs, list_install_plans, get_subscription, get_csv.
        ("applied", &ok, Some(0), 0, true, 1, Some(8), both),
        ("download", &ok, Some(1), 0, true, 2, None, both),
        ("subs fail", &subs_fail, None, 100, false, 4, None, &[]),
        ("not found", &none, None, 60, false, 2, None, &[]),
        ("forbidden", &forbidden, None, 0, true, 1, Some(0), &[]),
        ("malformed", &malformed, None, 0, true, 1, Some(0), &[]),
        ("no file", &missing_file, None, 60, false, 2, None, &[]),
        ("empty", &empty, None, 0, true, 1, Some(0), &[]),
    ];
    for (case, setup, failures, stop_after, done, reads, others, want) in cases {
        let clock = FakeClock::new();
        let cluster = FakeCluster::new();
        setup(&cluster);
        let (rec, applied) = fake_oc(false, 0);
        let lookups = std::cell::Cell::new(0);
        let want_path = if failures.is_some() {
            "/k/kubeconfig"
        } else {
            SNO_KUBECONFIG
        };
        let kubeconfig = || {
            lookups.set(lookups.get() + 1);
            if lookups.get() <= failures.unwrap_or(0) {
                anyhow::bail!("not yet");
            }
            Ok(PathBuf::from(want_path))
        };
        let stop: Box<dyn Stop> = match stop_after {
            0 => Box::new(NeverStop),
            secs => Box::new(stop_at(&clock, secs)),
        };
        let interval = Duration::from_secs(30);
        let got = abi_post_install(
            &clock,
            &*stop,
            &cluster,
            &rec,
            CTRL_NS,
            "4.14",
            &kubeconfig,
            interval,
        );
        assert_eq!(got, done, "{case}");
        assert_eq!(cluster.count("get_config_map"), reads, "{case}");
        if let Some(others) = others {
            assert_eq!(cluster.calls().len() - reads, others, "{case}");
        }
        assert_eq!(*applied.lock().unwrap(), want, "{case}");
        assert!(
            apply_kubeconfigs(&rec)
                .iter()
                .all(|k| k == Path::new(want_path)),
            "{case}"
        );
        if let Some(n) = failures.filter(|_| done) {
            assert_eq!(lookups.get(), n + 1, "{case}: asked until it succeeds");
        }
    }
}
