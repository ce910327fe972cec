//! `KubeClient` (kube-rs) against the fake Kubernetes API on the test HTTP server.

mod common;

use assisted_installer::config::Role;
use assisted_installer::kube::client::KubeClient;
use assisted_installer::kube::install_config;
use assisted_installer::kube::{EventInfo, KubeApi, PodInfo};
use assisted_installer::openshift::{
    CONTROLLER_NAMESPACE, CONTROLLER_READY_EVENT, CURRENT_CONFIG_ANNOTATION,
    DESIRED_CONFIG_ANNOTATION, UNINITIALIZED_TAINT,
};
use common::fake_kube::{kubeconfig, FakeKube};
use common::http_server::TestServer;
use std::collections::BTreeMap;
use std::path::Path;

struct Setup {
    fake: FakeKube,
    server: TestServer,
    client: KubeClient,
    _dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let fake = FakeKube::new();
    let server = TestServer::with_app(fake.clone());
    let dir = tempfile::tempdir().unwrap();
    let client = KubeClient::from_kubeconfig(&kubeconfig(dir.path(), &server.base_url())).unwrap();
    Setup {
        fake,
        server,
        client,
        _dir: dir,
    }
}

/// The requests the server got, as `METHOD /path` or `METHOD /path?query` (decoded).
fn calls(server: &TestServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .map(|r| {
            let query: Vec<String> = r
                .query_pairs()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            match query.is_empty() {
                true => format!("{} {}", r.method, r.path),
                false => format!("{} {}?{}", r.method, r.path, query.join("&")),
            }
        })
        .collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn count(calls: &[String], prefix: &str) -> usize {
    calls.iter().filter(|c| c.starts_with(prefix)).count()
}

#[test]
fn client_reports_its_server() {
    let s = setup();
    assert_eq!(s.client.server().trim_end_matches('/'), s.server.base_url());
}

#[test]
fn nodes_by_role_with_readiness_ips_annotations_and_taints() {
    let s = setup();
    s.fake.set_node(
        "master-0",
        "master",
        true,
        "192.168.126.10",
        map(&[
            (CURRENT_CONFIG_ANNOTATION, "rendered-master-a"),
            (DESIRED_CONFIG_ANNOTATION, "rendered-master-a"),
        ]),
    );
    s.fake.set_node(
        "master-1",
        "master",
        false,
        "192.168.126.11",
        BTreeMap::new(),
    );
    s.fake
        .add_node_taint("master-1", UNINITIALIZED_TAINT, "NoSchedule");
    s.fake
        .add_node_taint("master-1", "node.kubernetes.io/not-ready", "NoExecute");
    s.fake
        .set_node("worker-0", "worker", true, "", BTreeMap::new());

    let masters = s.client.list_nodes(&Role::Master).unwrap();
    assert_eq!(masters.len(), 2);
    let m0 = &masters[0];
    assert_eq!(m0.name, "master-0");
    assert!(m0.ready);
    assert_eq!(m0.internal_ips, ["192.168.126.10"]);
    assert_eq!(
        m0.annotations,
        BTreeMap::from([
            (
                CURRENT_CONFIG_ANNOTATION.to_string(),
                "rendered-master-a".to_string()
            ),
            (
                DESIRED_CONFIG_ANNOTATION.to_string(),
                "rendered-master-a".to_string()
            ),
        ])
    );
    assert!(m0.taints.is_empty());
    let m1 = &masters[1];
    assert_eq!(m1.name, "master-1");
    assert!(!m1.ready);
    assert_eq!(m1.internal_ips, ["192.168.126.11"]);
    assert!(m1.annotations.is_empty());
    assert_eq!(
        m1.taints,
        [UNINITIALIZED_TAINT, "node.kubernetes.io/not-ready"]
    );

    let workers = s.client.list_nodes(&Role::Worker).unwrap();
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0].name, "worker-0");
    assert!(workers[0].internal_ips.is_empty());
    assert!(s.client.list_nodes(&Role::Arbiter).unwrap().is_empty());

    let calls = calls(&s.server);
    for role in ["master", "worker", "arbiter"] {
        let want = format!("GET /api/v1/nodes?labelSelector=node-role.kubernetes.io/{role}");
        assert_eq!(count(&calls, &want), 1, "{calls:?}");
    }
}

#[test]
fn nodes_become_ready_between_polls() {
    let s = setup();
    s.fake
        .set_node("master-0", "master", false, "10.0.0.10", BTreeMap::new());
    s.fake
        .set_node("master-1", "master", false, "10.0.0.11", BTreeMap::new());
    let ready = |s: &Setup| -> Vec<String> {
        s.client
            .list_nodes(&Role::Master)
            .unwrap()
            .into_iter()
            .filter(|n| n.ready)
            .map(|n| n.name)
            .collect()
    };
    assert!(ready(&s).is_empty());
    s.fake.set_node_ready("master-0", true);
    assert_eq!(ready(&s), ["master-0"]);
    s.fake.set_node_ready("master-1", true);
    s.fake.add_node_role("master-1", "worker");
    assert_eq!(ready(&s), ["master-0", "master-1"]);
    assert_eq!(
        s.client.list_nodes(&Role::Worker).unwrap()[0].name,
        "master-1"
    );
    s.fake.set_node_annotation(
        "master-1",
        DESIRED_CONFIG_ANNOTATION,
        Some("rendered-master-b"),
    );
    let m1 = &s.client.list_nodes(&Role::Master).unwrap()[1];
    assert_eq!(
        m1.annotations[DESIRED_CONFIG_ANNOTATION],
        "rendered-master-b"
    );
}

#[test]
fn events_of_a_namespace() {
    let s = setup();
    assert!(s
        .client
        .list_events(CONTROLLER_NAMESPACE)
        .unwrap()
        .is_empty());
    s.fake.add_event_with_message(
        CONTROLLER_NAMESPACE,
        "controller-started",
        "Started",
        "pod started",
    );
    s.fake.add_event("default", "unrelated", "Other");
    s.fake.add_event(
        CONTROLLER_NAMESPACE,
        CONTROLLER_READY_EVENT,
        "AssistedControllerIsReady",
    );
    let events = s.client.list_events(CONTROLLER_NAMESPACE).unwrap();
    assert_eq!(
        events,
        [
            EventInfo {
                name: "controller-started".into(),
                reason: "Started".into(),
                message: "pod started".into(),
            },
            EventInfo {
                name: CONTROLLER_READY_EVENT.into(),
                reason: "AssistedControllerIsReady".into(),
                message: String::new(),
            },
        ]
    );
    assert_eq!(
        count(
            &calls(&s.server),
            "GET /api/v1/namespaces/assisted-installer/events"
        ),
        2
    );
}

#[test]
fn config_map_present_missing_and_empty() {
    let s = setup();
    assert_eq!(
        s.client
            .get_config_map("openshift-config", "openshift-install-manifests")
            .unwrap(),
        None
    );
    s.fake.set_config_map(
        "openshift-config",
        "openshift-install-manifests",
        map(&[("invoker", "agent-installer")]),
    );
    let data = s
        .client
        .get_config_map("openshift-config", "openshift-install-manifests")
        .unwrap();
    assert_eq!(
        install_config::invoker(data.as_ref()),
        install_config::INVOKER_AGENT
    );
    s.fake.set_config_map("ns", "empty", BTreeMap::new());
    assert_eq!(
        s.client.get_config_map("ns", "empty").unwrap(),
        Some(BTreeMap::new())
    );
    assert!(calls(&s.server).contains(&"GET /api/v1/namespaces/ns/configmaps/empty".to_string()));
}

#[test]
fn install_config_replicas_through_the_api() {
    let s = setup();
    let yaml = "apiVersion: v1\ncontrolPlane:\n  name: master\n  replicas: 2\narbiter:\n  name: arbiter\n  replicas: 1\ncompute:\n- name: worker\n  replicas: 0\n";
    s.fake.set_config_map(
        install_config::INSTALL_CONFIG_NAMESPACE,
        install_config::INSTALL_CONFIG_NAME,
        map(&[(install_config::INSTALL_CONFIG_KEY, yaml)]),
    );
    let data = s
        .client
        .get_config_map(
            install_config::INSTALL_CONFIG_NAMESPACE,
            install_config::INSTALL_CONFIG_NAME,
        )
        .unwrap()
        .unwrap();
    let replicas = install_config::replicas(&data[install_config::INSTALL_CONFIG_KEY]).unwrap();
    assert_eq!(replicas.control_plane, Some(2));
    assert_eq!(replicas.arbiter, Some(1));
    assert_eq!(install_config::needed_ready_masters(2), 1);
}

#[test]
fn machine_config_present_and_missing() {
    let s = setup();
    assert!(!s.client.machine_config_exists("rendered-master-a").unwrap());
    s.fake.add_machine_config("rendered-master-a");
    assert!(s.client.machine_config_exists("rendered-master-a").unwrap());
    assert!(!s.client.machine_config_exists("rendered-master-b").unwrap());
    assert_eq!(
        count(
            &calls(&s.server),
            "GET /apis/machineconfiguration.openshift.io/v1/machineconfigs/rendered-master-a"
        ),
        2
    );
}

#[test]
fn taint_removal_keeps_other_taints() {
    let s = setup();
    s.fake
        .set_node("master-1", "master", false, "10.0.0.11", BTreeMap::new());
    s.fake
        .add_node_taint("master-1", "node.kubernetes.io/not-ready", "NoSchedule");
    s.fake
        .add_node_taint("master-1", UNINITIALIZED_TAINT, "NoSchedule");
    s.fake
        .add_node_taint("master-1", "node.kubernetes.io/unreachable", "NoExecute");
    s.client
        .remove_node_taint("master-1", UNINITIALIZED_TAINT)
        .unwrap();
    assert_eq!(
        s.fake.node_taints("master-1"),
        [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable"
        ]
    );
    // Effects survive the round trip.
    let node = s.fake.node_json("master-1").unwrap();
    assert_eq!(node["spec"]["taints"][1]["effect"], "NoExecute");
    assert_eq!(
        s.client.list_nodes(&Role::Master).unwrap()[0].taints.len(),
        2
    );
    let calls = calls(&s.server);
    assert_eq!(count(&calls, "GET /api/v1/nodes/master-1"), 1, "{calls:?}");
    assert_eq!(
        count(&calls, "PATCH /api/v1/nodes/master-1"),
        1,
        "{calls:?}"
    );
}

#[test]
fn taint_removal_of_the_last_taint() {
    let s = setup();
    s.fake
        .set_node("master-1", "master", false, "10.0.0.11", BTreeMap::new());
    s.fake
        .add_node_taint("master-1", UNINITIALIZED_TAINT, "NoSchedule");
    s.client
        .remove_node_taint("master-1", UNINITIALIZED_TAINT)
        .unwrap();
    assert!(s.fake.node_taints("master-1").is_empty());
}

#[test]
fn taint_removal_is_a_noop_when_absent() {
    let s = setup();
    s.fake
        .set_node("master-1", "master", false, "10.0.0.11", BTreeMap::new());
    s.fake
        .add_node_taint("master-1", "node.kubernetes.io/not-ready", "NoSchedule");
    s.client
        .remove_node_taint("master-1", UNINITIALIZED_TAINT)
        .unwrap();
    s.fake
        .set_node("master-2", "master", false, "10.0.0.12", BTreeMap::new());
    s.client
        .remove_node_taint("master-2", UNINITIALIZED_TAINT)
        .unwrap();
    assert_eq!(
        s.fake.node_taints("master-1"),
        ["node.kubernetes.io/not-ready"]
    );
    assert_eq!(count(&calls(&s.server), "PATCH"), 0);
}

#[test]
fn taint_removal_retries_on_conflict() {
    let s = setup();
    s.fake
        .set_node("master-1", "master", false, "10.0.0.11", BTreeMap::new());
    s.fake
        .add_node_taint("master-1", UNINITIALIZED_TAINT, "NoSchedule");
    s.fake.fail_next("PATCH", "/api/v1/nodes/master-1", 409);
    s.client
        .remove_node_taint("master-1", UNINITIALIZED_TAINT)
        .unwrap();
    assert!(s.fake.node_taints("master-1").is_empty());
    let calls = calls(&s.server);
    assert_eq!(count(&calls, "GET /api/v1/nodes/master-1"), 2, "{calls:?}");
    assert_eq!(
        count(&calls, "PATCH /api/v1/nodes/master-1"),
        2,
        "{calls:?}"
    );
}

#[test]
fn taint_removal_gives_up_after_repeated_conflicts() {
    let s = setup();
    s.fake
        .set_node("master-1", "master", false, "10.0.0.11", BTreeMap::new());
    s.fake
        .add_node_taint("master-1", UNINITIALIZED_TAINT, "NoSchedule");
    for _ in 0..5 {
        s.fake.fail_next("PATCH", "/api/v1/nodes/master-1", 409);
    }
    let err = s
        .client
        .remove_node_taint("master-1", UNINITIALIZED_TAINT)
        .unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("master-1") && msg.contains(UNINITIALIZED_TAINT),
        "{msg}"
    );
    assert_eq!(s.fake.node_taints("master-1"), [UNINITIALIZED_TAINT]);
}

#[test]
fn taint_removal_of_a_missing_node_fails() {
    let s = setup();
    let err = s
        .client
        .remove_node_taint("ghost", UNINITIALIZED_TAINT)
        .unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("reading node ghost"), "{msg}");
}

#[test]
fn pods_by_label_with_their_phase() {
    let s = setup();
    let job = [("job-name", "assisted-installer-controller")];
    s.fake.set_pod(
        CONTROLLER_NAMESPACE,
        "assisted-installer-controller-a",
        &job,
        "Running",
    );
    s.fake.set_pod(
        CONTROLLER_NAMESPACE,
        "other",
        &[("app", "other")],
        "Pending",
    );
    s.fake.set_pod(
        "default",
        "assisted-installer-controller-b",
        &job,
        "Running",
    );
    let pods = s
        .client
        .list_pods(
            CONTROLLER_NAMESPACE,
            "job-name=assisted-installer-controller",
        )
        .unwrap();
    assert_eq!(
        pods,
        [PodInfo {
            name: "assisted-installer-controller-a".into(),
            phase: "Running".into()
        }]
    );
    assert!(calls(&s.server).contains(
        &"GET /api/v1/namespaces/assisted-installer/pods?labelSelector=job-name=assisted-installer-controller"
            .to_string()
    ));
    assert!(s
        .client
        .list_pods(CONTROLLER_NAMESPACE, "job-name=none")
        .unwrap()
        .is_empty());
}

#[test]
fn pod_logs_with_and_without_since_seconds() {
    let s = setup();
    let pod = "assisted-installer-controller-a";
    s.fake.set_pod(CONTROLLER_NAMESPACE, pod, &[], "Running");
    s.fake
        .set_pod_log(CONTROLLER_NAMESPACE, pod, "line 1\nline 2\n");
    let log = s
        .client
        .pod_logs(CONTROLLER_NAMESPACE, pod, Some(3600))
        .unwrap();
    assert_eq!(log, "line 1\nline 2\n");
    assert_eq!(
        s.client.pod_logs(CONTROLLER_NAMESPACE, pod, None).unwrap(),
        log
    );
    assert_eq!(
        s.fake.log_reads(),
        [
            (
                CONTROLLER_NAMESPACE.to_string(),
                pod.to_string(),
                Some(3600)
            ),
            (CONTROLLER_NAMESPACE.to_string(), pod.to_string(), None),
        ]
    );
    let msg = format!(
        "{:#}",
        s.client
            .pod_logs(CONTROLLER_NAMESPACE, "gone", None)
            .unwrap_err()
    );
    assert!(
        msg.starts_with("reading the log of pod assisted-installer/gone: "),
        "{msg}"
    );
    s.fake
        .fail_next("GET", "/api/v1/namespaces/assisted-installer/pods", 500);
    let msg = format!(
        "{:#}",
        s.client
            .list_pods(CONTROLLER_NAMESPACE, "job-name=x")
            .unwrap_err()
    );
    assert!(
        msg.starts_with("listing pods job-name=x in namespace assisted-installer: "),
        "{msg}"
    );
}

#[test]
fn errors_name_the_object() {
    let s = setup();
    s.fake.fail_next("GET", "/api/v1/nodes", 500);
    let msg = format!("{:#}", s.client.list_nodes(&Role::Master).unwrap_err());
    assert!(msg.starts_with("listing nodes with role master: "), "{msg}");
    assert!(msg.contains("injected failure"), "{msg}");

    s.fake
        .fail_next("GET", "/api/v1/namespaces/assisted-installer/events", 500);
    let msg = format!(
        "{:#}",
        s.client.list_events(CONTROLLER_NAMESPACE).unwrap_err()
    );
    assert!(
        msg.starts_with("listing events in namespace assisted-installer: "),
        "{msg}"
    );

    s.fake
        .fail_next("GET", "/api/v1/namespaces/kube-system/configmaps", 500);
    let msg = format!(
        "{:#}",
        s.client
            .get_config_map("kube-system", "cluster-config-v1")
            .unwrap_err()
    );
    assert!(
        msg.starts_with("reading ConfigMap kube-system/cluster-config-v1: "),
        "{msg}"
    );

    s.fake
        .fail_next("GET", "/apis/machineconfiguration.openshift.io", 500);
    let msg = format!("{:#}", s.client.machine_config_exists("mc").unwrap_err());
    assert!(msg.starts_with("reading MachineConfig mc: "), "{msg}");

    s.fake
        .set_node("n", "master", true, "10.0.0.1", BTreeMap::new());
    s.fake.add_node_taint("n", "t", "NoSchedule");
    s.fake.fail_next("PATCH", "/api/v1/nodes/n", 500);
    let msg = format!("{:#}", s.client.remove_node_taint("n", "t").unwrap_err());
    assert!(
        msg.starts_with("removing taint t from node n: patching the taints of node n: "),
        "{msg}"
    );

    // The client keeps working after errors.
    assert_eq!(s.client.list_nodes(&Role::Master).unwrap().len(), 1);
}

#[test]
fn unreachable_server_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let path = {
        let server = TestServer::with_app(FakeKube::new());
        kubeconfig(dir.path(), &server.base_url())
    };
    // The fake is gone: connections to its port are refused.
    let client = KubeClient::from_kubeconfig(&path).unwrap();
    let msg = format!("{:#}", client.list_nodes(&Role::Master).unwrap_err());
    assert!(msg.starts_with("listing nodes with role master: "), "{msg}");
}

#[test]
fn the_client_refuses_to_run_inside_a_runtime() {
    let s = setup();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let msg =
        rt.block_on(async { format!("{:#}", s.client.list_nodes(&Role::Master).unwrap_err()) });
    assert!(msg.contains("inside an async runtime"), "{msg}");
    assert!(msg.starts_with("listing nodes with role master"), "{msg}");
    let path = kubeconfig(s._dir.path(), &s.server.base_url());
    let msg =
        rt.block_on(async { format!("{:#}", KubeClient::from_kubeconfig(&path).unwrap_err()) });
    assert!(msg.contains("inside an async runtime"), "{msg}");
    // Still usable from a plain thread afterwards.
    assert!(s.client.list_nodes(&Role::Master).unwrap().is_empty());
}

#[test]
fn the_client_can_be_shared_between_threads() {
    let s = setup();
    s.fake
        .set_node("master-0", "master", true, "10.0.0.10", BTreeMap::new());
    let client = std::sync::Arc::new(s.client);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let client = client.clone();
            std::thread::spawn(move || {
                for _ in 0..5 {
                    assert_eq!(client.list_nodes(&Role::Master).unwrap().len(), 1);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(count(&calls(&s.server), "GET /api/v1/nodes"), 20);
}

#[test]
fn missing_kubeconfig_names_the_file() {
    let msg = format!(
        "{:#}",
        KubeClient::from_kubeconfig(Path::new("/nonexistent/kubeconfig")).unwrap_err()
    );
    assert!(msg.contains("/nonexistent/kubeconfig"), "{msg}");
}

#[test]
fn invalid_kubeconfig_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, "clusters: [unclosed").unwrap();
    let msg = format!("{:#}", KubeClient::from_kubeconfig(&path).unwrap_err());
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

// A throwaway CA (EC P-256) and an admin client certificate with an RSA key in PKCS#1 form, as in
// the kubeconfig bootkube writes. Test-only material, made once with the openssl CLI.
const CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBwzCCAWmgAwIBAgIUAZMsuECIK8ooWIsDsVouDo8vcTswCgYIKoZIzj0EAwIw
NjESMBAGA1UECwwJb3BlbnNoaWZ0MSAwHgYDVQQDDBdhZG1pbi1rdWJlY29uZmln
LXNpZ25lcjAgFw0yNjExMjEyMDA0MjFaGA8yMTI2MTAyODIwMDQyMVowNjESMBAG
A1UECwwJb3BlbnNoaWZ0MSAwHgYDVQQDDBdhZG1pbi1rdWJlY29uZmlnLXNpZ25l
cjBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABAYHwMSRJMtcGbb3e0cgf9JQpcf3
STCRNzXXgdXcBowYaSGaR5Yhk4O4P62/83iihN7kL9d3X+O7TI5wvnXEuW6jUzBR
MB0GA1UdDgQWBBQWIr43R+8vbI+AiNHMuFBQHW5IBjAfBgNVHSMEGDAWgBQWIr43
R+8vbI+AiNHMuFBQHW5IBjAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gA
MEUCIQDGenzPsQEAmiW4lrs+Nqzkp6bfqYsme1YvvBpmD4stJgIgEIhHjjhQPH43
+m4BdGoxPCVD3rpAEKFkLBm2F4j4usw=
-----END CERTIFICATE-----
";

const CLIENT_CERT_PEM: &str = "-----BEGIN CERTIFICATE-----
MIICqzCCAlCgAwIBAgIUJp3WpuYTNcqYhxn8nTLxhMxCDnswCgYIKoZIzj0EAwIw
NjESMBAGA1UECwwJb3BlbnNoaWZ0MSAwHgYDVQQDDBdhZG1pbi1rdWJlY29uZmln
LXNpZ25lcjAgFw0yNjExMjEyMDE1NDRaGA8yMTI2MTAyODIwMTU0NFowMDEXMBUG
A1UECgwOc3lzdGVtOm1hc3RlcnMxFTATBgNVBAMMDHN5c3RlbTphZG1pbjCCASIw
DQYJKoZIhvcNAQEBBQADggEPADCCAQoCggEBAIrEcugUzoCR/GQ4cOfgcqrfYLaw
I0OanW7DD/Jqr0pt7HXzflPKNdGf3Mt09OqlhKHyDTmPzajIV3I+qxDr4zJUL+Ci
l1nE+2CJNVtKjFvdW/sbc3vY7bJ76MXcFrpouePylkz6oQtt0dteME6EyGk4y496
BPN3Pu5sMqXTUdQ0Qg7Z4p3NS4p+dq4Ke1P58sHgryypcXHrHDFJ1QJx5hpCMNuN
Fwh3j0SZfv5tpgtY6vbu2VtYr4KhIBb8jS+q4yKEeShZsNvqwOz8QWA/zhq8F0XJ
2humHTqmHWE3FD3aduEPiSBuPFrgPndzW6Db/I3mPox2bd/p1GfOYkUokCcCAwEA
AaN1MHMwDAYDVR0TAQH/BAIwADAOBgNVHQ8BAf8EBAMCBaAwEwYDVR0lBAwwCgYI
KwYBBQUHAwIwHQYDVR0OBBYEFLtimfJTii1ayEmpYn3DtyroVD6EMB8GA1UdIwQY
MBaAFBYivjdH7y9sj4CI0cy4UFAdbkgGMAoGCCqGSM49BAMCA0kAMEYCIQDnc2xJ
7JcXMmv/KejWxb/UTujEAaCbyLryZ9o+h+NOAwIhAKyo4WFRJTFX8yxBuXwwFc3H
dYbB2dZa8nTmYEx/Tywt
-----END CERTIFICATE-----
";

const CLIENT_KEY_PEM: &str = "-----BEGIN RSA PRIVATE KEY-----
MIIEpAIBAAKCAQEAisRy6BTOgJH8ZDhw5+Byqt9gtrAjQ5qdbsMP8mqvSm3sdfN+
U8o10Z/cy3T06qWEofINOY/NqMhXcj6rEOvjMlQv4KKXWcT7YIk1W0qMW91b+xtz
e9jtsnvoxdwWumi54/KWTPqhC23R214wToTIaTjLj3oE83c+7mwypdNR1DRCDtni
nc1Lin52rgp7U/nyweCvLKlxcescMUnVAnHmGkIw240XCHePRJl+/m2mC1jq9u7Z
W1ivgqEgFvyNL6rjIoR5KFmw2+rA7PxBYD/OGrwXRcnaG6YdOqYdYTcUPdp24Q+J
IG48WuA+d3NboNv8jeY+jHZt3+nUZ85iRSiQJwIDAQABAoIBAAMI93tdNnf5s1NV
QH9+xAfYbH+Ery23fRcMFQocnsFVjp7ZbI2ppVniUaM6f8WWDFECcJshvPLfkMXe
R/j4oVIYbiMSPxwj2wdClfEqZqtkpYF2hwybS3vL6/1DqlSLl3NUt9qliyNPwmUF
i3MfPEDMtXFXYT5Xev/hlRO3TvgmKPceFijDDK12+Uof0gmQoMWzikqOS06vGqP/
+MVghETE+xQXN+9K7r8sXkz92bolIc+1is5NWSKi8QMaw3PiHxRYG7mNWdOZEtEM
2UEPYub5hAxZCdkOuC6/LejQNXAm+9zaPPii0O5Mk66esl+hV0xxOMxUOR5iArnO
3o7UcwECgYEAwb+GubBacTpMoGZh1EdxYpxmgApOcvBhwxlufFz8IfAxHFWLntO/
+qLEa0VM6emNMHtT1hpI5+gwDCmLYzjirj6WPWTVcdzBJoY8EuiGyoiCevmJei/h
ZvTQZZ0ViYTWl1uQcXZi+Kv8+pDkVOHdiJ3dsmCpbG85TDL15MKRLKcCgYEAt1qP
DTQpdrmUQ2c5waJEdxnLqRU9G4lUc0k+q8tFhdmtouenmrY1Nqc/C8Zm90ZFqN0q
9wBL3SPSSjAS7QXaFxMkA2vT/rxgPWW6+1he3MJhar1kGh0/3kN/2zKyUKXN38WW
PVzO6nTuW9TrmedvCtUtF4HdVMwO2Mc/9gzIcIECgYEApcN+ugo3Jx7RBn7x/lPt
n4febnfi7JXbnrd4fvBzS3ocGnjaTtYuL3rpADo3dv26LZume8zbSYau7QjyV78I
ujmUAwztTVCo9JPue+Lzx/6JXDt5MtAaUiLs1bNTBOhhTPgrGdhHDyje9WXX5QOl
rUgbsIzhB4QViqsjFEifOosCgYAGh6UclUT8w3MyS1TVPpAtpa+JIAaDGor1aCBh
QeYB9FSovpNLgT236pDmPHSiTdBhSS8kiNAq2gG9PqUN5+1ycO4RaR+trMvIo/za
wrTuK8YIZSJRg8Uoh0LgbZfII3+HfqPxH4MG+o8amiSh4Iol2p22fpuBT5sfwUjX
3HCvAQKBgQCdWu6K7Aa6Gjqw1u+cezY88zQbFVZe3mJDiAHrN9TMaIXAEy5MD+M0
BMFeqsc5BK/feoop4/5iEv1MnbWXrdyTTodtw8mcmaro+Lkm/hDDZRlCCR6Q76+7
T04qttVjirGoYkwQ33VQY2mq1X4T4CB0UcUOGNjA9TnPRr/5zDB17g==
-----END RSA PRIVATE KEY-----
";

/// Standard base64 with padding (the kubeconfig's `*-data` fields).
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn bootkube_like_kubeconfig(dir: &Path, ca: &str, cert: &str, key: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "clusters:
- cluster:
    certificate-authority-data: {}
    server: https://api-int.test-cluster.example.com:6443
  name: test-cluster
contexts:
- context:
    cluster: test-cluster
    user: admin
  name: admin
current-context: admin
preferences: {{}}
users:
- name: admin
  user:
    client-certificate-data: {}
    client-key-data: {}
",
        base64(ca.as_bytes()),
        base64(cert.as_bytes()),
        base64(key.as_bytes()),
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn base64_encoding() {
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"foobar"), "Zm9vYmFy");
}

#[test]
fn kubeconfig_with_certificate_data_parses() {
    let dir = tempfile::tempdir().unwrap();
    let path = bootkube_like_kubeconfig(dir.path(), CA_PEM, CLIENT_CERT_PEM, CLIENT_KEY_PEM);
    let client = KubeClient::from_kubeconfig(&path).unwrap();
    assert_eq!(
        client.server().trim_end_matches('/'),
        "https://api-int.test-cluster.example.com:6443"
    );
}

#[test]
fn kubeconfig_with_a_broken_key_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let broken_key = CLIENT_KEY_PEM
        .replace("MIIEpAIBAAKCAQEA", "MIIEpAIBAAKCAQEB")
        .replace('Q', "x");
    let path = bootkube_like_kubeconfig(dir.path(), CA_PEM, CLIENT_CERT_PEM, &broken_key);
    assert!(KubeClient::from_kubeconfig(&path).is_err());
    let path = bootkube_like_kubeconfig(
        dir.path(),
        "not a certificate",
        CLIENT_CERT_PEM,
        CLIENT_KEY_PEM,
    );
    assert!(KubeClient::from_kubeconfig(&path).is_err());
}

#[test]
fn connections_closed_by_the_server_between_calls() {
    let s = setup();
    s.fake
        .set_node("master-0", "master", true, "10.0.0.10", BTreeMap::new());
    s.fake
        .add_node_taint("master-0", UNINITIALIZED_TAINT, "NoSchedule");
    s.fake.drop_connections_after_response(true);
    for _ in 0..3 {
        assert_eq!(s.client.list_nodes(&Role::Master).unwrap().len(), 1);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(s
            .client
            .list_events(CONTROLLER_NAMESPACE)
            .unwrap()
            .is_empty());
        assert!(!s.client.machine_config_exists("x").unwrap());
        assert_eq!(s.client.get_config_map("a", "b").unwrap(), None);
    }
    s.client
        .remove_node_taint("master-0", UNINITIALIZED_TAINT)
        .unwrap();
    assert!(s.fake.node_taints("master-0").is_empty());
}
