#![allow(dead_code)]
//! A small Kubernetes API server for the controller run as a process: an object store keyed by
//! URL, as an [`App`] of the test HTTP server (`TestServer::with_app_tls` for a pod's view).
//!
//! Objects live at their REST paths (`/api/v1/nodes/master-0`,
//! `/apis/config.openshift.io/v1/clusteroperators/console`, …) and the verbs do what the API
//! server does with them:
//! - `GET` an object, or a collection (a `List` of the objects right under it, filtered by
//!   `labelSelector` — `k`, `k=v`, `k!=v`, comma-joined — and `fieldSelector` — dotted paths
//!   `=`/`!=` a value); a collection without `namespaces/<ns>/` lists every namespace's;
//! - `POST` to a collection creates (409 if the name is taken; `generateName` honoured);
//! - `PUT` replaces (also the `status` and `approval` subresources, which replace the object);
//! - `PATCH` with a JSON merge patch or a JSON patch (`add`, `remove`, `replace`, `test`);
//! - `DELETE` an object, or a collection's objects matching the selectors;
//! - `GET …/pods/{name}/log` answers the text set with [`FakeCluster::set_pod_log`].
//!
//! Every request must carry `Authorization: Bearer <token>` (else 401, as for a pod whose
//! service-account token is wrong). Unknown objects are a 404 `Status`.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::http_server::{App, Reply, Request};

#[derive(Default)]
struct State {
    objects: BTreeMap<String, Value>,
    /// Object path of a pod → its log.
    logs: BTreeMap<String, String>,
    version: u64,
    created: u64,
}

impl State {
    /// Stores `object` at `key` with the next resourceVersion; returns what was stored.
    fn store(&mut self, key: String, mut object: Value) -> Value {
        self.version += 1;
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
        self.objects.insert(key, object.clone());
        object
    }

    /// The keys of the objects `GET collection?query` lists (every namespace's when the
    /// collection names none).
    fn matching_keys(&self, collection: &str, query: &[(String, String)]) -> Vec<String> {
        let cluster_wide = without_namespace(collection) == collection;
        self.objects
            .iter()
            .filter(|(key, object)| {
                let (of, _, sub) = split(key);
                sub.is_none()
                    && (of == collection || (cluster_wide && without_namespace(&of) == collection))
                    && selected(object, query)
            })
            .map(|(key, _)| key.clone())
            .collect()
    }
}

/// See the module documentation. Clones share the store.
#[derive(Clone)]
pub(crate) struct FakeCluster {
    token: String,
    state: Arc<Mutex<State>>,
}

/// A `Status` answer, as the API server words its errors.
fn status(code: u16, reason: &str, message: &str) -> Reply {
    Reply::json(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": message, "reason": reason, "code": code}),
    )
}

/// The path's object name's position: `/api/v1/<res>/<name>`, `/apis/<g>/<v>/<res>/<name>`,
/// with `namespaces/<ns>/` before `<res>` for namespaced kinds. Returns (collection, name,
/// subresource) for a path, or None for a collection path.
fn split(path: &str) -> (String, Option<String>, Option<String>) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let base = if segs.first() == Some(&"api") { 2 } else { 3 };
    let mut at = base;
    if segs.get(at) == Some(&"namespaces") && segs.len() > at + 2 {
        at += 2;
    }
    // segs[at] is the resource.
    let collection = format!("/{}", segs[..=at.min(segs.len() - 1)].join("/"));
    let name = segs.get(at + 1).map(|s| s.to_string());
    let sub = segs.get(at + 2).map(|s| s.to_string());
    (collection, name, sub)
}

/// `/api/v1/namespaces/ns/pods` → `/api/v1/pods`: what a cluster-wide list would ask for.
fn without_namespace(collection: &str) -> String {
    let segs: Vec<&str> = collection.split('/').collect();
    match segs.iter().position(|s| *s == "namespaces") {
        Some(i) if segs.len() > i + 2 => [&segs[..i], &segs[i + 2..]].concat().join("/"),
        _ => collection.to_string(),
    }
}

fn lookup<'a>(value: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(value, |v, k| v.get(k))
}

fn as_text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// One `k`, `k=v` or `k!=v` requirement against `lookup(key)`.
fn requirement_holds(req: &str, get: impl Fn(&str) -> Option<String>) -> bool {
    if let Some((k, v)) = req.split_once("!=") {
        return get(k).as_deref() != Some(v);
    }
    if let Some((k, v)) = req.split_once("==").or_else(|| req.split_once('=')) {
        return get(k).as_deref() == Some(v);
    }
    get(req).is_some()
}

fn selected(object: &Value, query: &[(String, String)]) -> bool {
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let labels = param("labelSelector").unwrap_or_default();
    let fields = param("fieldSelector").unwrap_or_default();
    let label = |k: &str| as_text(object["metadata"]["labels"].get(k));
    let field = |k: &str| as_text(lookup(object, k));
    labels
        .split(',')
        .filter(|r| !r.is_empty())
        .all(|r| requirement_holds(r, label))
        && fields
            .split(',')
            .filter(|r| !r.is_empty())
            .all(|r| requirement_holds(r, field))
}

fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let map = target.as_object_mut().expect("an object");
            for (k, v) in fields {
                if v.is_null() {
                    map.remove(k);
                } else {
                    merge_patch(map.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// RFC 6902 on `target` (the operations the controller sends, and a few more).
fn json_patch(target: &mut Value, ops: &Value) -> Result<(), String> {
    for op in ops.as_array().ok_or("a JSON patch is an array")? {
        let path = op["path"].as_str().ok_or("an operation without a path")?;
        let (parent_path, last) = path.rsplit_once('/').ok_or("a path without '/'")?;
        let value = op.get("value").cloned().unwrap_or(Value::Null);
        match op["op"].as_str() {
            Some("test") => {
                if target.pointer(path) != Some(&value) {
                    return Err(format!("test of {path} failed"));
                }
                continue;
            }
            Some(kind @ ("add" | "remove" | "replace")) => {
                let parent = target
                    .pointer_mut(parent_path)
                    .ok_or(format!("no {parent_path}"))?;
                match parent {
                    Value::Array(items) => {
                        let i = match last {
                            "-" => items.len(),
                            n => n.parse::<usize>().map_err(|e| e.to_string())?,
                        };
                        match kind {
                            "add" if i <= items.len() => items.insert(i, value),
                            "remove" if i < items.len() => drop(items.remove(i)),
                            "replace" if i < items.len() => items[i] = value,
                            _ => return Err(format!("index {i} out of range in {path}")),
                        }
                    }
                    Value::Object(map) => match kind {
                        "remove" => {
                            map.remove(last).ok_or(format!("no {path}"))?;
                        }
                        _ => {
                            map.insert(last.to_string(), value);
                        }
                    },
                    _ => return Err(format!("{parent_path} is not a container")),
                }
            }
            other => return Err(format!("unsupported operation {other:?}")),
        }
    }
    Ok(())
}

impl FakeCluster {
    /// An empty cluster whose clients must present `token`.
    pub(crate) fn new(token: &str) -> FakeCluster {
        FakeCluster {
            token: token.to_string(),
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `object` at `collection/<metadata.name>` (replacing any), with a resourceVersion.
    pub(crate) fn put(&self, collection: &str, object: Value) {
        let name = object["metadata"]["name"]
            .as_str()
            .expect("an object with metadata.name")
            .to_string();
        self.state().store(format!("{collection}/{name}"), object);
    }

    /// The object at `path`.
    pub(crate) fn get(&self, path: &str) -> Option<Value> {
        self.state().objects.get(path).cloned()
    }

    /// The log `GET {pod}/log` answers, `pod` being the pod's object path.
    pub(crate) fn set_pod_log(&self, pod: &str, log: &str) {
        self.state().logs.insert(pod.to_string(), log.to_string());
    }

    fn route(&self, req: &Request) -> Reply {
        let query = req.query_pairs();
        let (collection, name, sub) = split(&req.path);
        let mut st = self.state();
        let key = name.as_ref().map(|n| format!("{collection}/{n}"));
        match (req.method.as_str(), key, sub.as_deref()) {
            ("GET", Some(key), Some("log")) => match st.logs.get(&key) {
                Some(log) => Reply::bytes(log.clone().into_bytes()),
                None => status(404, "NotFound", &format!("no log for {key}")),
            },
            ("GET", Some(key), None) => match st.objects.get(&key) {
                Some(object) => Reply::json(200, object),
                None => status(404, "NotFound", &format!("{key} not found")),
            },
            ("GET", None, _) => {
                let items: Vec<Value> = st
                    .matching_keys(&collection, &query)
                    .iter()
                    .map(|key| st.objects[key].clone())
                    .collect();
                let version = st.version.to_string();
                Reply::json(
                    200,
                    &json!({"kind": "List", "apiVersion": "v1",
                            "metadata": {"resourceVersion": version}, "items": items}),
                )
            }
            ("POST", None, _) => {
                let mut object = req.body_json();
                if object["metadata"]["name"]
                    .as_str()
                    .is_none_or(str::is_empty)
                {
                    let prefix = object["metadata"]["generateName"]
                        .as_str()
                        .unwrap_or("object-")
                        .to_string();
                    st.created += 1;
                    object["metadata"]["name"] = json!(format!("{prefix}{:05}", st.created));
                }
                let key = format!(
                    "{collection}/{}",
                    object["metadata"]["name"].as_str().unwrap()
                );
                if st.objects.contains_key(&key) {
                    return status(409, "AlreadyExists", &format!("{key} already exists"));
                }
                Reply::json(201, &st.store(key, object))
            }
            ("PUT", Some(key), _) => {
                if !st.objects.contains_key(&key) {
                    return status(404, "NotFound", &format!("{key} not found"));
                }
                Reply::json(200, &st.store(key, req.body_json()))
            }
            ("PATCH", Some(key), _) => {
                let Some(mut object) = st.objects.get(&key).cloned() else {
                    return status(404, "NotFound", &format!("{key} not found"));
                };
                let patch = req.body_json();
                let kind = req.header("content-type").unwrap_or_default();
                if kind.starts_with("application/json-patch+json") {
                    if let Err(e) = json_patch(&mut object, &patch) {
                        return status(422, "Invalid", &e);
                    }
                } else if kind.starts_with("application/merge-patch+json") {
                    merge_patch(&mut object, &patch);
                } else {
                    return status(415, "UnsupportedMediaType", kind);
                }
                Reply::json(200, &st.store(key, object))
            }
            ("DELETE", Some(key), None) => match st.objects.remove(&key) {
                Some(object) => Reply::json(200, &object),
                None => status(404, "NotFound", &format!("{key} not found")),
            },
            ("DELETE", None, _) => {
                for key in st.matching_keys(&collection, &query) {
                    st.objects.remove(&key);
                }
                Reply::json(200, &json!({"kind": "Status", "status": "Success"}))
            }
            _ => status(405, "MethodNotAllowed", &req.path),
        }
    }
}

impl App for FakeCluster {
    fn handle(&self, req: &Request) -> Reply {
        let bearer = format!("Bearer {}", self.token);
        if req.header("authorization") != Some(bearer.as_str()) {
            return status(401, "Unauthorized", "Unauthorized");
        }
        self.route(req)
    }
}
