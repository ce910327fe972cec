//! Go's `assisted_installer_main_test.go` main-sequence checks and the end-of-install order, on
//! the fake cluster, the in-memory service and a fake clock (Go's intervals, which take no time;
//! the console/CVO cap is raised out of reach so that the threads' waits, which all move the one
//! fake clock, cannot end it before the completion wait decides).

use super::*;
use crate::clock::FakeClock;
use crate::controller::service::testing::{MemoryService, ServiceCall};
use crate::controller::service::KUBECONFIG_NOINGRESS;
use crate::controller::testing::{
    abi_config_map, abi_operators_initialized, apply_kubeconfigs, available_version, fake_oc,
    record,
};
use crate::host::commands::RecordingRunner;
use crate::kube::testing::FakeCluster;
use crate::openshift::{INVOKER_CONFIG_MAP, INVOKER_KEY, INVOKER_NAMESPACE};
use crate::service::{FinalizingStage, LogsState};

struct Harness {
    clock: Arc<FakeClock>,
    k8s: Arc<FakeCluster>,
    svc: MemoryService,
    oc: Arc<RecordingRunner>,
    /// The signal token: fired by a test to stop the threads an `ExitNow` leaves running.
    signal: Cancel,
    dir: tempfile::TempDir,
}

impl Harness {
    fn new() -> Harness {
        let clock = Arc::new(FakeClock::new());
        Harness {
            k8s: Arc::new(FakeCluster::new()),
            svc: MemoryService::new("c-1", clock.clone()),
            clock,
            oc: Arc::new(fake_oc(false, 0).0),
            signal: Cancel::new(),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// The controller over the fakes, with the required variables and `extra`.
    fn controller(&self, extra: &[(&str, &str)]) -> Controller {
        let vars: Vec<(&str, &str)> = [
            ("CLUSTER_ID", "c-1"),
            ("INVENTORY_URL", "http://127.0.0.1:9"),
            ("OPENSHIFT_VERSION", "4.12"),
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
        let env = |name: &str| {
            vars.iter()
                .rev()
                .find(|v| v.0 == name)
                .map(|v| v.1.to_string())
        };
        let log_file = self.dir.path().join("controller_logs.log");
        std::fs::write(&log_file, "a log line\n").unwrap();
        let k8s: Arc<dyn ClusterApi> = self.k8s.clone();
        let svc: Arc<dyn ControllerService> = Arc::new(self.svc.clone());
        Controller {
            config: ControllerConfig::from_env(&env).unwrap(),
            build_cluster: Box::new(move || Ok(k8s)),
            set_env: Box::new(|_, _| {}),
            build_service: Box::new(move || Ok(svc)),
            clock: self.clock.clone(),
            signal: self.signal.clone(),
            oc: self.oc.clone(),
            router_probe: None,
            cvo_timeout: Duration::from_secs(100 * 365 * 24 * 3600),
            log_file,
            must_gather_dir: self.dir.path().join("must-gather-logs"),
        }
    }

    /// The cluster of the agent-based installer with an available ClusterVersion and the ABI
    /// post-install's ConfigMap, its two operators initialized.
    fn abi(&self) {
        let invoker = [(INVOKER_KEY, INVOKER_AGENT)];
        self.k8s
            .set_config_map(INVOKER_NAMESPACE, INVOKER_CONFIG_MAP, &invoker);
        available_version(&self.k8s, "");
        abi_operators_initialized(&self.k8s);
        abi_config_map(&self.k8s, "assisted-installer", true);
    }
}

fn position(calls: &[ServiceCall], f: impl Fn(&ServiceCall) -> bool) -> usize {
    calls
        .iter()
        .position(f)
        .unwrap_or_else(|| panic!("missing call in {calls:#?}"))
}

/// Where the final upload asked for, and then completed, the logs.
fn logs_progress(calls: &[ServiceCall]) -> (usize, usize) {
    let at = |state| position(calls, |c| *c == ServiceCall::UpdateLogsProgress(state));
    (at(LogsState::Requested), at(LogsState::Completed))
}

#[test]
fn the_service_losing_the_cluster_exits_at_once_without_the_final_upload() {
    let h = Harness::new();
    // Never finalizing; the service loses the cluster at its first call after the ready Event
    // went out (from then on every call answers 404, whichever thread makes it).
    let (svc, k8s) = (h.svc.clone(), h.k8s.clone());
    h.svc.on_call(move |_, _, _, _| {
        if !k8s.events().is_empty() {
            svc.lose_cluster();
        }
    });
    let out = run(h.controller(&[])).unwrap();
    let calls = h.svc.calls();
    // Like Go's os.Exit, nothing was stopped: end the threads left running (the log thread
    // then makes its final upload, after `calls` was taken).
    h.signal.cancel();
    assert_eq!(out, Outcome::ExitNow);
    assert!(!calls.contains(&ServiceCall::UpdateLogsProgress(LogsState::Requested)));
}

#[test]
fn abi_single_node_waits_for_the_cluster_version_only() {
    let h = Harness::new();
    h.abi();
    let out = run(h.controller(&[("CONTROL_PLANE_COUNT", "1")])).unwrap();
    assert_eq!(out, Outcome::Done { error: false });
    // Nothing waits for the ABI post-install on this path: its thread may still be applying.
    // The bound only keeps a broken run from hanging; a loaded CI machine needs it generous.
    let started = std::time::Instant::now();
    while apply_kubeconfigs(&h.oc).len() < 2 && started.elapsed() < Duration::from_secs(120) {
        std::thread::yield_now();
    }
    let sno = PathBuf::from(SNO_KUBECONFIG);
    assert_eq!(apply_kubeconfigs(&h.oc), [sno.clone(), sno]);
    assert!(h.k8s.events().is_empty(), "no ready Event on this path");
    assert_eq!(h.k8s.count("get_cluster_version"), 1);
    assert_eq!(h.k8s.count("list_nodes"), 0);
    assert!(h.svc.calls().is_empty(), "{:?}", h.svc.calls());
}

#[test]
fn abi_multi_node_sends_the_event_and_waits_for_the_masters() {
    let h = Harness::new();
    h.abi();
    for name in ["m0", "m1", "m2"] {
        h.k8s.set_node(crate::kube::Node {
            name: name.into(),
            labels: [("node-role.kubernetes.io/master".to_string(), String::new())].into(),
            ..Default::default()
        });
    }
    let out = run(h.controller(&[])).unwrap();
    assert_eq!(out, Outcome::Done { error: false });
    assert_eq!(h.k8s.events().len(), 1);
    // No kubeconfig path on this branch: the ABI post-install applies with the notifier's
    // download (its first round runs even when the tasks are already stopped).
    let kubeconfigs = apply_kubeconfigs(&h.oc);
    assert_eq!(kubeconfigs.len(), 2, "{kubeconfigs:?}");
    assert!(kubeconfigs
        .iter()
        .all(|k| k.ends_with(KUBECONFIG_NOINGRESS)));
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
    let h = Harness::new();
    h.signal.cancel();
    let err = run(h.controller(&[])).unwrap_err();
    assert_eq!(err.to_string(), STOPPED_BY_SIGNAL);
    // SetReadyState still made its one attempt (Go's poll always runs once).
    assert_eq!(h.k8s.events().len(), 1);
}

mod dry_tests;
