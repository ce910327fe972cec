//! An in-memory cluster for the tests of both programs ([`ClusterApi`]): state
//! set with `set_*`, every call recorded in order with its arguments ([`FakeCluster::calls`]),
//! writes applied to the state, and failures injected per method as [`ApiError`]s.
//! Selectors: as [`selector_matches`]; the field selector `status.phase=<phase>` for pods.

use anyhow::{anyhow, Result};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{
    merge_labels, pod_selected, selector_matches, ApiError, ClusterApi, ClusterOperator,
    ClusterVersion, Condition, Csr, CsrApproval, Csv, Event, InstallPlan, Job, Machine,
    MachineConfigPool, NewEvent, Node, Pod, ProxyStatus, Service, Subscription,
};

/// More calls than any test makes: a fake that receives this many panics, so that a wait that
/// never ends fails its test instead of growing the recorded calls until the machine kills it.
pub const RUNAWAY_CALLS: usize = 50_000;

/// One recorded call: the method's name and its arguments as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub method: &'static str,
    pub args: Vec<String>,
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.method, self.args.join(", "))
    }
}

type Key = (String, String);
fn key(namespace: &str, name: &str) -> Key {
    (namespace.to_string(), name.to_string())
}

/// What runs before every call: the cluster and the method's name.
type Hook = Arc<dyn Fn(&FakeCluster, &str) + Send + Sync>;

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    hook: Option<Hook>,
    /// (method, error, sticky): the first matching entry answers the call.
    failures: Vec<(String, ApiError, bool)>,
    proxy: ProxyStatus,
    cluster_versions: BTreeMap<String, ClusterVersion>,
    cluster_operators: BTreeMap<String, ClusterOperator>,
    config_maps: BTreeMap<Key, BTreeMap<String, String>>,
    events: Vec<(String, NewEvent)>,
    nodes: BTreeMap<String, Node>,
    services: Vec<Service>,
    pods: Vec<Pod>,
    pod_logs: BTreeMap<Key, String>,
    csrs: BTreeMap<String, Csr>,
    subscriptions: BTreeMap<Key, Subscription>,
    csvs: BTreeMap<Key, Csv>,
    install_plans: Vec<InstallPlan>,
    jobs: Vec<Job>,
    bmhs: BTreeMap<Key, Value>,
    provisionings: BTreeSet<String>,
    machine_configs: BTreeSet<String>,
    machines: Vec<Machine>,
    mcps: BTreeMap<String, MachineConfigPool>,
}

/// The fake cluster; clones share their state.
#[derive(Clone, Default)]
pub struct FakeCluster {
    state: Arc<Mutex<State>>,
}

/// The stored object, or NotFound naming it.
fn found<T>(object: Option<T>, kind: &str, name: &str) -> Result<T> {
    let err = || ApiError::new(404, "NotFound", &format!("{kind} {name} not found"));
    object.ok_or_else(|| err().into())
}

fn opt(s: Option<&str>) -> String {
    s.map_or_else(|| "-".to_string(), str::to_string)
}

impl FakeCluster {
    pub fn new() -> FakeCluster {
        FakeCluster::default()
    }
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record a call, then answer with an injected failure if one matches.
    fn enter(&self, method: &'static str, args: &[&str]) -> Result<MutexGuard<'_, State>> {
        let hook = self.lock().hook.clone();
        if let Some(hook) = hook {
            hook(self, method);
        }
        let mut state = self.lock();
        let args = args.iter().map(|a| a.to_string()).collect();
        state.calls.push(Call { method, args });
        assert!(
            state.calls.len() < RUNAWAY_CALLS,
            "the fake cluster received {RUNAWAY_CALLS} calls: a wait of the code under test never \
             ends (on a fake clock such a wait spins and eats memory instead of sleeping)"
        );
        if let Some(i) = state.failures.iter().position(|(m, _, _)| m == method) {
            let (_, err, sticky) = state.failures[i].clone();
            if !sticky {
                state.failures.remove(i);
            }
            return Err(anyhow::Error::new(err).context(format!("fake {method}")));
        }
        Ok(state)
    }

    /// Run `hook` before every call (the flow tests change the cluster as fake time passes).
    pub fn before_each_call(&self, hook: impl Fn(&FakeCluster, &str) + Send + Sync + 'static) {
        self.lock().hook = Some(Arc::new(hook));
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The calls so far as `method(arg, …)`, in order, and forget them.
    pub fn take_calls(&self) -> Vec<String> {
        let calls = std::mem::take(&mut self.lock().calls);
        calls.iter().map(Call::to_string).collect()
    }

    /// How many times `method` was called.
    pub fn count(&self, method: &str) -> usize {
        let state = self.lock();
        state.calls.iter().filter(|c| c.method == method).count()
    }

    /// The next call of `method` fails with `err`.
    pub fn fail_next(&self, method: &str, err: ApiError) {
        self.lock().failures.push((method.to_string(), err, false));
    }

    /// Every call of `method` fails with `err`.
    pub fn fail_always(&self, method: &str, err: ApiError) {
        self.lock().failures.push((method.to_string(), err, true));
    }

    pub fn set_proxy(&self, proxy: ProxyStatus) {
        self.lock().proxy = proxy;
    }

    pub fn set_cluster_version(&self, name: &str, cv: ClusterVersion) {
        self.lock().cluster_versions.insert(name.to_string(), cv);
    }

    pub fn set_cluster_operator(&self, co: ClusterOperator) {
        self.lock().cluster_operators.insert(co.name.clone(), co);
    }

    pub fn set_config_map(&self, namespace: &str, name: &str, data: &[(&str, &str)]) {
        let data = data.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        let key = key(namespace, name);
        self.lock().config_maps.insert(key, data.collect());
    }

    /// The Events created, with their namespaces.
    pub fn events(&self) -> Vec<(String, NewEvent)> {
        self.lock().events.clone()
    }

    /// Forget the Events of `namespace`.
    pub fn clear_events(&self, namespace: &str) {
        self.lock().events.retain(|(ns, _)| ns != namespace);
    }

    /// Add or replace a Node.
    pub fn set_node(&self, node: Node) {
        self.lock().nodes.insert(node.name.clone(), node);
    }

    pub fn node(&self, name: &str) -> Option<Node> {
        self.lock().nodes.get(name).cloned()
    }

    /// Set the `Ready` condition of a node, its only one.
    pub fn set_node_ready(&self, name: &str, ready: bool) {
        let status = if ready { "True" } else { "False" };
        let ready = Condition {
            type_: "Ready".into(),
            status: status.into(),
            ..Condition::default()
        };
        let mut state = self.lock();
        state.nodes.get_mut(name).expect("a node").conditions = vec![ready];
    }

    /// The pod log reads so far: namespace, pod and `sinceSeconds`.
    pub fn log_reads(&self) -> Vec<(String, String, Option<i64>)> {
        let calls = self.calls().into_iter().filter(|c| c.method == "pod_log");
        let read = |c: Call| (c.args[0].clone(), c.args[1].clone(), c.args[2].parse().ok());
        calls.map(read).collect()
    }

    pub fn add_service(&self, service: Service) {
        self.lock().services.push(service);
    }

    pub fn services(&self) -> Vec<Service> {
        self.lock().services.clone()
    }

    /// Add a Pod with its log.
    pub fn add_pod(&self, pod: Pod, log: &str) {
        self.set_pod_log(&pod.namespace, &pod.name, log);
        self.lock().pods.push(pod);
    }

    pub fn set_pod_log(&self, namespace: &str, name: &str, log: &str) {
        let log = log.to_string();
        self.lock().pod_logs.insert(key(namespace, name), log);
    }

    /// Add or replace a CSR; its `object` gets a `metadata.name` and the conditions when empty.
    pub fn set_csr(&self, mut csr: Csr) {
        if csr.object.is_null() {
            let conditions: Vec<Value> = csr.conditions.iter().map(condition_json).collect();
            csr.object = json!({
                "metadata": {"name": csr.name},
                "status": {"conditions": conditions},
            });
        }
        self.lock().csrs.insert(csr.name.clone(), csr);
    }

    pub fn csr(&self, name: &str) -> Option<Csr> {
        self.lock().csrs.get(name).cloned()
    }

    pub fn set_subscription(&self, sub: Subscription) {
        let k = key(&sub.namespace, &sub.name);
        self.lock().subscriptions.insert(k, sub);
    }

    pub fn set_csv(&self, csv: Csv) {
        self.lock().csvs.insert(key(&csv.namespace, &csv.name), csv);
    }

    pub fn add_install_plan(&self, plan: InstallPlan) {
        self.lock().install_plans.push(plan);
    }

    pub fn add_job(&self, job: Job) {
        self.lock().jobs.push(job);
    }

    /// Add or replace a BareMetalHost (keyed by its `metadata.namespace` and `metadata.name`).
    pub fn set_bmh(&self, bmh: Value) {
        let meta = |k: &str| bmh["metadata"][k].as_str().unwrap_or_default().to_string();
        let key = (meta("namespace"), meta("name"));
        self.lock().bmhs.insert(key, bmh);
    }

    pub fn bmh(&self, namespace: &str, name: &str) -> Option<Value> {
        self.lock().bmhs.get(&key(namespace, name)).cloned()
    }

    pub fn add_provisioning(&self, name: &str) {
        self.lock().provisionings.insert(name.to_string());
    }

    pub fn add_machine_config(&self, name: &str) {
        self.lock().machine_configs.insert(name.to_string());
    }

    pub fn add_machine(&self, machine: Machine) {
        self.lock().machines.push(machine);
    }

    pub fn set_machine_config_pool(&self, pool: MachineConfigPool) {
        self.lock().mcps.insert(pool.name.clone(), pool);
    }

    pub fn machine_config_pool(&self, name: &str) -> Option<MachineConfigPool> {
        self.lock().mcps.get(name).cloned()
    }

    /// Record the call, then `write` `bmh` over the stored BareMetalHost of its name.
    fn put_bmh(
        &self,
        method: &'static str,
        namespace: &str,
        bmh: &Value,
        write: impl FnOnce(&mut Value, &Value),
    ) -> Result<Value> {
        let name = bmh["metadata"]["name"].as_str();
        let mut state = self.enter(method, &[namespace, name.unwrap_or_default()])?;
        let name = name.ok_or_else(|| anyhow!("the BareMetalHost has no metadata.name"))?;
        let stored = state.bmhs.get_mut(&key(namespace, name));
        let stored = found(stored, "BareMetalHost", &format!("{namespace}/{name}"))?;
        write(stored, bmh);
        Ok(stored.clone())
    }
}

fn condition_json(c: &Condition) -> Value {
    json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message})
}

/// Remove the items whose (namespace, name) is `key`; whether there were any.
fn remove<T>(items: &mut Vec<T>, key: [&str; 2], of: fn(&T) -> [&String; 2]) -> bool {
    let before = items.len();
    items.retain(|i| of(i) != key);
    items.len() < before
}

/// The items of `namespace`.
fn of<T: Clone>(items: &[T], namespace: &str, ns: impl Fn(&T) -> &str) -> Vec<T> {
    let items = items.iter().filter(|i| ns(i) == namespace);
    items.cloned().collect()
}

impl ClusterApi for FakeCluster {
    fn get_proxy(&self, name: &str) -> Result<ProxyStatus> {
        Ok(self.enter("get_proxy", &[name])?.proxy.clone())
    }

    fn get_cluster_version(&self, name: &str) -> Result<ClusterVersion> {
        let state = self.enter("get_cluster_version", &[name])?;
        found(
            state.cluster_versions.get(name).cloned(),
            "ClusterVersion",
            name,
        )
    }

    fn list_cluster_operators(&self) -> Result<Vec<ClusterOperator>> {
        let state = self.enter("list_cluster_operators", &[])?;
        Ok(state.cluster_operators.values().cloned().collect())
    }

    fn get_cluster_operator(&self, name: &str) -> Result<ClusterOperator> {
        let state = self.enter("get_cluster_operator", &[name])?;
        found(
            state.cluster_operators.get(name).cloned(),
            "ClusterOperator",
            name,
        )
    }

    fn get_config_map(&self, ns: &str, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        let state = self.enter("get_config_map", &[ns, name])?;
        Ok(state.config_maps.get(&key(ns, name)).cloned())
    }

    fn create_event(&self, namespace: &str, event: &NewEvent) -> Result<()> {
        let mut state = self.enter("create_event", &[namespace, &event.name])?;
        let events = &mut state.events;
        if events
            .iter()
            .any(|(ns, e)| ns == namespace && e.name == event.name)
        {
            let msg = format!("events \"{}\" already exists", event.name);
            return Err(ApiError::new(409, "AlreadyExists", &msg).into());
        }
        events.push((namespace.to_string(), event.clone()));
        Ok(())
    }

    fn list_nodes(&self, label_selector: Option<&str>) -> Result<Vec<Node>> {
        let state = self.enter("list_nodes", &[&opt(label_selector)])?;
        let nodes = state.nodes.values();
        let selected = nodes.filter(|n| selector_matches(label_selector, &n.labels));
        Ok(selected.cloned().collect())
    }

    fn get_node(&self, name: &str) -> Result<Node> {
        let state = self.enter("get_node", &[name])?;
        found(state.nodes.get(name).cloned(), "node", name)
    }

    fn remove_node_taint(&self, name: &str, index: usize, key: &str) -> Result<()> {
        let mut state = self.enter("remove_node_taint", &[name, &index.to_string()])?;
        let node = found(state.nodes.get_mut(name), "node", name)?;
        // The patch's `test` op: taint `index` must still have `key`.
        if node.taints.get(index).is_none_or(|t| t.key != key) {
            let msg = format!("taint {index} of node {name} is not {key}");
            return Err(ApiError::new(422, "Invalid", &msg).into());
        }
        node.taints.remove(index);
        Ok(())
    }

    fn patch_node_labels(&self, name: &str, labels: &Value) -> Result<()> {
        let mut state = self.enter("patch_node_labels", &[name, &labels.to_string()])?;
        let node = found(state.nodes.get_mut(name), "node", name)?;
        merge_labels(&mut node.labels, labels)
    }

    fn list_services(&self) -> Result<Vec<Service>> {
        Ok(self.enter("list_services", &[])?.services.clone())
    }

    fn delete_service(&self, namespace: &str, name: &str) -> Result<()> {
        let mut state = self.enter("delete_service", &[namespace, name])?;
        let services = &mut state.services;
        match remove(services, [namespace, name], |s| [&s.namespace, &s.name]) {
            true => Ok(()),
            false => found(None, "service", &format!("{namespace}/{name}")),
        }
    }

    fn list_pods(&self, ns: &str, label: Option<&str>, field: Option<&str>) -> Result<Vec<Pod>> {
        let state = self.enter("list_pods", &[ns, &opt(label), &opt(field)])?;
        let pods = state.pods.iter();
        Ok(pods
            .filter(|p| pod_selected(p, ns, label, field))
            .cloned()
            .collect())
    }

    fn pod_log(&self, namespace: &str, name: &str, since_seconds: Option<i64>) -> Result<String> {
        let since = since_seconds.map_or_else(|| "-".to_string(), |s| s.to_string());
        let state = self.enter("pod_log", &[namespace, name, &since])?;
        let log = state.pod_logs.get(&key(namespace, name)).cloned();
        found(log, "pod", &format!("{namespace}/{name}"))
    }

    fn delete_pods(&self, namespace: &str, label_selector: Option<&str>) -> Result<()> {
        let mut state = self.enter("delete_pods", &[namespace, &opt(label_selector)])?;
        let pods = &mut state.pods;
        pods.retain(|p| !pod_selected(p, namespace, label_selector, None));
        Ok(())
    }

    fn list_csrs(&self) -> Result<Vec<Csr>> {
        let state = self.enter("list_csrs", &[])?;
        Ok(state.csrs.values().cloned().collect())
    }

    fn approve_csr(&self, csr: &Csr, approval: &CsrApproval) -> Result<()> {
        let mut state = self.enter("approve_csr", &[&csr.name, &approval.condition.type_])?;
        let stored = found(state.csrs.get_mut(&csr.name), "CSR", &csr.name)?;
        stored.conditions.push(approval.condition.clone());
        let mut object = csr.object.clone();
        let condition = condition_json(&approval.condition);
        match object["status"]["conditions"].as_array_mut() {
            Some(list) => list.push(condition),
            None => object["status"]["conditions"] = json!([condition]),
        }
        stored.object = object;
        Ok(())
    }

    fn get_subscription(&self, namespace: &str, name: &str) -> Result<Option<Subscription>> {
        let state = self.enter("get_subscription", &[namespace, name])?;
        Ok(state.subscriptions.get(&key(namespace, name)).cloned())
    }

    fn get_csv(&self, namespace: &str, name: &str) -> Result<Option<Csv>> {
        let state = self.enter("get_csv", &[namespace, name])?;
        Ok(state.csvs.get(&key(namespace, name)).cloned())
    }

    fn list_install_plans(&self, namespace: &str) -> Result<Vec<InstallPlan>> {
        let state = self.enter("list_install_plans", &[namespace])?;
        Ok(of(&state.install_plans, namespace, |p| &p.namespace))
    }

    fn delete_install_plan(&self, namespace: &str, name: &str) -> Result<()> {
        let mut state = self.enter("delete_install_plan", &[namespace, name])?;
        let plans = &mut state.install_plans;
        remove(plans, [namespace, name], |p| [&p.namespace, &p.name]);
        Ok(())
    }

    fn list_jobs(&self, namespace: &str) -> Result<Vec<Job>> {
        let state = self.enter("list_jobs", &[namespace])?;
        Ok(of(&state.jobs, namespace, |j| &j.namespace))
    }

    fn delete_job(&self, namespace: &str, name: &str) -> Result<()> {
        let mut state = self.enter("delete_job", &[namespace, name])?;
        remove(&mut state.jobs, [namespace, name], |j| {
            [&j.namespace, &j.name]
        });
        Ok(())
    }

    fn list_bmhs(&self, namespace: &str) -> Result<Vec<Value>> {
        let state = self.enter("list_bmhs", &[namespace])?;
        let bmhs = state.bmhs.iter().filter(|((ns, _), _)| ns == namespace);
        Ok(bmhs.map(|(_, v)| v.clone()).collect())
    }

    fn get_bmh(&self, namespace: &str, name: &str) -> Result<Value> {
        let state = self.enter("get_bmh", &[namespace, name])?;
        let bmh = state.bmhs.get(&key(namespace, name)).cloned();
        found(bmh, "BareMetalHost", &format!("{namespace}/{name}"))
    }

    fn update_bmh(&self, namespace: &str, bmh: &Value) -> Result<Value> {
        self.put_bmh("update_bmh", namespace, bmh, |stored, bmh| {
            // As the API server does on the main resource: the status is not written.
            let status = stored.get("status").cloned();
            *stored = bmh.clone();
            match (status, stored.as_object_mut()) {
                (Some(status), _) => stored["status"] = status,
                (None, Some(o)) => drop(o.remove("status")),
                (None, None) => {}
            }
        })
    }

    fn update_bmh_status(&self, namespace: &str, bmh: &Value) -> Result<Value> {
        self.put_bmh("update_bmh_status", namespace, bmh, |stored, bmh| {
            // Only the status is written through the subresource.
            stored["status"] = bmh.get("status").cloned().unwrap_or(Value::Null);
        })
    }

    fn provisioning_exists(&self, name: &str) -> Result<bool> {
        let state = self.enter("provisioning_exists", &[name])?;
        Ok(state.provisionings.contains(name))
    }

    fn list_machines(&self, namespace: &str) -> Result<Vec<Machine>> {
        let state = self.enter("list_machines", &[namespace])?;
        Ok(of(&state.machines, namespace, |m| &m.namespace))
    }

    fn get_machine_config_pool(&self, name: &str) -> Result<MachineConfigPool> {
        let state = self.enter("get_machine_config_pool", &[name])?;
        found(state.mcps.get(name).cloned(), "MachineConfigPool", name)
    }

    fn set_machine_config_pool_paused(&self, name: &str, paused: bool) -> Result<()> {
        let args = [name, &paused.to_string()];
        let mut state = self.enter("set_machine_config_pool_paused", &args)?;
        found(state.mcps.get_mut(name), "MachineConfigPool", name)?.paused = paused;
        Ok(())
    }

    /// The Events created.
    fn list_events(&self, namespace: &str) -> Result<Vec<Event>> {
        let state = self.enter("list_events", &[namespace])?;
        let events = state.events.iter().filter(|(ns, _)| ns == namespace);
        let event = |e: &NewEvent| Event {
            name: e.name.clone(),
            reason: e.reason.clone(),
            message: e.message.clone(),
        };
        Ok(events.map(|(_, e)| event(e)).collect())
    }

    /// The names given to [`FakeCluster::add_machine_config`].
    fn machine_config_exists(&self, name: &str) -> Result<bool> {
        let state = self.enter("machine_config_exists", &[name])?;
        Ok(state.machine_configs.contains(name))
    }
}
