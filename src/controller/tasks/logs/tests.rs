//! `assisted_installer_controller_test.go` log-upload and must-gather checklist items.

use super::*;
use crate::archive::read::entries;
use crate::clock::FakeClock;
use crate::controller::service::testing::{MemoryService, ServiceCall};
use crate::controller::testing::{boom, fake_oc, mg_images, stop_at, Urls};
use crate::host::commands::RecordingRunner;
use crate::kube::testing::FakeCluster;
use crate::kube::Pod;
use std::sync::Arc;

struct Env {
    dir: tempfile::TempDir,
    cluster: FakeCluster,
    svc: MemoryService,
    status: ControllerStatus,
    mg: RecordingRunner,
}

fn env() -> Env {
    let svc = MemoryService::new("cid", Arc::new(FakeClock::new()));
    svc.set_kubeconfig("kubeconfig");
    Env {
        dir: tempfile::tempdir().unwrap(),
        cluster: FakeCluster::new(),
        svc,
        status: ControllerStatus::default(),
        mg: fake_oc(false, 0).0,
    }
}

impl Env {
    fn uploader(&self) -> LogUploader<'_> {
        let dir = self.dir.path();
        LogUploader {
            cluster: &self.cluster,
            service: &self.svc,
            status: &self.status,
            oc: &self.mg,
            namespace: "assisted-installer".into(),
            must_gather_image: "quay.io/test-must-gather:latest".into(),
            log_file: dir.join("controller_logs.log"),
            must_gather_dir: dir.join("must-gather-logs"),
            // Never written: the failed-install tests log a resolv.conf that cannot be read.
            resolv_conf_files: vec![dir.join("resolv.conf")],
            pod_name: None,
            control_plane_count: 3,
            router_probe: None,
        }
    }

    fn uploads(&self) -> Vec<Vec<(String, Vec<u8>)>> {
        self.svc
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                ServiceCall::UploadControllerLogs(a) => Some(
                    entries(&a)
                        .into_iter()
                        .map(|(name, mode, _, data)| {
                            assert_eq!(mode, 0o644);
                            (name, data)
                        })
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    }
}

fn log_entry(data: &str) -> Vec<(String, Vec<u8>)> {
    vec![(CONTROLLER_LOG_ENTRY.to_string(), data.as_bytes().to_vec())]
}

#[test]
fn images_from_the_setting() {
    let json =
        r#"{"ocp":"quay.io/openshift/must-gather","cnv":"blah","ocs":"quay.io/ocs-must-gather"}"#;
    // (setting, the error flag, operators in error, images); a missing ocp adds "".
    let cases: [(&str, bool, &[&str], &[&str]); 5] = [
        ("", true, &[], &[]),
        ("quay.io/mg:1", false, &[], &["quay.io/mg:1"]),
        (
            json,
            true,
            &["cnv"],
            &["quay.io/openshift/must-gather", "blah"],
        ),
        (json, false, &["lso"], &[]),
        (r#"{"cnv":"x"}"#, true, &[], &[""]),
    ];
    for (setting, failed, in_error, want) in cases {
        let in_error: Vec<String> = in_error.iter().map(|s| s.to_string()).collect();
        let got = must_gather_images(setting, failed, &in_error);
        assert_eq!(got, want, "{setting} {failed} {in_error:?}");
    }
}

#[test]
fn periodic_upload_finds_the_pod_and_uploads_its_full_log() {
    let e = env();
    e.cluster.add_pod(
        Pod {
            namespace: "assisted-installer".into(),
            name: "assisted-installer-controller-abc".into(),
            phase: "Running".into(),
            labels: [(
                "job-name".to_string(),
                "assisted-installer-controller".to_string(),
            )]
            .into(),
        },
        "pod log",
    );
    let clock = FakeClock::new();
    let mut u = e.uploader();
    // The main context ends at 16 minutes.
    u.periodic(&clock, &stop_at(&clock, 16 * 60), LOGS_UPLOAD_PERIOD);
    assert_eq!(
        e.uploads(),
        vec![log_entry("pod log"); 3],
        "at 5, 10 and 15 min"
    );
    assert_eq!(e.cluster.count("list_pods"), 1, "the name is remembered");
    assert_eq!(
        e.cluster.take_calls()[..2],
        [
            "list_pods(assisted-installer, job-name=assisted-installer-controller, status.phase=Running)",
            "pod_log(assisted-installer, assisted-installer-controller-abc, -)",
        ]
    );
}

#[test]
fn pod_list_or_log_failure_falls_back_to_the_file() {
    let e = env();
    std::fs::write(e.dir.path().join("controller_logs.log"), "file log").unwrap();
    e.cluster.fail_always("list_pods", boom());
    let mut u = e.uploader();
    u.find_pod_name();
    u.upload_controller_logs().unwrap();
    assert_eq!(e.uploads(), [log_entry("file log")]);

    // Known pod whose log read fails.
    u.pod_name = Some("p".into());
    u.upload_controller_logs().unwrap();
    assert_eq!(e.uploads()[1], log_entry("file log"));
    assert_eq!(e.cluster.count("pod_log"), 1);
}

#[test]
fn missing_file_still_uploads_a_placeholder() {
    let e = env();
    let mut u = e.uploader();
    u.pod_name = Some("p".into());
    u.upload_controller_logs().unwrap();
    let up = e.uploads();
    let text = String::from_utf8(up[0][0].1.clone()).unwrap();
    assert!(text.starts_with("Failed to get logs from pod ("), "{text}");
    assert!(text.contains("controller_logs.log"), "{text}");
}

#[test]
fn summary_without_errors_has_no_must_gather() {
    let e = env();
    std::fs::write(e.dir.path().join("controller_logs.log"), "file log").unwrap();
    e.uploader().summary_upload().unwrap();
    assert_eq!(e.uploads(), [log_entry("file log")]);
    assert_eq!(mg_images(&e.mg).len(), 0);
    assert_eq!(e.svc.count("V2DownloadClusterCredentials"), 0);

    // The upload failing: an error, and still no must-gather.
    e.svc.fail("V2UploadLogs", 1, 500);
    assert!(e.uploader().summary_upload().is_err());
    assert_eq!(mg_images(&e.mg).len(), 0);
}

#[test]
fn summary_with_error_runs_must_gather_and_orders_the_entries() {
    let e = env();
    std::fs::write(e.dir.path().join("controller_logs.log"), "file log").unwrap();
    e.status.error();
    e.uploader().summary_upload().unwrap();
    assert_eq!(mg_images(&e.mg).len(), 1);
    assert_eq!(
        mg_images(&e.mg),
        [vec!["quay.io/test-must-gather:latest".to_string()]]
    );
    assert_eq!(e.svc.count("V2DownloadClusterCredentials"), 1);
    let up = e.uploads();
    assert_eq!(up.len(), 2, "the own logs alone, then the summary");
    assert_eq!(up[0], log_entry("file log"));
    assert_eq!(
        up[1],
        [
            (MUST_GATHER_ENTRY.to_string(), b"MG".to_vec()),
            (CONTROLLER_LOG_ENTRY.to_string(), b"file log".to_vec())
        ]
    );
    // A tarball already there is reused: no new download, no new run.
    e.uploader().summary_upload().unwrap();
    assert_eq!(mg_images(&e.mg).len(), 1);
    assert_eq!(e.svc.count("V2DownloadClusterCredentials"), 1);
}

#[test]
fn final_upload_retries_a_failed_must_gather() {
    let mut e = env();
    e.mg = fake_oc(false, 1).0;
    e.status.operator_error("lso");
    let clock = FakeClock::new();
    assert!(e
        .uploader()
        .final_upload(&clock, SUMMARY_LOGS_PERIOD, SUMMARY_LOGS_WINDOW));
    assert_eq!(mg_images(&e.mg).len(), 2);
    assert_eq!(e.svc.count("V2DownloadClusterCredentials"), 2);
    assert_eq!(clock.elapsed(), SUMMARY_LOGS_PERIOD);
    let states: Vec<_> = e
        .svc
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            ServiceCall::UpdateLogsProgress(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(states, [LogsState::Requested, LogsState::Completed]);
    let ops = e.svc.operations();
    assert_eq!(ops.first(), Some(&"v2UpdateClusterLogsProgress"));
    assert_eq!(ops.last(), Some(&"v2UpdateClusterLogsProgress"));
    // A plain image setting is used as it is, whatever is in error.
    assert_eq!(
        mg_images(&e.mg),
        vec![vec!["quay.io/test-must-gather:latest".to_string()]; 2]
    );
}

#[test]
fn final_upload_gives_up_after_the_window_and_still_completes() {
    let e = env();
    e.svc.fail("V2UploadLogs", 10_000, 500);
    let clock = FakeClock::new();
    assert!(!e
        .uploader()
        .final_upload(&clock, SUMMARY_LOGS_PERIOD, SUMMARY_LOGS_WINDOW));
    assert_eq!(e.svc.count("V2UploadLogs"), 140, "every 30 s for 70 min");
    assert_eq!(
        e.svc.calls().last(),
        Some(&ServiceCall::UpdateLogsProgress(LogsState::Completed))
    );
}

/// `oc adm must-gather` with each image in the work dir, then the tarball of the first
/// `must-gather*` directory (depth-first, sorted) it left there; none left: an error.
#[test]
fn must_gather_runs_oc_then_tars_the_first_must_gather_directory() {
    let e = env();
    let d = e.dir.path().join("must-gather-logs");
    let d2 = d.clone();
    let oc = RecordingRunner::with_script(move |_, args| {
        if args[1].contains("adm must-gather") {
            std::fs::create_dir_all(d2.join("a/must-gather.local.1")).unwrap();
            std::fs::create_dir_all(d2.join("b/must-gather.local.2")).unwrap();
            std::fs::write(d2.join("must-gather.txt"), "").unwrap();
        } else {
            std::fs::write(d2.join(MUST_GATHER_ENTRY), "MG").unwrap();
        }
        None
    });
    let mut u = e.uploader();
    u.oc = &oc;
    let images = ["quay.io/mg:1".to_string(), "blah".to_string()];
    assert_eq!(u.collect_must_gather(&images).unwrap(), b"MG");
    let (cd, k) = (
        format!("bash -c cd {}", d.display()),
        d.join(KUBECONFIG_NOINGRESS),
    );
    let k = k.display();
    assert_eq!(
        oc.lines(),
        [
            format!(
                "{cd} && oc --kubeconfig={k} adm must-gather --image=quay.io/mg:1 --image=blah"
            ),
            format!("{cd} && tar zcf must-gather.tar.gz must-gather.local.1"),
        ]
    );
    assert_eq!(find_must_gather_dir(&d.join("a/must-gather.local.1")), None);
    std::fs::remove_file(d.join(MUST_GATHER_ENTRY)).unwrap();
    let no_dir = RecordingRunner::new();
    u.oc = &no_dir;
    let err = u.collect_must_gather(&[]).unwrap_err();
    assert!(
        format!("{err:#}").contains("no must-gather directory"),
        "{err:#}"
    );
}

/// The router probe runs only on a single-node cluster whose install failed (an operator
/// error is not enough), and never blocks the upload, even when it cannot learn the cluster.
#[test]
fn router_probe_on_a_failed_single_node_only() {
    // (control-plane nodes, install error (else an operator error), GetCluster failing,
    //  GetCluster calls (None: at least one))
    let cases = [
        (1, false, false, Some(0)),
        (3, true, false, Some(0)),
        (1, true, true, None),
        (1, true, false, Some(1)),
    ];
    for (control_plane_count, error, probe_fails, gets) in cases {
        let e = env();
        if error {
            e.status.error();
        } else {
            e.status.operator_error("lso");
        }
        if probe_fails {
            e.svc.fail("v2GetCluster", 10_000, 500);
        }
        let mut u = e.uploader();
        u.control_plane_count = control_plane_count;
        let probe = Urls::default();
        u.router_probe = Some(&probe);
        assert!(u.final_upload(&FakeClock::new(), SUMMARY_LOGS_PERIOD, SUMMARY_LOGS_WINDOW));
        assert_eq!(mg_images(&e.mg).len(), 1);
        let case = format!("{control_plane_count} {error} {probe_fails}");
        match gets {
            Some(n) => assert_eq!(e.svc.count("v2GetCluster"), n, "{case}"),
            None => assert!(e.svc.count("v2GetCluster") >= 1, "{case}: the probe ran"),
        }
        assert_eq!(
            e.svc.calls().last(),
            Some(&ServiceCall::UpdateLogsProgress(LogsState::Completed)),
            "{case}"
        );
    }
}
