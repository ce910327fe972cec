//! An in-process fake of the few Kubernetes API endpoints the installer uses, over plain HTTP/1.1
//! on 127.0.0.1 (std + serde_json only; one thread per connection, keep-alive supported).
//!
//! Served:
//! - `GET /api/v1/nodes[?labelSelector=…]` (selectors: `k`, `!k`, `k=v`, `k==v`, `k!=v`, comma-joined)
//! - `GET /api/v1/nodes/{name}`, `PATCH /api/v1/nodes/{name}` (JSON merge patch; a
//!   `metadata.resourceVersion` in the patch must match, else 409 like the real API server)
//! - `GET /api/v1/namespaces/{ns}/events`
//! - `GET /api/v1/namespaces/{ns}/configmaps/{name}`
//! - `GET /apis/machineconfiguration.openshift.io/v1/machineconfigs/{name}`
//!
//! Anything else is a 404 `Status`. Every request is recorded (see [`FakeKube::calls`]), and
//! [`FakeKube::fail_next`] makes chosen requests fail.

#![allow(dead_code)]

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

const MACHINE_CONFIG_PREFIX: &str = "/apis/machineconfiguration.openshift.io/v1/machineconfigs/";

/// A running fake API server. Handles from [`FakeKube::clone_handle`] share it (for changing the
/// cluster from another thread while a flow runs); it stops accepting connections when the last
/// handle is dropped.
#[derive(Clone)]
pub struct FakeKube {
    server: Arc<Server>,
}

struct Server {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct State {
    nodes: BTreeMap<String, Value>,
    /// (namespace, event object)
    events: Vec<(String, Value)>,
    config_maps: BTreeMap<(String, String), Value>,
    machine_configs: BTreeMap<String, Value>,
    calls: Vec<String>,
    failures: Vec<Failure>,
    resource_version: u64,
    /// Close each connection right after its response, without announcing it (an idle timeout
    /// of a server or load balancer, as a pooling client sees it).
    drop_connections: bool,
}

struct Failure {
    method: String,
    path_prefix: String,
    status: u16,
}

impl State {
    fn next_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    fn node_mut(&mut self, name: &str) -> &mut Value {
        self.nodes
            .get_mut(name)
            .unwrap_or_else(|| panic!("fake kube: no node {name}"))
    }

    fn touch_node(&mut self, name: &str) {
        let rv = self.next_version();
        self.node_mut(name)["metadata"]["resourceVersion"] = Value::String(rv);
    }
}

impl FakeKube {
    /// Start serving on 127.0.0.1 with an ephemeral port.
    pub fn start() -> FakeKube {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake kube");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let state = state.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let state = state.clone();
                    std::thread::spawn(move || serve_connection(conn, &state));
                }
            })
        };
        FakeKube {
            server: Arc::new(Server {
                addr,
                state,
                stop,
                acceptor: Mutex::new(Some(acceptor)),
            }),
        }
    }

    /// Another handle on the same server and state.
    pub fn clone_handle(&self) -> FakeKube {
        self.clone()
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// Write `dir/kubeconfig` pointing at this server (http, no credentials) and return its path.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: fake\n  \
               cluster:\n    \
                 server: {}\n\
             users:\n\
             - name: fake\n  \
               user: {{}}\n\
             contexts:\n\
             - name: fake\n  \
               context:\n    \
                 cluster: fake\n    \
                 user: fake\n\
             current-context: fake\n",
            self.url()
        );
        std::fs::write(&path, text).expect("write fake kubeconfig");
        path
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.server.state.lock().unwrap()
    }

    /// Create or replace node `name` labelled `node-role.kubernetes.io/<role>` with a `Ready`
    /// condition, an `InternalIP` address (none when `internal_ip` is empty) and these annotations.
    /// Taints of an existing node are kept.
    pub fn set_node(
        &self,
        name: &str,
        role: &str,
        ready: bool,
        internal_ip: &str,
        annotations: BTreeMap<String, String>,
    ) {
        let mut st = self.state();
        let taints = st
            .nodes
            .get(name)
            .and_then(|n| n.pointer("/spec/taints").cloned())
            .unwrap_or_else(|| json!([]));
        let mut addresses = Vec::new();
        if !internal_ip.is_empty() {
            addresses.push(json!({"type": "InternalIP", "address": internal_ip}));
        }
        addresses.push(json!({"type": "Hostname", "address": name}));
        let annotations: Map<String, Value> = annotations
            .into_iter()
            .map(|(k, v)| (k, Value::from(v)))
            .collect();
        let rv = st.next_version();
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": format!("uid-{name}"),
                "resourceVersion": rv,
                "labels": {
                    format!("node-role.kubernetes.io/{role}"): "",
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                },
                "annotations": annotations,
            },
            "spec": { "taints": taints },
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                    ready_condition(ready),
                ],
                "addresses": addresses,
                "nodeInfo": {
                    "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
                    "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
                    "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"
                },
            },
        });
        st.nodes.insert(name.to_string(), node);
    }

    /// Set the `Ready` condition of an existing node.
    pub fn set_node_ready(&self, name: &str, ready: bool) {
        let mut st = self.state();
        let node = st.node_mut(name);
        let conditions = node["status"]["conditions"].as_array_mut().unwrap();
        conditions.retain(|c| c["type"] != "Ready");
        conditions.push(ready_condition(ready));
        st.touch_node(name);
    }

    /// Add the label `node-role.kubernetes.io/<role>` to an existing node.
    pub fn add_node_role(&self, name: &str, role: &str) {
        let mut st = self.state();
        st.node_mut(name)["metadata"]["labels"][format!("node-role.kubernetes.io/{role}")] =
            json!("");
        st.touch_node(name);
    }

    /// Set (or, with `None`, remove) an annotation of an existing node.
    pub fn set_node_annotation(&self, name: &str, key: &str, value: Option<&str>) {
        let mut st = self.state();
        let annotations = st.node_mut(name)["metadata"]["annotations"]
            .as_object_mut()
            .unwrap();
        match value {
            Some(v) => {
                annotations.insert(key.to_string(), json!(v));
            }
            None => {
                annotations.remove(key);
            }
        }
        st.touch_node(name);
    }

    /// Add a taint to an existing node.
    pub fn add_node_taint(&self, name: &str, key: &str, effect: &str) {
        let mut st = self.state();
        let node = st.node_mut(name);
        if !node["spec"]["taints"].is_array() {
            node["spec"]["taints"] = json!([]);
        }
        node["spec"]["taints"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": key, "effect": effect}));
        st.touch_node(name);
    }

    /// Taint keys of a node, in order.
    pub fn node_taints(&self, name: &str) -> Vec<String> {
        let st = self.state();
        let node = st
            .nodes
            .get(name)
            .unwrap_or_else(|| panic!("fake kube: no node {name}"));
        node.pointer("/spec/taints")
            .and_then(Value::as_array)
            .map(|ts| {
                ts.iter()
                    .filter_map(|t| t["key"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The stored JSON of a node.
    pub fn node_json(&self, name: &str) -> Option<Value> {
        self.state().nodes.get(name).cloned()
    }

    pub fn remove_node(&self, name: &str) {
        self.state().nodes.remove(name);
    }

    /// Remove the events of a namespace.
    pub fn clear_events(&self, namespace: &str) {
        self.state().events.retain(|(ns, _)| ns != namespace);
    }

    /// Add an event with an empty message.
    pub fn add_event(&self, namespace: &str, name: &str, reason: &str) {
        self.add_event_with_message(namespace, name, reason, "");
    }

    pub fn add_event_with_message(&self, namespace: &str, name: &str, reason: &str, message: &str) {
        let mut st = self.state();
        let rv = st.next_version();
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv},
            "involvedObject": {"kind": "Pod", "namespace": namespace, "name": "assisted-installer-controller"},
            "reason": reason,
            "message": message,
            "type": "Normal",
            "count": 1,
        });
        st.events.push((namespace.to_string(), event));
    }

    /// Create or replace a ConfigMap.
    pub fn set_config_map(&self, namespace: &str, name: &str, data: BTreeMap<String, String>) {
        let mut st = self.state();
        let rv = st.next_version();
        let data: Map<String, Value> = data.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
        let cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv},
            "data": data,
        });
        st.config_maps
            .insert((namespace.to_string(), name.to_string()), cm);
    }

    pub fn remove_config_map(&self, namespace: &str, name: &str) {
        self.state()
            .config_maps
            .remove(&(namespace.to_string(), name.to_string()));
    }

    pub fn add_machine_config(&self, name: &str) {
        let mut st = self.state();
        let rv = st.next_version();
        let mc = json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfig",
            "metadata": {"name": name, "resourceVersion": rv},
            "spec": {"config": {"ignition": {"version": "3.2.0"}}},
        });
        st.machine_configs.insert(name.to_string(), mc);
    }

    pub fn remove_machine_config(&self, name: &str) {
        self.state().machine_configs.remove(name);
    }

    /// Make the next request with this method whose path starts with `path_prefix` fail with
    /// `status` (a `Status` body). Queue several by calling again.
    pub fn fail_next(&self, method: &str, path_prefix: &str, status: u16) {
        self.state().failures.push(Failure {
            method: method.to_string(),
            path_prefix: path_prefix.to_string(),
            status,
        });
    }

    /// Close every connection just after its response without a `Connection: close` header, the
    /// way a server's idle timeout looks to a client that pools connections.
    pub fn drop_connections_after_response(&self, on: bool) {
        self.state().drop_connections = on;
    }

    /// Requests so far, as `METHOD /path` or `METHOD /path?query` with the query percent-decoded.
    pub fn calls(&self) -> Vec<String> {
        self.state().calls.clone()
    }

    pub fn clear_calls(&self) {
        self.state().calls.clear();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.lock().unwrap().take() {
            let _ = acceptor.join();
        }
    }
}

fn ready_condition(ready: bool) -> Value {
    json!({
        "type": "Ready",
        "status": if ready { "True" } else { "False" },
        "reason": if ready { "KubeletReady" } else { "KubeletNotReady" },
        "message": if ready { "kubelet is posting ready status" } else { "container runtime network not ready" },
    })
}

// ---------------------------------------------------------------------------------------------
// HTTP

struct Request {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    close: bool,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Response {
    status: u16,
    body: Value,
}

fn serve_connection(conn: TcpStream, state: &Mutex<State>) {
    let Ok(write_half) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    let mut writer = write_half;
    loop {
        let request = match read_request(&mut reader) {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(msg) => {
                let body = status_body(400, "BadRequest", &msg).to_string();
                let _ = write_response(&mut writer, 400, &body, true);
                return;
            }
        };
        let response = handle(&request, state);
        let body = response.body.to_string();
        let drop_connection = state.lock().unwrap().drop_connections;
        if write_response(&mut writer, response.status, &body, request.close).is_err()
            || request.close
            || drop_connection
        {
            let _ = writer.shutdown(Shutdown::Both);
            return;
        }
    }
}

/// `Ok(None)` on a clean end of stream before a request starts.
fn read_request(reader: &mut impl BufRead) -> Result<Option<Request>, String> {
    let mut line = String::new();
    // Tolerate stray blank lines between requests.
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => return Ok(None),
            Ok(_) if line.trim().is_empty() => continue,
            Ok(_) => break,
            Err(_) => return Ok(None),
        }
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("bad request line {line:?}"));
    };
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).map_err(|e| e.to_string())? == 0 {
            return Err("end of stream in headers".into());
        }
        let h = h.trim_end_matches(['\r', '\n']);
        if h.is_empty() {
            break;
        }
        let (k, v) = h
            .split_once(':')
            .ok_or_else(|| format!("bad header {h:?}"))?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.to_ascii_lowercase())
    };
    let body = if find("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        read_chunked(reader)?
    } else if let Some(len) = find("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| format!("bad content-length {len:?}"))?;
        let mut body = vec![0; len];
        reader.read_exact(&mut body).map_err(|e| e.to_string())?;
        body
    } else {
        Vec::new()
    };
    let close = match find("connection") {
        Some(v) if v.contains("close") => true,
        Some(v) if v.contains("keep-alive") => false,
        _ => version.eq_ignore_ascii_case("HTTP/1.0"),
    };
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, parse_query(q)),
        None => (target, Vec::new()),
    };
    Ok(Some(Request {
        method: method.to_string(),
        path: percent_decode(path, false),
        query,
        headers,
        body,
        close,
    }))
}

fn read_chunked(reader: &mut impl BufRead) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader
            .read_line(&mut size_line)
            .map_err(|e| e.to_string())?;
        let size_hex = size_line.trim().split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| format!("bad chunk size {size_line:?}"))?;
        if size == 0 {
            // Trailers, up to the blank line.
            loop {
                let mut t = String::new();
                if reader.read_line(&mut t).map_err(|e| e.to_string())? == 0 || t.trim().is_empty()
                {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader
            .read_exact(&mut body[start..])
            .map_err(|e| e.to_string())?;
        let mut crlf = [0u8; 2];
        reader.read_exact(&mut crlf).map_err(|e| e.to_string())?;
    }
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

fn percent_decode(s: &str, plus_is_space: bool) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' && i + 2 < bytes.len() {
            if let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push(hi << 4 | lo);
                i += 3;
                continue;
            }
        }
        out.push(if b == b'+' && plus_is_space { b' ' } else { b });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn write_response(w: &mut impl Write, status: u16, body: &str, close: bool) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    let connection = if close { "close" } else { "keep-alive" };
    write!(
        w,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n{body}",
        body.len()
    )?;
    w.flush()
}

fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

fn error(code: u16, reason: &str, message: &str) -> Response {
    Response {
        status: code,
        body: status_body(code, reason, message),
    }
}

fn not_found(kind: &str, name: &str) -> Response {
    let mut r = error(404, "NotFound", &format!("{kind} \"{name}\" not found"));
    r.body["details"] = json!({"name": name, "kind": kind});
    r
}

fn ok(body: Value) -> Response {
    Response { status: 200, body }
}

// ---------------------------------------------------------------------------------------------
// Routes

fn handle(req: &Request, state: &Mutex<State>) -> Response {
    let mut st = state.lock().unwrap();
    let mut call = format!("{} {}", req.method, req.path);
    if !req.query.is_empty() {
        let q: Vec<String> = req.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
        call.push('?');
        call.push_str(&q.join("&"));
    }
    st.calls.push(call);

    if let Some(i) = st.failures.iter().position(|f| {
        f.method.eq_ignore_ascii_case(&req.method) && req.path.starts_with(&f.path_prefix)
    }) {
        let f = st.failures.remove(i);
        let reason = match f.status {
            404 => "NotFound",
            409 => "Conflict",
            503 => "ServiceUnavailable",
            _ => "InternalError",
        };
        return error(
            f.status,
            reason,
            &format!("injected failure of {} {}", req.method, req.path),
        );
    }

    let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    match (req.method.as_str(), segments.as_slice()) {
        ("GET", ["api", "v1", "nodes"]) => list_nodes(&st, req),
        ("GET", ["api", "v1", "nodes", name]) => match st.nodes.get(*name) {
            Some(node) => ok(node.clone()),
            None => not_found("nodes", name),
        },
        ("PATCH", ["api", "v1", "nodes", name]) => patch_node(&mut st, req, name),
        ("GET", ["api", "v1", "namespaces", ns, "events"]) => {
            let items: Vec<Value> = st
                .events
                .iter()
                .filter(|(n, _)| n == ns)
                .map(|(_, e)| e.clone())
                .collect();
            ok(list("EventList", &st, items))
        }
        ("GET", ["api", "v1", "namespaces", ns, "configmaps", name]) => {
            match st.config_maps.get(&(ns.to_string(), name.to_string())) {
                Some(cm) => ok(cm.clone()),
                None => not_found("configmaps", name),
            }
        }
        ("GET", _) if req.path.starts_with(MACHINE_CONFIG_PREFIX) => {
            let name = &req.path[MACHINE_CONFIG_PREFIX.len()..];
            match st.machine_configs.get(name) {
                Some(mc) if !name.contains('/') => ok(mc.clone()),
                _ => not_found("machineconfigs.machineconfiguration.openshift.io", name),
            }
        }
        (_, ["api", "v1", "nodes", ..])
        | (_, ["api", "v1", "namespaces", ..])
        | (_, ["apis", "machineconfiguration.openshift.io", ..]) => error(
            405,
            "MethodNotAllowed",
            &format!("the fake does not serve {} {}", req.method, req.path),
        ),
        _ => error(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    }
}

fn list(kind: &str, st: &State, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"resourceVersion": st.resource_version.to_string()},
        "items": items,
    })
}

fn list_nodes(st: &State, req: &Request) -> Response {
    let selector = match parse_selector(req.query("labelSelector").unwrap_or("")) {
        Ok(s) => s,
        Err(msg) => return error(400, "BadRequest", &msg),
    };
    let items = st
        .nodes
        .values()
        .filter(|node| {
            let labels = node["metadata"]["labels"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            selector.iter().all(|r| r.matches(&labels))
        })
        .cloned()
        .collect();
    ok(list("NodeList", st, items))
}

enum Requirement {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
}

impl Requirement {
    fn matches(&self, labels: &Map<String, Value>) -> bool {
        let value_of = |k: &str| labels.get(k).and_then(Value::as_str);
        match self {
            Requirement::Exists(k) => value_of(k).is_some(),
            Requirement::NotExists(k) => value_of(k).is_none(),
            Requirement::Equals(k, v) => value_of(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => value_of(k) != Some(v.as_str()),
        }
    }
}

/// Equality-based selectors only: `k`, `!k`, `k=v`, `k==v`, `k!=v`, comma-joined.
fn parse_selector(selector: &str) -> Result<Vec<Requirement>, String> {
    let pair = |k: &str, v: &str| (k.trim().to_string(), v.trim().to_string());
    let mut requirements = Vec::new();
    for r in selector.split(',').map(str::trim).filter(|r| !r.is_empty()) {
        if r.contains(' ') || r.contains('(') {
            return Err(format!("unsupported label selector {selector:?}"));
        }
        requirements.push(if let Some((k, v)) = r.split_once("!=") {
            let (k, v) = pair(k, v);
            Requirement::NotEquals(k, v)
        } else if let Some((k, v)) = r.split_once("==").or_else(|| r.split_once('=')) {
            let (k, v) = pair(k, v);
            Requirement::Equals(k, v)
        } else if let Some(k) = r.strip_prefix('!') {
            Requirement::NotExists(k.to_string())
        } else {
            Requirement::Exists(r.to_string())
        });
    }
    Ok(requirements)
}

fn patch_node(st: &mut State, req: &Request, name: &str) -> Response {
    let content_type = req
        .header("content-type")
        .unwrap_or("")
        .to_ascii_lowercase();
    if !content_type.starts_with("application/merge-patch+json")
        && !content_type.starts_with("application/strategic-merge-patch+json")
    {
        return error(
            415,
            "UnsupportedMediaType",
            &format!("unsupported patch type {content_type:?}"),
        );
    }
    let patch: Value = match serde_json::from_slice(&req.body) {
        Ok(p) => p,
        Err(e) => return error(400, "BadRequest", &format!("invalid patch: {e}")),
    };
    let Some(node) = st.nodes.get(name) else {
        return not_found("nodes", name);
    };
    if let Some(rv) = patch
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
    {
        if node["metadata"]["resourceVersion"].as_str() != Some(rv) {
            return error(
                409,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on nodes \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                ),
            );
        }
    }
    if let Some(new_name) = patch.pointer("/metadata/name") {
        if new_name != name {
            return error(422, "Invalid", "metadata.name cannot be changed");
        }
    }
    let mut updated = node.clone();
    merge_patch(&mut updated, &patch);
    if updated.pointer("/spec/taints").is_some_and(Value::is_null) {
        updated["spec"].as_object_mut().unwrap().remove("taints");
    }
    updated["metadata"]["resourceVersion"] = Value::String(st.next_version());
    st.nodes.insert(name.to_string(), updated.clone());
    ok(updated)
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target = target.as_object_mut().unwrap();
    for (k, v) in patch {
        if v.is_null() {
            target.remove(k);
        } else {
            merge_patch(target.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// One request on a fresh connection (`Connection: close`): (status, JSON body).
    fn request(
        fake: &FakeKube,
        method: &str,
        target: &str,
        headers: &[&str],
        body: &str,
    ) -> (u16, Value) {
        let mut conn = TcpStream::connect(fake.addr()).unwrap();
        let mut head = format!(
            "{method} {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            fake.addr()
        );
        for h in headers {
            head.push_str(h);
            head.push_str("\r\n");
        }
        if !body.is_empty() {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        conn.write_all(head.as_bytes()).unwrap();
        conn.write_all(body.as_bytes()).unwrap();
        let mut raw = String::new();
        conn.read_to_string(&mut raw).unwrap();
        parse_response(&raw)
    }

    fn parse_response(raw: &str) -> (u16, Value) {
        let (head, body) = raw.split_once("\r\n\r\n").expect("response head");
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(body.len(), length);
        (status, serde_json::from_str(body).unwrap())
    }

    fn names(list: &Value) -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn nodes_are_listed_by_label_selector() {
        let fake = FakeKube::start();
        fake.set_node("master-0", "master", true, "10.0.0.10", map(&[("a", "b")]));
        fake.set_node("master-1", "master", false, "10.0.0.11", BTreeMap::new());
        fake.set_node("worker-0", "worker", true, "", BTreeMap::new());
        let (status, all) = request(&fake, "GET", "/api/v1/nodes", &[], "");
        assert_eq!(status, 200);
        assert_eq!(all["kind"], "NodeList");
        assert_eq!(names(&all), ["master-0", "master-1", "worker-0"]);
        let (_, masters) = request(
            &fake,
            "GET",
            "/api/v1/nodes?labelSelector=node-role.kubernetes.io%2Fmaster",
            &[],
            "",
        );
        assert_eq!(names(&masters), ["master-0", "master-1"]);
        let m0 = &masters["items"][0];
        assert_eq!(m0["metadata"]["annotations"]["a"], "b");
        assert_eq!(
            m0["status"]["addresses"][0],
            json!({"type": "InternalIP", "address": "10.0.0.10"})
        );
        let ready = |n: &Value| {
            n["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Ready")
                .unwrap()["status"]
                .clone()
        };
        assert_eq!(ready(m0), "True");
        assert_eq!(ready(&masters["items"][1]), "False");
        let (_, not_masters) = request(
            &fake,
            "GET",
            "/api/v1/nodes?labelSelector=!node-role.kubernetes.io/master",
            &[],
            "",
        );
        assert_eq!(names(&not_masters), ["worker-0"]);
        let (_, by_value) = request(
            &fake,
            "GET",
            "/api/v1/nodes?labelSelector=kubernetes.io%2Fhostname%3Dmaster-1",
            &[],
            "",
        );
        assert_eq!(names(&by_value), ["master-1"]);
        let (_, none) = request(
            &fake,
            "GET",
            "/api/v1/nodes?labelSelector=node-role.kubernetes.io/master,kubernetes.io/hostname!=master-0,kubernetes.io/hostname!=master-1",
            &[],
            "",
        );
        assert_eq!(names(&none), Vec::<String>::new());
        // The worker has no InternalIP; worker-0 worker ready.
        let (_, w) = request(&fake, "GET", "/api/v1/nodes/worker-0", &[], "");
        assert_eq!(w["status"]["addresses"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn node_readiness_roles_annotations_and_removal() {
        let fake = FakeKube::start();
        fake.set_node("n", "master", false, "10.0.0.1", BTreeMap::new());
        fake.set_node_ready("n", true);
        fake.add_node_role("n", "worker");
        fake.set_node_annotation("n", "k", Some("v"));
        let (_, n) = request(&fake, "GET", "/api/v1/nodes/n", &[], "");
        let conditions = n["status"]["conditions"].as_array().unwrap();
        assert_eq!(
            conditions.iter().filter(|c| c["type"] == "Ready").count(),
            1
        );
        assert!(conditions
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True"));
        assert_eq!(
            n["metadata"]["labels"]["node-role.kubernetes.io/worker"],
            ""
        );
        assert_eq!(n["metadata"]["annotations"]["k"], "v");
        fake.set_node_annotation("n", "k", None);
        assert!(fake.node_json("n").unwrap()["metadata"]["annotations"]
            .get("k")
            .is_none());
        fake.remove_node("n");
        let (status, body) = request(&fake, "GET", "/api/v1/nodes/n", &[], "");
        assert_eq!(status, 404);
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["reason"], "NotFound");
        assert_eq!(body["code"], 404);
    }

    #[test]
    fn node_merge_patch_replaces_taints_and_checks_resource_version() {
        let fake = FakeKube::start();
        fake.set_node("n", "master", false, "10.0.0.1", BTreeMap::new());
        fake.add_node_taint("n", "a", "NoSchedule");
        fake.add_node_taint("n", "b", "NoExecute");
        // set_node keeps the taints.
        fake.set_node("n", "master", false, "10.0.0.1", BTreeMap::new());
        assert_eq!(fake.node_taints("n"), ["a", "b"]);
        let rv = fake.node_json("n").unwrap()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let merge = "Content-Type: application/merge-patch+json";

        let stale = r#"{"metadata":{"resourceVersion":"0"},"spec":{"taints":[]}}"#;
        let (status, body) = request(&fake, "PATCH", "/api/v1/nodes/n", &[merge], stale);
        assert_eq!((status, body["reason"].as_str()), (409, Some("Conflict")));
        assert_eq!(fake.node_taints("n"), ["a", "b"]);

        let patch = format!(
            r#"{{"metadata":{{"resourceVersion":"{rv}"}},"spec":{{"taints":[{{"key":"b","effect":"NoExecute"}}]}}}}"#
        );
        let (status, body) = request(&fake, "PATCH", "/api/v1/nodes/n", &[merge], &patch);
        assert_eq!(status, 200);
        assert_eq!(
            body["spec"]["taints"],
            json!([{"key": "b", "effect": "NoExecute"}])
        );
        assert_ne!(body["metadata"]["resourceVersion"].as_str().unwrap(), rv);
        assert_eq!(fake.node_taints("n"), ["b"]);

        let (status, _) = request(
            &fake,
            "PATCH",
            "/api/v1/nodes/n",
            &[merge],
            r#"{"spec":{"taints":null}}"#,
        );
        assert_eq!(status, 200);
        assert!(fake.node_taints("n").is_empty());
        assert!(fake.node_json("n").unwrap()["spec"].get("taints").is_none());

        let json_patch = "Content-Type: application/json-patch+json";
        let (status, _) = request(&fake, "PATCH", "/api/v1/nodes/n", &[json_patch], "[]");
        assert_eq!(status, 415);
        let (status, _) = request(&fake, "PATCH", "/api/v1/nodes/missing", &[merge], "{}");
        assert_eq!(status, 404);
        let (status, _) = request(&fake, "PATCH", "/api/v1/nodes/n", &[merge], "{not json");
        assert_eq!(status, 400);
    }

    #[test]
    fn chunked_patch_body() {
        let fake = FakeKube::start();
        fake.set_node("n", "master", true, "10.0.0.1", BTreeMap::new());
        fake.add_node_taint("n", "a", "NoSchedule");
        let body = r#"{"spec":{"taints":[]}}"#;
        let (first, second) = body.split_at(7);
        let mut conn = TcpStream::connect(fake.addr()).unwrap();
        write!(
            conn,
            "PATCH /api/v1/nodes/n HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/merge-patch+json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{first}\r\n{:x}\r\n{second}\r\n0\r\n\r\n",
            first.len(),
            second.len()
        )
        .unwrap();
        let mut raw = String::new();
        conn.read_to_string(&mut raw).unwrap();
        assert_eq!(parse_response(&raw).0, 200);
        assert!(fake.node_taints("n").is_empty());
    }

    #[test]
    fn keep_alive_serves_several_requests_on_one_connection() {
        let fake = FakeKube::start();
        fake.add_machine_config("mc-1");
        let mut conn = TcpStream::connect(fake.addr()).unwrap();
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        for (target, want) in [
            (
                "/apis/machineconfiguration.openshift.io/v1/machineconfigs/mc-1",
                200,
            ),
            (
                "/apis/machineconfiguration.openshift.io/v1/machineconfigs/mc-2",
                404,
            ),
            ("/api/v1/namespaces/x/configmaps/y", 404),
        ] {
            write!(conn, "GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut status_line = String::new();
            reader.read_line(&mut status_line).unwrap();
            let mut length = 0;
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).unwrap();
                if h == "\r\n" {
                    break;
                }
                if let Some(v) = h.strip_prefix("Content-Length: ") {
                    length = v.trim().parse().unwrap();
                }
                assert_ne!(h.trim(), "Connection: close");
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let status: u16 = status_line
                .split_whitespace()
                .nth(1)
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(status, want, "{target}");
            let body: Value = serde_json::from_slice(&body).unwrap();
            if want == 200 {
                assert_eq!(body["kind"], "MachineConfig");
                assert_eq!(body["metadata"]["name"], "mc-1");
            } else {
                assert_eq!(body["kind"], "Status");
            }
        }
        assert_eq!(fake.calls().len(), 3);
    }

    #[test]
    fn events_are_per_namespace() {
        let fake = FakeKube::start();
        fake.add_event("assisted-installer", "AssistedControllerIsReady", "Ready");
        fake.add_event_with_message("default", "other", "Started", "hello");
        let (status, list) = request(
            &fake,
            "GET",
            "/api/v1/namespaces/assisted-installer/events",
            &[],
            "",
        );
        assert_eq!(status, 200);
        assert_eq!(list["kind"], "EventList");
        assert_eq!(names(&list), ["AssistedControllerIsReady"]);
        assert_eq!(list["items"][0]["reason"], "Ready");
        let (_, list) = request(&fake, "GET", "/api/v1/namespaces/default/events", &[], "");
        assert_eq!(list["items"][0]["message"], "hello");
        let (_, list) = request(&fake, "GET", "/api/v1/namespaces/empty/events", &[], "");
        assert_eq!(names(&list), Vec::<String>::new());
    }

    #[test]
    fn events_can_be_cleared_per_namespace() {
        let fake = FakeKube::start();
        fake.add_event("a", "e1", "R");
        fake.add_event("b", "e2", "R");
        fake.clear_events("a");
        let (_, list) = request(&fake, "GET", "/api/v1/namespaces/a/events", &[], "");
        assert_eq!(names(&list), Vec::<String>::new());
        let (_, list) = request(&fake, "GET", "/api/v1/namespaces/b/events", &[], "");
        assert_eq!(names(&list), ["e2"]);
    }

    #[test]
    fn handles_share_the_server_until_the_last_is_dropped() {
        let fake = FakeKube::start();
        let handle = fake.clone_handle();
        std::thread::spawn(move || handle.add_event("ns", "from-thread", "R"))
            .join()
            .unwrap();
        let (_, list) = request(&fake, "GET", "/api/v1/namespaces/ns/events", &[], "");
        assert_eq!(names(&list), ["from-thread"]);
        let handle = fake.clone_handle();
        let addr = fake.addr();
        drop(fake);
        assert_eq!(request(&handle, "GET", "/api/v1/nodes", &[], "").0, 200);
        drop(handle);
        assert!(TcpStream::connect(addr).is_err(), "the server stopped");
    }

    #[test]
    fn config_maps_and_machine_configs() {
        let fake = FakeKube::start();
        fake.set_config_map(
            "kube-system",
            "cluster-config-v1",
            map(&[("install-config", "a: 1\n")]),
        );
        let (status, cm) = request(
            &fake,
            "GET",
            "/api/v1/namespaces/kube-system/configmaps/cluster-config-v1",
            &[],
            "",
        );
        assert_eq!(status, 200);
        assert_eq!(cm["data"]["install-config"], "a: 1\n");
        fake.remove_config_map("kube-system", "cluster-config-v1");
        let (status, body) = request(
            &fake,
            "GET",
            "/api/v1/namespaces/kube-system/configmaps/cluster-config-v1",
            &[],
            "",
        );
        assert_eq!(status, 404);
        assert_eq!(body["details"]["name"], "cluster-config-v1");

        fake.add_machine_config("rendered-master-1");
        let path = "/apis/machineconfiguration.openshift.io/v1/machineconfigs/rendered-master-1";
        assert_eq!(request(&fake, "GET", path, &[], "").0, 200);
        fake.remove_machine_config("rendered-master-1");
        assert_eq!(request(&fake, "GET", path, &[], "").0, 404);
        assert_eq!(request(&fake, "GET", "/version", &[], "").0, 404);
        assert_eq!(request(&fake, "DELETE", "/api/v1/nodes/x", &[], "").0, 405);
    }

    #[test]
    fn failures_are_injected_once_in_order() {
        let fake = FakeKube::start();
        fake.fail_next("GET", "/api/v1/nodes", 500);
        fake.fail_next("GET", "/api/v1/nodes", 503);
        let (status, body) = request(&fake, "GET", "/api/v1/nodes?labelSelector=x", &[], "");
        assert_eq!(status, 500);
        assert_eq!(body["kind"], "Status");
        assert_eq!(
            request(&fake, "GET", "/api/v1/namespaces/a/events", &[], "").0,
            200
        );
        assert_eq!(request(&fake, "GET", "/api/v1/nodes", &[], "").0, 503);
        assert_eq!(request(&fake, "GET", "/api/v1/nodes", &[], "").0, 200);
    }

    #[test]
    fn calls_are_recorded_decoded() {
        let fake = FakeKube::start();
        request(
            &fake,
            "GET",
            "/api/v1/nodes?&labelSelector=node-role.kubernetes.io%2Fmaster",
            &[],
            "",
        );
        request(&fake, "GET", "/api/v1/namespaces/ns/events", &[], "");
        assert_eq!(
            fake.calls(),
            [
                "GET /api/v1/nodes?labelSelector=node-role.kubernetes.io/master",
                "GET /api/v1/namespaces/ns/events",
            ]
        );
        fake.clear_calls();
        assert!(fake.calls().is_empty());
    }

    #[test]
    fn bad_requests_get_400() {
        let fake = FakeKube::start();
        let mut conn = TcpStream::connect(fake.addr()).unwrap();
        conn.write_all(b"NONSENSE\r\n\r\n").unwrap();
        let mut raw = String::new();
        conn.read_to_string(&mut raw).unwrap();
        assert_eq!(parse_response(&raw).0, 400);
        let (status, _) = request(
            &fake,
            "GET",
            "/api/v1/nodes?labelSelector=role%20in%20(a)",
            &[],
            "",
        );
        assert_eq!(status, 400);
    }

    #[test]
    fn kubeconfig_points_at_the_server() {
        let fake = FakeKube::start();
        let dir = std::env::temp_dir().join(format!(
            "fake-kube-{}-{}",
            std::process::id(),
            fake.addr().port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = fake.kubeconfig(&dir);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(&format!("server: {}", fake.url())), "{text}");
        assert!(text.contains("current-context: fake"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%2Fb", false), "a/b");
        assert_eq!(percent_decode("a+b", true), "a b");
        assert_eq!(percent_decode("a+b", false), "a+b");
        assert_eq!(percent_decode("100%", false), "100%");
        assert_eq!(percent_decode("%zz", false), "%zz");
        assert_eq!(percent_decode("%4", false), "%4");
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut target = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut target, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(target, json!({"a": "z", "c": {"d": "e"}}));
        let mut target = json!({"a": [1, 2]});
        merge_patch(&mut target, &json!({"a": [3]}));
        assert_eq!(target, json!({"a": [3]}));
    }
}
