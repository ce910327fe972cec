//! The one Kubernetes client of both programs: kube-rs's typed `Api<K>` on a current-thread
//! tokio runtime the client owns and blocks on for each call, implementing [`ClusterApi`].
//!
//! - It must be created and used outside any async runtime (from the plain threads of the flows
//!   and tasks); doing otherwise is an error instead of a panic.
//! - Every call opens its own connection (`Connection: close`): nothing drives the runtime
//!   between calls, so a pooled connection closed meanwhile by the server or a load balancer
//!   would go unnoticed and fail the next call ("connection closed before message completed").
//! - The API server is always reached directly: `HTTP(S)_PROXY` from the environment is not
//!   applied (the controller even sets them from the cluster Proxy, which is for egress).

use super::model::kinds;
use super::{
    ApiError, ClusterApi, ClusterOperator, ClusterVersion, Csr, CsrApproval, Csv, Event,
    InstallPlan, Job, Machine, MachineConfigPool, NewEvent, Node, Pod, ProxyStatus, Service,
    Subscription,
};
use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::api::batch::v1::Job as K8sJob;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, LogParams, ObjectMeta, Patch,
    PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The kubeconfig the single-node bootstrap leaves for the controller: used when present, else
/// the in-cluster service account.
pub(crate) const BOOTSTRAP_KUBECONFIG: &str = "/tmp/bootstrap-secrets/kubeconfig";
/// Where a pod has its service account's token and the cluster's CA.
pub(crate) const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Time to establish a connection (TCP and TLS) to the API server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time to wait for a response: the installer's flows poll, so a hung call must not block them
/// for long; the controller reads whole pod logs.
const INSTALLER_READ_TIMEOUT: Duration = Duration::from_secs(30);
const CONTROLLER_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// See the module documentation.
pub struct KubeClient {
    runtime: tokio::runtime::Runtime,
    client: Client,
    server: String,
}

impl Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeClient")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// An error when called from inside an async runtime (blocking there would panic).
fn ensure_outside_runtime() -> Result<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        bail!("the Kubernetes client blocks and must not be used inside an async runtime");
    }
    Ok(())
}

impl KubeClient {
    /// The installer's client: a kubeconfig's current context (bootkube's, with certificate data;
    /// or plain http without credentials in tests).
    pub fn from_kubeconfig(path: &Path) -> Result<KubeClient> {
        KubeClient::kubeconfig_file(path, INSTALLER_READ_TIMEOUT)
    }

    /// The controller's client, as the Go controller's: the kubeconfig at `kubeconfig` (the
    /// single-node bootstrap leaves one at [`BOOTSTRAP_KUBECONFIG`]) if it exists, else the pod's
    /// service account. `service_account_dir` other than [`SERVICE_ACCOUNT_DIR`] is the tests'
    /// hook: that directory's token and CA, for the API server the pod's environment names.
    pub fn for_controller(kubeconfig: &Path, service_account_dir: &Path) -> Result<KubeClient> {
        if kubeconfig.exists() {
            return KubeClient::kubeconfig_file(kubeconfig, CONTROLLER_READ_TIMEOUT);
        }
        // Checked before kube's loader, whose error does not name the variable.
        let var = |name: &str| std::env::var(name).with_context(|| format!("{name} is not set"));
        let host = var("KUBERNETES_SERVICE_HOST")?;
        if service_account_dir == Path::new(SERVICE_ACCOUNT_DIR) {
            return KubeClient::new(None, CONTROLLER_READ_TIMEOUT)
                .context("the in-cluster Kubernetes client");
        }
        let host = match host.contains(':') {
            true => format!("[{host}]"),
            false => host,
        };
        let server = format!("https://{host}:{}", var("KUBERNETES_SERVICE_PORT")?);
        KubeClient::from_service_account(&server, service_account_dir)
    }

    /// A service account's credentials as a pod has them mounted, for an API server at `server`:
    /// the token in `dir/token` (read again as it rotates) and, when present, the CA in
    /// `dir/ca.crt`.
    pub fn from_service_account(server: &str, dir: &Path) -> Result<KubeClient> {
        let ca = dir.join("ca.crt");
        let mut cluster = json!({ "server": server });
        if ca.exists() {
            cluster["certificate-authority"] = json!(ca.display().to_string());
        }
        let token = dir.join("token").display().to_string();
        let kubeconfig: Kubeconfig = serde_json::from_value(json!({
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "sa", "user": {"tokenFile": token}}],
            "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
            "current-context": "sa",
        }))?;
        KubeClient::new(Some(kubeconfig), CONTROLLER_READ_TIMEOUT)
            .with_context(|| format!("service account {} for {server}", dir.display()))
    }

    fn kubeconfig_file(path: &Path, read_timeout: Duration) -> Result<KubeClient> {
        let kubeconfig = Kubeconfig::read_from(path)
            .with_context(|| format!("reading kubeconfig {}", path.display()))?;
        KubeClient::new(Some(kubeconfig), read_timeout)
            .with_context(|| format!("kubeconfig {}", path.display()))
    }

    /// From `kubeconfig`'s current context, or without one from the in-cluster service account.
    fn new(kubeconfig: Option<Kubeconfig>, read_timeout: Duration) -> Result<KubeClient> {
        ensure_outside_runtime().context("creating the Kubernetes client")?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building the runtime of the Kubernetes client")?;
        let mut config = match kubeconfig {
            Some(kubeconfig) => runtime
                .block_on(Config::from_custom_kubeconfig(
                    kubeconfig,
                    &KubeConfigOptions::default(),
                ))
                .context("loading the kubeconfig")?,
            None => Config::incluster()?,
        };
        if config.root_cert.as_ref().is_some_and(Vec::is_empty) {
            bail!("the certificate authority of the cluster holds no PEM certificate");
        }
        config.proxy_url = None;
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        config.read_timeout = Some(read_timeout);
        config.reset_reader_on_write = true;
        let close = http::HeaderValue::from_static("close");
        config.headers.push((http::header::CONNECTION, close));
        let server = config.cluster_url.to_string();
        let client = {
            let _inside = runtime.enter();
            Client::try_from(config).context("building the Kubernetes client")?
        };
        tracing::debug!(server = %server, "Kubernetes client ready");
        Ok(KubeClient {
            runtime,
            client,
            server,
        })
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Run one request; an API error answer becomes an [`ApiError`]; errors carry `what`.
    fn call<T>(
        &self,
        what: impl Fn() -> String,
        fut: impl Future<Output = kube::Result<T>>,
    ) -> Result<T> {
        ensure_outside_runtime().with_context(&what)?;
        match self.runtime.block_on(fut) {
            Ok(v) => Ok(v),
            Err(kube::Error::Api(s)) => {
                Err(anyhow!(ApiError::new(s.code, &s.reason, &s.message)).context(what()))
            }
            Err(e) => Err(anyhow!(e).context(what())),
        }
    }

    fn all<K: kube::Resource<DynamicType = ()>>(&self) -> Api<K> {
        Api::all(self.client.clone())
    }

    fn namespaced<K>(&self, namespace: &str) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    fn dynamic(&self, kind: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, kind),
            None => Api::all_with(self.client.clone(), kind),
        }
    }

    /// LIST the objects of an OpenShift kind, in a namespace or all.
    fn list_dynamic(&self, kind: &ApiResource, ns: Option<&str>) -> Result<Vec<DynamicObject>> {
        let of = ns.map(|n| format!(" in namespace {n}")).unwrap_or_default();
        let what = || format!("listing {}s{of}", kind.kind);
        let api = self.dynamic(kind, ns);
        Ok(self.call(what, api.list(&ListParams::default()))?.items)
    }

    /// GET an object of an OpenShift kind; NotFound is `None`.
    fn get_dynamic(
        &self,
        kind: &ApiResource,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Option<DynamicObject>> {
        let of = ns.map(|n| format!("{n}/")).unwrap_or_default();
        let what = || format!("reading {} {of}{name}", kind.kind);
        self.call(what, self.dynamic(kind, ns).get_opt(name))
    }

    /// GET an object of an OpenShift kind; NotFound is an error.
    fn get_existing(
        &self,
        kind: &ApiResource,
        ns: Option<&str>,
        name: &str,
    ) -> Result<DynamicObject> {
        let of = ns.map(|n| format!("{n}/")).unwrap_or_default();
        let what = || format!("reading {} {of}{name}", kind.kind);
        self.call(what, self.dynamic(kind, ns).get(name))
    }

    /// PUT a BareMetalHost (or its `status`), named by its `metadata.name`, with `apiVersion` and
    /// `kind` set (list items may lack them).
    fn put_bmh(&self, ns: &str, bmh: &Value, status: bool) -> Result<Value> {
        let kind = kinds::bmhs();
        let mut object: DynamicObject = serde_json::from_value(bmh.clone())
            .context("a BareMetalHost that is no Kubernetes object")?;
        let name = object.metadata.name.clone().filter(|n| !n.is_empty());
        let name = name.ok_or_else(|| anyhow!("the BareMetalHost has no metadata.name"))?;
        object.types = Some(kube::api::TypeMeta {
            api_version: kind.api_version.clone(),
            kind: kind.kind.clone(),
        });
        let api = self.dynamic(&kind, Some(ns));
        let pp = PostParams::default();
        let stored = match status {
            false => self.call(
                || format!("updating BareMetalHost {ns}/{name}"),
                api.replace(&name, &pp, &object),
            )?,
            true => self.call(
                || format!("updating the status of BareMetalHost {ns}/{name}"),
                api.replace_status(&name, &pp, &object),
            )?,
        };
        Ok(serde_json::to_value(stored)?)
    }
}

fn selectors(label: Option<&str>, field: Option<&str>) -> ListParams {
    ListParams {
        label_selector: label.map(str::to_string),
        field_selector: field.map(str::to_string),
        ..ListParams::default()
    }
}

/// A Kubernetes `Time` (serialised to the second, in UTC).
fn k8s_time(time: SystemTime) -> Result<Time> {
    Ok(Time(
        Timestamp::try_from(time).context("a time out of range")?,
    ))
}

impl ClusterApi for KubeClient {
    fn get_proxy(&self, name: &str) -> Result<ProxyStatus> {
        ProxyStatus::try_from(&self.get_existing(&kinds::proxies(), None, name)?)
    }

    fn get_cluster_version(&self, name: &str) -> Result<ClusterVersion> {
        ClusterVersion::try_from(&self.get_existing(&kinds::cluster_versions(), None, name)?)
    }

    fn list_cluster_operators(&self) -> Result<Vec<ClusterOperator>> {
        let list = self.list_dynamic(&kinds::cluster_operators(), None)?;
        list.iter().map(ClusterOperator::try_from).collect()
    }

    fn get_cluster_operator(&self, name: &str) -> Result<ClusterOperator> {
        ClusterOperator::try_from(&self.get_existing(&kinds::cluster_operators(), None, name)?)
    }

    fn get_config_map(&self, ns: &str, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        let what = || format!("reading ConfigMap {ns}/{name}");
        let cm = self.call(what, self.namespaced::<core::ConfigMap>(ns).get_opt(name))?;
        Ok(cm.map(|cm| cm.data.unwrap_or_default()))
    }

    fn create_event(&self, namespace: &str, event: &NewEvent) -> Result<()> {
        let what = || format!("creating Event {namespace}/{}", event.name);
        let time = k8s_time(event.time).with_context(what)?;
        let object = core::Event {
            metadata: ObjectMeta {
                name: Some(event.name.clone()),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            involved_object: core::ObjectReference {
                namespace: Some(event.involved_namespace.clone()),
                name: Some(event.involved_name.clone()),
                ..Default::default()
            },
            reason: Some(event.reason.clone()),
            message: Some(event.message.clone()),
            type_: Some(event.type_.clone()),
            count: Some(1),
            first_timestamp: Some(time.clone()),
            last_timestamp: Some(time),
            ..Default::default()
        };
        let api = self.namespaced::<core::Event>(namespace);
        self.call(what, api.create(&PostParams::default(), &object))
            .map(drop)
    }

    fn list_nodes(&self, label_selector: Option<&str>) -> Result<Vec<Node>> {
        let params = selectors(label_selector, None);
        let what = || format!("listing nodes {}", label_selector.unwrap_or_default());
        let list = self.call(what, self.all::<core::Node>().list(&params))?;
        Ok(list.items.iter().map(Node::from).collect())
    }

    fn get_node(&self, name: &str) -> Result<Node> {
        let what = || format!("reading node {name}");
        Ok(Node::from(
            &self.call(what, self.all::<core::Node>().get(name))?,
        ))
    }

    fn remove_node_taint(&self, name: &str, index: usize, key: &str) -> Result<()> {
        let path = format!("/spec/taints/{index}");
        let patch = serde_json::from_value(json!([
            {"op": "test", "path": format!("{path}/key"), "value": key},
            {"op": "remove", "path": path},
        ]))
        .expect("a well-formed JSON patch");
        let patch: Patch<()> = Patch::Json(patch);
        let what = || format!("removing taint {key} ({index}) of node {name}");
        let nodes = self.all::<core::Node>();
        self.call(what, nodes.patch(name, &PatchParams::default(), &patch))
            .map(drop)
    }

    fn patch_node_labels(&self, name: &str, labels: &Value) -> Result<()> {
        let what = || format!("patching the labels of node {name}");
        let patch = Patch::Merge(json!({"metadata": {"labels": labels}}));
        let nodes = self.all::<core::Node>();
        self.call(what, nodes.patch(name, &PatchParams::default(), &patch))
            .map(drop)
    }

    fn list_services(&self) -> Result<Vec<Service>> {
        let what = || "listing services in all namespaces".to_string();
        let api = self.all::<core::Service>();
        let list = self.call(what, api.list(&ListParams::default()))?;
        Ok(list.items.iter().map(Service::from).collect())
    }

    fn delete_service(&self, namespace: &str, name: &str) -> Result<()> {
        let what = || format!("deleting service {namespace}/{name}");
        let api = self.namespaced::<core::Service>(namespace);
        self.call(what, api.delete(name, &DeleteParams::default()))
            .map(drop)
    }

    fn list_pods(&self, ns: &str, label: Option<&str>, field: Option<&str>) -> Result<Vec<Pod>> {
        let params = selectors(label, field);
        let what = || format!("listing pods in namespace {ns}");
        let list = self.call(what, self.namespaced::<core::Pod>(ns).list(&params))?;
        Ok(list.items.iter().map(Pod::from).collect())
    }

    fn pod_log(&self, ns: &str, name: &str, since_seconds: Option<i64>) -> Result<String> {
        let params = LogParams {
            since_seconds,
            ..LogParams::default()
        };
        let what = || format!("reading the log of pod {ns}/{name}");
        self.call(what, self.namespaced::<core::Pod>(ns).logs(name, &params))
    }

    fn delete_pods(&self, namespace: &str, label_selector: Option<&str>) -> Result<()> {
        let params = selectors(label_selector, None);
        let what = || format!("deleting the pods of namespace {namespace}");
        let api = self.namespaced::<core::Pod>(namespace);
        let dp = DeleteParams::default();
        self.call(what, api.delete_collection(&dp, &params))
            .map(drop)
    }

    fn list_csrs(&self) -> Result<Vec<Csr>> {
        let what = || "listing CertificateSigningRequests".to_string();
        let api = self.all::<CertificateSigningRequest>();
        let list = self.call(what, api.list(&ListParams::default()))?;
        list.items.iter().map(Csr::try_from).collect()
    }

    fn approve_csr(&self, csr: &Csr, approval: &CsrApproval) -> Result<()> {
        let what = || format!("approving CSR {}", csr.name);
        // The CSR as listed, with the approval condition appended.
        let mut object: CertificateSigningRequest = serde_json::from_value(csr.object.clone())
            .with_context(|| format!("CSR {} has no object to update", csr.name))
            .with_context(what)?;
        let c = &approval.condition;
        let status = object.status.get_or_insert_with(Default::default);
        status
            .conditions
            .get_or_insert_with(Vec::new)
            .push(CertificateSigningRequestCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: Some(c.reason.clone()),
                message: Some(c.message.clone()),
                last_update_time: Some(k8s_time(approval.time).with_context(what)?),
                ..Default::default()
            });
        let api = self.all::<CertificateSigningRequest>();
        let pp = PostParams::default();
        let put = api.replace_subresource("approval", &csr.name, &pp, &object);
        self.call(what, put).map(drop)
    }

    fn get_subscription(&self, namespace: &str, name: &str) -> Result<Option<Subscription>> {
        let sub = self.get_dynamic(&kinds::subscriptions(), Some(namespace), name)?;
        sub.as_ref().map(Subscription::try_from).transpose()
    }

    fn get_csv(&self, namespace: &str, name: &str) -> Result<Option<Csv>> {
        let csv = self.get_dynamic(&kinds::csvs(), Some(namespace), name)?;
        csv.as_ref().map(Csv::try_from).transpose()
    }

    fn list_install_plans(&self, namespace: &str) -> Result<Vec<InstallPlan>> {
        let list = self.list_dynamic(&kinds::install_plans(), Some(namespace))?;
        list.iter().map(InstallPlan::try_from).collect()
    }

    fn delete_install_plan(&self, namespace: &str, name: &str) -> Result<()> {
        let what = || format!("deleting InstallPlan {namespace}/{name}");
        let api = self.dynamic(&kinds::install_plans(), Some(namespace));
        self.call(what, api.delete(name, &DeleteParams::default()))
            .map(drop)
    }

    fn list_jobs(&self, namespace: &str) -> Result<Vec<Job>> {
        let what = || format!("listing jobs in namespace {namespace}");
        let api = self.namespaced::<K8sJob>(namespace);
        let list = self.call(what, api.list(&ListParams::default()))?;
        Ok(list.items.iter().map(Job::from).collect())
    }

    fn delete_job(&self, namespace: &str, name: &str) -> Result<()> {
        let what = || format!("deleting job {namespace}/{name}");
        let api = self.namespaced::<K8sJob>(namespace);
        self.call(what, api.delete(name, &DeleteParams::default()))
            .map(drop)
    }

    fn list_bmhs(&self, namespace: &str) -> Result<Vec<Value>> {
        let list = self.list_dynamic(&kinds::bmhs(), Some(namespace))?;
        list.iter().map(|b| Ok(serde_json::to_value(b)?)).collect()
    }

    fn get_bmh(&self, namespace: &str, name: &str) -> Result<Value> {
        let bmh = self.get_existing(&kinds::bmhs(), Some(namespace), name)?;
        Ok(serde_json::to_value(bmh)?)
    }

    fn update_bmh(&self, namespace: &str, bmh: &Value) -> Result<Value> {
        self.put_bmh(namespace, bmh, false)
    }

    fn update_bmh_status(&self, namespace: &str, bmh: &Value) -> Result<Value> {
        self.put_bmh(namespace, bmh, true)
    }

    fn provisioning_exists(&self, name: &str) -> Result<bool> {
        let provisioning = self.get_dynamic(&kinds::provisionings(), None, name)?;
        Ok(provisioning.is_some())
    }

    fn list_machines(&self, namespace: &str) -> Result<Vec<Machine>> {
        let list = self.list_dynamic(&kinds::machines(), Some(namespace))?;
        Ok(list.iter().map(Machine::from).collect())
    }

    fn get_machine_config_pool(&self, name: &str) -> Result<MachineConfigPool> {
        MachineConfigPool::try_from(&self.get_existing(&kinds::mcps(), None, name)?)
    }

    fn set_machine_config_pool_paused(&self, name: &str, paused: bool) -> Result<()> {
        let what = || format!("setting spec.paused={paused} on MachineConfigPool {name}");
        let patch = Patch::Merge(json!({"spec": {"paused": paused}}));
        let pools = self.dynamic(&kinds::mcps(), None);
        self.call(what, pools.patch(name, &PatchParams::default(), &patch))
            .map(drop)
    }

    fn list_events(&self, namespace: &str) -> Result<Vec<Event>> {
        let what = || format!("listing events in namespace {namespace}");
        let api = self.namespaced::<core::Event>(namespace);
        let list = self.call(what, api.list(&ListParams::default()))?;
        Ok(list.items.iter().map(Event::from).collect())
    }

    fn machine_config_exists(&self, name: &str) -> Result<bool> {
        let config = self.get_dynamic(&kinds::machine_configs(), None, name)?;
        Ok(config.is_some())
    }
}
