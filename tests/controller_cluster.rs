//! The controller's `KubeCluster` (kube-rs) against an HTTP fake of the Kubernetes API: every
//! request every method sends is the one its RBAC declaration names (so the ClusterRole allows
//! it), and representative calls carry the method, path, query, content type and body the API
//! server expects.

mod common;

use assisted_installer::controller::cluster::fake::exercise_all;
use assisted_installer::controller::cluster::kube_impl::KubeCluster;
use assisted_installer::controller::cluster::rbac::{allowed, call_of_http, DECLARATIONS};
use assisted_installer::controller::cluster::{
    api_error_code, ClusterApi, Condition, CsrApproval, NewEvent,
};
use common::fake_kube::kubeconfig;
use common::http_server::{App, Reply, Request, RequestLog, TestServer};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Answers with canned replies by `METHOD path`; otherwise GET of a collection gives an empty
/// list, GET of an object a bare object, logs a line of text, and writes echo their body.
#[derive(Clone, Default)]
struct KubeApp {
    canned: Arc<Mutex<BTreeMap<String, Reply>>>,
}

impl KubeApp {
    fn answer(&self, method: &str, path: &str, reply: Reply) {
        self.canned
            .lock()
            .unwrap()
            .insert(format!("{method} {path}"), reply);
    }

    fn status(&self, method: &str, path: &str, code: u16, reason: &str) {
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": format!("{reason} for the test"),
            "reason": reason, "code": code,
        });
        self.answer(method, path, Reply::json(code, &status));
    }
}

impl App for KubeApp {
    fn handle(&self, request: &Request) -> Reply {
        let key = format!("{} {}", request.method, request.path);
        if let Some(reply) = self.canned.lock().unwrap().get(&key) {
            return reply.clone();
        }
        let segments = request.path.trim_matches('/').split('/').count();
        // /api/v1/<plural> or /api/v1/namespaces/<ns>/<plural>, /apis/<g>/<v>/... one more.
        let core = request.path.starts_with("/api/");
        let collection = match core {
            true => segments == 3 || segments == 5,
            false => segments == 4 || segments == 6,
        };
        match request.method.as_str() {
            "GET" if request.path.ends_with("/log") => Reply {
                content_type: Some("text/plain"),
                body: b"log line\n".to_vec(),
                ..Reply::empty(200)
            },
            "GET" if collection => Reply::json(200, &json!({"metadata": {}, "items": []})),
            "GET" => Reply::json(200, &json!({"metadata": {"name": "x"}})),
            "PUT" | "PATCH" | "POST" => Reply::json(
                200,
                &serde_json::from_slice(&request.body).unwrap_or(json!({})),
            ),
            _ => Reply::json(200, &json!({"kind": "Status", "status": "Success"})),
        }
    }
}

struct Setup {
    app: KubeApp,
    server: TestServer,
    client: KubeCluster,
    _dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let app = KubeApp::default();
    let server = TestServer::with_app(app.clone());
    let dir = tempfile::tempdir().unwrap();
    let client = KubeCluster::from_kubeconfig(&kubeconfig(dir.path(), &server.base_url())).unwrap();
    Setup {
        app,
        server,
        client,
        _dir: dir,
    }
}

fn only_request(server: &TestServer) -> RequestLog {
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    requests.into_iter().next().unwrap()
}

#[test]
fn every_method_sends_exactly_its_declared_and_allowed_request() {
    let s = setup();
    exercise_all(&s.client);
    let requests = s.server.requests();
    // exercise_all calls the methods in trait order, as DECLARATIONS lists them; each method
    // makes one request.
    assert_eq!(requests.len(), DECLARATIONS.len());
    for (request, (method, declared)) in requests.iter().zip(DECLARATIONS) {
        let call =
            call_of_http(&request.method, &request.path, &request.query).unwrap_or_else(|| {
                panic!(
                    "{method}: {} {} is no resource request",
                    request.method, request.path
                )
            });
        assert_eq!(
            declared.iter().map(|d| d.call()).collect::<Vec<_>>(),
            vec![call.clone()],
            "{method}: {} {}",
            request.method,
            request.path
        );
        assert!(allowed(&call), "{method}: {call:?} is not allowed");
    }
}

#[test]
fn nodes_list_with_a_label_selector_parses_the_items() {
    let s = setup();
    s.app.answer(
        "GET",
        "/api/v1/nodes",
        Reply::json(
            200,
            &json!({"metadata": {}, "items": [{
                "metadata": {"name": "master-0", "labels": {"node-role.kubernetes.io/master": ""}},
                "spec": {"taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "effect": "NoSchedule"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}],
                           "addresses": [{"type": "InternalIP", "address": "192.168.126.10"}]}
            }]}),
        ),
    );
    let nodes = s
        .client
        .list_nodes(Some("node-role.kubernetes.io/master"))
        .unwrap();
    let r = only_request(&s.server);
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("GET", "/api/v1/nodes")
    );
    assert_eq!(
        r.query_param("labelSelector").as_deref(),
        Some("node-role.kubernetes.io/master")
    );
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].name, "master-0");
    assert!(nodes[0].is_ready());
    assert_eq!(
        nodes[0].taints[0].key,
        "node.cloudprovider.kubernetes.io/uninitialized"
    );
    assert_eq!(
        nodes[0].internal_ips().collect::<Vec<_>>(),
        vec!["192.168.126.10"]
    );
}

#[test]
fn csr_approval_puts_the_listed_object_with_the_condition_appended() {
    let s = setup();
    let path = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    s.app.answer(
        "GET",
        path,
        Reply::json(
            200,
            &json!({"metadata": {}, "items": [{
                "metadata": {"name": "csr-abc", "resourceVersion": "42"},
                "spec": {"request": "LS0t", "signerName": "kubernetes.io/kubelet-serving"},
                "status": {}
            }]}),
        ),
    );
    let csr = s.client.list_csrs().unwrap().remove(0);
    assert!(csr.conditions.is_empty());
    let approval = CsrApproval {
        condition: Condition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: "NodeCSRApprove".into(),
            message: "This CSR was approved by the assisted-installer-controller".into(),
        },
        time: std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000),
    };
    s.client.approve_csr(&csr, &approval).unwrap();
    let requests = s.server.requests();
    let r = &requests[1];
    assert_eq!(r.method, "PUT");
    assert_eq!(r.path, format!("{path}/csr-abc/approval"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let body = r.body_json();
    assert_eq!(body["apiVersion"], "certificates.k8s.io/v1");
    assert_eq!(body["kind"], "CertificateSigningRequest");
    assert_eq!(body["metadata"]["resourceVersion"], "42");
    assert_eq!(body["spec"]["request"], "LS0t");
    assert_eq!(
        body["status"]["conditions"],
        json!([{
            "type": "Approved", "status": "True", "reason": "NodeCSRApprove",
            "message": "This CSR was approved by the assisted-installer-controller",
            "lastUpdateTime": "2023-11-14T22:13:20Z"
        }])
    );
}

#[test]
fn bmh_update_and_status_update_put_the_whole_object() {
    let s = setup();
    let ns = "openshift-machine-api";
    let bmh = json!({
        "metadata": {"name": "bmh-0", "namespace": ns, "resourceVersion": "5",
                     "annotations": {"keep": "me"}},
        "spec": {"externallyProvisioned": true,
                 "consumerRef": {"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
                                 "namespace": ns, "name": "worker-0"}},
        "status": {"provisioning": {"state": "externally provisioned"}},
    });
    let stored = s.client.update_bmh(ns, &bmh).unwrap();
    s.client.update_bmh_status(ns, &bmh).unwrap();
    let requests = s.server.requests();
    assert_eq!(requests.len(), 2);
    let base = format!("/apis/metal3.io/v1alpha1/namespaces/{ns}/baremetalhosts/bmh-0");
    let mut want = bmh.clone();
    want["apiVersion"] = json!("metal3.io/v1alpha1");
    want["kind"] = json!("BareMetalHost");
    for (r, path) in requests
        .iter()
        .zip([base.clone(), format!("{base}/status")])
    {
        assert_eq!(r.method, "PUT");
        assert_eq!(r.path, path);
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.body_json(), want);
    }
    // The answer (here the echo) is what the call returns.
    assert_eq!(stored, want);
}

#[test]
fn machine_config_pool_pause_is_a_merge_patch_of_spec_paused() {
    let s = setup();
    s.client
        .set_machine_config_pool_paused("worker", true)
        .unwrap();
    let r = only_request(&s.server);
    assert_eq!(r.method, "PATCH");
    assert_eq!(
        r.path,
        "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker"
    );
    assert_eq!(
        r.header("content-type"),
        Some("application/merge-patch+json")
    );
    assert_eq!(r.body_json(), json!({"spec": {"paused": true}}));
}

#[test]
fn node_taint_removal_is_a_json_patch_and_labels_a_merge_patch() {
    let s = setup();
    s.client.remove_node_taint("master-1", 2).unwrap();
    s.client
        .patch_node_labels("master-1", &json!({"a": "b", "c": ""}))
        .unwrap();
    let requests = s.server.requests();
    assert_eq!(requests[0].method, "PATCH");
    assert_eq!(requests[0].path, "/api/v1/nodes/master-1");
    assert_eq!(
        requests[0].header("content-type"),
        Some("application/json-patch+json")
    );
    assert_eq!(
        requests[0].body_json(),
        json!([{"op": "remove", "path": "/spec/taints/2"}])
    );
    assert_eq!(
        requests[1].header("content-type"),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        requests[1].body_json(),
        json!({"metadata": {"labels": {"a": "b", "c": ""}}})
    );
}

#[test]
fn pod_logs_with_and_without_since_seconds() {
    let s = setup();
    let ns = "openshift-machine-config-operator";
    let log = s
        .client
        .pod_log(ns, "machine-config-server-abc", Some(300))
        .unwrap();
    assert_eq!(log, "log line\n");
    s.client
        .pod_log("assisted-installer", "controller-x", None)
        .unwrap();
    let requests = s.server.requests();
    assert_eq!(requests[0].method, "GET");
    assert_eq!(
        requests[0].path,
        format!("/api/v1/namespaces/{ns}/pods/machine-config-server-abc/log")
    );
    assert_eq!(requests[0].query, "sinceSeconds=300");
    assert_eq!(
        requests[1].path,
        "/api/v1/namespaces/assisted-installer/pods/controller-x/log"
    );
    assert_eq!(requests[1].query, "");
}

#[test]
fn pods_by_label_and_field_selector_and_deletecollection() {
    let s = setup();
    s.client
        .list_pods(
            "assisted-installer",
            Some("job-name=assisted-installer-controller"),
            Some("status.phase=Running"),
        )
        .unwrap();
    s.client
        .delete_pods("openshift-dns-operator", None)
        .unwrap();
    let requests = s.server.requests();
    assert_eq!(
        requests[0].query_param("labelSelector").as_deref(),
        Some("job-name=assisted-installer-controller")
    );
    assert_eq!(
        requests[0].query_param("fieldSelector").as_deref(),
        Some("status.phase=Running")
    );
    assert_eq!(requests[1].method, "DELETE");
    assert_eq!(
        requests[1].path,
        "/api/v1/namespaces/openshift-dns-operator/pods"
    );
    assert_eq!(requests[1].query, "");
}

#[test]
fn api_errors_keep_their_codes_and_not_found_is_none_where_optional() {
    let s = setup();
    s.app.status(
        "GET",
        "/api/v1/namespaces/openshift-config/configmaps/openshift-install-manifests",
        404,
        "NotFound",
    );
    assert_eq!(
        s.client
            .get_config_map("openshift-config", "openshift-install-manifests")
            .unwrap(),
        None
    );
    s.app.status(
        "GET",
        "/api/v1/namespaces/assisted-installer/configmaps/olm-operator-manifests",
        403,
        "Forbidden",
    );
    let err = s
        .client
        .get_config_map("assisted-installer", "olm-operator-manifests")
        .unwrap_err();
    assert_eq!(api_error_code(&err), Some(403));
    assert!(
        format!("{err:#}").contains("ConfigMap assisted-installer/olm-operator-manifests"),
        "{err:#}"
    );

    s.app.status(
        "POST",
        "/api/v1/namespaces/assisted-installer/events",
        409,
        "AlreadyExists",
    );
    let event = NewEvent {
        name: "AssistedControllerIsReady".into(),
        reason: "AssistedControllerIsReady".into(),
        type_: "Normal".into(),
        message: "ready".into(),
        involved_namespace: "assisted-installer".into(),
        involved_name: "assisted-installer-controller".into(),
        time: std::time::UNIX_EPOCH,
    };
    let err = s
        .client
        .create_event("assisted-installer", &event)
        .unwrap_err();
    assert_eq!(api_error_code(&err), Some(409));

    s.app.status(
        "GET",
        "/apis/metal3.io/v1alpha1/provisionings/provisioning-configuration",
        404,
        "NotFound",
    );
    assert!(!s
        .client
        .provisioning_exists("provisioning-configuration")
        .unwrap());
    s.app.status("GET", "/api/v1/nodes/gone", 404, "NotFound");
    let err = s.client.get_node("gone").unwrap_err();
    assert_eq!(api_error_code(&err), Some(404));
}

#[test]
fn event_creation_posts_the_event() {
    let s = setup();
    let event = NewEvent {
        name: "AssistedControllerIsReady".into(),
        reason: "AssistedControllerIsReady".into(),
        type_: "Normal".into(),
        message: "Assisted controller managed to connect".into(),
        involved_namespace: "assisted-installer".into(),
        involved_name: "assisted-installer-controller".into(),
        time: std::time::UNIX_EPOCH,
    };
    s.client.create_event("assisted-installer", &event).unwrap();
    let r = only_request(&s.server);
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/api/v1/namespaces/assisted-installer/events");
    assert_eq!(r.header("content-type"), Some("application/json"));
    let body: Value = r.body_json();
    assert_eq!(body["metadata"]["name"], "AssistedControllerIsReady");
    assert_eq!(
        body["involvedObject"]["name"],
        "assisted-installer-controller"
    );
    assert!(body["involvedObject"].get("kind").is_none());
}

#[test]
fn one_client_serves_several_threads_at_once() {
    let s = setup();
    let client = Arc::new(s.client);
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let client = Arc::clone(&client);
            std::thread::spawn(move || {
                for _ in 0..5 {
                    client.get_node(&format!("node-{i}")).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(s.server.requests().len(), 20);
}

#[test]
fn a_service_account_token_is_sent_as_bearer() {
    let app = KubeApp::default();
    let server = TestServer::with_app(app);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "sa-token-1").unwrap();
    let client = KubeCluster::from_service_account(&server.base_url(), dir.path()).unwrap();
    client.list_csrs().unwrap();
    let r = only_request(&server);
    assert_eq!(r.header("authorization"), Some("Bearer sa-token-1"));
}

#[test]
fn a_service_account_without_its_token_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let err = KubeCluster::from_service_account("http://127.0.0.1:1", dir.path())
        .and_then(|c| c.list_csrs().map(drop))
        .unwrap_err();
    assert!(format!("{err:#}").contains("token"), "{err:#}");
}

#[test]
fn the_kubeconfig_is_used_when_it_exists() {
    let server = TestServer::with_app(KubeApp::default());
    let dir = tempfile::tempdir().unwrap();
    let path = kubeconfig(dir.path(), &server.base_url());
    let client = KubeCluster::kubeconfig_or_in_cluster(&path).unwrap();
    assert_eq!(client.server().trim_end_matches('/'), server.base_url());
    client.get_proxy("cluster").unwrap();
    assert_eq!(
        only_request(&server).path,
        "/apis/config.openshift.io/v1/proxies/cluster"
    );
}

#[test]
fn an_error_answer_without_a_status_body_keeps_its_code() {
    let s = setup();
    let path = "/api/v1/namespaces/assisted-installer/configmaps/olm-operator-manifests";
    s.app.answer("GET", path, Reply::empty(401));
    let err = s
        .client
        .get_config_map("assisted-installer", "olm-operator-manifests")
        .unwrap_err();
    assert_eq!(api_error_code(&err), Some(401), "{err:#}");
    s.app.answer(
        "GET",
        path,
        Reply {
            content_type: Some("text/plain"),
            body: b"forbidden by a proxy".to_vec(),
            ..Reply::empty(403)
        },
    );
    let err = s
        .client
        .get_config_map("assisted-installer", "olm-operator-manifests")
        .unwrap_err();
    assert_eq!(api_error_code(&err), Some(403), "{err:#}");
}
