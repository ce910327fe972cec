//! The object model both programs read: small structs holding the fields their flows and tasks
//! use, built from the k8s-openapi types (core kinds) or from typed deserialisation of the
//! OpenShift, OLM and metal3 kinds ([`kinds`]). BareMetalHosts stay whole JSON objects, since the
//! BMH task rewrites their annotations, spec and status and puts them back.

use anyhow::Context;
use k8s_openapi::api::batch::v1 as batch;
use k8s_openapi::api::certificates::v1 as cert;
use k8s_openapi::api::core::v1 as core;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// A condition of a Node, ClusterOperator, ClusterVersion, CSR or Job (absent fields empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl Condition {
    /// Whether this is a condition of `type_` with status `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.type_ == type_ && self.status == "True"
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct NodeAddress {
    /// `InternalIP`, `ExternalIP`, `Hostname`, …
    #[serde(rename = "type")]
    pub type_: String,
    pub address: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

/// A `v1 Node`: `spec.taints` keep their order (the untaint patch removes one by index).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub conditions: Vec<Condition>,
    pub addresses: Vec<NodeAddress>,
}

impl Node {
    /// A condition `Ready` with status `True`.
    pub fn is_ready(&self) -> bool {
        self.conditions.iter().any(|c| c.is_true("Ready"))
    }

    /// The `InternalIP` addresses, in order.
    pub fn internal_ips(&self) -> impl Iterator<Item = &str> {
        self.addresses
            .iter()
            .filter(|a| a.type_ == "InternalIP")
            .map(|a| a.address.as_str())
    }
}

/// A `certificates.k8s.io/v1 CertificateSigningRequest`. `object` is the whole object as
/// listed: the approval puts it back with one more condition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Csr {
    pub name: String,
    pub conditions: Vec<Condition>,
    pub object: Value,
}

/// The condition an approval appends to a CSR's `status.conditions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsrApproval {
    pub condition: Condition,
    /// Its `lastUpdateTime`.
    pub time: SystemTime,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct OperatorVersion {
    pub name: String,
    pub version: String,
}

/// A `config.openshift.io/v1 ClusterOperator`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterOperator {
    pub name: String,
    pub conditions: Vec<Condition>,
    /// `status.versions`, in order.
    pub versions: Vec<OperatorVersion>,
}

/// `config.openshift.io/v1 ClusterVersion version`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterVersion {
    pub conditions: Vec<Condition>,
    /// `status.capabilities.enabledCapabilities`.
    pub enabled_capabilities: Vec<String>,
    /// `status.capabilities.knownCapabilities`.
    pub known_capabilities: Vec<String>,
    /// `status.desired.version` (empty when unset).
    pub desired_version: String,
}

/// `status` of `config.openshift.io/v1 Proxy cluster` (empty when unset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyStatus {
    pub http_proxy: String,
    pub https_proxy: String,
    pub no_proxy: String,
}

/// A `v1 Event` to create: `count` 1, first and last timestamps both `time`, and an involved
/// object with only a namespace and a name (no kind), as the ready Event is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub name: String,
    pub reason: String,
    /// `Normal` or `Warning`.
    pub type_: String,
    pub message: String,
    pub involved_namespace: String,
    pub involved_name: String,
    pub time: SystemTime,
}

/// A `v1 Event` as listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    pub name: String,
    pub reason: String,
    pub message: String,
}

/// A `v1 Pod`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    /// `status.phase` (empty when unset).
    pub phase: String,
    pub labels: BTreeMap<String, String>,
}

/// A `v1 Service`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Service {
    pub namespace: String,
    pub name: String,
    /// `spec.clusterIP` as written (empty when unset).
    pub cluster_ip: String,
}

/// An OLM `operators.coreos.com/v1alpha1 Subscription`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    pub namespace: String,
    pub name: String,
    /// `status.currentCSV` (empty when unset).
    pub current_csv: String,
}

/// An OLM `operators.coreos.com/v1alpha1 ClusterServiceVersion`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Csv {
    pub namespace: String,
    pub name: String,
    /// `status.phase` (`Succeeded`, `Failed`, …; empty when unset).
    pub phase: String,
    /// `status.message`.
    pub message: String,
    /// `spec.version` as written (empty when unset).
    pub version: String,
}

/// An OLM `operators.coreos.com/v1alpha1 InstallPlan`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstallPlan {
    pub namespace: String,
    pub name: String,
    /// `metadata.ownerReferences[].name`, in order.
    pub owner_names: Vec<String>,
    /// `status.phase`.
    pub phase: String,
}

/// A `batch/v1 Job`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Job {
    pub namespace: String,
    pub name: String,
    /// `status.failed` (0 when unset).
    pub failed: i64,
    pub conditions: Vec<Condition>,
}

/// A `machine.openshift.io/v1beta1 Machine`: what a BareMetalHost's `consumerRef` names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Machine {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

/// A `machineconfiguration.openshift.io/v1 MachineConfigPool`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineConfigPool {
    pub name: String,
    /// `spec.paused` (false when unset).
    pub paused: bool,
}

/// `fn <name>() -> ApiResource` for each kind: group, version, kind, plural.
macro_rules! kinds {
    ($($name:ident: $group:literal $version:literal $kind:literal $plural:literal;)*) => {$(
        pub(crate) fn $name() -> ApiResource {
            let gvk = GroupVersionKind::gvk($group, $version, $kind);
            ApiResource::from_gvk_with_plural(&gvk, $plural)
        }
    )*};
}

/// The OpenShift, OLM and metal3 kinds, which k8s-openapi does not have.
pub(crate) mod kinds {
    use super::*;
    kinds! {
        proxies: "config.openshift.io" "v1" "Proxy" "proxies";
        cluster_versions: "config.openshift.io" "v1" "ClusterVersion" "clusterversions";
        cluster_operators: "config.openshift.io" "v1" "ClusterOperator" "clusteroperators";
        subscriptions: "operators.coreos.com" "v1alpha1" "Subscription" "subscriptions";
        csvs: "operators.coreos.com" "v1alpha1" "ClusterServiceVersion" "clusterserviceversions";
        install_plans: "operators.coreos.com" "v1alpha1" "InstallPlan" "installplans";
        bmhs: "metal3.io" "v1alpha1" "BareMetalHost" "baremetalhosts";
        provisionings: "metal3.io" "v1alpha1" "Provisioning" "provisionings";
        machines: "machine.openshift.io" "v1beta1" "Machine" "machines";
        mcps: "machineconfiguration.openshift.io" "v1" "MachineConfigPool" "machineconfigpools";
        machine_configs: "machineconfiguration.openshift.io" "v1" "MachineConfig" "machineconfigs";
    }
}

fn name_of(meta: &kube::api::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn namespace_of(meta: &kube::api::ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

/// The field at `pointer` of an object of a kind k8s-openapi lacks; absent or null is the
/// default, a value of the wrong type an error naming the object and the field.
fn field<T: serde::de::DeserializeOwned + Default>(
    o: &DynamicObject,
    pointer: &str,
) -> anyhow::Result<T> {
    match o.data.pointer(pointer) {
        None | Some(Value::Null) => Ok(T::default()),
        Some(value) => T::deserialize(value).with_context(|| {
            let kind = o.types.as_ref().map_or("object", |t| t.kind.as_str());
            format!("reading {pointer} of {kind} {:?}", name_of(&o.metadata))
        }),
    }
}

/// `TryFrom<&DynamicObject>` for model structs: `$body` builds one from the object `$o`.
macro_rules! from_dynamic {
    ($($model:ident: |$o:ident| $body:expr;)*) => {$(
        impl TryFrom<&DynamicObject> for $model {
            type Error = anyhow::Error;
            fn try_from($o: &DynamicObject) -> anyhow::Result<Self> {
                Ok($body)
            }
        }
    )*};
}

from_dynamic! {
    ClusterOperator: |o| ClusterOperator {
        name: name_of(&o.metadata),
        conditions: field(o, "/status/conditions")?,
        versions: field(o, "/status/versions")?,
    };
    ClusterVersion: |o| ClusterVersion {
        conditions: field(o, "/status/conditions")?,
        enabled_capabilities: field(o, "/status/capabilities/enabledCapabilities")?,
        known_capabilities: field(o, "/status/capabilities/knownCapabilities")?,
        desired_version: field(o, "/status/desired/version")?,
    };
    ProxyStatus: |o| ProxyStatus {
        http_proxy: field(o, "/status/httpProxy")?,
        https_proxy: field(o, "/status/httpsProxy")?,
        no_proxy: field(o, "/status/noProxy")?,
    };
    Subscription: |o| Subscription {
        namespace: namespace_of(&o.metadata),
        name: name_of(&o.metadata),
        current_csv: field(o, "/status/currentCSV")?,
    };
    Csv: |o| Csv {
        namespace: namespace_of(&o.metadata),
        name: name_of(&o.metadata),
        phase: field(o, "/status/phase")?,
        message: field(o, "/status/message")?,
        version: field(o, "/spec/version")?,
    };
    InstallPlan: |o| InstallPlan {
        namespace: namespace_of(&o.metadata),
        name: name_of(&o.metadata),
        owner_names: o.metadata.owner_references.iter().flatten().map(|r| r.name.clone()).collect(),
        phase: field(o, "/status/phase")?,
    };
    MachineConfigPool: |o| MachineConfigPool {
        name: name_of(&o.metadata),
        paused: field(o, "/spec/paused")?,
    };
}

/// A Machine as listed: list items may come without `apiVersion` and `kind`, which a
/// BareMetalHost's `consumerRef` needs, so those come from the kind.
impl From<&DynamicObject> for Machine {
    fn from(obj: &DynamicObject) -> Self {
        let kind = kinds::machines();
        let types = obj.types.clone().unwrap_or_default();
        let or = |s: String, default: String| if s.is_empty() { default } else { s };
        Machine {
            api_version: or(types.api_version, kind.api_version),
            kind: or(types.kind, kind.kind),
            namespace: namespace_of(&obj.metadata),
            name: name_of(&obj.metadata),
            labels: obj.metadata.labels.clone().unwrap_or_default(),
        }
    }
}

/// Model items from k8s-openapi ones with the same fields (conditions, taints, addresses).
fn items<T: serde::Serialize, M: serde::de::DeserializeOwned>(items: Option<&Vec<T>>) -> Vec<M> {
    let json = serde_json::to_value(items).unwrap_or_default();
    serde_json::from_value(json).unwrap_or_default()
}

impl From<&core::Node> for Node {
    fn from(node: &core::Node) -> Self {
        let status = node.status.clone().unwrap_or_default();
        Node {
            name: name_of(&node.metadata),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            annotations: node.metadata.annotations.clone().unwrap_or_default(),
            taints: items(node.spec.as_ref().and_then(|s| s.taints.as_ref())),
            conditions: items(status.conditions.as_ref()),
            addresses: items(status.addresses.as_ref()),
        }
    }
}

impl From<&core::Event> for Event {
    fn from(event: &core::Event) -> Self {
        Event {
            name: name_of(&event.metadata),
            reason: event.reason.clone().unwrap_or_default(),
            message: event.message.clone().unwrap_or_default(),
        }
    }
}

impl From<&core::Pod> for Pod {
    fn from(pod: &core::Pod) -> Self {
        Pod {
            namespace: namespace_of(&pod.metadata),
            name: name_of(&pod.metadata),
            phase: (pod.status.as_ref().and_then(|s| s.phase.clone())).unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
        }
    }
}

impl From<&core::Service> for Service {
    fn from(svc: &core::Service) -> Self {
        Service {
            namespace: namespace_of(&svc.metadata),
            name: name_of(&svc.metadata),
            cluster_ip: (svc.spec.as_ref().and_then(|s| s.cluster_ip.clone())).unwrap_or_default(),
        }
    }
}

impl From<&batch::Job> for Job {
    fn from(job: &batch::Job) -> Self {
        let status = job.status.clone().unwrap_or_default();
        Job {
            namespace: namespace_of(&job.metadata),
            name: name_of(&job.metadata),
            failed: status.failed.unwrap_or(0).into(),
            conditions: items(status.conditions.as_ref()),
        }
    }
}

impl TryFrom<&cert::CertificateSigningRequest> for Csr {
    type Error = anyhow::Error;
    fn try_from(csr: &cert::CertificateSigningRequest) -> anyhow::Result<Self> {
        let status = csr.status.as_ref();
        Ok(Csr {
            name: name_of(&csr.metadata),
            conditions: items(status.and_then(|s| s.conditions.as_ref())),
            object: serde_json::to_value(csr)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_of_the_wrong_type_names_the_object_and_the_field() {
        let o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "config.openshift.io/v1",
            "kind": "ClusterVersion",
            "metadata": {"name": "version"},
            "status": {"desired": {"version": 4}},
        }))
        .unwrap();
        let err = format!("{:#}", ClusterVersion::try_from(&o).unwrap_err());
        assert!(
            err.starts_with("reading /status/desired/version of ClusterVersion \"version\": "),
            "{err}"
        );
    }
}
