//! [`super::KubeApi`] over kube-rs, built from the kubeconfig bootkube writes
//! (`/opt/openshift/auth/kubeconfig`).
//!
//! The trait is synchronous: the transport is [`super::blocking::BlockingKube`] (its own runtime,
//! blocked on for each call, outside any async runtime; a connection per call).

use super::blocking::BlockingKube;
use super::{EventInfo, KubeApi, NodeInfo, PodInfo};
use crate::clock::{Failure, NeverStop, Schedule, SYSTEM_CLOCK};
use crate::config::Role;
use crate::openshift::role_label;
use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Taint};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, LogParams, Patch, PatchParams,
};
use kube::config::Kubeconfig;
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

/// Time to wait for a response; the flows poll, so a hung call must not block them for long.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts of the read-modify-write of a node's taints when the node changed in between (409).
const TAINT_PATCH_ATTEMPTS: u32 = 5;

const MACHINE_CONFIG_GROUP: &str = "machineconfiguration.openshift.io";
const MACHINE_CONFIG_VERSION: &str = "v1";
const MACHINE_CONFIG_KIND: &str = "MachineConfig";
const MACHINE_CONFIG_PLURAL: &str = "machineconfigs";

/// A Kubernetes API client for the bootstrap and single-node flows.
#[derive(Debug)]
pub struct KubeClient {
    kube: BlockingKube,
}

impl KubeClient {
    /// Load a kubeconfig (its current context) and build a client for its cluster: https with
    /// `certificate-authority-data` and client certificate/key data as bootkube writes them, or
    /// plain http without credentials (tests). The API is always reached directly (see
    /// [`BlockingKube`]).
    pub fn from_kubeconfig(path: &Path) -> Result<KubeClient> {
        let kubeconfig = Kubeconfig::read_from(path)
            .with_context(|| format!("reading kubeconfig {}", path.display()))?;
        let kube = BlockingKube::new(kubeconfig, READ_TIMEOUT)
            .with_context(|| format!("kubeconfig {}", path.display()))?;
        Ok(KubeClient { kube })
    }

    /// The API server URL of the kubeconfig's current context.
    pub fn server(&self) -> &str {
        self.kube.server()
    }

    /// Run one request on the client's runtime.
    fn block_on<F: Future>(&self, fut: F) -> Result<F::Output> {
        self.kube.block_on(fut)
    }

    /// Run one request; errors (including being called inside a runtime) carry `what`.
    fn call<T, F, W>(&self, fut: F, what: W) -> Result<T>
    where
        F: Future<Output = kube::Result<T>>,
        W: Fn() -> String,
    {
        self.block_on(fut).with_context(&what)?.with_context(&what)
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.kube.client().clone())
    }

    fn remove_taint_once(&self, api: &Api<Node>, node: &str, key: &str) -> Result<RemoveOutcome> {
        let current = self.call(api.get(node), || format!("reading node {node}"))?;
        let taints: Vec<Taint> = current.spec.and_then(|s| s.taints).unwrap_or_default();
        if !taints.iter().any(|t| t.key == key) {
            return Ok(RemoveOutcome::Done);
        }
        let remaining: Vec<&Taint> = taints.iter().filter(|t| t.key != key).collect();
        let mut patch = serde_json::json!({ "spec": { "taints": remaining } });
        // The merge patch replaces the whole list: make the API server refuse it (409) when the
        // node changed since we read it, rather than drop a taint added meanwhile.
        if let Some(rv) = current.metadata.resource_version {
            patch["metadata"] = serde_json::json!({ "resourceVersion": rv });
        }
        match self.block_on(api.patch(node, &PatchParams::default(), &Patch::Merge(&patch)))? {
            Ok(_) => Ok(RemoveOutcome::Done),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(RemoveOutcome::Conflict),
            Err(e) => Err(e).with_context(|| format!("patching the taints of node {node}")),
        }
    }
}

enum RemoveOutcome {
    Done,
    Conflict,
}

fn node_info(node: &Node) -> NodeInfo {
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let internal_ips = status
        .and_then(|s| s.addresses.as_ref())
        .map(|addrs| {
            addrs
                .iter()
                .filter(|a| a.type_ == "InternalIP")
                .map(|a| a.address.clone())
                .collect()
        })
        .unwrap_or_default();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| ts.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default();
    NodeInfo {
        name: node.metadata.name.clone().unwrap_or_default(),
        ready,
        internal_ips,
        annotations: node.metadata.annotations.clone().unwrap_or_default(),
        taints,
    }
}

fn event_info(event: &Event) -> EventInfo {
    EventInfo {
        name: event.metadata.name.clone().unwrap_or_default(),
        reason: event.reason.clone().unwrap_or_default(),
        message: event.message.clone().unwrap_or_default(),
    }
}

fn pod_info(pod: &Pod) -> PodInfo {
    PodInfo {
        name: pod.metadata.name.clone().unwrap_or_default(),
        phase: pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default(),
    }
}

impl KubeApi for KubeClient {
    fn list_nodes(&self, role: &Role) -> Result<Vec<NodeInfo>> {
        let params = ListParams::default().labels(&role_label(role.as_str()));
        let list = self.call(self.nodes().list(&params), || {
            format!("listing nodes with role {role}")
        })?;
        Ok(list.items.iter().map(node_info).collect())
    }

    fn list_events(&self, namespace: &str) -> Result<Vec<EventInfo>> {
        let api: Api<Event> = Api::namespaced(self.kube.client().clone(), namespace);
        let list = self.call(api.list(&ListParams::default()), || {
            format!("listing events in namespace {namespace}")
        })?;
        Ok(list.items.iter().map(event_info).collect())
    }

    fn get_config_map(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let api: Api<ConfigMap> = Api::namespaced(self.kube.client().clone(), namespace);
        let cm = self.call(api.get_opt(name), || {
            format!("reading ConfigMap {namespace}/{name}")
        })?;
        Ok(cm.map(|cm| cm.data.unwrap_or_default()))
    }

    fn machine_config_exists(&self, name: &str) -> Result<bool> {
        let gvk = GroupVersionKind::gvk(
            MACHINE_CONFIG_GROUP,
            MACHINE_CONFIG_VERSION,
            MACHINE_CONFIG_KIND,
        );
        let resource = ApiResource::from_gvk_with_plural(&gvk, MACHINE_CONFIG_PLURAL);
        let api: Api<DynamicObject> = Api::all_with(self.kube.client().clone(), &resource);
        let mc = self.call(api.get_opt(name), || {
            format!("reading MachineConfig {name}")
        })?;
        Ok(mc.is_some())
    }

    fn list_pods(&self, namespace: &str, label_selector: &str) -> Result<Vec<PodInfo>> {
        let api: Api<Pod> = Api::namespaced(self.kube.client().clone(), namespace);
        let params = ListParams::default().labels(label_selector);
        let list = self.call(api.list(&params), || {
            format!("listing pods {label_selector} in namespace {namespace}")
        })?;
        Ok(list.items.iter().map(pod_info).collect())
    }

    fn pod_logs(&self, namespace: &str, pod: &str, since_seconds: Option<i64>) -> Result<String> {
        let api: Api<Pod> = Api::namespaced(self.kube.client().clone(), namespace);
        let params = LogParams {
            since_seconds,
            ..LogParams::default()
        };
        self.call(api.logs(pod, &params), || {
            format!("reading the log of pod {namespace}/{pod}")
        })
    }

    fn remove_node_taint(&self, node: &str, key: &str) -> Result<()> {
        let api = self.nodes();
        // A conflict means the node changed since it was read: read it again at once.
        let outcome = SYSTEM_CLOCK.retry(
            &NeverStop,
            &Schedule::tries(TAINT_PATCH_ATTEMPTS, Duration::ZERO),
            |_| match self.remove_taint_once(&api, node, key) {
                Ok(RemoveOutcome::Done) => Ok(()),
                Ok(RemoveOutcome::Conflict) => Err(Failure::Retry(None)),
                Err(e) => Err(Failure::Fatal(Some(e))),
            },
            |_, next| {
                tracing::debug!(
                    node,
                    key,
                    attempt = next.failures,
                    "node changed while removing a taint; retrying"
                )
            },
        );
        match outcome {
            Ok(()) => Ok(()),
            Err(e) => match e.into_last().flatten() {
                Some(e) => Err(e.context(format!("removing taint {key} from node {node}"))),
                None => bail!(
                    "removing taint {key} from node {node}: the node kept changing ({TAINT_PATCH_ATTEMPTS} conflicts)"
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition, NodeSpec, NodeStatus};
    use kube::api::ObjectMeta;

    #[test]
    fn node_info_maps_ready_ips_annotations_and_taints() {
        let node = Node {
            metadata: ObjectMeta {
                name: Some("master-0".into()),
                annotations: Some(BTreeMap::from([("a".to_string(), "b".to_string())])),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                taints: Some(vec![Taint {
                    key: "node.cloudprovider.kubernetes.io/uninitialized".into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![
                    NodeCondition {
                        type_: "MemoryPressure".into(),
                        status: "False".into(),
                        ..Default::default()
                    },
                    NodeCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        ..Default::default()
                    },
                ]),
                addresses: Some(vec![
                    NodeAddress {
                        type_: "InternalIP".into(),
                        address: "192.168.126.10".into(),
                    },
                    NodeAddress {
                        type_: "Hostname".into(),
                        address: "master-0".into(),
                    },
                    NodeAddress {
                        type_: "InternalIP".into(),
                        address: "fd00::10".into(),
                    },
                ]),
                ..Default::default()
            }),
        };
        let info = node_info(&node);
        assert_eq!(info.name, "master-0");
        assert!(info.ready);
        assert_eq!(info.internal_ips, vec!["192.168.126.10", "fd00::10"]);
        assert_eq!(info.annotations.get("a").map(String::as_str), Some("b"));
        assert_eq!(
            info.taints,
            vec!["node.cloudprovider.kubernetes.io/uninitialized"]
        );
    }

    #[test]
    fn node_info_of_a_bare_node() {
        let info = node_info(&Node::default());
        assert_eq!(info, NodeInfo::default());
        let unknown = Node {
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "Unknown".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(!node_info(&unknown).ready);
    }

    #[test]
    fn event_info_maps_fields() {
        let event = Event {
            metadata: ObjectMeta {
                name: Some("AssistedControllerIsReady".into()),
                ..Default::default()
            },
            reason: Some("Ready".into()),
            message: Some("controller is ready".into()),
            ..Default::default()
        };
        assert_eq!(
            event_info(&event),
            EventInfo {
                name: "AssistedControllerIsReady".into(),
                reason: "Ready".into(),
                message: "controller is ready".into(),
            }
        );
    }
}
