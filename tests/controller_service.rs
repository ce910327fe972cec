//! The controller's service calls (`ControllerClient`) against the fake assisted-service on a
//! socket: method, path, query and body of every call, the monitored-operators cache and TLS.
//! The retry budget is `ClientRetry::controller`'s unit test; the retry loop and the headers
//! (token, a request id per call, JSON content type and length) are the shared client's, which
//! sends every request (`tests/service_client.rs`).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use assisted_installer::clock::FakeClock;
use assisted_installer::controller::service::{ControllerClient, ControllerService, RebootsEvent};
use assisted_installer::service::{
    ClientConfig, ClientRetry, CompletionParams, FinalizingStage, HostStage, LogsState,
    OperatorMonitorReport, OperatorStatus, ServiceError,
};
use common::fake_service::{host_json, FakeService, BASE_PATH};
use common::http_server::{Reply, Request, RequestLog, TestServer};
use serde_json::json;

const CLUSTER: &str = "3f8e9d2c-1b4a-4c5d-8e6f-7a8b9c0d1e2f";
const IE: &str = "6b1f2e0a-8d7c-4c1e-9a51-3f0d9c2b7e11";
const HOST: &str = "0b5a7c3e-2f4d-4e8a-9b1c-5d6e7f8a9b0c";

fn served() -> (FakeService, TestServer) {
    let fake = FakeService::new();
    let srv = TestServer::with_app(fake.clone());
    (fake, srv)
}

/// The controller's client as main builds it, waiting between retries on `clock`.
fn controller(url: &str, token: &str, clock: Arc<FakeClock>) -> ControllerClient {
    let config = ClientConfig {
        url: url.to_string(),
        token: token.to_string(),
        retry: ClientRetry::controller(),
        ..ClientConfig::default()
    };
    ControllerClient::new(config, CLUSTER, clock).unwrap()
}

fn client(fake: &FakeService, srv: &TestServer) -> (ControllerClient, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::new());
    (
        controller(&srv.base_url(), &fake.token(), clock.clone()),
        clock,
    )
}

fn api_path(call: &RequestLog) -> &str {
    call.path.strip_prefix(BASE_PATH).unwrap()
}

fn service_error(e: &anyhow::Error) -> &ServiceError {
    e.downcast_ref::<ServiceError>()
        .unwrap_or_else(|| panic!("not a ServiceError: {e:#}"))
}

fn operators() -> Vec<serde_json::Value> {
    vec![
        json!({"cluster_id": CLUSTER, "name": "console", "operator_type": "builtin"}),
        json!({"cluster_id": CLUSTER, "name": "cvo", "operator_type": "builtin", "status": "progressing"}),
        json!({"cluster_id": CLUSTER, "name": "odf", "operator_type": "olm", "namespace": "openshift-storage",
               "subscription_name": "odf-operator", "timeout_seconds": 1800}),
    ]
}

#[test]
fn every_call_method_path_query_and_body() {
    let (fake, srv) = served();
    fake.set_hosts(vec![host_json(HOST, IE, "master", Some("Rebooting"))]);
    fake.set_operators(operators());
    fake.set_cluster_file(
        "custom_manifests.json",
        br#"[{"Name":"odf","Content":"eA=="}]"#.to_vec(),
    );
    fake.set_credentials_file(
        "kubeconfig-noingress",
        b"apiVersion: v1\nkind: Config\n".to_vec(),
    );
    let (c, clock) = client(&fake, &srv);
    let dir = tempfile::tempdir().unwrap();

    let cluster = c.get_cluster(true).unwrap();
    assert!(cluster.hosts.is_empty());
    assert_eq!(c.get_cluster(false).unwrap().hosts[0].id, HOST);
    c.update_host_stage(IE, HOST, HostStage::Joined).unwrap();
    c.update_finalizing_stage(FinalizingStage::WaitingForClusterOperators)
        .unwrap();
    // An empty cache: fetched although the cache may serve.
    let ops = c.monitored_operators(true).unwrap();
    assert_eq!(ops.len(), 3);
    assert_eq!(
        (ops[2].subscription_name.as_str(), ops[2].timeout_seconds),
        ("odf-operator", Some(1800))
    );
    c.report_operator_status(&OperatorMonitorReport {
        name: "ocs".into(),
        version: "4.8.0".into(),
        status: Some(OperatorStatus::Available),
        status_info: String::new(),
    })
    .unwrap();
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    c.upload_ingress_cert(pem).unwrap();
    let manifests = dir.path().join("custom_manifests.json");
    c.download_custom_manifests(&manifests).unwrap();
    let kubeconfig = dir.path().join("kubeconfig-noingress");
    c.download_kubeconfig_noingress(&kubeconfig).unwrap();
    c.complete_installation(&CompletionParams {
        is_success: true,
        ..CompletionParams::default()
    })
    .unwrap();
    c.upload_controller_logs(b"\x1f\x8b-archive".to_vec())
        .unwrap();
    c.update_logs_progress(LogsState::Requested).unwrap();
    c.trigger_reboots_event(&RebootsEvent {
        cluster_id: CLUSTER.into(),
        host_id: HOST.into(),
        infra_env_id: IE.into(),
        node_name: "master-0".into(),
        reboots: 3,
    })
    .unwrap();

    let calls = srv.requests();
    let got: Vec<String> = (calls.iter())
        .map(|c| format!("{} {}?{}", c.method, api_path(c), c.query))
        .collect();
    let cl = format!("/v2/clusters/{CLUSTER}");
    let want = [
        format!("GET {cl}?exclude-hosts=true"),
        format!("GET {cl}?exclude-hosts=false"),
        format!("PUT /v2/infra-envs/{IE}/hosts/{HOST}/progress?"),
        format!("PUT {cl}/progress?"),
        format!("GET {cl}/monitored-operators?"),
        format!("PUT {cl}/monitored-operators?"),
        format!("POST {cl}/uploads/ingress-cert?"),
        format!("GET {cl}/downloads/files?file_name=custom_manifests.json"),
        format!("GET {cl}/downloads/credentials?file_name=kubeconfig-noingress"),
        format!("POST {cl}/actions/complete-installation?"),
        format!("POST {cl}/logs?logs_type=controller"),
        format!("PUT {cl}/logs-progress?"),
        "POST /v2/events?".to_string(),
    ];
    assert_eq!(got, want);
    let body = |i: usize| calls[i].body_text();
    assert_eq!(body(2), r#"{"current_stage":"Joined"}"#);
    assert_eq!(
        body(3),
        r#"{"finalizing_stage":"Waiting for cluster operators"}"#
    );
    assert_eq!(
        body(5),
        r#"{"name":"odf","version":"4.8.0","status":"available"}"#
    );
    assert_eq!(calls[6].body_json(), json!(pem));
    assert_eq!(body(9), r#"{"is_success":true}"#);
    let upload = &calls[10];
    assert!(upload
        .header("content-type")
        .unwrap()
        .starts_with("multipart/form-data; boundary="));
    let text = upload.body_text();
    assert!(
        text.contains("name=\"upfile\"; filename=\"controller_logs.tar.gz\""),
        "{text}"
    );
    assert!(text.contains("-archive"));
    assert_eq!(body(11), r#"{"logs_state":"requested"}"#);
    let event = calls[12].body_json();
    let time = event["event_time"].as_str().unwrap().to_string();
    assert_eq!(
        event,
        json!({
            "cluster_id": CLUSTER, "host_id": HOST, "infra_env_id": IE,
            "name": "reboots_for_node", "category": "user", "severity": "info",
            "message": "Node master-0 has been rebooted 3 times before completing installation",
            "event_time": time,
        })
    );
    assert!(time.ends_with('Z') && time.len() == 20, "{time}");

    // The downloads, as written.
    assert_eq!(
        std::fs::read(&manifests).unwrap(),
        br#"[{"Name":"odf","Content":"eA=="}]"#
    );
    assert_eq!(
        std::fs::read(&kubeconfig).unwrap(),
        b"apiVersion: v1\nkind: Config\n"
    );
    let mode = std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "credentials are private");

    // The operators list comes from the client's cache (whose rules are the unit test
    // `cache_serves_for_20_seconds_per_cluster_without_extending`'s) on its clock: the fetch
    // above was at 0 s.
    let path = format!("{BASE_PATH}/v2/clusters/{CLUSTER}/monitored-operators");
    let count = || {
        (srv.requests_for(&path).iter())
            .filter(|r| r.method == "GET")
            .count()
    };
    for (advance, use_cache, requests) in [(19, true, 1), (1, true, 2), (0, false, 3)] {
        clock.advance(Duration::from_secs(advance));
        assert_eq!(c.monitored_operators(use_cache).unwrap().len(), 3);
        assert_eq!(count(), requests, "after {advance} s");
    }
}

/// TLS as Go's service client: the `CA_CERT_PATH` bundle trusted on top of the system roots; without it the
/// service's private CA is refused (and not retried); `SKIP_CERT_VERIFICATION` trusts anything
/// (that it then ignores the CA path is `bootstrap`'s unit test).
#[test]
fn tls_ca_file_and_skip_verification() {
    use common::tls_server::Pki;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path(), "svc");
    let ca = dir.path().join("service-ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let cluster = json!({"kind": "Cluster", "id": CLUSTER, "status": "installing"});
    let app = move |_: &Request| Reply::json(200, &cluster);
    let srv = TestServer::with_app_tls(app, &pki.cert, &pki.key);
    let url = srv.url("");
    let build = |insecure: bool, cacert: Option<std::path::PathBuf>| {
        let config = ClientConfig {
            url: url.clone(),
            token: "tls-token".into(),
            insecure,
            cacert,
            retry: ClientRetry::controller(),
        };
        ControllerClient::new(config, CLUSTER, Arc::new(FakeClock::new())).unwrap()
    };

    let cluster = build(false, Some(ca.clone())).get_cluster(true).unwrap();
    assert_eq!(cluster.status, "installing");
    let requests = srv.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].path,
        format!("{BASE_PATH}/v2/clusters/{CLUSTER}")
    );
    assert_eq!(requests[0].query, "exclude-hosts=true");
    assert_eq!(requests[0].header("x-secret-key"), Some("tls-token"));

    let err = build(false, None).get_cluster(true).unwrap_err();
    let se = service_error(&err);
    assert_eq!((se.status, se.attempts), (None, 1), "{err:#}");
    assert_eq!(srv.requests().len(), 1, "the handshake failed");

    build(true, None).get_cluster(true).unwrap();
    assert_eq!(srv.requests().len(), 2);
}
