//! Least privilege, proved: the API request each [`super::ClusterApi`] method makes (group,
//! resource[/subresource], verb, whether the path names a namespace, the group and plural taken
//! from the same types the client uses), and the check that the controller's ClusterRole (the
//! rules the bootstrap deploys) allows each one.
//!
//! Tests prove three things: every declared request is allowed; every trait method has a
//! declaration (and no declaration is stale); and (tests/controller_cluster.rs) every HTTP request
//! the real client sends, for every method, is one its method declares.

use super::model::kinds;
use crate::controller::deploy::role::RULES;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Service};
use kube::api::ApiResource;
use kube::Resource;

/// A resource type as RBAC names it: API group (`""` for core) and plural.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    pub group: String,
    pub plural: String,
}

/// The kind of a k8s-openapi type.
fn typed<K: Resource<DynamicType = ()>>() -> Kind {
    Kind {
        group: K::group(&()).into_owned(),
        plural: K::plural(&()).into_owned(),
    }
}

/// The kind of an OpenShift, OLM or metal3 type.
fn dynamic(resource: ApiResource) -> Kind {
    Kind {
        group: resource.group,
        plural: resource.plural,
    }
}

/// One API request a method makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub kind: Kind,
    pub subresource: Option<&'static str>,
    /// A Kubernetes RBAC verb: get, list, create, update, patch, delete, deletecollection.
    pub verb: &'static str,
    /// The path names a namespace (false: cluster-scoped, or all namespaces).
    pub namespaced: bool,
}

fn cluster(kind: Kind, verb: &'static str) -> Declared {
    Declared {
        kind,
        subresource: None,
        verb,
        namespaced: false,
    }
}

fn namespaced(kind: Kind, verb: &'static str) -> Declared {
    Declared {
        kind,
        subresource: None,
        verb,
        namespaced: true,
    }
}

fn sub(kind: Kind, subresource: &'static str, verb: &'static str, ns: bool) -> Declared {
    Declared {
        kind,
        subresource: Some(subresource),
        verb,
        namespaced: ns,
    }
}

/// Method name → the request it makes, for every method of [`super::ClusterApi`] in the
/// trait's order.
pub fn declarations() -> Vec<(&'static str, Declared)> {
    let (nodes, pods, events) = (typed::<Node>, typed::<Pod>, typed::<Event>);
    let (services, jobs, csrs) = (
        typed::<Service>,
        typed::<Job>,
        typed::<CertificateSigningRequest>,
    );
    let operators = || dynamic(kinds::cluster_operators());
    let plans = || dynamic(kinds::install_plans());
    let bmhs = || dynamic(kinds::bmhs());
    let mcps = || dynamic(kinds::mcps());
    vec![
        ("get_proxy", cluster(dynamic(kinds::proxies()), "get")),
        (
            "get_cluster_version",
            cluster(dynamic(kinds::cluster_versions()), "get"),
        ),
        ("list_cluster_operators", cluster(operators(), "list")),
        ("get_cluster_operator", cluster(operators(), "get")),
        ("get_config_map", namespaced(typed::<ConfigMap>(), "get")),
        ("create_event", namespaced(events(), "create")),
        ("list_nodes", cluster(nodes(), "list")),
        ("get_node", cluster(nodes(), "get")),
        ("remove_node_taint", cluster(nodes(), "patch")),
        ("patch_node_labels", cluster(nodes(), "patch")),
        ("list_services", cluster(services(), "list")),
        ("delete_service", namespaced(services(), "delete")),
        ("list_pods", namespaced(pods(), "list")),
        ("pod_log", sub(pods(), "log", "get", true)),
        ("delete_pods", namespaced(pods(), "deletecollection")),
        ("list_csrs", cluster(csrs(), "list")),
        ("approve_csr", sub(csrs(), "approval", "update", false)),
        (
            "get_subscription",
            namespaced(dynamic(kinds::subscriptions()), "get"),
        ),
        ("get_csv", namespaced(dynamic(kinds::csvs()), "get")),
        ("list_install_plans", namespaced(plans(), "list")),
        ("delete_install_plan", namespaced(plans(), "delete")),
        ("list_jobs", namespaced(jobs(), "list")),
        ("delete_job", namespaced(jobs(), "delete")),
        ("list_bmhs", namespaced(bmhs(), "list")),
        ("get_bmh", namespaced(bmhs(), "get")),
        ("update_bmh", namespaced(bmhs(), "update")),
        ("update_bmh_status", sub(bmhs(), "status", "update", true)),
        (
            "provisioning_exists",
            cluster(dynamic(kinds::provisionings()), "get"),
        ),
        (
            "list_machines",
            namespaced(dynamic(kinds::machines()), "list"),
        ),
        ("get_machine_config_pool", cluster(mcps(), "get")),
        ("set_machine_config_pool_paused", cluster(mcps(), "patch")),
    ]
}

/// One API request as seen on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiCall {
    pub group: String,
    /// The plural, with `/<subresource>` when there is one.
    pub resource: String,
    pub verb: String,
    pub namespaced: bool,
}

impl Declared {
    /// `plural` or `plural/subresource`, as RBAC rules name it.
    pub fn resource(&self) -> String {
        match self.subresource {
            Some(sub) => format!("{}/{sub}", self.kind.plural),
            None => self.kind.plural.to_string(),
        }
    }

    pub fn call(&self) -> ApiCall {
        ApiCall {
            group: self.kind.group.to_string(),
            resource: self.resource(),
            verb: self.verb.to_string(),
            namespaced: self.namespaced,
        }
    }
}

/// Whether the deployed ClusterRole allows `verb` on `group`/`resource` for any object name.
/// Rules restricted to resource names never count: no method acts on such names only.
pub fn allowed(call: &ApiCall) -> bool {
    RULES.iter().any(|rule| {
        rule.resource_names.is_empty()
            && rule.api_groups.contains(&call.group.as_str())
            && rule.resources.contains(&call.resource.as_str())
            && rule.verbs.contains(&call.verb.as_str())
    })
}

/// The RBAC request an HTTP request to the API server is (`None` for a path that is no resource
/// request): GET of a collection is `list` (`watch` with `watch=true`), of an object `get`;
/// POST `create`; PUT `update`; PATCH `patch`; DELETE of an object `delete`, of a collection
/// `deletecollection`.
pub fn call_of_http(method: &str, path: &str, query: &str) -> Option<ApiCall> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespaced, rest) = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => (true, rest),
        rest => (false, rest),
    };
    let (resource, has_name) = match rest {
        [plural] => (plural.to_string(), false),
        [plural, _name] => (plural.to_string(), true),
        [plural, _name, sub] => (format!("{plural}/{sub}"), true),
        _ => return None,
    };
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match (method, has_name) {
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    Some(ApiCall {
        group: group.to_string(),
        resource,
        verb: verb.to_string(),
        namespaced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const NODES: &str = "/api/v1/nodes";

    /// The method names of the `ClusterApi` trait, from its source.
    fn trait_methods() -> BTreeSet<String> {
        let source = include_str!("mod.rs");
        let start = source
            .find("pub trait ClusterApi")
            .expect("the trait is in mod.rs");
        let body = &source[start..];
        let end = body.find("\n}\n").expect("the trait's end");
        body[..end]
            .split("fn ")
            .skip(1)
            .map(|s| s.split('(').next().unwrap().trim().to_string())
            .collect()
    }

    #[test]
    fn every_declared_request_is_allowed_by_the_cluster_role() {
        for (method, req) in declarations() {
            assert!(allowed(&req.call()), "{method}: {req:?} is not allowed");
        }
    }

    #[test]
    fn allowed_refuses_what_the_role_does_not_grant() {
        let call = |group: &str, resource: &str, verb: &str| ApiCall {
            group: group.into(),
            resource: resource.into(),
            verb: verb.into(),
            namespaced: false,
        };
        assert!(allowed(&call("", "nodes", "patch")));
        assert!(!allowed(&call("", "nodes", "delete")));
        assert!(!allowed(&call("", "secrets", "get")));
        assert!(!allowed(&call("metal3.io", "baremetalhosts", "delete")));
        let mc = "machineconfiguration.openshift.io";
        assert!(!allowed(&call(mc, "machineconfigs", "get")));
        // Granted only for named objects: never counted.
        let co = "config.openshift.io";
        assert!(!allowed(&call(co, "clusteroperators/status", "update")));
    }

    #[test]
    fn every_trait_method_is_declared_and_no_declaration_is_stale() {
        let methods = trait_methods();
        assert_eq!(methods.len(), 31, "{methods:?}");
        let declared: BTreeSet<String> =
            declarations().iter().map(|(m, _)| m.to_string()).collect();
        assert_eq!(declared.len(), methods.len(), "a method declared twice");
        let undeclared: Vec<_> = methods.difference(&declared).collect();
        assert!(undeclared.is_empty(), "undeclared methods: {undeclared:?}");
        let stale: Vec<_> = declared.difference(&methods).collect();
        assert!(stale.is_empty(), "declarations of no method: {stale:?}");
    }

    #[test]
    #[rustfmt::skip]
    fn http_requests_map_to_rbac_calls() {
        let csr = "/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-1/approval";
        let mcp = "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker";
        let (mc, certs) = ("machineconfiguration.openshift.io", "certificates.k8s.io");
        let pods = "/api/v1/namespaces/a/pods";
        for (method, path, query, want) in [
            ("GET", NODES, "", Some(("", "nodes", "list", false))),
            ("GET", NODES, "watch=true", Some(("", "nodes", "watch", false))),
            ("GET", "/api/v1/namespaces/a/pods/p/log", "sinceSeconds=3", Some(("", "pods/log", "get", true))),
            ("DELETE", pods, "", Some(("", "pods", "deletecollection", true))),
            ("DELETE", "/api/v1/namespaces/a/services/x", "", Some(("", "services", "delete", true))),
            ("PUT", csr, "", Some((certs, "certificatesigningrequests/approval", "update", false))),
            ("POST", "/api/v1/namespaces/a/events", "", Some(("", "events", "create", true))),
            ("PATCH", mcp, "", Some((mc, "machineconfigpools", "patch", false))),
            ("GET", "/version", "", None),
            ("GET", "/api/v1/a/b/c/d", "", None),
        ] {
            let want = want.map(|(group, resource, verb, namespaced)| ApiCall {
                group: group.into(), resource: resource.into(), verb: verb.into(), namespaced,
            });
            assert_eq!(call_of_http(method, path, query), want, "{method} {path}");
        }
    }
}
