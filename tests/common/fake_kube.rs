#![allow(dead_code)]
//! The fake Kubernetes API server of the tests (an [`App`] of the test HTTP server): objects
//! at their REST paths (`/api/v1/nodes/master-0`), served as the API server does. A collection
//! without `namespaces/<ns>/` lists every namespace's; subresources `PUT` replace the object;
//! a failed JSON-patch `test` is a 422. With a token, requests without `Authorization: Bearer
//! <token>` get a 401. Tests can inject answers and have every connection hung up.

use assisted_installer::kube::selector_matches;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::http_server::{App, Reply, Request};

#[derive(Default)]
struct State {
    objects: BTreeMap<String, Value>,
    /// Object path of a pod → its log.
    logs: BTreeMap<String, String>,
    version: u64,
    /// (method, path prefix, answer): each answers the first request it matches instead.
    injected: Vec<(String, String, Reply)>,
    hang_up: bool,
}

impl State {
    fn store(&mut self, key: String, mut object: Value) -> Reply {
        self.version += 1;
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
        self.objects.insert(key, object.clone());
        Reply::json(200, &object)
    }

    /// The keys of the objects `GET collection?query` lists.
    fn matching(&self, collection: &str, query: &[(String, String)]) -> Vec<String> {
        let listed = |key: &str| {
            let of = key.rsplit_once('/').map_or("", |(of, _)| of);
            of == collection || without_namespace(of) == collection
        };
        let objects = self.objects.iter();
        let matching = objects.filter(|(key, object)| listed(key) && selected(object, query));
        matching.map(|(key, _)| key.clone()).collect()
    }

    /// The fake's own answer to `req`.
    fn answer(&mut self, req: &Request) -> Reply {
        let (method, path) = (req.method.as_str(), req.path.as_str());
        let query = req.query_pairs();
        let (collection, name, sub) = split(path);
        let key = name.map(|n| format!("{collection}/{n}"));
        let missing = |key: &str| status(404, "NotFound", &format!("{key} not found"));
        match (method, key, sub.as_deref()) {
            ("GET", Some(key), Some("log")) => match self.logs.get(&key) {
                Some(log) => Reply::bytes(log.clone().into_bytes()),
                None => missing(&key),
            },
            ("GET", Some(key), None) => match self.objects.get(&key) {
                Some(object) => Reply::json(200, object),
                None => missing(&key),
            },
            ("GET", None, _) => {
                let keys = self.matching(&collection, &query);
                let items: Vec<&Value> = keys.iter().map(|key| &self.objects[key]).collect();
                let meta = json!({"resourceVersion": self.version.to_string()});
                let list =
                    json!({"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items});
                Reply::json(200, &list)
            }
            ("POST", None, _) => {
                let object = req.body_json();
                let name = object["metadata"]["name"].as_str().unwrap_or("");
                let key = format!("{collection}/{name}");
                if self.objects.contains_key(&key) {
                    return status(409, "AlreadyExists", &format!("{key} already exists"));
                }
                Reply {
                    status: 201,
                    ..self.store(key, object)
                }
            }
            ("PUT", Some(key), _) if self.objects.contains_key(&key) => {
                self.store(key, req.body_json())
            }
            ("PATCH", Some(key), _) if self.objects.contains_key(&key) => {
                let mut object = self.objects[&key].clone();
                let content_type = req.header("content-type").unwrap_or_default();
                if content_type.starts_with("application/json-patch+json") {
                    let patch: json_patch::Patch = serde_json::from_slice(&req.body).unwrap();
                    if let Err(e) = json_patch::patch(&mut object, &patch) {
                        return status(422, "Invalid", &e.to_string());
                    }
                } else {
                    json_patch::merge(&mut object, &req.body_json());
                }
                self.store(key, object)
            }
            ("DELETE", Some(key), None) => match self.objects.remove(&key) {
                Some(object) => Reply::json(200, &object),
                None => missing(&key),
            },
            ("DELETE", None, _) => {
                for key in self.matching(&collection, &query) {
                    self.objects.remove(&key);
                }
                Reply::json(200, &json!({"kind": "Status", "status": "Success"}))
            }
            (_, Some(key), _) => missing(&key),
            _ => status(405, "MethodNotAllowed", path),
        }
    }
}

/// Clones share the store.
#[derive(Clone, Default)]
pub(crate) struct FakeApiServer {
    token: Option<String>,
    state: Arc<Mutex<State>>,
}

/// A `Status` answer, as the API server words its errors.
fn status(code: u16, reason: &str, message: &str) -> Reply {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "message": message, "reason": reason, "code": code});
    Reply::json(code, &body)
}

/// (collection, name, subresource) of a path: `/api/v1/<res>/<name>/<sub>` or
/// `/apis/<g>/<v>/<res>/…`, with `namespaces/<ns>/` before `<res>` for namespaced kinds.
fn split(path: &str) -> (String, Option<String>, Option<String>) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut at = if segs.first() == Some(&"api") { 2 } else { 3 };
    if segs.get(at) == Some(&"namespaces") && segs.len() > at + 2 {
        at += 2;
    }
    let collection = format!("/{}", segs[..=at.min(segs.len() - 1)].join("/"));
    let part = |i: usize| segs.get(i).map(|s| s.to_string());
    (collection, part(at + 1), part(at + 2))
}

/// `/api/v1/namespaces/ns/pods` → `/api/v1/pods`: what a cluster-wide list asks for.
fn without_namespace(collection: &str) -> String {
    let segs: Vec<&str> = collection.split('/').collect();
    match segs.iter().position(|s| *s == "namespaces") {
        Some(i) if segs.len() > i + 2 => [&segs[..i], &segs[i + 2..]].concat().join("/"),
        _ => collection.to_string(),
    }
}

/// Whether `object` satisfies the query's label and field selectors.
fn selected(object: &Value, query: &[(String, String)]) -> bool {
    query.iter().all(|(k, selector)| {
        let values: BTreeMap<String, String> = match k.as_str() {
            "labelSelector" => {
                serde_json::from_value(object["metadata"]["labels"].clone()).unwrap_or_default()
            }
            "fieldSelector" => {
                let fields = selector.split(',').map(|r| r.split('=').next().unwrap());
                let value = |f: &str| f.split('.').try_fold(object, |v, k| v.get(k)).cloned();
                let text = |f: &str| Some((f.to_string(), value(f)?.as_str()?.to_string()));
                fields.filter_map(text).collect()
            }
            _ => return true,
        };
        selector_matches(Some(selector), &values)
    })
}

impl FakeApiServer {
    /// An empty cluster whose clients must present `token`.
    pub(crate) fn new(token: &str) -> FakeApiServer {
        FakeApiServer {
            token: Some(token.to_string()),
            ..FakeApiServer::default()
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `object` at `collection/<metadata.name>` (replacing any), with a resourceVersion.
    pub(crate) fn put(&self, collection: &str, object: Value) {
        let name = object["metadata"]["name"].as_str().expect("metadata.name");
        let key = format!("{collection}/{name}");
        self.state().store(key, object);
    }

    /// The object at `path`.
    pub(crate) fn get(&self, path: &str) -> Option<Value> {
        self.state().objects.get(path).cloned()
    }

    /// The log `GET {pod}/log` answers, `pod` being the pod's object path.
    pub(crate) fn set_pod_log(&self, pod: &str, log: &str) {
        self.state().logs.insert(pod.to_string(), log.to_string());
    }

    /// The next `method` request to a path starting with `prefix` is answered `reply`.
    pub(crate) fn answer_next(&self, method: &str, prefix: &str, reply: Reply) {
        let injected = (method.to_string(), prefix.to_string(), reply);
        self.state().injected.push(injected);
    }

    /// The next `method` request to a path starting with `prefix` fails with `code`.
    pub(crate) fn fail_next(&self, method: &str, prefix: &str, code: u16) {
        let reply = status(code, "InternalError", "injected failure");
        self.answer_next(method, prefix, reply);
    }

    /// From now on every connection is closed right after its answer, without saying so.
    pub(crate) fn hang_up(&self) {
        self.state().hang_up = true;
    }
}

impl App for FakeApiServer {
    fn handle(&self, req: &Request) -> Reply {
        if let Some(token) = &self.token {
            if req.header("authorization") != Some(format!("Bearer {token}").as_str()) {
                return status(401, "Unauthorized", "Unauthorized");
            }
        }
        let st = &mut *self.state();
        let matches =
            |(m, p, _): &(String, String, Reply)| *m == req.method && req.path.starts_with(p);
        let at = st.injected.iter().position(matches);
        let reply = match at {
            Some(i) => st.injected.remove(i).2,
            None => st.answer(req),
        };
        Reply {
            hang_up: st.hang_up,
            ..reply
        }
    }

    fn keep_alive(&self) -> bool {
        true
    }
}
