//! The controller end to end: `assisted-installer controller` run as a process, from the Job's
//! start to `complete-installation` and its exit, against the fake assisted-service and a fake
//! Kubernetes API over HTTPS reached as from a pod (`KUBERNETES_SERVICE_HOST`/`_PORT`, the
//! service account's token and CA in a directory), with a fake `oc` on `PATH`.
//!
//! The cluster: three masters (one was the bootstrap) Ready and at `Rebooting`/`Configuring`, a
//! worker whose node is not there yet but whose Ignition request is in the machine-config-server
//! log, a pending CSR, a BareMetalHost with its status in an annotation and a worker Machine, a
//! Proxy, and the operators. The test plays the service's part: `finalizing` once the hosts are
//! done, `installed` once the controller sent `complete-installation`, and the worker's node
//! joins once the controller reported it `Configuring`.
//!
//! The intervals are Go's (the completion wait first sleeps one minute): the test takes a bit
//! over a minute. A failed install (its report, must-gather, the summary upload) is the
//! completion and log tasks' unit tests, must-gather's commands included.

mod common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assisted_installer::kube::rbac::{allowed, call_of_http};
use assisted_installer::service::LogsType;
use common::fake_kube::FakeApiServer as FakeCluster;
use common::fake_service::{host_json, FakeService};
use common::http_server::TestServer;
use common::tls_server::Pki;
use common::untar_gz;
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const CLUSTER: &str = "3f8e9d2c-1b4a-4c5d-8e6f-7a8b9c0d1e2f";
const IE: &str = "6b1f2e0a-8d7c-4c1e-9a51-3f0d9c2b7e11";
const SA_TOKEN: &str = "sa-token-for-the-controller";
/// (name, role, initial stage) of host `i`, whose id is [`host_id`] and IP [`host_ip`].
const HOSTS: [(&str, &str, &str); 4] = [
    ("master-0", "bootstrap", "Configuring"),
    ("master-1", "master", "Rebooting"),
    ("master-2", "master", "Rebooting"),
    ("worker-0", "worker", "Rebooting"),
];

fn host_id(i: usize) -> String {
    format!("0b5a7c3e-2f4d-4e8a-9b1c-5d6e7f8a9b0{i}")
}

fn host_ip(i: usize) -> String {
    format!("192.168.111.2{i}")
}
const WORKER: usize = 3;
const WORKER_LABELS: &str = r#"{"example.com/rack":"r1"}"#;
const INGRESS_CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB-ingress\n-----END CERTIFICATE-----\n";
const BMH_STATUS: &str = r#"{"operationalStatus":"OK","provisioning":{"state":"externally provisioned"},"poweredOn":true}"#;

/// A fake `oc`: records each call (with the proxy variable it sees), answers `debug node` with
/// two reboots, and makes a must-gather directory for `adm must-gather`.
const FAKE_OC: &str = r#"#!/bin/bash
echo "HTTP_PROXY=${HTTP_PROXY-unset} oc $*" >> "$FAKE_OC_LOG"
case " $* " in
  *" debug node/"*)
    printf 'reboot   system boot  5.14.0 Mon Nov 23 10:00   still running\n'
    printf 'reboot   system boot  5.14.0 Mon Nov 23 09:40 - 09:58  (00:18)\n\n'
    printf 'wtmp begins Mon Nov 23 09:00:00 2026\n' ;;
  *" adm must-gather"*)
    mkdir -p must-gather.local.4242/quay-io-must-gather
    echo "gathered" > must-gather.local.4242/quay-io-must-gather/timestamp ;;
esac
"#;

fn node(name: &str, ip: &str, role: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {format!("node-role.kubernetes.io/{role}"): ""}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
        },
    })
}

fn config_map(namespace: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": namespace}, "data": data})
}

/// The cluster as the controller finds it when its Job starts.
fn cluster() -> FakeCluster {
    let k = FakeCluster::new(SA_TOKEN);
    k.put(
        "/apis/config.openshift.io/v1/proxies",
        json!({"metadata": {"name": "cluster"}, "spec": {},
               "status": {"httpProxy": "http://127.0.0.1:9", "noProxy": "127.0.0.1,localhost"}}),
    );
    k.put(
        "/api/v1/namespaces/kube-system/configmaps",
        config_map(
            "kube-system",
            "cluster-config-v1",
            json!({"install-config": "apiVersion: v1\nplatform:\n  baremetal: {}\nnetworking:\n  serviceNetwork:\n  - 172.30.0.0/16\n"}),
        ),
    );
    k.put(
        "/api/v1/namespaces/openshift-dns/services",
        json!({"metadata": {"name": "dns-default", "namespace": "openshift-dns"},
               "spec": {"clusterIP": "172.30.0.10"}}),
    );
    for (i, (name, role, _)) in HOSTS[..WORKER].iter().enumerate() {
        let role = if *role == "bootstrap" { "master" } else { role };
        k.put("/api/v1/nodes", node(name, &host_ip(i), role));
    }
    k.put(
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
        json!({"metadata": {"name": "csr-worker-0"},
               "spec": {"username": "system:node:worker-0", "request": "LS0t"}, "status": {}}),
    );
    let mcs = "/api/v1/namespaces/openshift-machine-config-operator/pods";
    k.put(
        mcs,
        json!({"metadata": {"name": "machine-config-server-abcde",
                            "namespace": "openshift-machine-config-operator",
                            "labels": {"k8s-app": "machine-config-server"}},
               "status": {"phase": "Running"}}),
    );
    k.set_pod_log(
        &format!("{mcs}/machine-config-server-abcde"),
        "I1123 10:00:00.000000       1 api.go:99] Pool worker requested by address:\"192.168.111.23:40548\" User-Agent:\"Ignition/2.14.0\" Accept-Header: \"application/vnd.coreos.ignition+json;version=3.4.0\"\n",
    );
    k.put(
        "/apis/config.openshift.io/v1/clusterversions",
        json!({"metadata": {"name": "version"},
               "status": {"capabilities": {"enabledCapabilities": ["Console"], "knownCapabilities": ["Console"]},
                          "desired": {"version": "4.18.0"},
                          "conditions": [{"type": "Available", "status": "True", "message": "Done applying 4.18.0"}]}}),
    );
    k.put(
        "/apis/config.openshift.io/v1/clusteroperators",
        json!({"metadata": {"name": "console"},
               "status": {"conditions": [{"type": "Available", "status": "True", "message": "All is well"}],
                          "versions": [{"name": "operator", "version": "4.18.0"}]}}),
    );
    k.put(
        "/api/v1/namespaces/openshift-config-managed/configmaps",
        config_map(
            "openshift-config-managed",
            "default-ingress-cert",
            json!({"ca-bundle.crt": INGRESS_CA}),
        ),
    );
    k.put(
        "/apis/machineconfiguration.openshift.io/v1/machineconfigpools",
        json!({"metadata": {"name": "worker"}, "spec": {"paused": false}}),
    );
    k.put(
        "/apis/metal3.io/v1alpha1/namespaces/openshift-machine-api/baremetalhosts",
        json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
               "metadata": {"name": "worker-0", "namespace": "openshift-machine-api",
                            "annotations": {"baremetalhost.metal3.io/status": BMH_STATUS}},
               "spec": {"online": true}}),
    );
    k.put(
        "/apis/machine.openshift.io/v1beta1/namespaces/openshift-machine-api/machines",
        json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
               "metadata": {"name": "ostest-worker-0", "namespace": "openshift-machine-api",
                            "labels": {"machine.openshift.io/cluster-api-machine-role": "worker"}}}),
    );
    k
}

fn service() -> FakeService {
    let svc = FakeService::new();
    svc.set_cluster(json!({"id": CLUSTER, "status": "installing"}));
    svc.state().hosts_follow_progress = true;
    svc.set_hosts(
        HOSTS
            .iter()
            .enumerate()
            .map(|(i, (name, role, stage))| {
                let service_role = if *role == "bootstrap" { "master" } else { role };
                let (id, ip) = (host_id(i), host_ip(i));
                let mut h = host_json(&id, IE, service_role, Some(stage));
                h["cluster_id"] = json!(CLUSTER);
                h["requested_hostname"] = json!(name);
                h["bootstrap"] = json!(*role == "bootstrap");
                h["inventory"] = json!(json!({"interfaces": [
                    {"name": "ens3", "ipv4_addresses": [format!("{ip}/24")], "ipv6_addresses": []}
                ]})
                .to_string());
                if *name == "worker-0" {
                    h["node_labels"] = json!(WORKER_LABELS);
                    h["machine_config_pool_name"] = json!("infra");
                }
                h
            })
            .collect(),
    );
    svc.state().operators = vec![
        json!({"name": "console", "operator_type": "builtin", "status": "progressing"}),
        json!({"name": "cvo", "operator_type": "builtin", "status": "progressing"}),
    ];
    svc.set_credentials_file("kubeconfig-noingress", "apiVersion: v1\nkind: Config\n");
    svc
}

/// What the test sees of a run.
struct Run {
    dir: tempfile::TempDir,
    svc: FakeService,
    k: FakeCluster,
    kube: TestServer,
    _svc_server: TestServer,
    child: Child,
    started: Instant,
}

impl Run {
    fn start() -> Run {
        assert!(
            !Path::new("/tmp/bootstrap-secrets/kubeconfig").exists(),
            "/tmp/bootstrap-secrets/kubeconfig exists: the controller would use it instead of \
             the service account this test gives it"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let pki = Pki::new(d, "kube-api");
        let sa = d.join("serviceaccount");
        std::fs::create_dir(&sa).unwrap();
        std::fs::write(sa.join("token"), SA_TOKEN).unwrap();
        std::fs::write(sa.join("ca.crt"), &pki.ca_pem).unwrap();
        let k = cluster();
        let kube = TestServer::with_app_tls(k.clone(), &pki.cert, &pki.key);
        let svc = service();
        let svc_server = TestServer::with_app(svc.clone());
        std::fs::write(d.join("token"), svc.token()).unwrap();
        let bin = d.join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(bin.join("oc"), FAKE_OC).unwrap();
        std::fs::set_permissions(bin.join("oc"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
        let child = Command::new(BIN)
            .arg("controller")
            .env_clear()
            .env("PATH", path)
            .env("CLUSTER_ID", CLUSTER)
            .env("INVENTORY_URL", svc_server.base_url())
            .env("OPENSHIFT_VERSION", "4.18.0")
            .env("NOTIFY_NUM_REBOOTS", "true")
            .env("CHECK_CLUSTER_VERSION", "true")
            .env("CONTROL_PLANE_COUNT", "3")
            .env("MUST_GATHER_IMAGE", "quay.io/example/must-gather:latest")
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", kube.addr().port().to_string())
            .env("ASSISTED_CONTROLLER_SERVICE_ACCOUNT_DIR", &sa)
            .env("ASSISTED_CONTROLLER_TOKEN_FILE", d.join("token"))
            .env(
                "ASSISTED_CONTROLLER_LOG_FILE",
                d.join("controller_logs.log"),
            )
            .env("ASSISTED_CONTROLLER_MUST_GATHER_DIR", d.join("must-gather"))
            .env("FAKE_OC_LOG", d.join("oc.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Run {
            dir,
            svc,
            k,
            kube,
            _svc_server: svc_server,
            child,
            started: Instant::now(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("controller_logs.log")).unwrap_or_default()
    }

    fn oc_calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("oc.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Waits, up to 3 minutes from the start, for `done` to give a value; fails with the log
    /// otherwise.
    fn wait<T>(&mut self, name: &str, done: impl Fn(&mut Run) -> Option<T>) -> T {
        loop {
            if let Some(value) = done(self) {
                return value;
            }
            if self.started.elapsed() > Duration::from_secs(180) {
                let _ = self.child.kill();
                panic!("no {name} within 3 minutes:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_for(&mut self, name: &str, what: impl Fn(&Run) -> bool) {
        self.wait(name, |r| {
            if what(r) {
                return Some(());
            }
            if let Some(status) = r.child.try_wait().unwrap() {
                panic!(
                    "the controller exited ({status}) before {name}:\n{}",
                    r.log()
                );
            }
            None
        });
    }

    fn exit_code(&mut self) -> i32 {
        self.wait("exit", |r| {
            let status = r.child.try_wait().unwrap();
            status.map(|s| s.code().unwrap_or(-1))
        })
    }

    fn stages(&self, host: usize) -> Vec<String> {
        self.svc
            .progress_reports(&host_id(host))
            .into_iter()
            .map(|(stage, _)| stage)
            .collect()
    }

    fn stderr(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut err) = self.child.stderr.take() {
            err.read_to_string(&mut text).unwrap();
        }
        text
    }

    /// Plays the service and the cluster up to `finalizing`: the worker's node joins once the
    /// controller reported it `Configuring`, and the cluster finalizes once the masters are done.
    fn play(&mut self) {
        // The worker's Ignition request is in the MCS log: Configuring, then its node joins.
        self.wait_for("the worker Configuring", |r| {
            r.stages(WORKER).contains(&"Configuring".to_string())
        });
        let node = node(HOSTS[WORKER].0, &host_ip(WORKER), "worker");
        self.k.put("/api/v1/nodes", node);
        self.wait_for("every master Done", |r| {
            (0..WORKER).all(|h| r.stages(h).contains(&"Done".to_string()))
        });
        self.svc.set_cluster(json!({"status": "finalizing"}));
    }

    /// Every request to the API server is one the ClusterRole allows, with the token.
    fn assert_every_kube_request_is_allowed(&self) {
        let requests = self.kube.requests();
        assert!(requests.len() > 20, "{} requests", requests.len());
        for r in &requests {
            let call = call_of_http(&r.method, &r.path, &r.query)
                .unwrap_or_else(|| panic!("not a resource request: {} {}", r.method, r.path));
            assert!(allowed(&call), "not allowed by the ClusterRole: {call:?}");
            // Only reads of optional objects (the invoker ConfigMap, …) may find nothing.
            let ok = r.status / 100 == 2 || (r.method == "GET" && r.status == 404);
            assert!(ok, "{} {} → {}", r.method, r.path, r.status);
            assert_eq!(
                r.header("authorization"),
                Some(format!("Bearer {SA_TOKEN}").as_str())
            );
        }
    }

    fn requests(&self, method: &str, path: &str) -> Vec<Value> {
        self.kube
            .requests()
            .iter()
            .filter(|r| r.method == method && r.path == path)
            .map(|r| serde_json::from_slice(&r.body).unwrap_or(Value::String(r.body_text())))
            .collect()
    }
}

fn reboot_events(svc: &FakeService) -> Vec<String> {
    let mut events: Vec<String> = (svc.state().events.iter())
        .filter(|e| e["name"] == "reboots_for_node")
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect();
    events.sort();
    events
}

#[test]
fn from_job_start_to_complete_installation_and_exit_0() {
    let mut run = Run::start();
    run.play();
    run.wait_for("complete-installation", |r| {
        !r.svc.state().completions.is_empty()
    });
    run.svc.set_cluster(json!({"status": "installed"}));
    let code = run.exit_code();
    let log = run.log();
    assert_eq!(code, 0, "{}\n{log}", run.stderr());

    // The ready event, once, in the controller's namespace.
    let events = run.requests("POST", "/api/v1/namespaces/assisted-installer/events");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["metadata"]["name"], "AssistedControllerIsReady");
    assert_eq!(events[0]["reason"], "AssistedControllerIsReady");
    // Hosts: masters Joined then Done, the worker Configuring (MCS log), Joined, Done.
    assert_eq!(run.stages(0), ["Joined", "Done"]);
    assert_eq!(run.stages(1), ["Joined", "Done"]);
    assert_eq!(run.stages(WORKER), ["Configuring", "Joined", "Done"]);
    // The reboot count of each node, from `oc debug node/…` with the noingress kubeconfig.
    let expected: Vec<String> = HOSTS
        .iter()
        .map(|h| {
            format!(
                "Node {} has been rebooted 2 times before completing installation",
                h.0
            )
        })
        .collect();
    assert_eq!(reboot_events(&run.svc), expected);
    // As Go: `oc` does not see the cluster proxy the controller itself uses.
    let oc = run.oc_calls();
    assert!(
        oc.iter().all(|c| c.starts_with("HTTP_PROXY= oc ")),
        "{oc:?}"
    );
    assert!(oc
        .iter()
        .any(|c| c.contains("debug node/worker-0 -- chroot /host last reboot")));
    assert!(!oc.iter().any(|c| c.contains("must-gather")), "{oc:?}");
    // The CSR approved through its approval subresource.
    let approvals = run.requests(
        "PUT",
        "/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-worker-0/approval",
    );
    assert!(!approvals.is_empty());
    assert_eq!(
        approvals[0]["status"]["conditions"][0]["reason"],
        "NodeCSRApprove"
    );
    // The worker labelled while the worker pool was paused, then unpaused.
    let node = run.k.get("/api/v1/nodes/worker-0").unwrap();
    assert_eq!(node["metadata"]["labels"]["example.com/rack"], "r1");
    let pool_patches = run.requests(
        "PATCH",
        "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker",
    );
    assert_eq!(
        pool_patches,
        [
            json!({"spec": {"paused": true}}),
            json!({"spec": {"paused": false}})
        ]
    );
    // The BareMetalHost: status from the annotation, consumerRef to the worker machine.
    let bmh = run
        .k
        .get("/apis/metal3.io/v1alpha1/namespaces/openshift-machine-api/baremetalhosts/worker-0")
        .unwrap();
    assert_eq!(bmh["status"]["operationalStatus"], "OK");
    assert_eq!(bmh["spec"]["consumerRef"]["name"], "ostest-worker-0");
    assert!(bmh["metadata"]["annotations"]
        .get("baremetalhost.metal3.io/status")
        .is_none());
    // Finalizing: Go's stages in order, the operators reported available, the ingress CA.
    // Go reports the OLM csv-initialization stage before it knows the OLM list is empty.
    assert_eq!(
        run.svc.state().finalizing_stages,
        [
            "Waiting for cluster operators",
            "Adding router ca",
            "Waiting for olm operators csv initialization",
            "Done"
        ]
    );
    let reported: Vec<Value> = (run.svc.state().operator_reports.iter())
        .map(|r| json!([r["name"], r["status"]]))
        .collect();
    for name in ["console", "cvo"] {
        let available = json!([name, "available"]);
        assert!(reported.contains(&available), "{reported:?}");
    }
    assert_eq!(run.svc.state().ingress_certs, [INGRESS_CA]);
    assert_eq!(run.svc.state().completions, [json!({"is_success": true})]);
    // The final log upload: requested, the controller's log without must-gather, completed.
    // As Go, the pod's name is only looked up by the periodic upload (first after 5 minutes),
    // so a shorter run uploads its log file.
    let states: Vec<String> = (run.svc.state().cluster_logs_reports.clone().into_iter())
        .map(|r| r.1)
        .collect();
    assert_eq!(states, ["requested", "completed"]);
    let uploads = run.svc.state().uploads.clone();
    assert_eq!(uploads.len(), 1);
    assert_eq!(uploads[0].logs_type, LogsType::Controller);
    let entries = untar_gz(&uploads[0].data);
    let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(names, ["assisted-installer-controller.logs"]);
    let uploaded = String::from_utf8(entries[0].1.clone()).unwrap();
    assert!(
        uploaded.contains("Assisted controller is ready"),
        "{uploaded}"
    );
    run.assert_every_kube_request_is_allowed();
    assert!(
        !log.contains(&run.svc.token()) && !log.contains(SA_TOKEN),
        "a token leaked into the log"
    );
}
