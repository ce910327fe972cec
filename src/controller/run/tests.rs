//! Go's `assisted_installer_main_test.go` main-sequence checks and the end-of-install order, on the fake cluster and the
//! in-memory service. Paths that start tasks run on the real clock with every interval shrunk
//! to 10 ms (as Go's main tests shrink the install-status interval); the startup failures, which
//! start none, run on the fake clock so the 70 min limit passes at once.

use super::*;
use crate::clock::{FakeClock, SystemClock};
use crate::controller::service::testing::{MemoryService, ServiceCall};
use crate::controller::tasks::reboots::KUBECONFIG_FILE;
use crate::controller::testing::{
    abi_config_map, abi_operators_initialized, cond, record, Recorder,
};
use crate::image::Cancel;
use crate::kube::fake::FakeCluster;
use crate::kube::install_config::{INVOKER_CONFIG_MAP, INVOKER_KEY, INVOKER_NAMESPACE};
use crate::kube::{ApiError, ClusterOperator, ClusterVersion, ProxyStatus};
use crate::openshift::{INGRESS_CERT_KEY, INGRESS_CERT_NAME, INGRESS_CERT_NAMESPACE};
use crate::service::{FinalizingStage, LogsState};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

struct NoReboots;
impl RebootCounter for NoReboots {
    fn count(&self, _: &Path, _: &str) -> Result<u32> {
        Ok(0)
    }
}

/// A must-gather that writes a small tarball and counts its runs.
#[derive(Default)]
struct FakeMustGather(Mutex<Vec<Vec<String>>>);
impl MustGatherRunner for FakeMustGather {
    fn run(&self, work_dir: &Path, _: &Path, images: &[String]) -> Result<PathBuf> {
        self.0.lock().unwrap().push(images.to_vec());
        let path = work_dir.join("must-gather.tar.gz");
        std::fs::write(&path, b"mg")?;
        Ok(path)
    }
}

fn config(extra: &[(&str, &str)]) -> ControllerConfig {
    let mut vars: Vec<(String, String)> = [
        ("CLUSTER_ID", "c-1"),
        ("INVENTORY_URL", "http://127.0.0.1:9"),
        ("OPENSHIFT_VERSION", "4.12"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    vars.reverse();
    ControllerConfig::from_env(&|name: &str| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
    .unwrap()
}

struct Harness {
    k8s: Arc<FakeCluster>,
    svc: MemoryService,
    must_gather: Arc<FakeMustGather>,
    env_set: Arc<Mutex<Vec<(String, String)>>>,
    service_built: Arc<AtomicBool>,
    /// The signal token: fired by a test to stop the threads an `ExitNow` leaves running.
    signal: Cancel,
    applier: Arc<Recorder>,
    dir: tempfile::TempDir,
}

impl Harness {
    fn new(clock: Arc<dyn Clock>) -> Harness {
        Harness {
            k8s: Arc::new(FakeCluster::new()),
            svc: MemoryService::new("c-1", clock),
            must_gather: Arc::new(FakeMustGather::default()),
            env_set: Arc::default(),
            service_built: Arc::default(),
            signal: Cancel::new(),
            applier: Arc::default(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn controller(
        &self,
        config: ControllerConfig,
        clock: Arc<dyn Clock>,
        intervals: Intervals,
    ) -> Controller {
        let log_file = self.dir.path().join("controller_logs.log");
        std::fs::write(&log_file, "a log line\n").unwrap();
        let k8s: Arc<dyn ClusterApi> = self.k8s.clone();
        let svc: Arc<dyn ControllerService> = Arc::new(self.svc.clone());
        let (env_set, built) = (self.env_set.clone(), self.service_built.clone());
        Controller {
            config,
            build_cluster: Box::new(move || Ok(k8s)),
            set_env: Box::new(move |k, v| env_set.lock().unwrap().push((k.into(), v.into()))),
            build_service: Box::new(move || {
                built.store(true, Ordering::SeqCst);
                Ok(svc)
            }),
            clock,
            signal: self.signal.clone(),
            must_gather: self.must_gather.clone(),
            reboot_counter: Arc::new(NoReboots),
            router_probe: None,
            intervals,
            log_paths: LogPaths {
                log_file,
                must_gather_dir: self.dir.path().join("must-gather-logs"),
            },
            applier: self.applier.clone(),
        }
    }
}

/// The ABI post-install's ConfigMap, its two operators initialized.
fn abi_manifests(k8s: &FakeCluster) {
    abi_operators_initialized(k8s);
    abi_config_map(k8s, "assisted-installer", true);
}

fn fast() -> Intervals {
    let ms = Duration::from_millis(10);
    Intervals {
        general: ms,
        progress: ms,
        cvo_timeout: Duration::from_secs(60),
        router_ca: ms,
        install_status: ms,
        logs_upload: ms,
        summary_logs: ms,
        summary_logs_window: Duration::from_secs(5),
    }
}

fn available_cluster(k8s: &FakeCluster) {
    k8s.set_cluster_version(
        "version",
        ClusterVersion {
            conditions: vec![cond("Available", "True", "")],
            enabled_capabilities: vec!["Console".into()],
            known_capabilities: vec!["Console".into()],
            desired_version: "4.12.0".into(),
        },
    );
}

fn position(calls: &[ServiceCall], f: impl Fn(&ServiceCall) -> bool) -> usize {
    calls
        .iter()
        .position(f)
        .unwrap_or_else(|| panic!("missing call in {calls:#?}"))
}

#[test]
fn success_sends_the_event_completes_then_uploads_the_final_logs() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let h = Harness::new(clock.clone());
    available_cluster(&h.k8s);
    h.k8s.set_cluster_operator(ClusterOperator {
        name: "console".into(),
        conditions: vec![cond("Available", "True", "")],
        versions: vec![],
    });
    h.k8s.set_config_map(
        INGRESS_CERT_NAMESPACE,
        INGRESS_CERT_NAME,
        &[(INGRESS_CERT_KEY, "CA")],
    );
    h.k8s.set_proxy(ProxyStatus {
        http_proxy: "http://proxy:3128".into(),
        ..ProxyStatus::default()
    });
    h.svc.set_operators(vec![record("console", "progressing")]);
    h.svc.update_cluster(|c| c.status = "finalizing".into());
    h.svc.on_call(|call, _, cluster, _| {
        if matches!(call, ServiceCall::CompleteInstallation(_)) {
            cluster.status = "installed".into();
        }
    });
    let out = run(h.controller(config(&[]), clock, fast())).unwrap();
    assert_eq!(out, Outcome::Done { error: false });

    assert_eq!(
        *h.env_set.lock().unwrap(),
        [("HTTP_PROXY".to_string(), "http://proxy:3128".to_string())]
    );
    let events = h.k8s.events();
    assert_eq!(events.len(), 1, "the ready Event once: {events:?}");
    let olm_stage = ServiceCall::UpdateFinalizingStage(
        FinalizingStage::WaitingForOlmOperatorsCsvInitialization,
    );
    let olm_runs = h.svc.calls().iter().filter(|c| **c == olm_stage).count();
    assert_eq!(olm_runs, 1, "the OLM step ran once");

    let calls = h.svc.calls();
    let stage =
        |s: FinalizingStage| position(&calls, |c| *c == ServiceCall::UpdateFinalizingStage(s));
    let complete = position(
        &calls,
        |c| matches!(c, ServiceCall::CompleteInstallation(p) if p.is_success),
    );
    assert!(
        stage(FinalizingStage::WaitingForClusterOperators) < stage(FinalizingStage::AddingRouterCa)
    );
    assert!(stage(FinalizingStage::AddingRouterCa) < stage(FinalizingStage::Done));
    assert!(stage(FinalizingStage::Done) < complete);
    let requested = position(&calls, |c| {
        *c == ServiceCall::UpdateLogsProgress(LogsState::Requested)
    });
    let completed = position(&calls, |c| {
        *c == ServiceCall::UpdateLogsProgress(LogsState::Completed)
    });
    assert!(complete < requested && requested < completed);
    assert!(calls[requested..completed]
        .iter()
        .any(|c| matches!(c, ServiceCall::UploadControllerLogs(_))));
    assert_eq!(
        calls
            .iter()
            .filter(|c| matches!(c, ServiceCall::CompleteInstallation(_)))
            .count(),
        1
    );
    assert!(
        h.must_gather.0.lock().unwrap().is_empty(),
        "no must-gather on success"
    );
}

#[test]
fn an_error_cluster_fails_the_operator_wait_and_runs_must_gather() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let h = Harness::new(clock.clone());
    available_cluster(&h.k8s);
    // No console ClusterOperator: the console never becomes available.
    h.svc.set_operators(vec![record("console", "progressing")]);
    h.svc.update_cluster(|c| c.status = "finalizing".into());
    h.svc.on_call(|call, _, cluster, _| {
        if *call == ServiceCall::UpdateFinalizingStage(FinalizingStage::WaitingForClusterOperators)
        {
            cluster.status = "error".into();
        }
    });
    let out = run(h.controller(config(&[]), clock, fast())).unwrap();
    assert_eq!(out, Outcome::Done { error: true });
    let calls = h.svc.calls();
    let completions: Vec<_> = calls
        .iter()
        .filter_map(|c| match c {
            ServiceCall::CompleteInstallation(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(completions.len(), 1, "{completions:?}");
    assert!(!completions[0].is_success);
    assert_eq!(
        completions[0].error_info,
        "Stopped waiting for cluster operators to be available: context canceled"
    );
    assert_eq!(h.must_gather.0.lock().unwrap().len(), 1);
    assert!(calls.contains(&ServiceCall::DownloadKubeconfigNoingress));
    // Post-install's failed completion and the final upload run side by side after the
    // shutdown step cancelled the tasks: only the upload's own order is fixed.
    let requested = position(&calls, |c| {
        *c == ServiceCall::UpdateLogsProgress(LogsState::Requested)
    });
    let completed = position(&calls, |c| {
        *c == ServiceCall::UpdateLogsProgress(LogsState::Completed)
    });
    assert!(requested < completed);
}

#[test]
fn the_service_losing_the_cluster_exits_at_once_without_the_final_upload() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let h = Harness::new(clock.clone());
    // Never finalizing; the cluster is deleted once the ready Event went out (the fake
    // service injects failures per operation, from a helper thread here).
    let svc = h.svc.clone();
    let k8s = h.k8s.clone();
    let injector = std::thread::spawn(move || {
        while k8s.events().is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        svc.fail("v2GetCluster", 1000, 404);
    });
    let out = run(h.controller(config(&[]), clock, fast())).unwrap();
    injector.join().unwrap();
    let calls = h.svc.calls();
    // Like Go's os.Exit, nothing was stopped: end the threads left running (the log thread
    // then makes its final upload, after `calls` was taken).
    h.signal.cancel();
    assert_eq!(out, Outcome::ExitNow);
    assert!(!calls.contains(&ServiceCall::UpdateLogsProgress(LogsState::Requested)));
}

#[test]
fn abi_single_node_waits_for_the_cluster_version_only() {
    let clock = Arc::new(FakeClock::new());
    let h = Harness::new(clock.clone());
    h.k8s.set_config_map(
        INVOKER_NAMESPACE,
        INVOKER_CONFIG_MAP,
        &[(INVOKER_KEY, INVOKER_AGENT)],
    );
    available_cluster(&h.k8s);
    abi_manifests(&h.k8s);
    let out = run(h.controller(config(&[("CONTROL_PLANE_COUNT", "1")]), clock, fast())).unwrap();
    assert_eq!(out, Outcome::Done { error: false });
    // Nothing waits for the ABI post-install on this path.
    let started = std::time::Instant::now();
    while h.applier.kubeconfigs().len() < 2 && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        h.applier.kubeconfigs(),
        [PathBuf::from(SNO_KUBECONFIG), PathBuf::from(SNO_KUBECONFIG)]
    );
    assert!(h.k8s.events().is_empty(), "no ready Event on this path");
    assert_eq!(h.k8s.count("get_cluster_version"), 1);
    assert_eq!(h.k8s.count("list_nodes"), 0);
    assert!(h.svc.calls().is_empty(), "{:?}", h.svc.calls());
}

#[test]
fn a_failed_proxy_read_is_a_startup_error_before_the_service_client() {
    let clock = Arc::new(FakeClock::new());
    let h = Harness::new(clock.clone());
    h.k8s
        .fail_next("get_proxy", ApiError::new(500, "InternalError", "boom"));
    let err = run(h.controller(config(&[]), clock, fast())).unwrap_err();
    assert!(format!("{err:#}").contains("Proxy cluster"), "{err:#}");
    assert!(!h.service_built.load(Ordering::SeqCst));
    assert!(h.svc.calls().is_empty());
}

#[test]
fn no_cluster_within_70_minutes_is_a_startup_error() {
    let clock = Arc::new(FakeClock::new());
    let h = Harness::new(clock.clone());
    h.svc.fail("v2GetCluster", 100_000, 500);
    let err = run(h.controller(config(&[]), clock.clone(), Intervals::production())).unwrap_err();
    assert!(format!("{err:#}").contains("within 70 minutes"), "{err:#}");
    assert!(clock.elapsed() >= Duration::from_secs(70 * 60));
    assert!(h.k8s.events().is_empty());
    assert!(h.svc.operations().iter().all(|o| *o == "v2GetCluster"));
}

#[test]
fn abi_multi_node_sends_the_event_and_waits_for_the_masters() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let h = Harness::new(clock.clone());
    h.k8s.set_config_map(
        INVOKER_NAMESPACE,
        INVOKER_CONFIG_MAP,
        &[(INVOKER_KEY, INVOKER_AGENT)],
    );
    available_cluster(&h.k8s);
    for name in ["m0", "m1", "m2"] {
        h.k8s.set_node(crate::kube::Node {
            name: name.into(),
            labels: [("node-role.kubernetes.io/master".to_string(), String::new())].into(),
            ..Default::default()
        });
    }
    abi_manifests(&h.k8s);
    let out = run(h.controller(config(&[]), clock, fast())).unwrap();
    assert_eq!(out, Outcome::Done { error: false });
    assert_eq!(h.k8s.events().len(), 1);
    // No kubeconfig path on this branch: the ABI post-install applies with the notifier's
    // download (its first round runs even when the tasks are already stopped).
    let kubeconfigs = h.applier.kubeconfigs();
    assert_eq!(kubeconfigs.len(), 2, "{kubeconfigs:?}");
    assert!(kubeconfigs.iter().all(|k| k.ends_with(KUBECONFIG_FILE)));
    let calls = h.svc.calls();
    assert!(
        !calls.iter().any(|c| matches!(
            c,
            ServiceCall::CompleteInstallation(_) | ServiceCall::UpdateLogsProgress(_)
        )),
        "no post-install of `PostInstallConfigs` and no final upload for ABI: {calls:?}"
    );
}

#[test]
fn a_signal_ends_the_completion_wait_with_an_error_and_no_final_upload() {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let h = Harness::new(clock.clone());
    h.signal.cancel();
    let err = run(h.controller(config(&[]), clock, fast())).unwrap_err();
    assert_eq!(err.to_string(), STOPPED_BY_SIGNAL);
    // SetReadyState still made its one attempt (Go's poll always runs once).
    assert_eq!(h.k8s.events().len(), 1);
}

mod dry_tests;
