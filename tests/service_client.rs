//! The assisted-service client against the fake service: request shapes, auth and
//! request-id headers, the retry classes, downloads, and that the token never leaks. Then the
//! controller's calls (`ControllerClient`, over the same client, so the headers and the retry
//! loop are the ones checked above; its retry budget is `ClientRetry::controller`'s unit test):
//! method, path, query and body of every call, the monitored-operators cache and TLS.

mod common;

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use assisted_installer::clock::FakeClock;
use assisted_installer::config::Role;
use assisted_installer::controller::service::{ControllerClient, ControllerService, RebootsEvent};
use assisted_installer::service::{
    ClientConfig, ClientRetry, CompletionParams, FinalizingStage, HostStage, InventoryClient,
    LogsState, LogsType, LogsUpload, OperatorMonitorReport, OperatorStatus, ServiceClient,
    ServiceError,
};
use common::fake_service::{host_json, FakeService, BASE_PATH};
use common::http_server::{Reply, Request, RequestLog, TestServer};
use serde_json::json;

const CLUSTER: &str = "3f8e9d2c-1b4a-4c5d-8e6f-7a8b9c0d1e2f";
const IE: &str = "6b1f2e0a-8d7c-4c1e-9a51-3f0d9c2b7e11";
const HOST: &str = "0b5a7c3e-2f4d-4e8a-9b1c-5d6e7f8a9b0c";

fn fast_retry(max_retries: u32) -> ClientRetry {
    ClientRetry {
        min_retries: ClientRetry::MIN_RETRIES,
        max_retries,
        delay_base: Duration::from_millis(1),
        delay_cap: Duration::from_millis(5),
    }
}

fn client_for(url: &str, token: &str, retry: ClientRetry) -> ServiceClient {
    ServiceClient::new(ClientConfig {
        url: url.to_string(),
        token: token.to_string(),
        retry,
        ..ClientConfig::default()
    })
    .unwrap()
}

/// The fake service on the test server.
fn served() -> (FakeService, TestServer) {
    let fake = FakeService::new();
    let srv = TestServer::with_app(fake.clone());
    (fake, srv)
}

fn client(fake: &FakeService, srv: &TestServer) -> ServiceClient {
    client_for(&srv.base_url(), &fake.token(), fast_retry(20))
}

/// The path below `/api/assisted-install`.
fn api_path(call: &RequestLog) -> &str {
    call.path.strip_prefix(BASE_PATH).unwrap()
}

/// Every operation of the trait: its request (method, path below the base path, query, body),
/// each with the token, its own request id (a v4 UUID) and, for a JSON body, its type and
/// length; and what the fake recorded. The flow scenarios, which reach the fake through this
/// client, rely on these.
#[test]
fn every_call_sends_its_request_with_the_token_and_its_own_request_id() {
    let (fake, srv) = served();
    fake.set_host_ignition(HOST, b"{}".to_vec());
    fake.set_cluster_file("bootstrap.ign", b"{}".to_vec());
    fake.set_hosts(vec![
        host_json(HOST, IE, "master", Some("Done")),
        host_json("9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d", IE, "worker", None),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let c = client(&fake, &srv);
    // The cluster's own fields: models::tests::cluster_parses_leniently.
    assert!(c.get_cluster(CLUSTER, true).unwrap().hosts.is_empty());
    assert!(c.get_cluster(CLUSTER, true).unwrap().hosts.is_empty());
    let cluster = c.get_cluster(CLUSTER, false).unwrap();
    assert_eq!(cluster.hosts.len(), 2);
    assert_eq!(cluster.hosts[0].current_stage(), "Done");
    assert_eq!(cluster.hosts[0].infra_env_id, IE);
    let masters = c.list_cluster_hosts(CLUSTER, Some(&Role::Master)).unwrap();
    assert_eq!(masters.len(), 1);
    assert_eq!(masters[0].role, Some(Role::Master));
    let arbiters = c.list_cluster_hosts(CLUSTER, Some(&Role::Arbiter));
    assert!(arbiters.unwrap().is_empty());
    assert_eq!(c.list_cluster_hosts(CLUSTER, None).unwrap().len(), 2);
    c.download_host_ignition(IE, HOST, &dir.path().join("a.ign"))
        .unwrap();
    c.download_cluster_file(CLUSTER, "bootstrap.ign", &dir.path().join("b.ign"))
        .unwrap();
    c.update_host_progress(IE, HOST, HostStage::Installing, "master")
        .unwrap();
    c.update_host_progress(IE, HOST, HostStage::Rebooting, "")
        .unwrap();
    c.update_host_logs_progress(IE, HOST, LogsState::Requested)
        .unwrap();
    c.update_cluster_logs_progress(CLUSTER, LogsState::Completed)
        .unwrap();
    let host_logs = LogsUpload {
        cluster_id: CLUSTER.into(),
        logs_type: LogsType::Host,
        host: Some((IE.into(), HOST.into())),
        file_name: "logs.tar.gz".into(),
        data: b"archive bytes".to_vec(),
    };
    c.upload_logs(&host_logs).unwrap();
    c.upload_logs(&LogsUpload {
        logs_type: LogsType::Controller,
        host: None,
        file_name: "controller_logs.tar.gz".into(),
        ..host_logs
    })
    .unwrap();

    let (h, c) = (
        format!("/v2/infra-envs/{IE}/hosts/{HOST}"),
        format!("/v2/clusters/{CLUSTER}"),
    );
    // `METHOD path?query body` below the base path.
    let want = [
        format!("GET {c}?exclude-hosts=true"),
        format!("GET {c}?exclude-hosts=true"),
        format!("GET {c}?exclude-hosts=false"),
        format!("GET {c}/hosts?role=master"),
        format!("GET {c}/hosts?role=arbiter"),
        format!("GET {c}/hosts?"),
        format!("GET /v2/infra-env/{IE}/hosts/{HOST}/downloads/ignition?"),
        format!("GET {c}/downloads/files?file_name=bootstrap.ign"),
        format!(r#"PUT {h}/progress? {{"current_stage":"Installing","progress_info":"master"}}"#),
        format!(r#"PUT {h}/progress? {{"current_stage":"Rebooting"}}"#),
        format!(r#"PUT {h}/logs-progress? {{"logs_state":"requested"}}"#),
        format!(r#"PUT {c}/logs-progress? {{"logs_state":"completed"}}"#),
        format!("POST {c}/logs?logs_type=host&infra_env_id={IE}&host_id={HOST} upfile logs.tar.gz"),
        format!("POST {c}/logs?logs_type=controller upfile controller_logs.tar.gz"),
    ];
    let calls = srv.requests();
    assert_eq!(calls.len(), want.len(), "{calls:#?}");
    for (call, want) in calls.iter().zip(want) {
        assert_eq!(call.status / 100, 2, "{call:?}");
        assert_eq!(call.header("x-secret-key"), Some(fake.token().as_str()));
        let id = call.header("x-request-id").expect("X-Request-ID");
        assert_eq!(id.len(), 36, "{id}");
        assert_eq!(id.as_bytes()[14], b'4', "a v4 UUID: {id}");
        let text = call.body_text();
        let content_type = call.header("content-type").unwrap_or_default();
        let body = if content_type.starts_with("multipart/form-data") {
            // The file part, as the service's `upfile` field.
            let (_, name) = text.split_once(r#"name="upfile"; filename=""#).unwrap();
            assert!(text.contains("archive bytes"), "{text}");
            format!("upfile {}", name.split('"').next().unwrap())
        } else {
            if !text.is_empty() {
                assert_eq!(content_type, "application/json", "{want}");
                let length = call.body.len().to_string();
                assert_eq!(call.header("content-length"), Some(length.as_str()));
            }
            text
        };
        let line = format!("{} {}?{} {body}", call.method, api_path(call), call.query);
        assert_eq!(line.trim_end(), want);
    }
    let ids: std::collections::HashSet<_> =
        calls.iter().map(|c| c.header("x-request-id")).collect();
    assert_eq!(ids.len(), calls.len(), "{ids:?}");
    assert_eq!(
        fake.progress_reports(HOST),
        [
            ("Installing".to_string(), "master".to_string()),
            ("Rebooting".to_string(), String::new())
        ]
    );
    assert_eq!(
        fake.state().host_logs_reports,
        [(HOST.to_string(), "requested".to_string())]
    );
    assert_eq!(
        fake.state().cluster_logs_reports,
        [(CLUSTER.to_string(), "completed".to_string())]
    );
}

type FailedCall = fn(&FakeService, &TestServer, &Path) -> anyhow::Result<()>;

/// The retry classes, as the Go client: 5xx until `max_retries` (20 here), 404 `min_retries`
/// times, 401 and 409 never. The error names the call, the status and the service's reason;
/// the retries of a call share its request id; a failed download leaves no file behind.
#[test]
fn failed_calls_are_retried_by_class() {
    use HostStage::{Installing, WritingImageToDisk};
    let progress =
        format!("UpdateHostInstallProgress (PUT /v2/infra-envs/{IE}/hosts/{HOST}/progress)");
    let ignition =
        format!("DownloadHostIgnition (GET /v2/infra-env/{IE}/hosts/{HOST}/downloads/ignition)");
    // The call, with its set-up; the requests made in all; the error's status and attempts,
    // and its text.
    let cases: [(FailedCall, usize, u16, u32, String); 4] = [
        (
            |fake, srv, _| {
                fake.fail_path("/progress", 500);
                client(fake, srv).update_host_progress(IE, HOST, Installing, "master")
            },
            21,
            500,
            21,
            format!("{progress}: 500 Internal Server Error: injected fault 500 for this path (gave up after 21 attempts)"),
        ),
        (
            // No ignition configured for the host.
            |fake, srv, dir| {
                let c = client_for(&srv.base_url(), &fake.token(), fast_retry(360));
                c.download_host_ignition(IE, HOST, &dir.join("master-host.ign"))
            },
            11,
            404,
            11,
            format!("{ignition}: 404 Not Found: no ignition for host {HOST} (gave up after 11 attempts)"),
        ),
        (
            |fake, srv, _| {
                let c = client(fake, srv);
                c.update_host_progress(IE, HOST, WritingImageToDisk, "")?;
                c.update_host_progress(IE, HOST, Installing, "master")
            },
            2,
            409,
            1,
            format!("{progress}: 409 Conflict: Can't move host {HOST} stage backwards from Writing image to disk to Installing"),
        ),
        (
            |_, srv, _| {
                let c = client_for(&srv.base_url(), "some-other-token-value", fast_retry(20));
                c.get_cluster(CLUSTER, false).map(drop)
            },
            1,
            401,
            1,
            format!("GetCluster (GET /v2/clusters/{CLUSTER}?exclude-hosts=false): 401 Unauthorized: Unauthorized"),
        ),
    ];
    for (call, requests, status, attempts, text) in cases {
        let (fake, srv) = served();
        let dir = tempfile::tempdir().unwrap();
        let err = call(&fake, &srv, dir.path()).unwrap_err();
        let se = err.downcast_ref::<ServiceError>().expect("a ServiceError");
        assert_eq!((se.status, se.attempts), (Some(status), attempts), "{err}");
        assert_eq!(err.to_string(), text);
        let calls = srv.requests();
        assert_eq!(calls.len(), requests, "{text}");
        let ids: std::collections::HashSet<_> = calls[requests - attempts as usize..]
            .iter()
            .map(|c| c.header("x-request-id").unwrap())
            .collect();
        assert_eq!(ids.len(), 1, "{text}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}

#[test]
fn downloads_land_atomically_in_place() {
    let (fake, srv) = served();
    let ignition = br#"{"ignition":{"version":"3.2.0"}}"#.to_vec();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    fake.set_host_ignition(HOST, ignition.clone());
    fake.set_cluster_file("bootstrap.ign", big.clone());
    let c = client(&fake, &srv);
    let dir = tempfile::tempdir().unwrap();
    let host_dest = dir.path().join(format!("master-{HOST}.ign"));
    std::fs::write(&host_dest, b"stale").unwrap();
    c.download_host_ignition(IE, HOST, &host_dest).unwrap();
    assert_eq!(std::fs::read(&host_dest).unwrap(), ignition);
    let boot_dest = dir.path().join("bootstrap.ign");
    c.download_cluster_file(CLUSTER, "bootstrap.ign", &boot_dest)
        .unwrap();
    assert_eq!(std::fs::read(&boot_dest).unwrap(), big);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "no temporary files left: {names:?}");
    let mode = std::fs::metadata(&boot_dest).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "ignition files are private: {mode:o}");
    // Into a missing directory: fails at once.
    let dest = Path::new("/nonexistent-dir-for-test/x.ign");
    let err = c.download_host_ignition(IE, HOST, dest).unwrap_err();
    assert_eq!(srv.requests().len(), 3);
    let text = format!("{err:#}");
    assert!(text.contains("DownloadHostIgnition"), "{text}");
    assert!(text.contains("/nonexistent-dir-for-test/"), "{text}");
}

#[test]
fn the_token_never_appears_in_errors_debug_or_logs() {
    let (fake, srv) = served();
    let token = &fake.token();
    let (subscriber, logs) = common::log_capture(tracing::Level::TRACE);
    let mut texts = Vec::new();
    // The process-wide subscriber, not a scoped one: tracing caches a callsite's interest when
    // it is first hit, and another test thread, without this subscriber, may hit the retry log
    // first. The other tests' logs land here too, and must not hold the token either.
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    {
        let config = ClientConfig {
            url: srv.base_url(),
            token: token.to_string(),
            insecure: true,
            cacert: None,
            retry: fast_retry(2),
        };
        // The config's and the client's Debug: client::tests::config_debug_hides_token.
        let c = ServiceClient::new(config).unwrap();
        // Success after retried failures, a 409, a 404 download, a refused connection.
        fake.fail_next(1, 500);
        fake.fail_next(1, 503);
        c.update_host_progress(IE, HOST, HostStage::Rebooting, "")
            .unwrap();
        let statuses: Vec<u16> = srv.requests().iter().map(|c| c.status).collect();
        assert_eq!(statuses, [500, 503, 200]);
        assert_eq!(fake.progress_reports(HOST).len(), 1);
        let e = c
            .update_host_progress(IE, HOST, HostStage::Installing, "")
            .unwrap_err();
        texts.push(format!("{e:#} {e:?}"));
        let dir = tempfile::tempdir().unwrap();
        let e = c
            .download_host_ignition(IE, HOST, &dir.path().join("x"))
            .unwrap_err();
        texts.push(format!("{e:#} {e:?}"));
        fake.fail_path("/hosts", 503);
        let e = c.list_cluster_hosts(CLUSTER, None).unwrap_err();
        texts.push(format!("{e:#} {e:?}"));
        // A port on 127.0.0.1 with nothing listening.
        let closed_port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let closed = client_for(&format!("http://{closed_port}"), token, fast_retry(1));
        let e = closed.get_cluster(CLUSTER, true).unwrap_err();
        texts.push(format!("{e:#} {e:?}"));
    }
    let logs = logs();
    assert!(logs.contains("retrying"), "retries are logged: {logs}");
    assert!(logs.contains("--insecure"), "{logs}");
    for text in texts.iter().chain(std::iter::once(&logs)) {
        assert!(!text.contains(token), "token leaked: {text}");
        assert!(!text.contains("fake-agent-token"), "token leaked: {text}");
    }
}

/// A service without authentication wants no token: an empty one is not sent at all. When the
/// service does require one, its 401 says which token was empty, for the installer's client
/// and the controller's.
#[test]
fn an_empty_token_is_not_sent_and_a_401_names_the_token() {
    let (_fake, srv) = served();
    let installer = client_for(&srv.base_url(), "", fast_retry(20));
    let err = installer.get_cluster(CLUSTER, false).unwrap_err();
    let se = err.downcast_ref::<ServiceError>().expect("a ServiceError");
    assert_eq!((se.status, se.attempts), (Some(401), 1), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "GetCluster (GET /v2/clusters/{CLUSTER}?exclude-hosts=false): 401 Unauthorized: \
             Unauthorized; no token was sent, and this assisted-service requires one: \
             PULL_SECRET_TOKEN is empty or unset (the agent passes the host's token to the \
             installer in it)"
        )
    );
    let config = ClientConfig {
        url: srv.base_url(),
        retry: ClientRetry {
            max_retries: 0,
            ..fast_retry(0)
        },
        ..ClientConfig::default()
    };
    let controller = ControllerClient::new(config, CLUSTER, Arc::new(FakeClock::new())).unwrap();
    let err = controller.get_cluster(false).unwrap_err().to_string();
    assert!(
        err.ends_with(
            "no token was sent, and this assisted-service requires one: the controller's token \
             is empty (the file /etc/assisted-installer-controller/token, from the \
             pull-secret-token item of its Secret, else PULL_SECRET_TOKEN)"
        ),
        "{err}"
    );
    let requests = srv.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.header("x-secret-key"), None, "{r:?}");
        assert!(r.header("x-request-id").is_some());
    }
}

/// The controller's client as main builds it, waiting between retries on its fake clock.
fn controller_client(fake: &FakeService, srv: &TestServer) -> (ControllerClient, Arc<FakeClock>) {
    let clock = Arc::new(FakeClock::new());
    let config = ClientConfig {
        url: srv.base_url(),
        token: fake.token(),
        retry: ClientRetry::controller(),
        ..ClientConfig::default()
    };
    let client = ControllerClient::new(config, CLUSTER, clock.clone()).unwrap();
    (client, clock)
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
fn every_controller_call_method_path_query_and_body() {
    let (fake, srv) = served();
    fake.set_hosts(vec![host_json(HOST, IE, "master", Some("Rebooting"))]);
    fake.state().operators = operators();
    fake.set_cluster_file(
        "custom_manifests.json",
        br#"[{"Name":"odf","Content":"eA=="}]"#.to_vec(),
    );
    fake.set_credentials_file(
        "kubeconfig-noingress",
        b"apiVersion: v1\nkind: Config\n".to_vec(),
    );
    let (c, clock) = controller_client(&fake, &srv);
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
    let se = err.downcast_ref::<ServiceError>().expect("a ServiceError");
    assert_eq!((se.status, se.attempts), (None, 1), "{err:#}");
    assert_eq!(srv.requests().len(), 1, "the handshake failed");

    build(true, None).get_cluster(true).unwrap();
    assert_eq!(srv.requests().len(), 2);
}
