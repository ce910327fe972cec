//! Least privilege, proved: the API request each [`super::ClusterApi`] method makes (group,
//! resource[/subresource], verb, whether the path names a namespace, the group and plural taken
//! from the same types the client uses), and the check that the controller's ClusterRole (the
//! rules the bootstrap deploys) allows each one.
//!
//! Tests prove that every trait method has a declaration (and no declaration is stale), and
//! (tests/kube_client.rs) that every HTTP request the real client sends, for every method, is
//! the one its method declares and is allowed.

use super::model::kinds::*;
use crate::controller::deploy::role::RULES;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod, Service};
use kube::api::ApiResource;
use kube::Resource;

/// One API request as RBAC sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiCall {
    /// The API group, `""` for core.
    pub group: String,
    /// The plural, with `/<subresource>` when there is one.
    pub resource: String,
    /// A Kubernetes RBAC verb: get, list, create, update, patch, delete, deletecollection.
    pub verb: String,
    /// The path names a namespace (false: cluster-scoped, or all namespaces).
    pub namespaced: bool,
}

/// Group and plural of a k8s-openapi type.
fn typed<K: Resource<DynamicType = ()>>() -> (String, String) {
    (K::group(&()).into_owned(), K::plural(&()).into_owned())
}

/// Group and plural of an OpenShift, OLM or metal3 kind.
fn kind(kind: fn() -> ApiResource) -> (String, String) {
    let resource = kind();
    (resource.group, resource.plural)
}

/// The subresource `sub` of a resource.
fn sub((group, plural): (String, String), sub: &str) -> (String, String) {
    (group, format!("{plural}/{sub}"))
}

/// Method name → the request it makes, for every method of [`super::ClusterApi`] in the
/// trait's order.
pub fn declarations() -> Vec<(&'static str, ApiCall)> {
    let (nodes, pods, events) = (typed::<Node>, typed::<Pod>, typed::<Event>);
    let (services, jobs, csrs) = (
        typed::<Service>,
        typed::<Job>,
        typed::<CertificateSigningRequest>,
    );
    let operators = || kind(cluster_operators);
    let (plans, hosts, pools) = (|| kind(install_plans), || kind(bmhs), || kind(mcps));
    // (method, (group, resource), verb, whether the path names a namespace)
    let calls = [
        ("get_proxy", kind(proxies), "get", false),
        ("get_cluster_version", kind(cluster_versions), "get", false),
        ("list_cluster_operators", operators(), "list", false),
        ("get_cluster_operator", operators(), "get", false),
        ("get_config_map", typed::<ConfigMap>(), "get", true),
        ("create_event", events(), "create", true),
        ("list_nodes", nodes(), "list", false),
        ("get_node", nodes(), "get", false),
        ("remove_node_taint", nodes(), "patch", false),
        ("patch_node_labels", nodes(), "patch", false),
        ("list_services", services(), "list", false),
        ("delete_service", services(), "delete", true),
        ("list_pods", pods(), "list", true),
        ("pod_log", sub(pods(), "log"), "get", true),
        ("delete_pods", pods(), "deletecollection", true),
        ("list_csrs", csrs(), "list", false),
        ("approve_csr", sub(csrs(), "approval"), "update", false),
        ("get_subscription", kind(subscriptions), "get", true),
        ("get_csv", kind(csvs), "get", true),
        ("list_install_plans", plans(), "list", true),
        ("delete_install_plan", plans(), "delete", true),
        ("list_jobs", jobs(), "list", true),
        ("delete_job", jobs(), "delete", true),
        ("list_bmhs", hosts(), "list", true),
        ("get_bmh", hosts(), "get", true),
        ("update_bmh", hosts(), "update", true),
        ("update_bmh_status", sub(hosts(), "status"), "update", true),
        ("provisioning_exists", kind(provisionings), "get", false),
        ("list_machines", kind(machines), "list", true),
        ("get_machine_config_pool", pools(), "get", false),
        ("set_machine_config_pool_paused", pools(), "patch", false),
        ("list_events", events(), "list", true),
        ("machine_config_exists", kind(machine_configs), "get", false),
    ];
    let calls = calls.into_iter();
    let calls = calls.map(|(method, (group, resource), verb, namespaced)| {
        let verb = verb.to_string();
        let call = ApiCall {
            group,
            resource,
            verb,
            namespaced,
        };
        (method, call)
    });
    calls.collect()
}

/// The methods only the installer calls, with bootkube's admin kubeconfig: the controller's
/// role need not allow them.
pub const INSTALLER_ONLY: [&str; 2] = ["list_events", "machine_config_exists"];

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
        assert_eq!(methods.len(), 33, "{methods:?}");
        let declared: BTreeSet<String> =
            declarations().iter().map(|(m, _)| m.to_string()).collect();
        assert_eq!(declared.len(), methods.len(), "a method declared twice");
        let undeclared: Vec<_> = methods.difference(&declared).collect();
        assert!(undeclared.is_empty(), "undeclared methods: {undeclared:?}");
        let stale: Vec<_> = declared.difference(&methods).collect();
        assert!(stale.is_empty(), "declarations of no method: {stale:?}");
    }

    /// What tests/kube_client.rs cannot meet: the client never watches, nor leaves the resource
    /// paths (its every request is mapped there and compared with its declaration).
    #[test]
    fn watches_and_paths_that_are_no_resource_requests() {
        let watch = call_of_http("GET", NODES, "watch=true").unwrap();
        assert_eq!(
            (watch.resource.as_str(), watch.verb.as_str()),
            ("nodes", "watch")
        );
        assert_eq!(call_of_http("GET", "/version", ""), None);
        assert_eq!(call_of_http("GET", "/api/v1/a/b/c/d", ""), None);
    }
}
