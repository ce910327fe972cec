//! Least privilege, proved: the API requests each [`super::ClusterApi`] method makes (group,
//! resource[/subresource], verb, whether the path names a namespace), and the check that the
//! controller's ClusterRole (`controller::deploy::role`, the rules we deploy) allows each
//! one. The real client builds its request paths from these same [`Kind`]s.
//!
//! Tests prove three things: every declared request is allowed; every trait method has a
//! declaration (and no declaration is stale); and (tests/controller_cluster.rs) every HTTP request
//! the real client sends, for every method, is one its method declares.

use crate::controller::deploy::role::RULES;

/// A resource type: API group (`""` for core), version and plural.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
}

const fn kind(group: &'static str, version: &'static str, plural: &'static str) -> Kind {
    Kind {
        group,
        version,
        plural,
    }
}

pub const NODES: Kind = kind("", "v1", "nodes");
pub const PODS: Kind = kind("", "v1", "pods");
pub const CONFIG_MAPS: Kind = kind("", "v1", "configmaps");
pub const EVENTS: Kind = kind("", "v1", "events");
pub const SERVICES: Kind = kind("", "v1", "services");
pub const CSRS: Kind = kind("certificates.k8s.io", "v1", "certificatesigningrequests");
pub const CLUSTER_OPERATORS: Kind = kind("config.openshift.io", "v1", "clusteroperators");
pub const CLUSTER_VERSIONS: Kind = kind("config.openshift.io", "v1", "clusterversions");
pub const PROXIES: Kind = kind("config.openshift.io", "v1", "proxies");
pub const SUBSCRIPTIONS: Kind = kind("operators.coreos.com", "v1alpha1", "subscriptions");
pub const CSVS: Kind = kind("operators.coreos.com", "v1alpha1", "clusterserviceversions");
pub const INSTALL_PLANS: Kind = kind("operators.coreos.com", "v1alpha1", "installplans");
pub const JOBS: Kind = kind("batch", "v1", "jobs");
pub const BMHS: Kind = kind("metal3.io", "v1alpha1", "baremetalhosts");
pub const PROVISIONINGS: Kind = kind("metal3.io", "v1alpha1", "provisionings");
pub const MACHINES: Kind = kind("machine.openshift.io", "v1beta1", "machines");
pub const MCPS: Kind = kind(
    "machineconfiguration.openshift.io",
    "v1",
    "machineconfigpools",
);

impl Kind {
    /// `apiVersion` of the objects: `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        match self.group {
            "" => self.version.to_string(),
            group => format!("{group}/{}", self.version),
        }
    }

    /// The request path: `/api/v1` or `/apis/<group>/<version>`, then `/namespaces/<ns>` when
    /// given, the plural, and the name and subresource when given.
    pub fn path(&self, namespace: Option<&str>, name: Option<&str>, sub: Option<&str>) -> String {
        let mut path = match self.group {
            "" => format!("/api/{}", self.version),
            group => format!("/apis/{group}/{}", self.version),
        };
        if let Some(ns) = namespace {
            path.push_str(&format!("/namespaces/{ns}"));
        }
        path.push('/');
        path.push_str(self.plural);
        for part in [name, sub].into_iter().flatten() {
            path.push('/');
            path.push_str(part);
        }
        path
    }
}

/// One API request a method makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Declared {
    pub kind: Kind,
    pub subresource: Option<&'static str>,
    /// A Kubernetes RBAC verb: get, list, create, update, patch, delete, deletecollection.
    pub verb: &'static str,
    /// The path names a namespace (false: cluster-scoped, or all namespaces).
    pub namespaced: bool,
}

const fn cluster(kind: Kind, verb: &'static str) -> Declared {
    Declared {
        kind,
        subresource: None,
        verb,
        namespaced: false,
    }
}

const fn namespaced(kind: Kind, verb: &'static str) -> Declared {
    Declared {
        kind,
        subresource: None,
        verb,
        namespaced: true,
    }
}

const fn sub(kind: Kind, subresource: &'static str, verb: &'static str, ns: bool) -> Declared {
    Declared {
        kind,
        subresource: Some(subresource),
        verb,
        namespaced: ns,
    }
}

/// Method name → the requests it makes, for every method of [`super::ClusterApi`].
pub const DECLARATIONS: &[(&str, &[Declared])] = &[
    ("get_proxy", &[cluster(PROXIES, "get")]),
    ("get_cluster_version", &[cluster(CLUSTER_VERSIONS, "get")]),
    (
        "list_cluster_operators",
        &[cluster(CLUSTER_OPERATORS, "list")],
    ),
    ("get_cluster_operator", &[cluster(CLUSTER_OPERATORS, "get")]),
    ("get_config_map", &[namespaced(CONFIG_MAPS, "get")]),
    ("create_event", &[namespaced(EVENTS, "create")]),
    ("list_nodes", &[cluster(NODES, "list")]),
    ("get_node", &[cluster(NODES, "get")]),
    ("remove_node_taint", &[cluster(NODES, "patch")]),
    ("patch_node_labels", &[cluster(NODES, "patch")]),
    ("list_services", &[cluster(SERVICES, "list")]),
    ("delete_service", &[namespaced(SERVICES, "delete")]),
    ("list_pods", &[namespaced(PODS, "list")]),
    ("pod_log", &[sub(PODS, "log", "get", true)]),
    ("delete_pods", &[namespaced(PODS, "deletecollection")]),
    ("list_csrs", &[cluster(CSRS, "list")]),
    ("approve_csr", &[sub(CSRS, "approval", "update", false)]),
    ("get_subscription", &[namespaced(SUBSCRIPTIONS, "get")]),
    ("get_csv", &[namespaced(CSVS, "get")]),
    ("list_install_plans", &[namespaced(INSTALL_PLANS, "list")]),
    (
        "delete_install_plan",
        &[namespaced(INSTALL_PLANS, "delete")],
    ),
    ("list_jobs", &[namespaced(JOBS, "list")]),
    ("delete_job", &[namespaced(JOBS, "delete")]),
    ("list_bmhs", &[namespaced(BMHS, "list")]),
    ("get_bmh", &[namespaced(BMHS, "get")]),
    ("update_bmh", &[namespaced(BMHS, "update")]),
    ("update_bmh_status", &[sub(BMHS, "status", "update", true)]),
    ("provisioning_exists", &[cluster(PROVISIONINGS, "get")]),
    ("list_machines", &[namespaced(MACHINES, "list")]),
    ("get_machine_config_pool", &[cluster(MCPS, "get")]),
    ("set_machine_config_pool_paused", &[cluster(MCPS, "patch")]),
];

/// The requests `method` declares; `None` for an undeclared method.
pub fn requests(method: &str) -> Option<&'static [Declared]> {
    DECLARATIONS
        .iter()
        .find(|(name, _)| *name == method)
        .map(|(_, reqs)| *reqs)
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
    use crate::controller::cluster::fake::{exercise_all, FakeCluster};
    use std::collections::BTreeSet;

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
        for (method, reqs) in DECLARATIONS {
            assert!(!reqs.is_empty(), "{method} declares no request");
            for req in *reqs {
                assert!(allowed(&req.call()), "{method}: {req:?} is not allowed");
            }
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
        assert!(!allowed(&call(
            "machineconfiguration.openshift.io",
            "machineconfigs",
            "get"
        )));
        // Only for named objects (rule 11): never counted.
        assert!(!allowed(&call(
            "config.openshift.io",
            "clusteroperators/status",
            "update"
        )));
    }

    #[test]
    fn every_trait_method_is_declared_and_no_declaration_is_stale() {
        let methods = trait_methods();
        assert_eq!(methods.len(), 31, "{methods:?}");
        let declared: BTreeSet<String> = DECLARATIONS.iter().map(|(m, _)| m.to_string()).collect();
        assert_eq!(
            declared.len(),
            DECLARATIONS.len(),
            "a method declared twice"
        );
        let undeclared: Vec<_> = methods.difference(&declared).collect();
        assert!(undeclared.is_empty(), "undeclared methods: {undeclared:?}");
        let stale: Vec<_> = declared.difference(&methods).collect();
        assert!(stale.is_empty(), "declarations of no method: {stale:?}");
    }

    #[test]
    fn the_fake_records_every_method_under_a_declared_name() {
        let fake = FakeCluster::new();
        exercise_all(&fake);
        let recorded: BTreeSet<String> =
            fake.calls().iter().map(|c| c.method.to_string()).collect();
        for method in &recorded {
            assert!(requests(method).is_some(), "{method} has no declaration");
        }
        assert_eq!(recorded, trait_methods(), "exercise_all calls every method");
    }

    #[test]
    fn paths_of_kinds() {
        assert_eq!(NODES.path(None, Some("m0"), None), "/api/v1/nodes/m0");
        assert_eq!(
            PODS.path(Some("ns"), Some("p"), Some("log")),
            "/api/v1/namespaces/ns/pods/p/log"
        );
        assert_eq!(
            MCPS.path(None, Some("worker"), None),
            "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker"
        );
        assert_eq!(
            BMHS.path(Some("openshift-machine-api"), None, None),
            "/apis/metal3.io/v1alpha1/namespaces/openshift-machine-api/baremetalhosts"
        );
        assert_eq!(CSRS.api_version(), "certificates.k8s.io/v1");
        assert_eq!(PODS.api_version(), "v1");
    }

    #[test]
    fn http_requests_map_to_rbac_calls() {
        let c =
            |m, p, q| call_of_http(m, p, q).map(|c| (c.group, c.resource, c.verb, c.namespaced));
        let s =
            |g: &str, r: &str, v: &str, n| Some((g.to_string(), r.to_string(), v.to_string(), n));
        assert_eq!(c("GET", "/api/v1/nodes", ""), s("", "nodes", "list", false));
        assert_eq!(
            c("GET", "/api/v1/nodes", "watch=true"),
            s("", "nodes", "watch", false)
        );
        assert_eq!(
            c("GET", "/api/v1/namespaces/a/pods/p/log", "sinceSeconds=300"),
            s("", "pods/log", "get", true)
        );
        assert_eq!(
            c("DELETE", "/api/v1/namespaces/a/pods", ""),
            s("", "pods", "deletecollection", true)
        );
        assert_eq!(
            c("DELETE", "/api/v1/namespaces/a/services/x", ""),
            s("", "services", "delete", true)
        );
        assert_eq!(
            c(
                "PUT",
                "/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-1/approval",
                ""
            ),
            s(
                "certificates.k8s.io",
                "certificatesigningrequests/approval",
                "update",
                false
            )
        );
        assert_eq!(
            c("POST", "/api/v1/namespaces/a/events", ""),
            s("", "events", "create", true)
        );
        assert_eq!(
            c(
                "PATCH",
                "/apis/machineconfiguration.openshift.io/v1/machineconfigpools/worker",
                ""
            ),
            s(
                "machineconfiguration.openshift.io",
                "machineconfigpools",
                "patch",
                false
            )
        );
        assert_eq!(c("GET", "/version", ""), None);
        assert_eq!(c("GET", "/api/v1/a/b/c/d", ""), None);
    }

    #[test]
    fn each_declaration_round_trips_through_its_path() {
        for (method, reqs) in DECLARATIONS {
            for req in *reqs {
                let ns = req.namespaced.then_some("ns");
                let name = (req.subresource.is_some()
                    || matches!(req.verb, "get" | "update" | "patch" | "delete"))
                .then_some("obj");
                let http = match req.verb {
                    "get" | "list" => "GET",
                    "create" => "POST",
                    "update" => "PUT",
                    "patch" => "PATCH",
                    _ => "DELETE",
                };
                let path = req.kind.path(ns, name, req.subresource);
                assert_eq!(
                    call_of_http(http, &path, ""),
                    Some(req.call()),
                    "{method}: {path}"
                );
            }
        }
    }
}
