#![allow(dead_code)]
//! An in-process fake assisted-service for tests (std + serde_json only).
//!
//! Include it with `#[path = "common/fake_service.rs"] mod fake_service;`.
//!
//! * Listens on 127.0.0.1 (ephemeral port unless [`FakeService::start_on`]); one thread per
//!   connection, one request per connection, `Connection: close` on every answer.
//! * Serves, under `/api/assisted-install`, the endpoints the installer uses:
//!   - `PUT  /v2/infra-envs/{ie}/hosts/{h}/progress` (enforces the stage order, see below)
//!   - `GET  /v2/infra-env/{ie}/hosts/{h}/downloads/ignition`
//!   - `GET  /v2/clusters/{c}/downloads/files?file_name=…`
//!   - `GET  /v2/clusters/{c}[?exclude-hosts=true|false]`
//!   - `GET  /v2/clusters/{c}/hosts[?role=…]`
//!   - `PUT  /v2/infra-envs/{ie}/hosts/{h}/logs-progress`
//!   - `PUT  /v2/clusters/{c}/logs-progress`
//! * Requires `X-Secret-Key` equal to its token, else 401 with an `infra_error` body (the
//!   swagger's schema for 401).
//! * Stage rules per host: a stage may repeat (new info such as "55%") or move forward in the
//!   order of the host's role (skipping is fine), never backwards → 409 with an `error` body;
//!   a stage outside the role's order → 409; `Failed` is accepted from any stage and is final
//!   (anything after it → 409); an unknown stage string → 400. The role of a host is the one
//!   given with [`FakeService::set_host_role`], else taken from the configured host list
//!   (`bootstrap: true` means the bootstrap order), else `master`.
//! * Records every request ([`Call`]), including rejected ones, with the status it got.
//! * Faults: [`FakeService::fail_next`], [`FakeService::fail_path`] (answered after the auth
//!   check), [`FakeService::unavailable_for`] (the listening socket is closed, so connections
//!   are refused, then reopened on the same port).
//! * Dropping it stops the listener, shuts open connections down and joins every thread.

use std::collections::{HashMap, VecDeque};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Swagger `basePath`.
pub const BASE_PATH: &str = "/api/assisted-install";
/// Token the fake expects unless told otherwise.
pub const DEFAULT_TOKEN: &str = "fake-agent-token-0123456789";

/// All `host-stage` values, in swagger order.
pub const STAGES: [&str; 13] = [
    "Starting installation",
    "Waiting for control plane",
    "Waiting for bootkube",
    "Waiting for controller",
    "Installing",
    "Writing image to disk",
    "Copying registry data to disk",
    "Rebooting",
    "Waiting for ignition",
    "Configuring",
    "Joined",
    "Done",
    "Failed",
];

pub const MASTER_ORDER: [&str; 8] = [
    "Starting installation",
    "Installing",
    "Writing image to disk",
    "Copying registry data to disk",
    "Rebooting",
    "Configuring",
    "Joined",
    "Done",
];

pub const WORKER_ORDER: [&str; 9] = [
    "Starting installation",
    "Installing",
    "Writing image to disk",
    "Waiting for control plane",
    "Rebooting",
    "Waiting for ignition",
    "Configuring",
    "Joined",
    "Done",
];

pub const BOOTSTRAP_ORDER: [&str; 11] = [
    "Starting installation",
    "Installing",
    "Writing image to disk",
    "Copying registry data to disk",
    "Waiting for control plane",
    "Waiting for bootkube",
    "Waiting for controller",
    "Rebooting",
    "Configuring",
    "Joined",
    "Done",
];

/// Single node (bootstrap in place): bootkube finishes before the disk is written.
pub const SNO_ORDER: [&str; 8] = [
    "Starting installation",
    "Installing",
    "Waiting for bootkube",
    "Writing image to disk",
    "Copying registry data to disk",
    "Rebooting",
    "Joined",
    "Done",
];

/// The allowed stage order for a role (`arbiter` and unknown roles use the master order).
pub fn stage_order(role: &str) -> &'static [&'static str] {
    match role {
        "worker" => &WORKER_ORDER,
        "bootstrap" => &BOOTSTRAP_ORDER,
        // Not a role the service stores: the fake's name for a single-node cluster's host.
        "sno" => &SNO_ORDER,
        _ => &MASTER_ORDER,
    }
}

/// A host object as the service would list it.
pub fn host_json(id: &str, infra_env_id: &str, role: &str, current_stage: Option<&str>) -> Value {
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

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    /// Full path (with `/api/assisted-install`), without the query.
    pub path: String,
    /// Raw query string, without `?`.
    pub query: String,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Status the fake answered with.
    pub status: u16,
}

impl Call {
    /// First value of a header (name matched case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Path below `/api/assisted-install` (the full path when it lacks that prefix).
    pub fn api_path(&self) -> &str {
        self.path.strip_prefix(BASE_PATH).unwrap_or(&self.path)
    }

    /// A query parameter, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        query_param(&self.query, name)
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (`Value::Null` when it is not JSON).
    pub fn body_json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// Produces the host list for the n-th host-list answer (n counts from 0 over both
/// `GET …/hosts` and `GET /v2/clusters/{id}?exclude-hosts=false`).
type HostsScript = Box<dyn FnMut(u64) -> Vec<Value> + Send>;

#[derive(Default)]
struct HostProgress {
    accepted: Vec<(String, String)>,
    current: Option<String>,
    failed: bool,
}

struct State {
    token: String,
    calls: Vec<Call>,
    progress: HashMap<String, HostProgress>,
    roles: HashMap<String, String>,
    ignitions: HashMap<String, Vec<u8>>,
    files: HashMap<String, Vec<u8>>,
    cluster: serde_json::Map<String, Value>,
    hosts: Vec<Value>,
    hosts_script: Option<HostsScript>,
    host_list_answers: u64,
    fail_next: VecDeque<u16>,
    fail_paths: Vec<(String, u16)>,
    unavailable_until: Option<Instant>,
    host_logs: Vec<(String, String)>,
    cluster_logs: Vec<(String, String)>,
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
    open: Mutex<HashMap<u64, TcpStream>>,
    next_conn: AtomicU64,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// See the module documentation.
pub struct FakeService {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FakeService {
    /// Starts on an ephemeral port of 127.0.0.1 with [`DEFAULT_TOKEN`].
    pub fn start() -> FakeService {
        Self::start_on("127.0.0.1:0".parse().unwrap())
    }

    /// Starts on a given address (e.g. a port a client is already trying to reach).
    pub fn start_on(addr: SocketAddr) -> FakeService {
        let listener = TcpListener::bind(addr).expect("binding the fake assisted-service");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                token: DEFAULT_TOKEN.to_string(),
                calls: Vec::new(),
                progress: HashMap::new(),
                roles: HashMap::new(),
                ignitions: HashMap::new(),
                files: HashMap::new(),
                cluster: serde_json::Map::new(),
                hosts: Vec::new(),
                hosts_script: None,
                host_list_answers: 0,
                fail_next: VecDeque::new(),
                fail_paths: Vec::new(),
                unavailable_until: None,
                host_logs: Vec::new(),
                cluster_logs: Vec::new(),
            }),
            stop: AtomicBool::new(false),
            open: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(0),
            workers: Mutex::new(Vec::new()),
        });
        let acceptor_shared = Arc::clone(&shared);
        let acceptor = thread::Builder::new()
            .name("fake-service-accept".into())
            .spawn(move || accept_loop(listener, addr, acceptor_shared))
            .unwrap();
        FakeService {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The value to give as `--url` (no base path).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn token(&self) -> String {
        self.shared.state().token.clone()
    }

    pub fn set_token(&self, token: &str) {
        self.shared.state().token = token.to_string();
    }

    // ---- configuration ----

    /// The stage order the fake enforces for this host: `master`, `arbiter`, `worker` or
    /// `bootstrap`.
    pub fn set_host_role(&self, host_id: &str, role: &str) {
        self.shared
            .state()
            .roles
            .insert(host_id.to_string(), role.to_string());
    }

    pub fn set_host_ignition(&self, host_id: &str, bytes: impl Into<Vec<u8>>) {
        self.shared
            .state()
            .ignitions
            .insert(host_id.to_string(), bytes.into());
    }

    pub fn set_cluster_file(&self, file_name: &str, bytes: impl Into<Vec<u8>>) {
        self.shared
            .state()
            .files
            .insert(file_name.to_string(), bytes.into());
    }

    /// Fields merged (top level) over the default cluster object, e.g.
    /// `json!({"kind": "AddHostsCluster", "platform": {"type": "vsphere"}})`.
    pub fn set_cluster(&self, fields: Value) {
        let Value::Object(map) = fields else {
            panic!("set_cluster wants a JSON object")
        };
        let mut state = self.shared.state();
        for (k, v) in map {
            state.cluster.insert(k, v);
        }
    }

    /// A fixed host list (missing required fields are filled in when served).
    pub fn set_hosts(&self, hosts: Vec<Value>) {
        let mut state = self.shared.state();
        state.hosts = hosts;
        state.hosts_script = None;
    }

    /// A host list that changes with each answer: `script(n)` gives the hosts of the n-th
    /// host-list answer (n from 0, counted over both list endpoints). Role filtering is applied
    /// afterwards.
    pub fn set_hosts_script(&self, script: impl FnMut(u64) -> Vec<Value> + Send + 'static) {
        self.shared.state().hosts_script = Some(Box::new(script));
    }

    // ---- faults ----

    /// The next `n` authenticated requests (any path) get `status` with an `error` body.
    /// Calls queue up: `fail_next(1, 500); fail_next(1, 503)` answers 500 then 503.
    pub fn fail_next(&self, n: usize, status: u16) {
        let mut state = self.shared.state();
        state.fail_next.extend(std::iter::repeat_n(status, n));
    }

    /// Every authenticated request whose path contains `path_substring` gets `status`.
    pub fn fail_path(&self, path_substring: &str, status: u16) {
        self.shared
            .state()
            .fail_paths
            .push((path_substring.to_string(), status));
    }

    /// Drops the `fail_next` queue and every `fail_path` rule.
    pub fn clear_faults(&self) {
        let mut state = self.shared.state();
        state.fail_next.clear();
        state.fail_paths.clear();
    }

    /// Closes the listening socket for `duration` (connections are refused), then listens on
    /// the same port again. Returns once the socket is closed.
    pub fn unavailable_for(&self, duration: Duration) {
        self.shared.state().unavailable_until = Some(Instant::now() + duration);
        // Wait until the acceptor has dropped the socket.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && TcpStream::connect(self.addr).is_ok() {
            thread::sleep(Duration::from_millis(1));
        }
    }

    // ---- inspection ----

    /// Every request received so far (including rejected ones), in arrival order.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.state().calls.clone()
    }

    /// Requests whose path contains `path_substring`.
    pub fn calls_to(&self, path_substring: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.path.contains(path_substring))
            .collect()
    }

    pub fn request_count(&self) -> usize {
        self.shared.state().calls.len()
    }

    pub fn clear_calls(&self) {
        self.shared.state().calls.clear();
    }

    /// Accepted progress reports for a host: (stage, info), in order.
    pub fn progress_reports(&self, host_id: &str) -> Vec<(String, String)> {
        self.shared
            .state()
            .progress
            .get(host_id)
            .map(|p| p.accepted.clone())
            .unwrap_or_default()
    }

    /// The host's current stage as the fake sees it.
    pub fn current_stage(&self, host_id: &str) -> Option<String> {
        self.shared
            .state()
            .progress
            .get(host_id)
            .and_then(|p| p.current.clone())
    }

    /// Accepted host logs-progress updates: (host_id, logs_state).
    pub fn host_logs_reports(&self) -> Vec<(String, String)> {
        self.shared.state().host_logs.clone()
    }

    /// Accepted cluster logs-progress updates: (cluster_id, logs_state).
    pub fn cluster_logs_reports(&self) -> Vec<(String, String)> {
        self.shared.state().cluster_logs.clone()
    }
}

impl Drop for FakeService {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for (_, stream) in self.shared.open.lock().unwrap().drain() {
            let _ = stream.shutdown(Shutdown::Both);
        }
        let workers: Vec<_> = self.shared.workers.lock().unwrap().drain(..).collect();
        for worker in workers {
            let _ = worker.join();
        }
    }
}

fn accept_loop(listener: TcpListener, addr: SocketAddr, shared: Arc<Shared>) {
    let mut listener = Some(listener);
    while !shared.stop.load(Ordering::SeqCst) {
        let until = shared.state().unavailable_until;
        if let Some(until) = until {
            if Instant::now() < until {
                listener = None; // refuse connections
                thread::sleep(Duration::from_millis(2));
                continue;
            }
            shared.state().unavailable_until = None;
        }
        if listener.is_none() {
            match TcpListener::bind(addr) {
                Ok(l) => {
                    l.set_nonblocking(true).unwrap();
                    listener = Some(l);
                }
                Err(_) => {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                }
            }
        }
        match listener.as_ref().unwrap().accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
                if let Ok(clone) = stream.try_clone() {
                    shared.open.lock().unwrap().insert(id, clone);
                }
                let conn_shared = Arc::clone(&shared);
                let handle = thread::Builder::new()
                    .name("fake-service-conn".into())
                    .spawn(move || {
                        let _ = serve_connection(stream, &conn_shared);
                        conn_shared.open.lock().unwrap().remove(&id);
                    })
                    .unwrap();
                let mut workers = shared.workers.lock().unwrap();
                workers.retain(|w| !w.is_finished());
                workers.push(handle);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(1))
            }
            Err(_) => thread::sleep(Duration::from_millis(1)),
        }
    }
}

struct Request {
    method: String,
    path: String,
    query: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

struct Answer {
    status: u16,
    content_type: Option<&'static str>,
    body: Vec<u8>,
}

impl Answer {
    fn empty(status: u16) -> Answer {
        Answer {
            status,
            content_type: None,
            body: Vec::new(),
        }
    }

    fn json(status: u16, value: &Value) -> Answer {
        Answer {
            status,
            content_type: Some("application/json"),
            body: serde_json::to_vec(value).unwrap(),
        }
    }

    fn bytes(bytes: Vec<u8>) -> Answer {
        Answer {
            status: 200,
            content_type: Some("application/octet-stream"),
            body: bytes,
        }
    }

    /// Swagger `error` (401/403 use `infra_error`, as the spec says).
    fn error(status: u16, reason: impl Into<String>) -> Answer {
        let reason = reason.into();
        if status == 401 || status == 403 {
            return Answer::json(status, &json!({"code": status, "message": reason}));
        }
        Answer::json(
            status,
            &json!({
                "kind": "Error",
                "id": status,
                "href": "",
                "code": status.to_string(),
                "reason": reason,
            }),
        )
    }
}

fn serve_connection(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let Some(request) = read_request(&mut reader)? else {
        return Ok(());
    };
    let answer = handle(shared, &request);
    let mut out = stream;
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nConnection: close\r\n",
        answer.status,
        reason_phrase(answer.status)
    );
    if let Some(ct) = answer.content_type {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    if answer.status != 204 && answer.status != 304 {
        head.push_str(&format!("Content-Length: {}\r\n", answer.body.len()));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(&answer.body)?;
    out.flush()?;
    let _ = out.shutdown(Shutdown::Write);
    Ok(())
}

fn read_request(reader: &mut BufReader<TcpStream>) -> io::Result<Option<Request>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Ok(None);
    };
    let method = method.to_string();
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.to_string(), String::new()),
    };
    let mut headers = Vec::new();
    let mut total = 0usize;
    loop {
        let mut h = String::new();
        let n = reader.read_line(&mut h)?;
        total += n;
        if n == 0 || total > 64 * 1024 {
            return Ok(None);
        }
        let h = h.trim_end_matches(['\r', '\n']);
        if h.is_empty() {
            break;
        }
        if let Some((name, value)) = h.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if find("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        loop {
            let mut size_line = String::new();
            reader.read_line(&mut size_line)?;
            let size_text = size_line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
            if size == 0 {
                // Trailers, up to the blank line.
                loop {
                    let mut t = String::new();
                    if reader.read_line(&mut t)? == 0 || t.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..])?;
            let mut crlf = [0u8; 2];
            reader.read_exact(&mut crlf)?;
        }
    } else if let Some(len) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.resize(len, 0);
        reader.read_exact(&mut body)?;
    }
    Ok(Some(Request {
        method,
        path,
        query,
        headers,
        body,
    }))
}

fn handle(shared: &Shared, request: &Request) -> Answer {
    let mut state = shared.state();
    let answer = route(&mut state, request);
    state.calls.push(Call {
        method: request.method.clone(),
        path: request.path.clone(),
        query: request.query.clone(),
        headers: request.headers.clone(),
        body: request.body.clone(),
        status: answer.status,
    });
    answer
}

fn route(state: &mut State, req: &Request) -> Answer {
    let Some(api_path) = req.path.strip_prefix(BASE_PATH) else {
        return Answer::error(404, format!("no such path {}", req.path));
    };
    let presented = req
        .headers
        .iter()
        .find(|(n, _)| n == "x-secret-key")
        .map(|(_, v)| v.as_str());
    if presented != Some(state.token.as_str()) {
        return Answer::error(401, "Unauthorized");
    }
    if let Some(status) = state.fail_next.pop_front() {
        return Answer::error(status, format!("injected fault {status}"));
    }
    if let Some((_, status)) = state
        .fail_paths
        .iter()
        .find(|(sub, _)| req.path.contains(sub.as_str()))
    {
        let status = *status;
        return Answer::error(status, format!("injected fault {status} for this path"));
    }

    let segments: Vec<&str> = api_path.trim_start_matches('/').split('/').collect();
    let method = req.method.as_str();
    match (method, segments.as_slice()) {
        ("PUT", ["v2", "infra-envs", _ie, "hosts", host, "progress"]) => {
            update_progress(state, host, &req.body)
        }
        ("GET", ["v2", "infra-env", _ie, "hosts", host, "downloads", "ignition"]) => {
            match state.ignitions.get(*host) {
                Some(bytes) => Answer::bytes(bytes.clone()),
                None => Answer::error(404, format!("no ignition for host {host}")),
            }
        }
        ("POST", ["v2", "clusters", _c, "logs"]) => {
            match query_param(&req.query, "logs_type").as_deref() {
                Some("host") | Some("controller") => {}
                other => {
                    return Answer::error(
                        400,
                        format!("logs_type must be host or controller, got {other:?}"),
                    )
                }
            }
            let content_type = req
                .headers
                .iter()
                .find(|(n, _)| n == "content-type")
                .map(|(_, v)| v.as_str())
                .unwrap_or("");
            if !content_type.starts_with("multipart/form-data") {
                return Answer::error(400, "a log upload is multipart/form-data");
            }
            Answer::empty(204)
        }
        ("GET", ["v2", "clusters", _c, "downloads", "files"]) => {
            let Some(name) = query_param(&req.query, "file_name") else {
                return Answer::error(400, "file_name is required");
            };
            match state.files.get(&name) {
                Some(bytes) => Answer::bytes(bytes.clone()),
                None => Answer::error(404, format!("no cluster file {name}")),
            }
        }
        ("GET", ["v2", "clusters", cluster]) => {
            let exclude = match query_param(&req.query, "exclude-hosts").as_deref() {
                None | Some("false") => false,
                Some("true") => true,
                Some(other) => {
                    return Answer::error(400, format!("exclude-hosts: invalid boolean {other:?}"))
                }
            };
            let hosts = if exclude {
                None
            } else {
                Some(current_hosts(state))
            };
            Answer::json(200, &cluster_json(state, cluster, hosts))
        }
        ("GET", ["v2", "clusters", _c, "hosts"]) => {
            let role = query_param(&req.query, "role");
            let hosts: Vec<Value> = current_hosts(state)
                .into_iter()
                .filter(|h| role.as_deref().is_none_or(|r| h["role"] == r))
                .collect();
            Answer::json(200, &Value::Array(hosts))
        }
        ("PUT", ["v2", "infra-envs", _ie, "hosts", host, "logs-progress"]) => {
            match logs_state(&req.body) {
                Ok(s) => {
                    state.host_logs.push((host.to_string(), s));
                    Answer::empty(204)
                }
                Err(a) => a,
            }
        }
        ("PUT", ["v2", "clusters", cluster, "logs-progress"]) => match logs_state(&req.body) {
            Ok(s) => {
                state.cluster_logs.push((cluster.to_string(), s));
                Answer::empty(204)
            }
            Err(a) => a,
        },
        _ => Answer::error(404, format!("no route for {method} {}", req.path)),
    }
}

fn update_progress(state: &mut State, host: &str, body: &[u8]) -> Answer {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) else {
        return Answer::error(400, "the body must be a host-progress JSON object");
    };
    let Some(stage) = body.get("current_stage").and_then(|v| v.as_str()) else {
        return Answer::error(400, "current_stage is required");
    };
    if !STAGES.contains(&stage) {
        return Answer::error(400, format!("unknown stage {stage:?}"));
    }
    let info = match body.get("progress_info") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Answer::error(400, "progress_info must be a string"),
    };
    let role = host_role(state, host);
    let progress = state.progress.entry(host.to_string()).or_default();
    if progress.failed {
        return Answer::error(
            409,
            format!("Can't set progress {stage} to host {host}: it already failed"),
        );
    }
    if stage == "Failed" {
        progress.failed = true;
    } else {
        let order = stage_order(&role);
        let Some(new_index) = order.iter().position(|s| *s == stage) else {
            return Answer::error(
                409,
                format!("Stage {stage} is not valid for a host with role {role}"),
            );
        };
        if let Some(current) = &progress.current {
            let current_index = order.iter().position(|s| s == current).unwrap_or(0);
            if new_index < current_index {
                return Answer::error(
                    409,
                    format!("Can't move host {host} stage backwards from {current} to {stage}"),
                );
            }
        }
    }
    progress.current = Some(stage.to_string());
    progress.accepted.push((stage.to_string(), info));
    Answer::empty(200)
}

fn host_role(state: &State, host: &str) -> String {
    if let Some(role) = state.roles.get(host) {
        return role.clone();
    }
    if let Some(h) = state.hosts.iter().find(|h| h["id"] == host) {
        if h["bootstrap"] == true {
            return "bootstrap".into();
        }
        if let Some(role) = h["role"].as_str() {
            return role.to_string();
        }
    }
    "master".into()
}

fn logs_state(body: &[u8]) -> Result<String, Answer> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|_| Answer::error(400, "the body must be logs-progress-params JSON"))?;
    match value.get("logs_state").and_then(|v| v.as_str()) {
        Some(s @ ("requested" | "collecting" | "completed" | "timeout" | "")) => Ok(s.to_string()),
        Some(other) => Err(Answer::error(400, format!("invalid logs_state {other:?}"))),
        None => Err(Answer::error(400, "logs_state is required")),
    }
}

fn current_hosts(state: &mut State) -> Vec<Value> {
    let n = state.host_list_answers;
    state.host_list_answers += 1;
    let hosts = match state.hosts_script.as_mut() {
        Some(script) => script(n),
        None => state.hosts.clone(),
    };
    hosts.into_iter().map(complete_host).collect()
}

/// Fills in the fields swagger marks required, so that answers validate.
fn complete_host(mut host: Value) -> Value {
    if let Value::Object(map) = &mut host {
        let id = map
            .get("id")
            .and_then(|v| v.as_str())
            .unwrap_or("00000000-0000-4000-8000-000000000000")
            .to_string();
        map.entry("kind").or_insert_with(|| json!("Host"));
        map.entry("id").or_insert_with(|| json!(id.clone()));
        map.entry("href")
            .or_insert_with(|| json!(format!("{BASE_PATH}/v2/hosts/{id}")));
        map.entry("status")
            .or_insert_with(|| json!("installing-in-progress"));
        map.entry("status_info").or_insert_with(|| json!(""));
    }
    host
}

fn cluster_json(state: &State, id: &str, hosts: Option<Vec<Value>>) -> Value {
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
    for (k, v) in &state.cluster {
        map.insert(k.clone(), v.clone());
    }
    match hosts {
        Some(hosts) => {
            map.insert("hosts".into(), Value::Array(hosts));
        }
        None => {
            map.remove("hosts");
        }
    }
    cluster
}

fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(k) == name).then(|| percent_decode(v))
    })
}

fn percent_decode(text: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h << 4) | l);
                i += 3;
                continue;
            }
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        423 => "Locked",
        425 => "Too Early",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// A minimal blocking HTTP/1.1 client for tests that must send exactly what they want:
/// returns (status, body).
pub fn raw_request(
    addr: SocketAddr,
    method: &str,
    path_and_query: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> io::Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head =
        format!("{method} {path_and_query} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    if let Some(b) = body {
        stream.write_all(b)?;
    }
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no header end"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no status"))?;
    Ok((status, raw[split + 4..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const IE: &str = "6b1f2e0a-8d7c-4c1e-9a51-3f0d9c2b7e11";
    const HOST: &str = "0b5a7c3e-2f4d-4e8a-9b1c-5d6e7f8a9b0c";

    fn put_progress(fake: &FakeService, host: &str, body: &str) -> (u16, Value) {
        let token = fake.token();
        let (status, body) = raw_request(
            fake.addr(),
            "PUT",
            &format!("{BASE_PATH}/v2/infra-envs/{IE}/hosts/{host}/progress"),
            &[
                ("X-Secret-Key", &token),
                ("Content-Type", "application/json"),
            ],
            Some(body.as_bytes()),
        )
        .unwrap();
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    fn stage(fake: &FakeService, stage: &str, info: &str) -> (u16, Value) {
        put_progress(
            fake,
            HOST,
            &json!({"current_stage": stage, "progress_info": info}).to_string(),
        )
    }

    #[test]
    fn missing_or_wrong_token_is_401() {
        let fake = FakeService::start();
        let path = format!("{BASE_PATH}/v2/clusters/{IE}");
        let (status, body) = raw_request(fake.addr(), "GET", &path, &[], None).unwrap();
        assert_eq!(status, 401);
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], 401);
        assert!(body["message"].is_string());
        let (status, _) = raw_request(
            fake.addr(),
            "GET",
            &path,
            &[("X-Secret-Key", "wrong")],
            None,
        )
        .unwrap();
        assert_eq!(status, 401);
        let (status, _) = raw_request(
            fake.addr(),
            "GET",
            &path,
            &[("x-secret-key", DEFAULT_TOKEN)],
            None,
        )
        .unwrap();
        assert_eq!(status, 200);
        let statuses: Vec<u16> = fake.calls().iter().map(|c| c.status).collect();
        assert_eq!(statuses, [401, 401, 200]);
    }

    #[test]
    fn stages_move_forward_repeat_and_skip() {
        let fake = FakeService::start();
        assert_eq!(stage(&fake, "Starting installation", "master").0, 200);
        assert_eq!(stage(&fake, "Installing", "master").0, 200);
        assert_eq!(stage(&fake, "Writing image to disk", "").0, 200);
        assert_eq!(stage(&fake, "Writing image to disk", "55%").0, 200);
        assert_eq!(stage(&fake, "Writing image to disk", "60%").0, 200);
        // skipping "Copying registry data to disk" is fine
        assert_eq!(stage(&fake, "Rebooting", "").0, 200);
        assert_eq!(
            fake.progress_reports(HOST),
            [
                ("Starting installation".to_string(), "master".to_string()),
                ("Installing".into(), "master".into()),
                ("Writing image to disk".into(), "".into()),
                ("Writing image to disk".into(), "55%".into()),
                ("Writing image to disk".into(), "60%".into()),
                ("Rebooting".into(), "".into()),
            ]
        );
        assert_eq!(fake.current_stage(HOST).as_deref(), Some("Rebooting"));
    }

    #[test]
    fn backwards_is_409_with_reason() {
        let fake = FakeService::start();
        assert_eq!(stage(&fake, "Writing image to disk", "").0, 200);
        let (status, body) = stage(&fake, "Installing", "master");
        assert_eq!(status, 409);
        assert_eq!(body["kind"], "Error");
        assert_eq!(body["code"], "409");
        assert!(
            body["reason"].as_str().unwrap().contains("backwards"),
            "{body}"
        );
        assert_eq!(fake.progress_reports(HOST).len(), 1);
        assert_eq!(fake.calls().len(), 2);
    }

    #[test]
    fn stage_outside_role_order_is_409_and_unknown_is_400() {
        let fake = FakeService::start();
        // master (default role) has no "Waiting for bootkube"
        assert_eq!(stage(&fake, "Waiting for bootkube", "").0, 409);
        fake.set_host_role(HOST, "bootstrap");
        assert_eq!(stage(&fake, "Waiting for bootkube", "").0, 200);
        let (status, body) = stage(&fake, "Not a stage", "");
        assert_eq!(status, 400);
        assert!(body["reason"].as_str().unwrap().contains("Not a stage"));
        assert_eq!(put_progress(&fake, HOST, "{}").0, 400);
        assert_eq!(put_progress(&fake, HOST, "not json").0, 400);
    }

    #[test]
    fn worker_order_is_enforced() {
        let fake = FakeService::start();
        fake.set_host_role(HOST, "worker");
        for s in WORKER_ORDER {
            assert_eq!(stage(&fake, s, "").0, 200, "{s}");
        }
        assert_eq!(stage(&fake, "Rebooting", "").0, 409);
    }

    #[test]
    fn role_from_host_list() {
        let fake = FakeService::start();
        let mut boot = host_json(HOST, IE, "master", None);
        boot["bootstrap"] = json!(true);
        fake.set_hosts(vec![boot]);
        assert_eq!(stage(&fake, "Waiting for controller", "").0, 200);
    }

    #[test]
    fn failed_is_allowed_anywhere_and_final() {
        let fake = FakeService::start();
        assert_eq!(stage(&fake, "Rebooting", "").0, 200);
        assert_eq!(stage(&fake, "Failed", "boom").0, 200);
        let (status, body) = stage(&fake, "Done", "");
        assert_eq!(status, 409);
        assert!(body["reason"].as_str().unwrap().contains("failed"));
        assert_eq!(stage(&fake, "Failed", "again").0, 409);
        let other = "1c9d8e7f-6a5b-4c3d-8e2f-1a0b9c8d7e6f";
        let failed = json!({"current_stage": "Failed", "progress_info": "early"}).to_string();
        assert_eq!(put_progress(&fake, other, &failed).0, 200);
    }

    #[test]
    fn records_calls_with_headers_query_and_body() {
        let fake = FakeService::start();
        assert_eq!(stage(&fake, "Installing", "master").0, 200);
        let token = fake.token();
        let (status, _) = raw_request(
            fake.addr(),
            "GET",
            &format!("{BASE_PATH}/v2/clusters/{IE}/hosts?role=master"),
            &[("X-Secret-Key", &token), ("X-Request-ID", "abc")],
            None,
        )
        .unwrap();
        assert_eq!(status, 200);
        let calls = fake.calls();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].method, "PUT");
        assert_eq!(
            calls[0].api_path(),
            format!("/v2/infra-envs/{IE}/hosts/{HOST}/progress")
        );
        assert_eq!(
            calls[0].body_json(),
            json!({"current_stage": "Installing", "progress_info": "master"})
        );
        assert_eq!(calls[1].query, "role=master");
        assert_eq!(calls[1].query_param("role").as_deref(), Some("master"));
        assert_eq!(calls[1].header("x-request-id"), Some("abc"));
        assert_eq!(calls[1].header("X-Secret-Key"), Some(DEFAULT_TOKEN));
    }

    #[test]
    fn downloads_cluster_and_hosts() {
        let fake = FakeService::start();
        let token = fake.token();
        let auth = [("X-Secret-Key", token.as_str())];
        fake.set_host_ignition(HOST, b"{\"ignition\":{}}".to_vec());
        fake.set_cluster_file("bootstrap.ign", b"boot".to_vec());
        fake.set_cluster(json!({"kind": "AddHostsCluster"}));
        fake.set_hosts(vec![
            host_json(HOST, IE, "master", Some("Done")),
            host_json("w-1", IE, "worker", None),
        ]);
        let get = |path: &str| {
            raw_request(
                fake.addr(),
                "GET",
                &format!("{BASE_PATH}{path}"),
                &auth,
                None,
            )
            .unwrap()
        };
        assert_eq!(
            get(&format!(
                "/v2/infra-env/{IE}/hosts/{HOST}/downloads/ignition"
            )),
            (200, b"{\"ignition\":{}}".to_vec())
        );
        assert_eq!(
            get(&format!(
                "/v2/infra-env/{IE}/hosts/other/downloads/ignition"
            ))
            .0,
            404
        );
        assert_eq!(
            get(&format!(
                "/v2/clusters/{IE}/downloads/files?file_name=bootstrap.ign"
            )),
            (200, b"boot".to_vec())
        );
        let (s, body) = get(&format!("/v2/clusters/{IE}?exclude-hosts=true"));
        assert_eq!(s, 200);
        let c: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(c["kind"], "AddHostsCluster");
        assert_eq!(c["platform"]["type"], "baremetal");
        assert!(c.get("hosts").is_none());
        let (_, body) = get(&format!("/v2/clusters/{IE}?exclude-hosts=false"));
        let c: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(c["hosts"].as_array().unwrap().len(), 2);
        let (_, body) = get(&format!("/v2/clusters/{IE}/hosts?role=worker"));
        let hosts: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(hosts.as_array().unwrap().len(), 1);
        assert_eq!(hosts[0]["id"], "w-1");
        assert_eq!(hosts[0]["kind"], "Host");
    }

    #[test]
    fn hosts_script_changes_with_polls() {
        let fake = FakeService::start();
        let token = fake.token();
        fake.set_hosts_script(|n| {
            let stage = if n >= 2 {
                Some("Done")
            } else {
                Some("Rebooting")
            };
            vec![host_json("m-1", IE, "master", stage)]
        });
        let mut stages = Vec::new();
        for _ in 0..3 {
            let (_, body) = raw_request(
                fake.addr(),
                "GET",
                &format!("{BASE_PATH}/v2/clusters/{IE}/hosts?role=master"),
                &[("X-Secret-Key", &token)],
                None,
            )
            .unwrap();
            let hosts: Value = serde_json::from_slice(&body).unwrap();
            stages.push(
                hosts[0]["progress"]["current_stage"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        assert_eq!(stages, ["Rebooting", "Rebooting", "Done"]);
    }

    #[test]
    fn logs_progress_endpoints() {
        let fake = FakeService::start();
        let token = fake.token();
        let auth = [("X-Secret-Key", token.as_str())];
        let put = |path: &str, body: &str| {
            raw_request(
                fake.addr(),
                "PUT",
                &format!("{BASE_PATH}{path}"),
                &auth,
                Some(body.as_bytes()),
            )
            .unwrap()
            .0
        };
        let hp = format!("/v2/infra-envs/{IE}/hosts/{HOST}/logs-progress");
        let cp = format!("/v2/clusters/{IE}/logs-progress");
        assert_eq!(put(&hp, r#"{"logs_state":"requested"}"#), 204);
        assert_eq!(put(&cp, r#"{"logs_state":"completed"}"#), 204);
        assert_eq!(put(&cp, r#"{"logs_state":"bogus"}"#), 400);
        assert_eq!(
            fake.host_logs_reports(),
            [(HOST.to_string(), "requested".to_string())]
        );
        assert_eq!(
            fake.cluster_logs_reports(),
            [(IE.to_string(), "completed".to_string())]
        );
    }

    #[test]
    fn injected_faults() {
        let fake = FakeService::start();
        fake.fail_next(1, 500);
        fake.fail_next(1, 503);
        assert_eq!(stage(&fake, "Installing", "").0, 500);
        assert_eq!(stage(&fake, "Installing", "").0, 503);
        assert_eq!(stage(&fake, "Installing", "").0, 200);
        fake.fail_path("/downloads/ignition", 404);
        let token = fake.token();
        fake.set_host_ignition(HOST, b"x".to_vec());
        let path = format!("{BASE_PATH}/v2/infra-env/{IE}/hosts/{HOST}/downloads/ignition");
        for _ in 0..2 {
            let (s, body) =
                raw_request(fake.addr(), "GET", &path, &[("X-Secret-Key", &token)], None).unwrap();
            assert_eq!(s, 404);
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert!(body["reason"].as_str().unwrap().contains("injected"));
        }
        fake.clear_faults();
        let (s, _) =
            raw_request(fake.addr(), "GET", &path, &[("X-Secret-Key", &token)], None).unwrap();
        assert_eq!(s, 200);
    }

    #[test]
    fn unavailable_refuses_then_recovers() {
        let fake = FakeService::start();
        fake.unavailable_for(Duration::from_millis(300));
        let err = TcpStream::connect(fake.addr()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok((status, _)) = raw_request(fake.addr(), "GET", "/", &[], None) {
                assert_eq!(status, 404);
                break;
            }
            assert!(Instant::now() < deadline, "fake never came back");
            thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn query_decoding() {
        assert_eq!(
            query_param("a=1&file_name=bootstrap.ign", "file_name").as_deref(),
            Some("bootstrap.ign")
        );
        assert_eq!(query_param("x=a%20b+c%2", "x").as_deref(), Some("a b c%2"));
        assert_eq!(query_param("x", "x").as_deref(), Some(""));
        assert_eq!(query_param("", "x"), None);
    }
}
