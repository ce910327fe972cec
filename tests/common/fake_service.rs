#![allow(dead_code)]
//! The fake assisted-service, an [`App`] of the test HTTP server: served by the test
//! (`TestServer::with_app(fake.clone())`), or on a server of its own behind the real REST
//! client ([`FakeService::client`]). Tests set up and read what it holds through
//! [`FakeService::state`].
//!
//! It keeps the service's stage rules: per host, a stage may repeat or move forward in its
//! role's order (skipping is fine), never backwards, and one outside that order is a 409;
//! `Failed` is accepted from any stage and is final. The role is the one given with
//! [`FakeService::set_host_role`], else the host list's (`bootstrap: true` means the bootstrap
//! order), else `master`. Injected answers ([`FakeService::fail_next`], `fail_path`) apply
//! after the token check (`X-Secret-Key`, else 401 with swagger's `infra_error`) and before
//! the body checks (a 400). The controller's calls are recorded as sent (their enums and
//! required fields are Prism's to check, `tests/service_contract.rs`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use assisted_installer::service::client::API_BASE_PATH;
use assisted_installer::service::{
    ClientConfig, ClientRetry, ClusterFinalizingProgress, HostProgress, HostStage,
    LogsProgressParams, LogsType, LogsUpload, ServiceClient, StageOrder,
};
use serde_json::{json, Value};

use super::http_server::{App, Reply, Request, TestServer};

/// Swagger `basePath`.
pub(crate) const BASE_PATH: &str = API_BASE_PATH;
const TOKEN: &str = "fake-agent-token-0123456789";

use HostStage::Failed;

/// The stage order the service accepts per role (`arbiter` and unknown roles: the master's):
/// the crate's one model of it, whose unit tests pin the lists. `sno` is not a role the service
/// stores: the fake's name for a single-node cluster's host.
fn stage_order(role: &str) -> &'static [HostStage] {
    let order = match role {
        "worker" => StageOrder::Worker,
        "bootstrap" => StageOrder::Bootstrap,
        "sno" => StageOrder::SingleNode,
        _ => StageOrder::Master,
    };
    order.stages()
}

/// A host object as the service would list it.
pub(crate) fn host_json(
    id: &str,
    infra_env_id: &str,
    role: &str,
    current_stage: Option<&str>,
) -> Value {
    let mut host = json!({
        "kind": "Host",
        "id": id,
        "href": format!("{BASE_PATH}/v2/infra-envs/{infra_env_id}/hosts/{id}"),
        "infra_env_id": infra_env_id,
        "status": "installing-in-progress",
        "status_info": "Host is being installed",
        "role": role,
        "requested_hostname": format!("host-{}", &id[..id.len().min(8)]),
    });
    if let Some(stage) = current_stage {
        host["progress"] = json!({"current_stage": stage, "progress_info": ""});
    }
    host
}

fn refuse<T>(status: u16, reason: impl Into<String>) -> Result<T, Reply> {
    Err(error_reply(status, &reason.into()))
}

/// What the fake holds, and what it recorded (in order; `*_logs_reports` are (host or
/// cluster id, logs_state), the controller's records are the accepted bodies).
#[derive(Default)]
pub(crate) struct State {
    /// Accepted progress reports by host: (stage, info), in order.
    progress: HashMap<String, Vec<(String, String)>>,
    roles: HashMap<String, String>,
    /// What the downloads serve, by kind (`ignition` by host id, `files` and `credentials` by
    /// file name) and name.
    downloads: HashMap<(String, String), Vec<u8>>,
    cluster: serde_json::Map<String, Value>,
    hosts: Vec<Value>,
    /// The hosts of the n-th host-list answer (n counts from 0 over both `GET …/hosts` and
    /// `GET /v2/clusters/{id}?exclude-hosts=false`).
    hosts_script: Option<Box<dyn FnMut(u64) -> Vec<Value> + Send>>,
    host_list_answers: u64,
    fail_next: VecDeque<u16>,
    fail_paths: Vec<(String, u16)>,
    pub host_logs_reports: Vec<(String, String)>,
    pub cluster_logs_reports: Vec<(String, String)>,
    pub uploads: Vec<LogsUpload>,
    /// The monitored operators (swagger `monitored-operator` objects); reports update them.
    pub operators: Vec<Value>,
    pub finalizing_stages: Vec<String>,
    pub operator_reports: Vec<Value>,
    pub ingress_certs: Vec<String>,
    pub completions: Vec<Value>,
    pub events: Vec<Value>,
    /// Served through Prism's proxy, which forwards a JSON-string body (the ingress CA)
    /// decoded, without its quotes: accept that text as the string (Prism validated it).
    pub behind_prism: bool,
    /// As the service: listed hosts carry their last accepted stage, and `Done` makes a host
    /// `installed`.
    pub hosts_follow_progress: bool,
}

/// See the module documentation. Clones share the state.
#[derive(Clone, Default)]
pub(crate) struct FakeService {
    state: Arc<Mutex<State>>,
    /// Serves `state` to [`FakeService::client`]s; started by the first, closed with the last
    /// clone (the server's own clone has none).
    served: Arc<OnceLock<TestServer>>,
}

impl FakeService {
    pub(crate) fn new() -> FakeService {
        FakeService::default()
    }

    /// The token the fake expects (`X-Secret-Key`).
    pub(crate) fn token(&self) -> String {
        TOKEN.into()
    }

    /// The REST client (without retries) of this fake, served on a socket of its own.
    pub(crate) fn client(&self) -> Arc<ServiceClient> {
        let srv = self.served.get_or_init(|| {
            TestServer::with_app(FakeService {
                state: self.state.clone(),
                ..FakeService::default()
            })
        });
        let config = ClientConfig {
            url: srv.base_url(),
            token: self.token(),
            retry: ClientRetry {
                min_retries: 0,
                max_retries: 0,
                ..ClientRetry::installer()
            },
            ..ClientConfig::default()
        };
        Arc::new(ServiceClient::new(config).expect("the fake's client"))
    }

    /// The requests of the [`FakeService::client`]s, as `METHOD /path[?query]` below the base
    /// path.
    pub(crate) fn calls(&self) -> Vec<String> {
        let requests = self.served.get().map(TestServer::requests);
        let line = |r: &super::http_server::RequestLog| {
            let path = r.path.strip_prefix(BASE_PATH).unwrap_or(&r.path);
            let query = (!r.query.is_empty()).then(|| format!("?{}", r.query));
            format!("{} {path}{}", r.method, query.unwrap_or_default())
        };
        requests.unwrap_or_default().iter().map(line).collect()
    }

    /// Drop the guard before the next call to the fake (a statement of its own).
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stage order enforced for this host: `master`, `arbiter`, `worker`, `bootstrap` or
    /// `sno`.
    pub(crate) fn set_host_role(&self, host_id: &str, role: &str) {
        self.state().roles.insert(host_id.into(), role.into());
    }

    fn set_download(&self, kind: &str, name: &str, bytes: impl Into<Vec<u8>>) {
        let key = (kind.to_string(), name.to_string());
        self.state().downloads.insert(key, bytes.into());
    }

    pub(crate) fn set_host_ignition(&self, host_id: &str, bytes: impl Into<Vec<u8>>) {
        self.set_download("ignition", host_id, bytes);
    }

    /// A `V2DownloadClusterFiles` file (e.g. `bootstrap.ign`).
    pub(crate) fn set_cluster_file(&self, file_name: &str, bytes: impl Into<Vec<u8>>) {
        self.set_download("files", file_name, bytes);
    }

    /// A `V2DownloadClusterCredentials` file (e.g. `kubeconfig-noingress`).
    pub(crate) fn set_credentials_file(&self, file_name: &str, bytes: impl Into<Vec<u8>>) {
        self.set_download("credentials", file_name, bytes);
    }

    /// Fields merged (top level) over the default cluster object, e.g.
    /// `json!({"kind": "AddHostsCluster", "platform": {"type": "vsphere"}})`.
    pub(crate) fn set_cluster(&self, fields: Value) {
        let Value::Object(map) = fields else {
            panic!("set_cluster wants a JSON object")
        };
        self.state().cluster.extend(map);
    }

    /// A fixed host list (of [`host_json`]s, which have the fields swagger requires).
    pub(crate) fn set_hosts(&self, hosts: Vec<Value>) {
        let mut state = self.state();
        state.hosts = hosts;
        state.hosts_script = None;
    }

    /// A host list that changes with each answer: `script(n)` gives the hosts of the n-th
    /// host-list answer. Role filtering is applied afterwards.
    pub(crate) fn set_hosts_script(&self, script: impl FnMut(u64) -> Vec<Value> + Send + 'static) {
        self.state().hosts_script = Some(Box::new(script));
    }

    /// The next `n` calls (any path) get `status`; calls queue up.
    pub(crate) fn fail_next(&self, n: usize, status: u16) {
        (self.state().fail_next).extend(std::iter::repeat_n(status, n));
    }

    /// Every call whose full path contains `path_substring` gets `status`.
    pub(crate) fn fail_path(&self, path_substring: &str, status: u16) {
        (self.state().fail_paths).push((path_substring.into(), status));
    }

    /// Accepted progress reports of a host: (stage, info), in order.
    pub(crate) fn progress_reports(&self, host_id: &str) -> Vec<(String, String)> {
        let reports = self.state().progress.get(host_id).cloned();
        reports.unwrap_or_default()
    }
}

/// The file of a multipart/form-data body (the first `filename`): (file name, bytes).
fn multipart_file(req: &Request) -> Option<(String, Vec<u8>)> {
    let content_type = req
        .header("content-type")?
        .strip_prefix("multipart/form-data")?;
    let (_, boundary) = content_type.split_once("boundary=")?;
    let (body, delimiter) = (&req.body, format!("\r\n--{}", boundary.trim_matches('"')));
    let find = |needle: &[u8], from: usize| {
        let at = body[from..].windows(needle.len()).position(|w| w == needle);
        at.map(|i| i + from)
    };
    let name_at = find(b"filename=\"", 0)? + b"filename=\"".len();
    let name_end = find(b"\"", name_at)?;
    let data_at = find(b"\r\n\r\n", name_end)? + 4;
    let data_end = find(delimiter.as_bytes(), data_at)?;
    let name = String::from_utf8_lossy(&body[name_at..name_end]).into_owned();
    Some((name, body[data_at..data_end].to_vec()))
}

/// Swagger `error` (401 and 403 use `infra_error`, as the spec says).
fn error_reply(status: u16, reason: &str) -> Reply {
    if status == 401 || status == 403 {
        return Reply::json(status, &json!({"code": status, "message": reason}));
    }
    Reply::json(
        status,
        &json!({"kind": "Error", "id": status, "href": "", "code": status.to_string(), "reason": reason}),
    )
}

/// The body as `T` (a swagger parameters object), else a 400.
fn params<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Reply> {
    serde_json::from_slice(body).or_else(|e| refuse(400, format!("the body: {e}")))
}

impl State {
    fn injected(&mut self, full_path: &str) -> Result<(), Reply> {
        if let Some(status) = self.fail_next.pop_front() {
            return refuse(status, format!("injected fault {status}"));
        }
        match self.fail_paths.iter().find(|(s, _)| full_path.contains(s)) {
            Some(&(_, status)) => refuse(status, format!("injected fault {status} for this path")),
            None => Ok(()),
        }
    }

    fn role_of(&self, host: &str) -> String {
        if let Some(role) = self.roles.get(host) {
            return role.clone();
        }
        match self.hosts.iter().find(|h| h["id"] == host) {
            Some(h) if h["bootstrap"] == true => "bootstrap".into(),
            Some(h) => h["role"].as_str().unwrap_or("master").to_string(),
            None => "master".into(),
        }
    }

    fn update_progress(&mut self, host: &str, stage: HostStage, info: &str) -> Result<(), Reply> {
        let role = self.role_of(host);
        let order = stage_order(&role);
        let at = |s: HostStage| order.iter().position(|o| *o == s);
        let accepted = self.progress.entry(host.to_string()).or_default();
        let current = accepted.last().map(|(s, _)| s.parse().unwrap());
        let refusal = match current {
            Some(Failed) => format!("Can't set progress {stage} to host {host}: it already failed"),
            _ if stage == Failed => String::new(),
            _ if at(stage).is_none() => {
                format!("Stage {stage} is not valid for a host with role {role}")
            }
            Some(current) if at(stage) < at(current) => {
                format!("Can't move host {host} stage backwards from {current} to {stage}")
            }
            _ => String::new(),
        };
        if !refusal.is_empty() {
            return refuse(409, refusal);
        }
        accepted.push((stage.to_string(), info.to_string()));
        Ok(())
    }

    fn download(&self, kind: &str, name: &str) -> Result<Vec<u8>, Reply> {
        match self.downloads.get(&(kind.to_string(), name.to_string())) {
            Some(bytes) => Ok(bytes.clone()),
            None if kind == "ignition" => refuse(404, format!("no ignition for host {name}")),
            None => refuse(404, format!("no {kind} file {name}")),
        }
    }

    /// Records a report and applies it to the operator of that name (404 when there is none,
    /// as the service answers).
    fn report_operator(&mut self, report: Value) -> Result<(), Reply> {
        let name = report["name"].as_str().unwrap_or("").to_string();
        let Some(op) = (self.operators.iter_mut()).find(|o| o["name"] == name.as_str()) else {
            return refuse(404, format!("no monitored operator {name:?}"));
        };
        for field in ["status", "status_info", "version"] {
            if let Some(v) = report.get(field) {
                op[field] = v.clone();
            }
        }
        self.operator_reports.push(report);
        Ok(())
    }

    fn current_hosts(&mut self) -> Vec<Value> {
        let n = self.host_list_answers;
        self.host_list_answers += 1;
        let mut hosts = match self.hosts_script.as_mut() {
            Some(script) => script(n),
            None => self.hosts.clone(),
        };
        if !self.hosts_follow_progress {
            return hosts;
        }
        for host in &mut hosts {
            let id = host["id"].as_str().unwrap_or_default().to_string();
            if let Some((stage, _)) = self.progress.get(&id).and_then(|p| p.last()) {
                host["progress"]["current_stage"] = json!(stage);
                if stage == "Done" {
                    host["status"] = json!("installed");
                }
            }
        }
        hosts
    }

    fn cluster(&mut self, id: &str, exclude_hosts: bool) -> Value {
        let mut cluster = json!({
            "kind": "Cluster",
            "id": id,
            "href": format!("{BASE_PATH}/v2/clusters/{id}"),
            "name": "fake-cluster",
            "image_info": {},
            "status": "installing",
            "status_info": "Installation in progress",
            "openshift_version": "4.18.0",
            "base_dns_domain": "example.com",
            "control_plane_count": 3,
            "high_availability_mode": "Full",
            "platform": {"type": "baremetal"},
        });
        let map = cluster.as_object_mut().unwrap();
        map.extend(self.cluster.clone());
        map.remove("hosts");
        if !exclude_hosts {
            map.insert("hosts".into(), Value::Array(self.current_hosts()));
        }
        cluster
    }

    fn route(&mut self, req: &Request) -> Result<Reply, Reply> {
        let Some(api_path) = req.path.strip_prefix(BASE_PATH) else {
            return refuse(404, format!("no such path {}", req.path));
        };
        if req.header("x-secret-key") != Some(TOKEN) {
            return refuse(401, "Unauthorized");
        }
        self.injected(&req.path)?;
        let segments: Vec<&str> = api_path.trim_start_matches('/').split('/').collect();
        let query = |name: &str| req.query_param(name);
        match (req.method.as_str(), segments.as_slice()) {
            ("PUT", ["v2", "infra-envs", _, "hosts", host, "progress"]) => {
                let p: HostProgress = params(&req.body)?;
                let Some(stage) = p.current_stage else {
                    return refuse(400, "current_stage is required");
                };
                self.update_progress(host, stage, &p.progress_info)?;
                Ok(Reply::empty(200))
            }
            ("GET", ["v2", "infra-env", _, "hosts", host, "downloads", "ignition"]) => {
                Ok(Reply::bytes(self.download("ignition", host)?))
            }
            ("GET", ["v2", "clusters", _, "downloads", kind @ ("files" | "credentials")]) => {
                let name =
                    query("file_name").ok_or_else(|| error_reply(400, "file_name is required"))?;
                Ok(Reply::bytes(self.download(kind, &name)?))
            }
            ("GET", ["v2", "clusters", cluster]) => {
                let exclude = query("exclude-hosts").as_deref() == Some("true");
                Ok(Reply::json(200, &self.cluster(cluster, exclude)))
            }
            ("GET", ["v2", "clusters", _, "hosts"]) => {
                let role = query("role");
                let hosts = self.current_hosts().into_iter();
                let hosts = hosts.filter(|h| role.as_deref().is_none_or(|r| h["role"] == r));
                Ok(Reply::json(200, &hosts.collect::<Value>()))
            }
            ("PUT", ["v2", "infra-envs", _, "hosts", host, "logs-progress"]) => {
                let LogsProgressParams { logs_state } = params(&req.body)?;
                (self.host_logs_reports).push((host.to_string(), logs_state.to_string()));
                Ok(Reply::empty(204))
            }
            ("PUT", ["v2", "clusters", cluster, "logs-progress"]) => {
                let LogsProgressParams { logs_state } = params(&req.body)?;
                (self.cluster_logs_reports).push((cluster.to_string(), logs_state.to_string()));
                Ok(Reply::empty(204))
            }
            ("POST", ["v2", "clusters", cluster, "logs"]) => {
                let logs_type = query("logs_type").unwrap_or_default().parse::<LogsType>();
                let logs_type = logs_type.or_else(|e| refuse(400, e.to_string()))?;
                let Some((file_name, data)) = multipart_file(req) else {
                    return refuse(400, "a log upload is multipart/form-data with a file part");
                };
                let host = query("infra_env_id").zip(query("host_id"));
                self.uploads.push(LogsUpload {
                    cluster_id: cluster.to_string(),
                    logs_type,
                    host,
                    file_name,
                    data,
                });
                Ok(Reply::empty(204))
            }
            ("PUT", ["v2", "clusters", _, "progress"]) => {
                let ClusterFinalizingProgress { finalizing_stage } = params(&req.body)?;
                let stage = finalizing_stage.to_string();
                let progress =
                    json!({"finalizing_stage": stage, "finalizing_stage_timed_out": false});
                self.cluster.insert("progress".into(), progress);
                self.finalizing_stages.push(stage);
                Ok(Reply::empty(200))
            }
            ("GET", ["v2", "clusters", _, "monitored-operators"]) => {
                Ok(Reply::json(200, &Value::Array(self.operators.clone())))
            }
            ("PUT", ["v2", "clusters", _, "monitored-operators"]) => {
                self.report_operator(params(&req.body)?)?;
                Ok(Reply::empty(200))
            }
            ("POST", ["v2", "clusters", _, "uploads", "ingress-cert"]) => {
                let pem = match serde_json::from_slice::<Value>(&req.body) {
                    Ok(Value::String(pem)) => pem,
                    Err(_) if self.behind_prism => req.body_text(),
                    _ => return refuse(400, "ingress-cert-params must be a JSON string"),
                };
                self.ingress_certs.push(pem);
                Ok(Reply::empty(201))
            }
            ("POST", ["v2", "clusters", cluster, "actions", "complete-installation"]) => {
                self.completions.push(params(&req.body)?);
                Ok(Reply::json(202, &self.cluster(cluster, true)))
            }
            ("POST", ["v2", "events"]) => {
                self.events.push(params(&req.body)?);
                Ok(Reply::empty(201))
            }
            _ => refuse(404, format!("no route for {} {}", req.method, req.path)),
        }
    }
}

impl App for FakeService {
    fn handle(&self, req: &Request) -> Reply {
        self.state().route(req).unwrap_or_else(|refusal| refusal)
    }
}
