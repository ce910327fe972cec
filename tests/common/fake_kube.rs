#![allow(dead_code)]
//! The fake Kubernetes API: the few objects the installer reads (nodes, events, ConfigMaps,
//! MachineConfigs, pods and their logs) as one model with two faces:
//! * in memory, as a [`KubeApi`] (the bootstrap scenarios);
//! * on the socket, as an [`App`] of the test HTTP server for `KubeClient` (kube-rs), with
//!   keep-alive: `TestServer::with_app(fake.clone())` and [`kubeconfig`] to point at it.
//!
//! Served on the socket:
//! - `GET /api/v1/nodes[?labelSelector=…]` (`k` and `k=v` requirements, comma-joined)
//! - `GET /api/v1/nodes/{name}`, `PATCH /api/v1/nodes/{name}` (JSON merge patch; a
//!   `metadata.resourceVersion` in the patch must match, else 409 as the API server answers)
//! - `GET /api/v1/namespaces/{ns}/events`
//! - `GET /api/v1/namespaces/{ns}/configmaps/{name}`
//! - `GET /apis/machineconfiguration.openshift.io/v1/machineconfigs/{name}`
//! - `GET /api/v1/namespaces/{ns}/pods[?labelSelector=…]`
//! - `GET /api/v1/namespaces/{ns}/pods/{name}/log[?sinceSeconds=…]` (text)
//!
//! Anything else is a 404 `Status`. [`FakeKube::fail_next`] makes chosen calls fail (both faces).

use anyhow::{anyhow, Result};
use assisted_installer::config::Role;
use assisted_installer::kube::{EventInfo, KubeApi, NodeInfo, PodInfo};
use assisted_installer::openshift::role_label;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::http_server::{App, Reply, Request};

const MACHINE_CONFIGS: &str = "/apis/machineconfiguration.openshift.io/v1/machineconfigs/";

/// A kubeconfig at `dir/kubeconfig` for `server` (http, no credentials); returns its path.
pub(crate) fn kubeconfig(dir: &Path, server: &str) -> PathBuf {
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

#[derive(Default)]
struct State {
    nodes: BTreeMap<String, Value>,
    /// (namespace, event)
    events: Vec<(String, Value)>,
    config_maps: BTreeMap<(String, String), Value>,
    machine_configs: BTreeMap<String, Value>,
    /// (namespace, name) → pod.
    pods: BTreeMap<(String, String), Value>,
    /// (namespace, name) → the pod's log.
    pod_logs: BTreeMap<(String, String), String>,
    /// Log reads: (namespace, pod, sinceSeconds).
    log_reads: Vec<(String, String, Option<i64>)>,
    /// (method, path prefix, status), used once each.
    failures: Vec<(String, String, u16)>,
    resource_version: u64,
    hang_up: bool,
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

    fn injected(&mut self, method: &str, path: &str) -> Option<(u16, String)> {
        let i = self.failures.iter().position(|(m, prefix, _)| {
            m.eq_ignore_ascii_case(method) && path.starts_with(prefix)
        })?;
        let (_, _, status) = self.failures.remove(i);
        Some((status, format!("injected failure of {method} {path}")))
    }

    fn nodes_with(&self, labels: &[(String, Option<String>)]) -> Vec<Value> {
        let matches = |node: &&Value| {
            labels.iter().all(|(k, v)| {
                let have = node["metadata"]["labels"][k].as_str();
                have.is_some() && v.as_ref().is_none_or(|v| have == Some(v.as_str()))
            })
        };
        self.nodes.values().filter(matches).cloned().collect()
    }

    fn pods_with(&self, namespace: &str, labels: &[(String, Option<String>)]) -> Vec<Value> {
        self.pods
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .map(|(_, pod)| pod)
            .filter(|pod| {
                labels.iter().all(|(k, v)| {
                    let have = pod["metadata"]["labels"][k].as_str();
                    have.is_some() && v.as_ref().is_none_or(|v| have == Some(v.as_str()))
                })
            })
            .cloned()
            .collect()
    }

    /// A pod's log, the read recorded; `None` when there is no such pod.
    fn read_log(&mut self, namespace: &str, pod: &str, since: Option<i64>) -> Option<String> {
        let key = (namespace.to_string(), pod.to_string());
        self.pods.get(&key)?;
        self.log_reads
            .push((namespace.to_string(), pod.to_string(), since));
        Some(self.pod_logs.get(&key).cloned().unwrap_or_default())
    }

    fn events_of(&self, namespace: &str) -> Vec<Value> {
        self.events
            .iter()
            .filter(|(ns, _)| ns == namespace)
            .map(|(_, e)| e.clone())
            .collect()
    }
}

/// See the module documentation. Clones share the state.
#[derive(Clone, Default)]
pub(crate) struct FakeKube {
    state: Arc<Mutex<State>>,
}

fn ready_condition(ready: bool) -> Value {
    json!({
        "type": "Ready",
        "status": if ready { "True" } else { "False" },
        "reason": if ready { "KubeletReady" } else { "KubeletNotReady" },
    })
}

impl FakeKube {
    pub(crate) fn new() -> FakeKube {
        FakeKube::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates or replaces node `name`, labelled `node-role.kubernetes.io/<role>`, with a
    /// `Ready` condition, an `InternalIP` (none when `internal_ip` is empty) and these
    /// annotations. An existing node keeps its taints.
    pub(crate) fn set_node(
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
        let rv = st.next_version();
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "resourceVersion": rv,
                "labels": {role_label(role): "", "kubernetes.io/hostname": name},
                "annotations": annotations,
            },
            "spec": {"taints": taints},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    ready_condition(ready),
                ],
                "addresses": addresses,
            },
        });
        st.nodes.insert(name.to_string(), node);
    }

    pub(crate) fn set_node_ready(&self, name: &str, ready: bool) {
        let mut st = self.state();
        let conditions = st.node_mut(name)["status"]["conditions"]
            .as_array_mut()
            .unwrap();
        conditions.retain(|c| c["type"] != "Ready");
        conditions.push(ready_condition(ready));
        st.touch_node(name);
    }

    /// Adds the label `node-role.kubernetes.io/<role>`.
    pub(crate) fn add_node_role(&self, name: &str, role: &str) {
        let mut st = self.state();
        st.node_mut(name)["metadata"]["labels"][role_label(role)] = json!("");
        st.touch_node(name);
    }

    /// Sets (or, with `None`, removes) an annotation.
    pub(crate) fn set_node_annotation(&self, name: &str, key: &str, value: Option<&str>) {
        let mut st = self.state();
        let annotations = st.node_mut(name)["metadata"]["annotations"]
            .as_object_mut()
            .unwrap();
        match value {
            Some(v) => annotations.insert(key.to_string(), json!(v)),
            None => annotations.remove(key),
        };
        st.touch_node(name);
    }

    pub(crate) fn add_node_taint(&self, name: &str, key: &str, effect: &str) {
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
    pub(crate) fn node_taints(&self, name: &str) -> Vec<String> {
        let node = self.node_json(name).expect("fake kube: no such node");
        taint_keys(&node)
    }

    /// The stored JSON of a node.
    pub(crate) fn node_json(&self, name: &str) -> Option<Value> {
        self.state().nodes.get(name).cloned()
    }

    pub(crate) fn clear_events(&self, namespace: &str) {
        self.state().events.retain(|(ns, _)| ns != namespace);
    }

    pub(crate) fn add_event(&self, namespace: &str, name: &str, reason: &str) {
        self.add_event_with_message(namespace, name, reason, "");
    }

    pub(crate) fn add_event_with_message(
        &self,
        namespace: &str,
        name: &str,
        reason: &str,
        message: &str,
    ) {
        let mut st = self.state();
        let rv = st.next_version();
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv},
            "involvedObject": {"kind": "Pod", "namespace": namespace},
            "reason": reason,
            "message": message,
        });
        st.events.push((namespace.to_string(), event));
    }

    /// Creates or replaces a ConfigMap.
    pub(crate) fn set_config_map(
        &self,
        namespace: &str,
        name: &str,
        data: BTreeMap<String, String>,
    ) {
        let mut st = self.state();
        let rv = st.next_version();
        let cm = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv},
            "data": data,
        });
        st.config_maps
            .insert((namespace.to_string(), name.to_string()), cm);
    }

    pub(crate) fn add_machine_config(&self, name: &str) {
        let mut st = self.state();
        let rv = st.next_version();
        let mc = json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfig",
            "metadata": {"name": name, "resourceVersion": rv},
        });
        st.machine_configs.insert(name.to_string(), mc);
    }

    /// Creates or replaces pod `namespace/name` with these labels, in `phase`.
    pub(crate) fn set_pod(
        &self,
        namespace: &str,
        name: &str,
        labels: &[(&str, &str)],
        phase: &str,
    ) {
        let mut st = self.state();
        let rv = st.next_version();
        let labels: Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv, "labels": labels},
            "spec": {"containers": [{"name": "main", "image": "example"}]},
            "status": {"phase": phase},
        });
        st.pods
            .insert((namespace.to_string(), name.to_string()), pod);
    }

    /// What pod `namespace/name` logged.
    pub(crate) fn set_pod_log(&self, namespace: &str, name: &str, log: &str) {
        self.state()
            .pod_logs
            .insert((namespace.to_string(), name.to_string()), log.to_string());
    }

    /// The pod-log reads so far: (namespace, pod, sinceSeconds).
    pub(crate) fn log_reads(&self) -> Vec<(String, String, Option<i64>)> {
        self.state().log_reads.clone()
    }

    /// Makes the next call with this method whose path starts with `path_prefix` fail with
    /// `status`. Queue several by calling again.
    pub(crate) fn fail_next(&self, method: &str, path_prefix: &str, status: u16) {
        self.state()
            .failures
            .push((method.to_string(), path_prefix.to_string(), status));
    }

    /// On the socket: close every connection right after its answer, without saying so.
    pub(crate) fn drop_connections_after_response(&self, on: bool) {
        self.state().hang_up = on;
    }

    /// An in-memory call: `op` unless a failure was injected for `method path`.
    fn call<T>(&self, method: &str, path: &str, op: impl FnOnce(&mut State) -> T) -> Result<T> {
        let mut st = self.state();
        match st.injected(method, path) {
            Some((status, message)) => Err(anyhow!("{message} ({status})")),
            None => Ok(op(&mut st)),
        }
    }
}

fn taint_keys(node: &Value) -> Vec<String> {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter_map(|t| t["key"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// What `KubeClient` makes of a node.
fn node_info(node: &Value) -> NodeInfo {
    let status = &node["status"];
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    NodeInfo {
        name: node["metadata"]["name"].as_str().unwrap_or_default().into(),
        ready: list(&status["conditions"])
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True"),
        internal_ips: list(&status["addresses"])
            .iter()
            .filter(|a| a["type"] == "InternalIP")
            .filter_map(|a| a["address"].as_str().map(str::to_string))
            .collect(),
        annotations: string_map(&node["metadata"]["annotations"]),
        taints: taint_keys(node),
    }
}

impl KubeApi for FakeKube {
    fn list_nodes(&self, role: &Role) -> Result<Vec<NodeInfo>> {
        self.call("GET", "/api/v1/nodes", |st| {
            st.nodes_with(&[(role_label(role.as_str()), None)])
                .iter()
                .map(node_info)
                .collect()
        })
    }

    fn list_events(&self, namespace: &str) -> Result<Vec<EventInfo>> {
        let path = format!("/api/v1/namespaces/{namespace}/events");
        self.call("GET", &path, |st| {
            st.events_of(namespace)
                .iter()
                .map(|e| EventInfo {
                    name: e["metadata"]["name"].as_str().unwrap_or_default().into(),
                    reason: e["reason"].as_str().unwrap_or_default().into(),
                    message: e["message"].as_str().unwrap_or_default().into(),
                })
                .collect()
        })
    }

    fn get_config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let path = format!("/api/v1/namespaces/{namespace}/configmaps/{name}");
        self.call("GET", &path, |st| {
            st.config_maps
                .get(&(namespace.to_string(), name.to_string()))
                .map(|cm| string_map(&cm["data"]))
        })
    }

    fn machine_config_exists(&self, name: &str) -> Result<bool> {
        self.call("GET", &format!("{MACHINE_CONFIGS}{name}"), |st| {
            st.machine_configs.contains_key(name)
        })
    }

    fn list_pods(&self, namespace: &str, label_selector: &str) -> Result<Vec<PodInfo>> {
        let labels = parse_selector(label_selector)
            .ok_or_else(|| anyhow!("fake kube: selector {label_selector:?}"))?;
        let path = format!("/api/v1/namespaces/{namespace}/pods");
        self.call("GET", &path, |st| {
            st.pods_with(namespace, &labels)
                .iter()
                .map(|p| PodInfo {
                    name: p["metadata"]["name"].as_str().unwrap_or_default().into(),
                    phase: p["status"]["phase"].as_str().unwrap_or_default().into(),
                })
                .collect()
        })
    }

    fn pod_logs(&self, namespace: &str, pod: &str, since_seconds: Option<i64>) -> Result<String> {
        let path = format!("/api/v1/namespaces/{namespace}/pods/{pod}/log");
        self.call("GET", &path, |st| {
            st.read_log(namespace, pod, since_seconds)
        })?
        .ok_or_else(|| anyhow!("pods \"{pod}\" not found"))
    }

    fn remove_node_taint(&self, node: &str, key: &str) -> Result<()> {
        let path = format!("/api/v1/nodes/{node}");
        self.call("GET", &path, |st| st.nodes.contains_key(node))?
            .then_some(())
            .ok_or_else(|| anyhow!("reading node {node}: nodes \"{node}\" not found"))?;
        if !self.node_taints(node).iter().any(|k| k == key) {
            return Ok(());
        }
        self.call("PATCH", &path, |st| {
            st.node_mut(node)["spec"]["taints"]
                .as_array_mut()
                .unwrap()
                .retain(|t| t["key"] != key);
            st.touch_node(node);
        })
    }
}

// ---------------------------------------------------------------------------------------------
// On the socket

fn status(code: u16, reason: &str, message: &str) -> Reply {
    Reply::json(
        code,
        &json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code,
        }),
    )
}

fn not_found(kind: &str, name: &str) -> Reply {
    status(404, "NotFound", &format!("{kind} \"{name}\" not found"))
}

fn list(kind: &str, st: &State, items: Vec<Value>) -> Reply {
    Reply::json(
        200,
        &json!({
            "apiVersion": "v1", "kind": kind,
            "metadata": {"resourceVersion": st.resource_version.to_string()},
            "items": items,
        }),
    )
}

/// `k` and `k=v` requirements, comma-joined: what `KubeClient` sends.
fn parse_selector(selector: &str) -> Option<Vec<(String, Option<String>)>> {
    selector
        .split(',')
        .filter(|r| !r.is_empty())
        .map(|r| match r.split_once('=') {
            _ if r.contains(['!', ' ', '(']) => None,
            Some((k, v)) => Some((k.to_string(), Some(v.to_string()))),
            None => Some((r.to_string(), None)),
        })
        .collect()
}

fn patch_node(st: &mut State, req: &Request, name: &str) -> Reply {
    let content_type = req.header("content-type").unwrap_or("");
    if !content_type.starts_with("application/merge-patch+json") {
        return status(415, "UnsupportedMediaType", content_type);
    }
    let patch: Value = match serde_json::from_slice(&req.body) {
        Ok(p) => p,
        Err(e) => return status(400, "BadRequest", &format!("invalid patch: {e}")),
    };
    let Some(node) = st.nodes.get(name) else {
        return not_found("nodes", name);
    };
    if let Some(rv) = patch.pointer("/metadata/resourceVersion") {
        if node["metadata"]["resourceVersion"] != *rv {
            let message = format!(
                "Operation cannot be fulfilled on nodes \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            );
            return status(409, "Conflict", &message);
        }
    }
    let mut updated = node.clone();
    merge_patch(&mut updated, &patch);
    updated["metadata"]["resourceVersion"] = Value::String(st.next_version());
    st.nodes.insert(name.to_string(), updated.clone());
    Reply::json(200, &updated)
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

impl FakeKube {
    fn route(&self, st: &mut State, req: &Request) -> Reply {
        if let Some((code, message)) = st.injected(&req.method, &req.path) {
            return status(code, "InternalError", &message);
        }
        let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        match (req.method.as_str(), segments.as_slice()) {
            ("GET", ["api", "v1", "nodes"]) => {
                let selector = req.query_param("labelSelector").unwrap_or_default();
                match parse_selector(&selector) {
                    Some(labels) => list("NodeList", st, st.nodes_with(&labels)),
                    None => status(400, "BadRequest", &format!("selector {selector:?}")),
                }
            }
            ("GET", ["api", "v1", "nodes", name]) => match st.nodes.get(*name) {
                Some(node) => Reply::json(200, node),
                None => not_found("nodes", name),
            },
            ("PATCH", ["api", "v1", "nodes", name]) => patch_node(st, req, name),
            ("GET", ["api", "v1", "namespaces", ns, "events"]) => {
                list("EventList", st, st.events_of(ns))
            }
            ("GET", ["api", "v1", "namespaces", ns, "configmaps", name]) => {
                match st.config_maps.get(&(ns.to_string(), name.to_string())) {
                    Some(cm) => Reply::json(200, cm),
                    None => not_found("configmaps", name),
                }
            }
            ("GET", ["api", "v1", "namespaces", ns, "pods"]) => {
                let selector = req.query_param("labelSelector").unwrap_or_default();
                match parse_selector(&selector) {
                    Some(labels) => list("PodList", st, st.pods_with(ns, &labels)),
                    None => status(400, "BadRequest", &format!("selector {selector:?}")),
                }
            }
            ("GET", ["api", "v1", "namespaces", ns, "pods", name, "log"]) => {
                let since = req.query_param("sinceSeconds").map(|s| s.parse().unwrap());
                match st.read_log(ns, name, since) {
                    Some(log) => Reply {
                        content_type: Some("text/plain"),
                        ..Reply::bytes(log.into_bytes())
                    },
                    None => not_found("pods", name),
                }
            }
            (
                "GET",
                ["apis", "machineconfiguration.openshift.io", "v1", "machineconfigs", name],
            ) => match st.machine_configs.get(*name) {
                Some(mc) => Reply::json(200, mc),
                None => not_found("machineconfigs.machineconfiguration.openshift.io", name),
            },
            _ => status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        }
    }
}

impl App for FakeKube {
    fn handle(&self, req: &Request) -> Reply {
        let mut st = self.state();
        let reply = self.route(&mut st, req);
        Reply {
            hang_up: st.hang_up,
            ..reply
        }
    }

    fn keep_alive(&self) -> bool {
        true
    }
}
