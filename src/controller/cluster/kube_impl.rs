//! [`ClusterApi`] over kube-rs: the client's transport and credentials (in-cluster service
//! account, or a kubeconfig), with request paths built from the [`rbac`] kinds, so that what is
//! declared there is what is sent. Objects come back as JSON and pure parsers take out the fields
//! the tasks read; BareMetalHosts stay whole.
//!
//! Like `kube::client::KubeClient`, the trait is synchronous, on the same transport
//! ([`crate::kube::blocking::BlockingKube`]: its own runtime blocked on for each call, callable
//! from several threads at once, never from inside a runtime; a connection per call).

use crate::kube::blocking::BlockingKube;
use anyhow::{anyhow, bail, Context, Result};
use http::{Method, Request};
use k8s_openapi::jiff;
use kube::config::Kubeconfig;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::rbac::{
    Kind, BMHS, CLUSTER_OPERATORS, CLUSTER_VERSIONS, CONFIG_MAPS, CSRS, CSVS, EVENTS,
    INSTALL_PLANS, JOBS, MACHINES, MCPS, NODES, PODS, PROVISIONINGS, PROXIES, SERVICES,
    SUBSCRIPTIONS,
};
use super::{
    ApiError, ClusterApi, ClusterOperator, ClusterVersion, Condition, Csr, CsrApproval, Csv,
    InstallPlan, Job, Machine, MachineConfigPool, NewEvent, Node, NodeAddress, OperatorVersion,
    Pod, ProxyStatus, Service, Subscription, Taint,
};

/// The kubeconfig the single-node bootstrap leaves for the controller (§2.5): used when present,
/// else the in-cluster service account.
pub const BOOTSTRAP_KUBECONFIG: &str = "/tmp/bootstrap-secrets/kubeconfig";
/// Where a pod has its service account's token and the cluster's CA.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The API server's address in a pod's environment.
pub const SERVICE_HOST_ENV: &str = "KUBERNETES_SERVICE_HOST";
pub const SERVICE_PORT_ENV: &str = "KUBERNETES_SERVICE_PORT";

/// Time to wait for a response (a full pod log included).
const READ_TIMEOUT: Duration = Duration::from_secs(60);

const JSON: &str = "application/json";
const MERGE_PATCH: &str = "application/merge-patch+json";
const JSON_PATCH: &str = "application/json-patch+json";

/// The controller's Kubernetes client.
#[derive(Debug)]
pub struct KubeCluster {
    kube: BlockingKube,
}

impl KubeCluster {
    /// As the Go controller (§2.5): the kubeconfig at `kubeconfig` (the single-node bootstrap
    /// leaves one at [`BOOTSTRAP_KUBECONFIG`]) if it exists, else the pod's service account in
    /// `service_account_dir` ([`SERVICE_ACCOUNT_DIR`]).
    pub fn for_controller(kubeconfig: &Path, service_account_dir: &Path) -> Result<KubeCluster> {
        match kubeconfig.exists() {
            true => KubeCluster::from_kubeconfig(kubeconfig),
            false => KubeCluster::in_cluster(service_account_dir),
        }
    }

    /// The kubeconfig at `path` if it exists, else the pod's own service account.
    pub fn kubeconfig_or_in_cluster(path: &Path) -> Result<KubeCluster> {
        KubeCluster::for_controller(path, Path::new(SERVICE_ACCOUNT_DIR))
    }

    /// The in-cluster service account, as client-go's `InClusterConfig`: the API server at
    /// `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, the token and CA in `dir`.
    pub fn in_cluster(dir: &Path) -> Result<KubeCluster> {
        let var = |name: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    anyhow!(
                        "{name} is not set: not running in a pod, and no kubeconfig; \
                     the controller runs as the assisted-installer-controller Job"
                    )
                })
        };
        let (host, port) = (var(SERVICE_HOST_ENV)?, var(SERVICE_PORT_ENV)?);
        // An IPv6 service address needs brackets in a URL.
        let host = match host.contains(':') {
            true => format!("[{host}]"),
            false => host,
        };
        KubeCluster::from_service_account(&format!("https://{host}:{port}"), dir)
            .context("the in-cluster Kubernetes client")
    }

    /// A kubeconfig's current context.
    pub fn from_kubeconfig(path: &Path) -> Result<KubeCluster> {
        let kubeconfig = Kubeconfig::read_from(path)
            .with_context(|| format!("reading kubeconfig {}", path.display()))?;
        KubeCluster::from_loaded(kubeconfig)
            .with_context(|| format!("kubeconfig {}", path.display()))
    }

    /// A service account's credentials as a pod has them mounted, for an API server at `server`:
    /// the token in `dir/token` (read again as it rotates) and, when present, the cluster's CA in
    /// `dir/ca.crt`. [`KubeCluster::in_cluster`] is this with the pod's own mount and address.
    pub fn from_service_account(server: &str, dir: &Path) -> Result<KubeCluster> {
        let ca = dir.join("ca.crt");
        let mut cluster = json!({ "server": server });
        if ca.exists() {
            cluster["certificate-authority"] = json!(ca.display().to_string());
        }
        let kubeconfig: Kubeconfig = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "cluster", "cluster": cluster}],
            "users": [{"name": "sa", "user": {"tokenFile": dir.join("token").display().to_string()}}],
            "contexts": [{"name": "sa", "context": {"cluster": "cluster", "user": "sa"}}],
            "current-context": "sa",
        }))
        .context("building the service account's kubeconfig")?;
        KubeCluster::from_loaded(kubeconfig)
            .with_context(|| format!("service account {} for {server}", dir.display()))
    }

    fn from_loaded(kubeconfig: Kubeconfig) -> Result<KubeCluster> {
        Ok(KubeCluster {
            kube: BlockingKube::new(kubeconfig, READ_TIMEOUT)?,
        })
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        self.kube.server()
    }

    /// Send one request; the answer's body as text. An API error answer becomes an [`ApiError`].
    fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<(&'static str, Value)>,
    ) -> Result<String> {
        let mut uri = path.to_string();
        let query: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v)))
            .collect();
        if !query.is_empty() {
            uri.push('?');
            uri.push_str(&query.join("&"));
        }
        let mut request = Request::builder().method(method).uri(&uri);
        let bytes = match body {
            Some((content_type, value)) => {
                request = request.header(http::header::CONTENT_TYPE, content_type);
                serde_json::to_vec(&value).context("encoding the request body")?
            }
            None => Vec::new(),
        };
        let request = request
            // As client-go: JSON where the API has a choice; a log comes as text.
            .header(http::header::ACCEPT, "application/json, */*")
            .body(bytes)
            .with_context(|| format!("building the request {uri}"))?;
        match self
            .kube
            .block_on(self.kube.client().request_text(request))?
        {
            Ok(text) => Ok(text),
            Err(kube::Error::Api(status)) => {
                Err(ApiError::new(status.code, &status.reason, &status.message).into())
            }
            Err(e) => Err(anyhow!(e)),
        }
    }

    fn json(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<(&'static str, Value)>,
    ) -> Result<Value> {
        let text = self.send(method, path, query, body)?;
        serde_json::from_str(&text).context("decoding the API server's answer")
    }

    fn get(&self, kind: Kind, ns: Option<&str>, name: &str) -> Result<Value> {
        self.json(Method::GET, &kind.path(ns, Some(name), None), &[], None)
    }

    /// A GET where NotFound is `None`.
    fn get_opt(&self, kind: Kind, ns: Option<&str>, name: &str) -> Result<Option<Value>> {
        match self.get(kind, ns, name) {
            Ok(v) => Ok(Some(v)),
            Err(e) if super::api_error_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The `items` of a LIST.
    fn list(&self, kind: Kind, ns: Option<&str>, query: &[(&str, String)]) -> Result<Vec<Value>> {
        let list = self.json(Method::GET, &kind.path(ns, None, None), query, None)?;
        Ok(match list.get("items") {
            Some(Value::Array(items)) => items.clone(),
            _ => Vec::new(),
        })
    }

    fn delete(&self, kind: Kind, ns: &str, name: &str) -> Result<()> {
        self.send(
            Method::DELETE,
            &kind.path(Some(ns), Some(name), None),
            &[],
            None,
        )
        .map(drop)
    }

    fn patch(&self, kind: Kind, name: &str, content_type: &'static str, body: Value) -> Result<()> {
        let path = kind.path(None, Some(name), None);
        self.send(Method::PATCH, &path, &[], Some((content_type, body)))
            .map(drop)
    }
}

/// Percent-encode a query value (everything but RFC 3986 unreserved characters).
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn selectors(label: Option<&str>, field: Option<&str>) -> Vec<(&'static str, String)> {
    let mut query = Vec::new();
    if let Some(l) = label {
        query.push(("labelSelector", l.to_string()));
    }
    if let Some(f) = field {
        query.push(("fieldSelector", f.to_string()));
    }
    query
}

/// A Kubernetes `Time`: RFC 3339 in UTC, to the second.
fn k8s_time(time: SystemTime) -> Result<String> {
    let ts = jiff::Timestamp::try_from(time).context("a time out of range")?;
    jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%SZ", ts).context("formatting a time")
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn strings(v: &Value, pointer: &str) -> Vec<String> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn string_map(v: &Value, pointer: &str) -> BTreeMap<String, String> {
    v.pointer(pointer)
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn items<'a>(v: &'a Value, pointer: &str) -> impl Iterator<Item = &'a Value> {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn conditions(v: &Value) -> Vec<Condition> {
    items(v, "/status/conditions")
        .map(|c| Condition {
            type_: text(c, "/type"),
            status: text(c, "/status"),
            reason: text(c, "/reason"),
            message: text(c, "/message"),
        })
        .collect()
}

fn name(v: &Value) -> String {
    text(v, "/metadata/name")
}

fn namespace(v: &Value) -> String {
    text(v, "/metadata/namespace")
}

fn parse_node(v: &Value) -> Node {
    Node {
        name: name(v),
        labels: string_map(v, "/metadata/labels"),
        taints: items(v, "/spec/taints")
            .map(|t| Taint {
                key: text(t, "/key"),
                value: text(t, "/value"),
                effect: text(t, "/effect"),
            })
            .collect(),
        conditions: conditions(v),
        addresses: items(v, "/status/addresses")
            .map(|a| NodeAddress {
                type_: text(a, "/type"),
                address: text(a, "/address"),
            })
            .collect(),
    }
}

fn parse_cluster_operator(v: &Value) -> ClusterOperator {
    ClusterOperator {
        name: name(v),
        conditions: conditions(v),
        versions: items(v, "/status/versions")
            .map(|o| OperatorVersion {
                name: text(o, "/name"),
                version: text(o, "/version"),
            })
            .collect(),
    }
}

fn parse_cluster_version(v: &Value) -> ClusterVersion {
    ClusterVersion {
        conditions: conditions(v),
        enabled_capabilities: strings(v, "/status/capabilities/enabledCapabilities"),
        known_capabilities: strings(v, "/status/capabilities/knownCapabilities"),
        desired_version: text(v, "/status/desired/version"),
    }
}

fn parse_proxy(v: &Value) -> ProxyStatus {
    ProxyStatus {
        http_proxy: text(v, "/status/httpProxy"),
        https_proxy: text(v, "/status/httpsProxy"),
        no_proxy: text(v, "/status/noProxy"),
    }
}

fn parse_pod(v: &Value) -> Pod {
    Pod {
        namespace: namespace(v),
        name: name(v),
        phase: text(v, "/status/phase"),
        labels: string_map(v, "/metadata/labels"),
    }
}

fn parse_service(v: &Value) -> Service {
    Service {
        namespace: namespace(v),
        name: name(v),
        cluster_ip: text(v, "/spec/clusterIP"),
    }
}

fn parse_csr(v: &Value) -> Csr {
    Csr {
        name: name(v),
        conditions: conditions(v),
        object: v.clone(),
    }
}

fn parse_subscription(v: &Value) -> Subscription {
    Subscription {
        namespace: namespace(v),
        name: name(v),
        current_csv: text(v, "/status/currentCSV"),
    }
}

fn parse_csv(v: &Value) -> Csv {
    Csv {
        namespace: namespace(v),
        name: name(v),
        phase: text(v, "/status/phase"),
        message: text(v, "/status/message"),
        version: text(v, "/spec/version"),
    }
}

fn parse_install_plan(v: &Value) -> InstallPlan {
    InstallPlan {
        namespace: namespace(v),
        name: name(v),
        owner_names: items(v, "/metadata/ownerReferences")
            .map(|o| text(o, "/name"))
            .collect(),
        phase: text(v, "/status/phase"),
    }
}

fn parse_job(v: &Value) -> Job {
    Job {
        namespace: namespace(v),
        name: name(v),
        failed: v
            .pointer("/status/failed")
            .and_then(Value::as_i64)
            .unwrap_or(0),
        conditions: conditions(v),
    }
}

fn parse_machine(v: &Value) -> Machine {
    Machine {
        api_version: text(v, "/apiVersion"),
        kind: text(v, "/kind"),
        namespace: namespace(v),
        name: name(v),
        labels: string_map(v, "/metadata/labels"),
    }
}

fn parse_mcp(v: &Value) -> MachineConfigPool {
    MachineConfigPool {
        name: name(v),
        paused: v
            .pointer("/spec/paused")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    }
}

/// The body of an Event creation.
fn event_body(namespace: &str, event: &NewEvent) -> Result<Value> {
    let time = k8s_time(event.time)?;
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event.name, "namespace": namespace},
        "involvedObject": {"namespace": event.involved_namespace, "name": event.involved_name},
        "reason": event.reason,
        "message": event.message,
        "type": event.type_,
        "count": 1,
        "firstTimestamp": time,
        "lastTimestamp": time,
    }))
}

/// The CSR object as listed, with the approval condition appended.
fn approval_body(csr: &Csr, approval: &CsrApproval) -> Result<Value> {
    let mut object = csr.object.clone();
    if !object.is_object() {
        bail!("CSR {} has no object to update", csr.name);
    }
    object["apiVersion"] = json!(CSRS.api_version());
    object["kind"] = json!("CertificateSigningRequest");
    let c = &approval.condition;
    let condition = json!({
        "type": c.type_,
        "status": c.status,
        "reason": c.reason,
        "message": c.message,
        "lastUpdateTime": k8s_time(approval.time)?,
    });
    if !object["status"].is_object() {
        object["status"] = json!({});
    }
    match object["status"]["conditions"].as_array_mut() {
        Some(list) => list.push(condition),
        None => object["status"]["conditions"] = json!([condition]),
    }
    Ok(object)
}

/// A BareMetalHost to put back: its name, and the object with `apiVersion` and `kind` (list items
/// may lack them).
fn bmh_body(bmh: &Value) -> Result<(String, Value)> {
    let name = bmh
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| anyhow!("the BareMetalHost has no metadata.name"))?
        .to_string();
    let mut object = bmh.clone();
    object["apiVersion"] = json!(BMHS.api_version());
    object["kind"] = json!("BareMetalHost");
    Ok((name, object))
}

impl ClusterApi for KubeCluster {
    fn get_proxy(&self, name: &str) -> Result<ProxyStatus> {
        let v = self
            .get(PROXIES, None, name)
            .with_context(|| format!("reading Proxy {name}"))?;
        Ok(parse_proxy(&v))
    }

    fn get_cluster_version(&self, name: &str) -> Result<ClusterVersion> {
        let v = self
            .get(CLUSTER_VERSIONS, None, name)
            .with_context(|| format!("reading ClusterVersion {name}"))?;
        Ok(parse_cluster_version(&v))
    }

    fn list_cluster_operators(&self) -> Result<Vec<ClusterOperator>> {
        let list = self
            .list(CLUSTER_OPERATORS, None, &[])
            .context("listing ClusterOperators")?;
        Ok(list.iter().map(parse_cluster_operator).collect())
    }

    fn get_cluster_operator(&self, name: &str) -> Result<ClusterOperator> {
        let v = self
            .get(CLUSTER_OPERATORS, None, name)
            .with_context(|| format!("reading ClusterOperator {name}"))?;
        Ok(parse_cluster_operator(&v))
    }

    fn get_config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let v = self
            .get_opt(CONFIG_MAPS, Some(namespace), name)
            .with_context(|| format!("reading ConfigMap {namespace}/{name}"))?;
        Ok(v.map(|v| string_map(&v, "/data")))
    }

    fn create_event(&self, namespace: &str, event: &NewEvent) -> Result<()> {
        let what = || format!("creating Event {namespace}/{}", event.name);
        let body = event_body(namespace, event).with_context(what)?;
        let path = EVENTS.path(Some(namespace), None, None);
        self.send(Method::POST, &path, &[], Some((JSON, body)))
            .with_context(what)
            .map(drop)
    }

    fn list_nodes(&self, label_selector: Option<&str>) -> Result<Vec<Node>> {
        let list = self
            .list(NODES, None, &selectors(label_selector, None))
            .with_context(|| match label_selector {
                Some(l) => format!("listing nodes {l}"),
                None => "listing nodes".to_string(),
            })?;
        Ok(list.iter().map(parse_node).collect())
    }

    fn get_node(&self, name: &str) -> Result<Node> {
        let v = self
            .get(NODES, None, name)
            .with_context(|| format!("reading node {name}"))?;
        Ok(parse_node(&v))
    }

    fn remove_node_taint(&self, name: &str, index: usize) -> Result<()> {
        let body = json!([{"op": "remove", "path": format!("/spec/taints/{index}")}]);
        self.patch(NODES, name, JSON_PATCH, body)
            .with_context(|| format!("removing taint {index} of node {name}"))
    }

    fn patch_node_labels(&self, name: &str, labels: &Value) -> Result<()> {
        let body = json!({"metadata": {"labels": labels}});
        self.patch(NODES, name, MERGE_PATCH, body)
            .with_context(|| format!("patching the labels of node {name}"))
    }

    fn list_services(&self) -> Result<Vec<Service>> {
        let list = self
            .list(SERVICES, None, &[])
            .context("listing services in all namespaces")?;
        Ok(list.iter().map(parse_service).collect())
    }

    fn delete_service(&self, namespace: &str, name: &str) -> Result<()> {
        self.delete(SERVICES, namespace, name)
            .with_context(|| format!("deleting service {namespace}/{name}"))
    }

    fn list_pods(
        &self,
        namespace: &str,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Vec<Pod>> {
        let list = self
            .list(
                PODS,
                Some(namespace),
                &selectors(label_selector, field_selector),
            )
            .with_context(|| format!("listing pods in namespace {namespace}"))?;
        Ok(list.iter().map(parse_pod).collect())
    }

    fn pod_log(&self, namespace: &str, name: &str, since_seconds: Option<i64>) -> Result<String> {
        let query: Vec<(&str, String)> = since_seconds
            .map(|s| ("sinceSeconds", s.to_string()))
            .into_iter()
            .collect();
        let path = PODS.path(Some(namespace), Some(name), Some("log"));
        self.send(Method::GET, &path, &query, None)
            .with_context(|| format!("reading the log of pod {namespace}/{name}"))
    }

    fn delete_pods(&self, namespace: &str, label_selector: Option<&str>) -> Result<()> {
        let path = PODS.path(Some(namespace), None, None);
        self.send(
            Method::DELETE,
            &path,
            &selectors(label_selector, None),
            None,
        )
        .with_context(|| format!("deleting the pods of namespace {namespace}"))
        .map(drop)
    }

    fn list_csrs(&self) -> Result<Vec<Csr>> {
        let list = self
            .list(CSRS, None, &[])
            .context("listing CertificateSigningRequests")?;
        Ok(list.iter().map(parse_csr).collect())
    }

    fn approve_csr(&self, csr: &Csr, approval: &CsrApproval) -> Result<()> {
        let what = || format!("approving CSR {}", csr.name);
        let body = approval_body(csr, approval).with_context(what)?;
        let path = CSRS.path(None, Some(&csr.name), Some("approval"));
        self.send(Method::PUT, &path, &[], Some((JSON, body)))
            .with_context(what)
            .map(drop)
    }

    fn get_subscription(&self, namespace: &str, name: &str) -> Result<Option<Subscription>> {
        let v = self
            .get_opt(SUBSCRIPTIONS, Some(namespace), name)
            .with_context(|| format!("reading Subscription {namespace}/{name}"))?;
        Ok(v.as_ref().map(parse_subscription))
    }

    fn get_csv(&self, namespace: &str, name: &str) -> Result<Option<Csv>> {
        let v = self
            .get_opt(CSVS, Some(namespace), name)
            .with_context(|| format!("reading ClusterServiceVersion {namespace}/{name}"))?;
        Ok(v.as_ref().map(parse_csv))
    }

    fn list_install_plans(&self, namespace: &str) -> Result<Vec<InstallPlan>> {
        let list = self
            .list(INSTALL_PLANS, Some(namespace), &[])
            .with_context(|| format!("listing InstallPlans in namespace {namespace}"))?;
        Ok(list.iter().map(parse_install_plan).collect())
    }

    fn delete_install_plan(&self, namespace: &str, name: &str) -> Result<()> {
        self.delete(INSTALL_PLANS, namespace, name)
            .with_context(|| format!("deleting InstallPlan {namespace}/{name}"))
    }

    fn list_jobs(&self, namespace: &str) -> Result<Vec<Job>> {
        let list = self
            .list(JOBS, Some(namespace), &[])
            .with_context(|| format!("listing jobs in namespace {namespace}"))?;
        Ok(list.iter().map(parse_job).collect())
    }

    fn delete_job(&self, namespace: &str, name: &str) -> Result<()> {
        self.delete(JOBS, namespace, name)
            .with_context(|| format!("deleting job {namespace}/{name}"))
    }

    fn list_bmhs(&self, namespace: &str) -> Result<Vec<Value>> {
        self.list(BMHS, Some(namespace), &[])
            .with_context(|| format!("listing BareMetalHosts in namespace {namespace}"))
    }

    fn get_bmh(&self, namespace: &str, name: &str) -> Result<Value> {
        self.get(BMHS, Some(namespace), name)
            .with_context(|| format!("reading BareMetalHost {namespace}/{name}"))
    }

    fn update_bmh(&self, namespace: &str, bmh: &Value) -> Result<Value> {
        let (name, body) = bmh_body(bmh).context("updating a BareMetalHost")?;
        let path = BMHS.path(Some(namespace), Some(&name), None);
        self.json(Method::PUT, &path, &[], Some((JSON, body)))
            .with_context(|| format!("updating BareMetalHost {namespace}/{name}"))
    }

    fn update_bmh_status(&self, namespace: &str, bmh: &Value) -> Result<Value> {
        let (name, body) = bmh_body(bmh).context("updating the status of a BareMetalHost")?;
        let path = BMHS.path(Some(namespace), Some(&name), Some("status"));
        self.json(Method::PUT, &path, &[], Some((JSON, body)))
            .with_context(|| format!("updating the status of BareMetalHost {namespace}/{name}"))
    }

    fn provisioning_exists(&self, name: &str) -> Result<bool> {
        let v = self
            .get_opt(PROVISIONINGS, None, name)
            .with_context(|| format!("reading Provisioning {name}"))?;
        Ok(v.is_some())
    }

    fn list_machines(&self, namespace: &str) -> Result<Vec<Machine>> {
        let list = self
            .list(MACHINES, Some(namespace), &[])
            .with_context(|| format!("listing Machines in namespace {namespace}"))?;
        // List items may come without apiVersion and kind: a consumerRef needs both.
        Ok(list
            .iter()
            .map(|v| {
                let mut m = parse_machine(v);
                if m.api_version.is_empty() {
                    m.api_version = MACHINES.api_version();
                }
                if m.kind.is_empty() {
                    m.kind = "Machine".to_string();
                }
                m
            })
            .collect())
    }

    fn get_machine_config_pool(&self, name: &str) -> Result<MachineConfigPool> {
        let v = self
            .get(MCPS, None, name)
            .with_context(|| format!("reading MachineConfigPool {name}"))?;
        Ok(parse_mcp(&v))
    }

    fn set_machine_config_pool_paused(&self, name: &str, paused: bool) -> Result<()> {
        self.patch(MCPS, name, MERGE_PATCH, json!({"spec": {"paused": paused}}))
            .with_context(|| format!("setting spec.paused={paused} on MachineConfigPool {name}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_keeps_unreserved_and_escapes_the_rest() {
        assert_eq!(
            encode("node-role.kubernetes.io/master"),
            "node-role.kubernetes.io%2Fmaster"
        );
        assert_eq!(encode("job-name=a,b"), "job-name%3Da%2Cb");
        assert_eq!(encode("a b~_"), "a%20b~_");
    }

    #[test]
    fn k8s_time_is_utc_to_the_second() {
        let t = std::time::UNIX_EPOCH + Duration::from_millis(1_700_000_000_500);
        assert_eq!(k8s_time(t).unwrap(), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn parse_node_takes_labels_taints_conditions_and_addresses() {
        let v = json!({
            "metadata": {"name": "m0", "labels": {"a": "b", "n": 1}},
            "spec": {"taints": [
                {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"},
                {"key": "k", "effect": "NoExecute"}
            ]},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "m0"}]
            }
        });
        let node = parse_node(&v);
        assert_eq!(node.name, "m0");
        assert_eq!(node.labels, BTreeMap::from([("a".into(), "b".into())]));
        assert_eq!(node.taints.len(), 2);
        assert_eq!(node.taints[0].value, "true");
        assert_eq!(node.taints[1].key, "k");
        assert!(node.is_ready());
        assert_eq!(node.conditions[0].reason, "KubeletReady");
        assert_eq!(node.internal_ips().collect::<Vec<_>>(), vec!["10.0.0.1"]);
        assert_eq!(parse_node(&json!({})), Node::default());
    }

    #[test]
    fn parse_openshift_objects() {
        let co = parse_cluster_operator(&json!({
            "metadata": {"name": "console"},
            "status": {"conditions": [{"type": "Available", "status": "True", "message": "m"}],
                       "versions": [{"name": "operator", "version": "4.15.0"}]}
        }));
        assert_eq!(co.name, "console");
        assert!(co.conditions[0].is_true("Available"));
        assert_eq!(co.versions[0].version, "4.15.0");

        let cv = parse_cluster_version(&json!({
            "status": {"capabilities": {"enabledCapabilities": ["Console"], "knownCapabilities": ["Console", "Insights"]},
                       "desired": {"version": "4.15.1"},
                       "conditions": [{"type": "Available", "status": "False"}]}
        }));
        assert_eq!(cv.enabled_capabilities, vec!["Console"]);
        assert_eq!(cv.known_capabilities, vec!["Console", "Insights"]);
        assert_eq!(cv.desired_version, "4.15.1");
        assert_eq!(cv.conditions[0].status, "False");

        let proxy =
            parse_proxy(&json!({"status": {"httpProxy": "http://p:3128", "noProxy": ".svc"}}));
        assert_eq!(proxy.http_proxy, "http://p:3128");
        assert_eq!(proxy.https_proxy, "");
        assert_eq!(proxy.no_proxy, ".svc");

        let mcp = parse_mcp(&json!({"metadata": {"name": "worker"}, "spec": {"paused": true}}));
        assert!(mcp.paused);
        assert!(!parse_mcp(&json!({"metadata": {"name": "worker"}})).paused);
    }

    #[test]
    fn parse_olm_and_batch_objects() {
        let sub = parse_subscription(&json!({
            "metadata": {"name": "odf", "namespace": "openshift-storage"},
            "status": {"currentCSV": "odf.v4.15.0"}
        }));
        assert_eq!(sub.current_csv, "odf.v4.15.0");
        assert_eq!(sub.namespace, "openshift-storage");
        let csv = parse_csv(&json!({
            "metadata": {"name": "odf.v4.15.0"},
            "spec": {"version": "4.15.0-rhodf"},
            "status": {"phase": "Succeeded", "message": "install strategy completed"}
        }));
        assert_eq!(
            (csv.phase.as_str(), csv.version.as_str()),
            ("Succeeded", "4.15.0-rhodf")
        );
        assert_eq!(csv.message, "install strategy completed");
        let plan = parse_install_plan(&json!({
            "metadata": {"name": "ip-1", "ownerReferences": [{"name": "odf"}, {"name": "x"}]},
            "status": {"phase": "Failed"}
        }));
        assert_eq!(plan.owner_names, vec!["odf", "x"]);
        assert_eq!(plan.phase, "Failed");
        let job = parse_job(&json!({
            "metadata": {"name": "j", "namespace": "openshift-marketplace"},
            "status": {"failed": 2, "conditions": [{"type": "Failed", "status": "True"}]}
        }));
        assert_eq!(job.failed, 2);
        assert!(job.conditions[0].is_true("Failed"));
        assert_eq!(parse_job(&json!({})).failed, 0);
    }

    #[test]
    fn parse_pods_services_machines() {
        let pod = parse_pod(&json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"job-name": "x"}},
            "status": {"phase": "Running"}
        }));
        assert_eq!(pod.phase, "Running");
        assert_eq!(pod.labels["job-name"], "x");
        let svc = parse_service(&json!({
            "metadata": {"name": "dns-default", "namespace": "openshift-dns"},
            "spec": {"clusterIP": "172.30.0.10"}
        }));
        assert_eq!(svc.cluster_ip, "172.30.0.10");
        let m = parse_machine(&json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "w-0", "namespace": "openshift-machine-api",
                         "labels": {"machine.openshift.io/cluster-api-machine-role": "worker"}}
        }));
        assert_eq!(m.api_version, "machine.openshift.io/v1beta1");
        assert_eq!(
            m.labels["machine.openshift.io/cluster-api-machine-role"],
            "worker"
        );
    }

    #[test]
    fn event_body_is_the_ready_event_shape() {
        let event = NewEvent {
            name: "AssistedControllerIsReady".into(),
            reason: "AssistedControllerIsReady".into(),
            type_: "Normal".into(),
            message: "ready".into(),
            involved_namespace: "assisted-installer".into(),
            involved_name: "assisted-installer-controller".into(),
            time: std::time::UNIX_EPOCH,
        };
        let body = event_body("assisted-installer", &event).unwrap();
        assert_eq!(body["metadata"]["namespace"], "assisted-installer");
        assert_eq!(body["count"], 1);
        assert_eq!(body["firstTimestamp"], "1970-01-01T00:00:00Z");
        assert_eq!(body["lastTimestamp"], body["firstTimestamp"]);
        assert_eq!(
            body["involvedObject"],
            json!({"namespace": "assisted-installer", "name": "assisted-installer-controller"})
        );
        assert_eq!(body["type"], "Normal");
    }

    #[test]
    fn approval_body_appends_to_existing_or_missing_conditions() {
        let approval = CsrApproval {
            condition: Condition {
                type_: "Approved".into(),
                status: "True".into(),
                reason: "NodeCSRApprove".into(),
                message: "m".into(),
            },
            time: std::time::UNIX_EPOCH,
        };
        let with = parse_csr(&json!({
            "metadata": {"name": "csr-1", "resourceVersion": "7"},
            "spec": {"request": "abc"},
            "status": {"conditions": [{"type": "Denied", "status": "True"}]}
        }));
        let body = approval_body(&with, &approval).unwrap();
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert_eq!(body["spec"]["request"], "abc");
        assert_eq!(body["kind"], "CertificateSigningRequest");
        assert_eq!(body["apiVersion"], "certificates.k8s.io/v1");
        let conds = body["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[1]["type"], "Approved");
        assert_eq!(conds[1]["lastUpdateTime"], "1970-01-01T00:00:00Z");
        let without = parse_csr(&json!({"metadata": {"name": "csr-2"}}));
        let body = approval_body(&without, &approval).unwrap();
        assert_eq!(body["status"]["conditions"][0]["reason"], "NodeCSRApprove");
        assert!(approval_body(&Csr::default(), &approval).is_err());
    }

    #[test]
    fn bmh_body_needs_a_name_and_sets_the_type() {
        let (name, body) = bmh_body(&json!({"metadata": {"name": "b"}})).unwrap();
        assert_eq!(name, "b");
        assert_eq!(body["apiVersion"], "metal3.io/v1alpha1");
        assert_eq!(body["kind"], "BareMetalHost");
        assert!(bmh_body(&json!({"metadata": {}})).is_err());
    }
}
