//! The one Kubernetes client (kube-rs), both programs' traits, against the fake API server: the
//! requests each method sends (method, path, query, content type, body; a path is asserted
//! where the fake's answer would not show a wrong one), what it makes of the answers, and that
//! every request of the controller is the one its RBAC declaration names and the ClusterRole
//! allows.

mod common;

use assisted_installer::kube::client::KubeClient;
use assisted_installer::kube::rbac::{allowed, call_of_http, declarations, INSTALLER_ONLY};
use assisted_installer::kube::{api_error_code, ClusterApi, Condition, Csr, CsrApproval};
use assisted_installer::kube::{remove_taint_by_key, NewEvent};
use assisted_installer::openshift::{
    invoker, CONTROLLER_NAMESPACE, CURRENT_CONFIG_ANNOTATION, INVOKER_AGENT, INVOKER_CONFIG_MAP,
    INVOKER_KEY, INVOKER_NAMESPACE, UNINITIALIZED_TAINT,
};
use base64::Engine;
use common::fake_kube::FakeApiServer;
use common::http_server::{Reply, RequestLog, TestServer};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const NODES: &str = "/api/v1/nodes";
const PODS: &str = "/api/v1/namespaces/assisted-installer/pods";
const EVENTS: &str = "/api/v1/namespaces/assisted-installer/events";
const MASTERS: Option<&str> = Some("node-role.kubernetes.io/master");
const JSON: &str = "application/json";
const MERGE_PATCH: &str = "application/merge-patch+json";

/// A kubeconfig at `dir/kubeconfig` for `server` (http, no credentials); returns its path.
fn kubeconfig(dir: &Path, server: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\n\
         clusters:\n- name: fake\n  cluster:\n    server: {server}\n\
         users:\n- name: fake\n  user: {{}}\n\
         contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n\
         current-context: fake\n"
    );
    std::fs::write(&path, text).expect("write fake kubeconfig");
    path
}

struct Setup {
    fake: FakeApiServer,
    server: TestServer,
    client: KubeClient,
    dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let fake = FakeApiServer::default();
    let server = TestServer::with_app(fake.clone());
    let dir = tempfile::tempdir().unwrap();
    let client = KubeClient::from_kubeconfig(&kubeconfig(dir.path(), &server.base_url())).unwrap();
    Setup {
        fake,
        server,
        client,
        dir,
    }
}

/// A request as `METHOD /path` or `METHOD /path?query` (decoded).
fn line(r: &RequestLog) -> String {
    let pairs = r.query_pairs();
    let query = pairs.iter().map(|(k, v)| format!("{k}={v}"));
    let query: Vec<String> = query.collect();
    match query.is_empty() {
        true => format!("{} {}", r.method, r.path),
        false => format!("{} {}?{}", r.method, r.path, query.join("&")),
    }
}

/// The requests so far, as [`line`]s.
fn calls(server: &TestServer) -> Vec<String> {
    server.requests().iter().map(line).collect()
}

/// `apiVersion kind` of an object.
fn types(object: &Value) -> String {
    let text = |key: &str| object[key].as_str().unwrap().to_string();
    format!("{} {}", text("apiVersion"), text("kind"))
}

fn last(server: &TestServer) -> RequestLog {
    server.requests().pop().unwrap()
}

/// The body of the last request, once its line and content type are checked.
fn sent(server: &TestServer, want: &str, content_type: &str) -> Value {
    let r = last(server);
    let sent = (line(&r), r.header("content-type"));
    assert_eq!(sent, (want.to_string(), Some(content_type)));
    r.body_json()
}

fn msg<T: std::fmt::Debug>(r: anyhow::Result<T>) -> String {
    format!("{:#}", r.unwrap_err())
}

/// A node with a role, readiness, an `InternalIP` (none if ""), annotations and taint keys.
fn node(
    name: &str,
    role: &str,
    ready: bool,
    ip: &str,
    annotations: Value,
    taints: &[&str],
) -> Value {
    let taints = taints
        .iter()
        .map(|k| json!({"key": k, "effect": "NoSchedule"}));
    let taints: Vec<Value> = taints.collect();
    let addresses = [ip].into_iter().filter(|ip| !ip.is_empty());
    let addresses = addresses.map(|ip| json!({"type": "InternalIP", "address": ip}));
    let addresses: Vec<Value> = addresses.collect();
    let ready = if ready { "True" } else { "False" };
    json!({
        "metadata": {"name": name, "labels": {format!("node-role.kubernetes.io/{role}"): ""},
                     "annotations": annotations},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "MemoryPressure", "status": "False"},
                                  {"type": "Ready", "status": ready}],
                   "addresses": addresses},
    })
}

fn taint_keys(s: &Setup, name: &str) -> Vec<String> {
    let node = s.fake.get(&format!("{NODES}/{name}")).unwrap();
    let taints = node["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let keys = taints
        .iter()
        .map(|t| t["key"].as_str().unwrap().to_string());
    keys.collect()
}

#[test]
fn reads_of_every_kind_into_the_model() {
    let s = setup();
    let (c, f) = (&s.client, &s.fake);
    // Nodes by role, with readiness, IPs, annotations and taints.
    assert_eq!(c.server().trim_end_matches('/'), s.server.base_url());
    let ann = json!({CURRENT_CONFIG_ANNOTATION: "rendered-master-a"});
    let taints = [UNINITIALIZED_TAINT, "node.kubernetes.io/not-ready"];
    for node in [
        node("master-0", "master", true, "192.168.126.10", ann, &[]),
        node("master-1", "master", false, "fd00::11", json!({}), &taints),
        node("worker-0", "worker", true, "", json!({}), &[]),
    ] {
        f.put(NODES, node);
    }

    let by_role = |r: &str| c.list_nodes(Some(&format!("node-role.kubernetes.io/{r}")));
    let masters = by_role("master").unwrap();
    let (m0, m1) = (&masters[0], &masters[1]);
    let names = (masters.len(), m0.name.as_str(), m1.name.as_str());
    assert_eq!(names, (2, "master-0", "master-1"));
    assert!(m0.is_ready() && !m1.is_ready());
    assert_eq!(m0.internal_ips().collect::<Vec<_>>(), ["192.168.126.10"]);
    assert_eq!(m1.internal_ips().collect::<Vec<_>>(), ["fd00::11"]);
    let rendered = &m0.annotations[CURRENT_CONFIG_ANNOTATION];
    assert_eq!(rendered, "rendered-master-a");
    assert!(m0.taints.is_empty() && m1.annotations.is_empty());
    let keys: Vec<&str> = m1.taints.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(keys, taints);
    assert_eq!(m1.taints[0].effect, "NoSchedule");
    assert_eq!(by_role("worker").unwrap()[0].internal_ips().count(), 0);
    assert!(by_role("arbiter").unwrap().is_empty());
    let want = ["master", "worker", "arbiter"]
        .map(|r| format!("GET {NODES}?labelSelector=node-role.kubernetes.io/{r}"));
    assert_eq!(calls(&s.server), want);

    // Events, ConfigMaps and MachineConfigs.
    let started = json!({"metadata": {"name": "started", "namespace": CONTROLLER_NAMESPACE},
                         "reason": "Started", "message": "pod started"});
    f.put(EVENTS, started);
    let other = json!({"metadata": {"name": "other"}});
    f.put("/api/v1/namespaces/default/events", other);
    let listed = c.list_events(CONTROLLER_NAMESPACE).unwrap();
    let e = &listed[0];
    let event = format!("{} {} {}: {}", listed.len(), e.name, e.reason, e.message);
    assert_eq!(event, "1 started Started: pod started");
    assert_eq!(calls(&s.server)[3..], [format!("GET {EVENTS}")]);

    let (ns, name) = (INVOKER_NAMESPACE, INVOKER_CONFIG_MAP);
    assert_eq!(c.get_config_map(ns, name).unwrap(), None);
    let invoker_map = json!({"metadata": {"name": name}, "data": {INVOKER_KEY: INVOKER_AGENT}});
    f.put(&format!("/api/v1/namespaces/{ns}/configmaps"), invoker_map);
    let empty = json!({"metadata": {"name": "empty"}});
    f.put("/api/v1/namespaces/ns/configmaps", empty);
    let data = c.get_config_map(ns, name).unwrap();
    assert_eq!(invoker(data.as_ref()), INVOKER_AGENT);
    let empty = c.get_config_map("ns", "empty").unwrap();
    assert_eq!(empty, Some(Default::default()));

    let configs = "/apis/machineconfiguration.openshift.io/v1/machineconfigs";
    f.put(configs, json!({"metadata": {"name": "rendered-master-a"}}));
    assert!(c.machine_config_exists("rendered-master-a").unwrap());
    assert!(!c.machine_config_exists("rendered-master-b").unwrap());

    // Pods by selectors, their logs, and deletecollection.
    let job = "job-name=assisted-installer-controller";
    let pod = |name: &str, labels: Value, phase: &str| {
        json!({"metadata": {"name": name, "namespace": CONTROLLER_NAMESPACE, "labels": labels},
               "status": {"phase": phase}})
    };
    let job_label = json!({"job-name": "assisted-installer-controller"});
    let (a, b) = (
        pod("controller-a", job_label.clone(), "Running"),
        pod("controller-b", job_label, "Pending"),
    );
    let other = pod("other", json!({"app": "other"}), "Running");
    [a, b, other].into_iter().for_each(|p| f.put(PODS, p));
    let pods = c.list_pods(CONTROLLER_NAMESPACE, Some(job), None).unwrap();
    let names: Vec<String> = pods
        .iter()
        .map(|p| format!("{} {}", p.name, p.phase))
        .collect();
    assert_eq!(names, ["controller-a Running", "controller-b Pending"]);
    assert_eq!(pods[0].labels["job-name"], "assisted-installer-controller");
    let last_line = || line(&last(&s.server));
    assert_eq!(last_line(), format!("GET {PODS}?labelSelector={job}"));
    let phase = Some("status.phase=Running");
    let running = c.list_pods(CONTROLLER_NAMESPACE, Some(job), phase);
    assert_eq!(running.unwrap().len(), 1);
    let want = format!("GET {PODS}?fieldSelector=status.phase=Running&labelSelector={job}");
    assert_eq!(last_line(), want);

    f.set_pod_log(&format!("{PODS}/controller-a"), "line 1\nline 2\n");
    let ns = CONTROLLER_NAMESPACE;
    let log = c.pod_log(ns, "controller-a", Some(300));
    assert_eq!(log.unwrap(), "line 1\nline 2\n");
    assert_eq!(
        last_line(),
        format!("GET {PODS}/controller-a/log?sinceSeconds=300")
    );
    let log = c.pod_log(ns, "controller-a", None);
    assert_eq!(log.unwrap(), "line 1\nline 2\n");
    assert_eq!(last_line(), format!("GET {PODS}/controller-a/log"));
    let err = msg(c.pod_log(ns, "gone", None));
    let want = "reading the log of pod assisted-installer/gone: ";
    assert!(err.starts_with(want), "{err}");

    c.delete_pods(ns, Some("app=other")).unwrap();
    assert_eq!(
        last_line(),
        format!("DELETE {PODS}?labelSelector=app=other")
    );
    assert_eq!(c.list_pods(ns, None, None).unwrap().len(), 2);

    // The OpenShift, OLM, machine-api and batch objects.
    let config = "/apis/config.openshift.io/v1";
    f.put(
        &format!("{config}/clusteroperators"),
        json!({"metadata": {"name": "console"},
        "status": {"conditions": [{"type": "Available", "status": "True", "message": "m"}],
                   "versions": [{"name": "operator", "version": "4.15.0"}]}}),
    );
    f.put(&format!("{config}/clusterversions"), json!({"metadata": {"name": "version"},
        "status": {"capabilities": {"enabledCapabilities": ["Console"], "knownCapabilities": ["Console", "Insights"]},
                   "desired": {"version": "4.15.1"}}}));
    f.put(
        &format!("{config}/proxies"),
        json!({"metadata": {"name": "cluster"},
        "status": {"httpProxy": "http://p:3128", "noProxy": ".svc"}}),
    );
    let co = c.get_cluster_operator("console").unwrap();
    assert!(co.conditions[0].is_true("Available"));
    let (condition, version) = (&co.conditions[0], &co.versions[0]);
    assert_eq!((&*condition.message, &*version.version), ("m", "4.15.0"));
    assert_eq!(c.list_cluster_operators().unwrap(), [co]);
    let cv = c.get_cluster_version("version").unwrap();
    let capabilities = (cv.enabled_capabilities, cv.known_capabilities.len());
    assert_eq!(capabilities, (vec!["Console".to_string()], 2));
    assert_eq!(cv.desired_version, "4.15.1");
    let p = c.get_proxy("cluster").unwrap();
    let proxy = format!("{} {:?} {}", p.http_proxy, p.https_proxy, p.no_proxy);
    assert_eq!(proxy, "http://p:3128 \"\" .svc");

    let ns = "openshift-storage";
    let olm = format!("/apis/operators.coreos.com/v1alpha1/namespaces/{ns}");
    f.put(
        &format!("{olm}/subscriptions"),
        json!({"metadata": {"name": "odf", "namespace": ns},
        "status": {"currentCSV": "odf.v4"}}),
    );
    f.put(
        &format!("{olm}/clusterserviceversions"),
        json!({"metadata": {"name": "odf.v4"},
        "spec": {"version": "4.15.0-rhodf"}, "status": {"phase": "Succeeded", "message": "done"}}),
    );
    f.put(&format!("{olm}/installplans"), json!({"metadata": {"name": "ip-1",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Subscription", "name": "odf", "uid": "u"}]},
        "status": {"phase": "Failed"}}));
    let sub = c.get_subscription(ns, "odf").unwrap().unwrap();
    assert_eq!(
        format!("{} {}", sub.namespace, sub.current_csv),
        format!("{ns} odf.v4")
    );
    let csv = c.get_csv(ns, "odf.v4").unwrap().unwrap();
    let read = format!("{} {} {}", csv.phase, csv.message, csv.version);
    assert_eq!(read, "Succeeded done 4.15.0-rhodf");
    assert_eq!(c.get_csv(ns, "none").unwrap(), None);
    let plan = c.list_install_plans(ns).unwrap().remove(0);
    assert_eq!(
        (plan.owner_names, &*plan.phase),
        (vec!["odf".into()], "Failed")
    );

    let ns = "openshift-machine-api";
    f.put(
        &format!("/apis/machine.openshift.io/v1beta1/namespaces/{ns}/machines"),
        json!({"metadata": {"name": "w-0", "namespace": ns, "labels": {"role": "worker"}}}),
    );
    let m = c.list_machines(ns).unwrap().remove(0);
    let types = format!("{} {}", m.api_version, m.kind);
    assert_eq!(types, "machine.openshift.io/v1beta1 Machine");
    assert_eq!(m.labels["role"], "worker");
    f.put(
        "/apis/batch/v1/namespaces/openshift-marketplace/jobs",
        json!({"metadata": {"name": "j"},
        "status": {"failed": 2, "conditions": [{"type": "Failed", "status": "True"}]}}),
    );
    let job = &c.list_jobs("openshift-marketplace").unwrap()[0];
    assert_eq!(job.failed, 2);
    assert!(job.conditions[0].is_true("Failed"));
    f.put(
        "/api/v1/namespaces/openshift-dns/services",
        json!({"metadata": {"name": "dns-default"}, "spec": {"clusterIP": "172.30.0.10"}}),
    );
    let services = c.list_services().unwrap();
    assert_eq!(services[0].cluster_ip, "172.30.0.10");
    c.delete_service("openshift-dns", "dns-default").unwrap();
    assert!(c.list_services().unwrap().is_empty());
}

#[test]
fn writes_and_the_bodies_they_send() {
    let s = setup();
    let (c, f) = (&s.client, &s.fake);
    // A CSR approval puts the listed object with the condition appended.
    let path = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let csr = json!({"metadata": {"name": "csr-abc"},
        "spec": {"request": "TFMwdA==", "signerName": "kubernetes.io/kubelet-serving"},
        "status": {"conditions": [{"type": "Denied", "status": "True"}]}});
    f.put(path, csr);
    let csr = c.list_csrs().unwrap().remove(0);
    assert!(csr.conditions[0].is_true("Denied"));
    c.approve_csr(&csr, &approval()).unwrap();
    let body = sent(&s.server, &format!("PUT {path}/csr-abc/approval"), JSON);
    assert_eq!(
        types(&body),
        "certificates.k8s.io/v1 CertificateSigningRequest"
    );
    assert_eq!(body["metadata"]["resourceVersion"], "1");
    assert_eq!(body["spec"]["request"], "TFMwdA==");
    let approved = json!({"type": "Approved", "status": "True", "reason": "NodeCSRApprove",
        "message": "approved by the controller", "lastUpdateTime": "2023-11-14T22:13:20Z"});
    assert_eq!(body["status"]["conditions"][1], approved);

    // A taint is removed by a JSON patch guarded by its key.
    let (not_ready, unreachable) = (
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    );
    let taints = [not_ready, UNINITIALIZED_TAINT, unreachable];
    let master = node("master-1", "master", false, "10.0.0.11", json!({}), &taints);
    f.put(NODES, master);
    remove_taint_by_key(c, "master-1", UNINITIALIZED_TAINT).unwrap();
    assert_eq!(taint_keys(&s, "master-1"), [taints[0], taints[2]]);
    let want = ["GET", "PATCH"].map(|m| format!("{m} {NODES}/master-1"));
    assert_eq!(calls(&s.server)[2..], want);
    let patch = sent(&s.server, &want[1], "application/json-patch+json");
    let want = json!([{"op": "test", "path": "/spec/taints/1/key", "value": UNINITIALIZED_TAINT},
                      {"op": "remove", "path": "/spec/taints/1"}]);
    assert_eq!(patch, want);

    // Absent: no patch. The controller's by index: a taint list changed since it was read fails
    // the patch's test (422) and removes nothing.
    remove_taint_by_key(c, "master-1", UNINITIALIZED_TAINT).unwrap();
    assert_eq!(last(&s.server).method, "GET");
    let err = c.remove_node_taint("master-1", 0, UNINITIALIZED_TAINT);
    assert_eq!(api_error_code(&err.unwrap_err()), Some(422));
    assert_eq!(taint_keys(&s, "master-1"), [taints[0], taints[2]]);
    c.remove_node_taint("master-1", 1, taints[2]).unwrap();
    c.remove_node_taint("master-1", 0, taints[0]).unwrap();
    assert!(taint_keys(&s, "master-1").is_empty());

    let err = msg(remove_taint_by_key(c, "ghost", UNINITIALIZED_TAINT));
    assert!(err.starts_with("reading node ghost: "), "{err}");
    f.put(NODES, node("n", "master", true, "", json!({}), &["t"]));
    s.fake.fail_next("PATCH", "/api/v1/nodes/n", 500);
    let err = msg(remove_taint_by_key(c, "n", "t"));
    assert!(err.starts_with("removing taint t (0) of node n: "), "{err}");

    // BareMetalHosts, merge patches and Events.
    let ns = "openshift-machine-api";
    let bmhs = format!("/apis/metal3.io/v1alpha1/namespaces/{ns}/baremetalhosts");
    let bmh = json!({
        "metadata": {"name": "bmh-0", "namespace": ns, "annotations": {"keep": "me"}},
        "spec": {"externallyProvisioned": true},
        "status": {"provisioning": {"state": "externally provisioned"}},
    });
    f.put(&bmhs, bmh.clone());
    let mut listed = c.list_bmhs(ns).unwrap().remove(0);
    listed["spec"]["consumerRef"] = json!({"name": "worker-0"});
    let stored = c.update_bmh(ns, &listed).unwrap();
    assert_eq!(stored["spec"]["consumerRef"]["name"], "worker-0");
    c.update_bmh_status(ns, &listed).unwrap();
    let requests = s.server.requests();
    for (r, sub) in requests[requests.len() - 2..].iter().zip(["", "/status"]) {
        assert_eq!(line(r), format!("PUT {bmhs}/bmh-0{sub}"));
        let body = r.body_json();
        assert_eq!(types(&body), "metal3.io/v1alpha1 BareMetalHost");
        let annotations = &bmh["metadata"]["annotations"];
        assert_eq!(&body["metadata"]["annotations"], annotations);
        assert_eq!(body["status"], bmh["status"]);
    }

    let merge = |path: &str| sent(&s.server, &format!("PATCH {path}"), MERGE_PATCH);
    let pools = "/apis/machineconfiguration.openshift.io/v1/machineconfigpools";
    let pool = json!({"metadata": {"name": "worker"}, "spec": {"paused": false}});
    f.put(pools, pool);
    c.set_machine_config_pool_paused("worker", true).unwrap();
    let paused = json!({"spec": {"paused": true}});
    assert_eq!(merge(&format!("{pools}/worker")), paused);
    assert!(c.get_machine_config_pool("worker").unwrap().paused);
    f.put(NODES, node("m", "master", true, "", json!({}), &[]));
    let labels = json!({"a": "b", "c": ""});
    c.patch_node_labels("m", &labels).unwrap();
    let patch = json!({"metadata": {"labels": labels}});
    assert_eq!(merge("/api/v1/nodes/m"), patch);

    let event = ready_event();
    c.create_event(CONTROLLER_NAMESPACE, &event).unwrap();
    let body = sent(&s.server, &format!("POST {EVENTS}"), JSON);
    let meta = json!({"name": "AssistedControllerIsReady", "namespace": CONTROLLER_NAMESPACE});
    assert_eq!(body["metadata"], meta);
    let involved =
        json!({"namespace": CONTROLLER_NAMESPACE, "name": "assisted-installer-controller"});
    assert_eq!(body["involvedObject"], involved);
    assert_eq!(
        (&body["count"], &body["type"]),
        (&json!(1), &json!("Normal"))
    );
    assert_eq!(body["firstTimestamp"], "1970-01-01T00:00:00Z");
    assert_eq!(body["lastTimestamp"], body["firstTimestamp"]);
    let again = c.create_event(CONTROLLER_NAMESPACE, &event);
    assert_eq!(api_error_code(&again.unwrap_err()), Some(409));
}

#[test]
fn every_controller_method_sends_exactly_its_declared_and_allowed_request() {
    let s = setup();
    exercise_all(&s.client);
    let requests = s.server.requests();
    let declarations = declarations();
    // exercise_all calls the methods in trait order, as the declarations list them; each one
    // makes one request.
    assert_eq!(requests.len(), declarations.len(), "{:?}", calls(&s.server));
    for (request, (method, declared)) in requests.iter().zip(declarations) {
        let call = call_of_http(&request.method, &request.path, &request.query);
        let call =
            call.unwrap_or_else(|| panic!("{method}: {} is no resource request", line(request)));
        assert_eq!(declared, call, "{method}: {}", line(request));
        let allowed = allowed(&call) || INSTALLER_ONLY.contains(&method);
        assert!(allowed, "{method}: {call:?} is not allowed");
    }
}

#[test]
fn api_errors_keep_their_codes_and_name_the_object() {
    let s = setup();
    let c = &s.client;
    let provisioning = c.provisioning_exists("provisioning-configuration");
    assert!(!provisioning.unwrap());
    let gone = c.get_node("gone").unwrap_err();
    assert_eq!(api_error_code(&gone), Some(404));
    let cm = "/api/v1/namespaces/assisted-installer/configmaps/olm-operator-manifests";
    let get_cm = || c.get_config_map("assisted-installer", "olm-operator-manifests");
    s.fake.fail_next("GET", cm, 403);
    let err = get_cm().unwrap_err();
    assert_eq!(api_error_code(&err), Some(403));
    let want = "reading ConfigMap assisted-installer/olm-operator-manifests: ";
    assert!(format!("{err:#}").starts_with(want), "{err:#}");
    // An answer without a Status body keeps its code.
    let text = Reply {
        content_type: Some("text/plain"),
        body: b"forbidden by a proxy".to_vec(),
        ..Reply::empty(403)
    };
    for (reply, code) in [(Reply::empty(401), 401), (text, 403)] {
        s.fake.answer_next("GET", cm, reply);
        assert_eq!(api_error_code(&get_cm().unwrap_err()), Some(code));
    }

    // The installer's calls: a failure injected under `prefix` names the call.
    let fails = |prefix: &str, want: &str, call: &dyn Fn() -> String| {
        s.fake.fail_next("GET", prefix, 500);
        let err = call();
        assert!(
            err.starts_with(want) && err.contains("injected failure"),
            "{err}"
        );
    };
    let masters = "listing nodes node-role.kubernetes.io/master: ";
    fails(NODES, masters, &|| msg(c.list_nodes(MASTERS)));
    let want = "listing events in namespace assisted-installer: ";
    fails(EVENTS, want, &|| msg(c.list_events(CONTROLLER_NAMESPACE)));
    let mc = "/apis/machineconfiguration.openshift.io";
    fails(mc, "reading MachineConfig mc: ", &|| {
        msg(c.machine_config_exists("mc"))
    });
    let want = "listing pods in namespace assisted-installer: ";
    let pods = || msg(c.list_pods(CONTROLLER_NAMESPACE, Some("job-name=x"), None));
    fails(PODS, want, &pods);
    // The client keeps working after errors.
    let nodes = c.list_nodes(MASTERS);
    assert!(nodes.unwrap().is_empty());
}

#[test]
fn the_client_is_blocking_shared_and_never_hangs() {
    let s = setup();
    let taints = [UNINITIALIZED_TAINT];
    let master = node("master-0", "master", true, "10.0.0.10", json!({}), &taints);
    s.fake.put(NODES, master);
    let masters = |client: &KubeClient| client.list_nodes(MASTERS);
    let rt = tokio::runtime::Builder::new_current_thread().build();
    let rt = rt.unwrap();
    let err = rt.block_on(async { msg(masters(&s.client)) });
    let inside = "inside an async runtime";
    let listing = err.starts_with("listing nodes");
    assert!(err.contains(inside) && listing, "{err}");
    let path = kubeconfig(s.dir.path(), &s.server.base_url());
    let err = rt.block_on(async { msg(KubeClient::from_kubeconfig(&path)) });
    assert!(err.contains(inside), "{err}");

    let client = Arc::new(s.client);
    let five_lists = |client: Arc<KubeClient>| {
        move || (0..5).for_each(|_| assert_eq!(masters(&client).unwrap().len(), 1))
    };
    let threads: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(five_lists(client.clone())))
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(s.server.requests().len(), 20);

    // A connection per call: the server closing each one after its answer breaks nothing.
    s.fake.hang_up();
    for _ in 0..3 {
        assert_eq!(masters(&client).unwrap().len(), 1);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!client.machine_config_exists("x").unwrap());
    }
    remove_taint_by_key(&*client, "master-0", UNINITIALIZED_TAINT).unwrap();

    let gone = {
        let server = TestServer::with_app(FakeApiServer::default());
        kubeconfig(s.dir.path(), &server.base_url())
    };
    let err = msg(masters(&KubeClient::from_kubeconfig(&gone).unwrap()));
    let want = "listing nodes node-role.kubernetes.io/master: ";
    assert!(err.starts_with(want), "{err}");
}

#[test]
fn clients_from_kubeconfigs_and_service_accounts() {
    // The controller uses the kubeconfig, else the service account.
    let server = TestServer::with_app(FakeApiServer::new("sa-token-1"));
    let dir = tempfile::tempdir().unwrap();
    let sa = dir.path().join("sa");
    std::fs::create_dir(&sa).unwrap();
    let client = KubeClient::from_service_account(&server.base_url(), &sa);
    let err = msg(client.and_then(|c| c.list_csrs()));
    assert!(err.contains("token"), "{err}");
    std::fs::write(sa.join("token"), "sa-token-1").unwrap();
    let client = KubeClient::from_service_account(&server.base_url(), &sa).unwrap();
    client.list_csrs().unwrap();
    let request = last(&server);
    assert_eq!(request.header("authorization"), Some("Bearer sa-token-1"));

    let path = kubeconfig(dir.path(), &server.base_url());
    let client = KubeClient::for_controller(&path, &sa).unwrap();
    assert_eq!(client.server().trim_end_matches('/'), server.base_url());
    let err = client.get_proxy("cluster").unwrap_err();
    assert_eq!(
        api_error_code(&err),
        Some(401),
        "no token in the kubeconfig"
    );

    // Kubeconfigs missing, invalid, or with certificate data.
    let missing = Path::new("/nonexistent/kubeconfig");
    let err = msg(KubeClient::from_kubeconfig(missing));
    assert!(err.contains("/nonexistent/kubeconfig"), "{err}");
    let [ca, cert, key] = <[String; 3]>::try_from(certs()).unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, "clusters: [unclosed").unwrap();
    assert!(msg(KubeClient::from_kubeconfig(&path)).contains(&path.display().to_string()));

    let client = KubeClient::from_kubeconfig(&bootkube_like(dir.path(), &ca, &cert, &key)).unwrap();
    let server = "https://api-int.test-cluster.example.com:6443";
    assert_eq!(client.server().trim_end_matches('/'), server);
    let broken_key = key.replace("MIIEpAIBAAKCAQEA", "MIIEpAIBAAKCAQEB");
    let broken_key = &broken_key.replace('Q', "x");
    let broken = bootkube_like(dir.path(), &ca, &cert, broken_key);
    assert!(KubeClient::from_kubeconfig(&broken).is_err());
    let no_ca = bootkube_like(dir.path(), "not a certificate", &cert, &key);
    assert!(KubeClient::from_kubeconfig(&no_ca).is_err());
}

/// A kubeconfig as bootkube writes it: certificate authority, client certificate and key data.
fn bootkube_like(dir: &Path, ca: &str, cert: &str, key: &str) -> PathBuf {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let path = dir.join("kubeconfig");
    let text = format!(
        "clusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://api-int.test-cluster.example.com:6443\n  name: c\n\
         contexts:\n- context:\n    cluster: c\n    user: admin\n  name: admin\ncurrent-context: admin\n\
         users:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(ca), b64(cert), b64(key),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A throwaway CA (EC P-256), an admin client certificate, and its RSA key in PKCS#1 form, as in
/// the kubeconfig bootkube writes. Test-only material, made once with the openssl CLI.
fn certs() -> Vec<String> {
    let pems = include_str!("common/bootkube-certs.pem").split("-----BEGIN ");
    pems.skip(1).map(|p| format!("-----BEGIN {p}")).collect()
}

/// Call every [`ClusterApi`] method once, in trait order, ignoring the results.
fn exercise_all(api: &dyn ClusterApi) {
    let (ns, storage, marketplace) = (
        "openshift-machine-api",
        "openshift-storage",
        "openshift-marketplace",
    );
    let object = json!({"metadata": {"name": "csr-1"}, "spec": {"request": "", "signerName": ""}});
    let csr = Csr {
        name: "csr-1".into(),
        conditions: vec![],
        object,
    };
    let bmh = json!({"metadata": {"name": "bmh-0", "namespace": ns}, "spec": {}, "status": {}});
    let _ = api.get_proxy("cluster");
    let _ = api.get_cluster_version("version");
    let _ = api.list_cluster_operators();
    let _ = api.get_cluster_operator("console");
    let _ = api.get_config_map("kube-system", "cluster-config-v1");
    let _ = api.create_event("assisted-installer", &ready_event());
    let _ = api.list_nodes(Some("node-role.kubernetes.io/master"));
    let _ = api.get_node("master-0");
    let _ = api.remove_node_taint("master-0", 0, "k");
    let _ = api.patch_node_labels("master-0", &json!({"a": "b"}));
    let _ = api.list_services();
    let _ = api.delete_service("openshift-dns", "dns-default");
    let _ = api.list_pods(
        "assisted-installer",
        Some("a=b"),
        Some("status.phase=Running"),
    );
    let _ = api.pod_log("assisted-installer", "pod-0", Some(300));
    let _ = api.delete_pods("openshift-dns-operator", None);
    let _ = api.list_csrs();
    let _ = api.approve_csr(&csr, &approval());
    let _ = api.get_subscription(storage, "odf-operator");
    let _ = api.get_csv(storage, "odf-operator.v4.15.0");
    let _ = api.list_install_plans(storage);
    let _ = api.delete_install_plan(storage, "install-1");
    let _ = api.list_jobs(marketplace);
    let _ = api.delete_job(marketplace, "job-1");
    let _ = api.list_bmhs(ns);
    let _ = api.get_bmh(ns, "bmh-0");
    let _ = api.update_bmh(ns, &bmh);
    let _ = api.update_bmh_status(ns, &bmh);
    let _ = api.provisioning_exists("provisioning-configuration");
    let _ = api.list_machines(ns);
    let _ = api.get_machine_config_pool("worker");
    let _ = api.set_machine_config_pool_paused("worker", true);
    let _ = api.list_events(CONTROLLER_NAMESPACE);
    let _ = api.machine_config_exists("rendered-master-a");
}

/// The controller's approval of a CSR.
fn approval() -> CsrApproval {
    let condition = Condition {
        type_: "Approved".into(),
        status: "True".into(),
        reason: "NodeCSRApprove".into(),
        message: "approved by the controller".into(),
    };
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_500);
    CsrApproval { condition, time }
}

/// The Event the controller creates when it is ready.
fn ready_event() -> NewEvent {
    NewEvent {
        name: "AssistedControllerIsReady".into(),
        reason: "AssistedControllerIsReady".into(),
        type_: "Normal".into(),
        message: "ready".into(),
        involved_namespace: CONTROLLER_NAMESPACE.into(),
        involved_name: "assisted-installer-controller".into(),
        time: std::time::UNIX_EPOCH,
    }
}
