//! The ClusterRole of the assisted-installer-controller's service account: the Go deploy
//! template's rules, in its order, as typed data (one exception, rule 25, narrowed below). The
//! controller uses some of them no more (jobs, tokenreviews, services...); they stay, so that a
//! controller image built for the Go installer finds what it was granted there.

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};

use super::settings::{meta, NAME, NAMESPACE};

/// One rule: API groups (`""` is the core group), resources, resource names (empty: any) and
/// verbs. No field ever holds `*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rule {
    pub api_groups: &'static [&'static str],
    pub resources: &'static [&'static str],
    pub resource_names: &'static [&'static str],
    pub verbs: &'static [&'static str],
}

const CORE: &str = "";

const fn rule(
    api_groups: &'static [&'static str],
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
) -> Rule {
    Rule {
        api_groups,
        resources,
        resource_names: &[],
        verbs,
    }
}

const fn named(
    api_groups: &'static [&'static str],
    resources: &'static [&'static str],
    resource_names: &'static [&'static str],
    verbs: &'static [&'static str],
) -> Rule {
    Rule {
        api_groups,
        resources,
        resource_names,
        verbs,
    }
}

/// The rules, numbered in the Go template's order.
pub(crate) const RULES: [Rule; 25] = [
    // 1
    rule(
        &[CORE],
        &["pods", "configmaps", "pods/log"],
        &["get", "list", "watch"],
    ),
    // 2
    rule(&[CORE], &["nodes"], &["get", "list", "watch", "patch"]),
    // 3
    rule(&[CORE], &["events"], &["create"]),
    // 4
    rule(&[CORE], &["namespaces"], &["patch"]),
    // 5
    rule(
        &["certificates.k8s.io"],
        &["certificatesigningrequests"],
        &["get", "list", "watch"],
    ),
    // 6
    rule(&["batch"], &["jobs"], &["get", "list", "delete"]),
    // 7
    rule(
        &["certificates.k8s.io"],
        &["certificatesigningrequests/approval"],
        &["update"],
    ),
    // 8
    rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
    // 9
    rule(
        &["authorization.k8s.io"],
        &["subjectaccessreviews"],
        &["create"],
    ),
    // 10
    rule(
        &["config.openshift.io"],
        &["clusteroperators"],
        &["get", "create", "list", "watch"],
    ),
    // 11
    named(
        &["config.openshift.io"],
        &["clusteroperators/status"],
        &["machine-approver"],
        &["update"],
    ),
    // 12
    rule(&["config.openshift.io"], &["proxies"], &["get", "list"]),
    // 13
    named(
        &["certificates.k8s.io"],
        &["signers"],
        &[
            "kubernetes.io/kube-apiserver-client-kubelet",
            "kubernetes.io/kubelet-serving",
        ],
        &["approve"],
    ),
    // 14
    rule(
        &["operator.openshift.io"],
        &["etcds", "ingresscontrollers"],
        &["patch"],
    ),
    // 15
    rule(
        &["metal3.io"],
        &["baremetalhosts"],
        &["get", "list", "watch", "update", "patch"],
    ),
    // 16
    rule(
        &["metal3.io"],
        &["baremetalhosts/status"],
        &["get", "patch", "update"],
    ),
    // 17
    rule(
        &["machine.openshift.io"],
        &["machines"],
        &["get", "list", "watch"],
    ),
    // 18
    rule(&["metal3.io"], &["provisionings"], &["get", "list"]),
    // 19
    rule(
        &["config.openshift.io"],
        &["clusterversions"],
        &["get", "list"],
    ),
    // 20
    rule(
        &["operators.coreos.com"],
        &["clusterserviceversions"],
        &["get", "list"],
    ),
    // 21
    rule(
        &["operators.coreos.com"],
        &["subscriptions", "installplans"],
        &["get", "list", "update", "delete"],
    ),
    // 22
    rule(&[CORE], &["services"], &["list", "delete"]),
    // 23
    rule(&[CORE], &["pods"], &["deletecollection"]),
    // 24
    named(
        &["security.openshift.io"],
        &["securitycontextconstraints"],
        &[
            "anyuid",
            "nonroot",
            "hostmount-anyuid",
            "machine-api-termination-handler",
            "hostnetwork",
            "hostaccess",
            "node-exporter",
        ],
        &["use"],
    ),
    // 25. Deliberately narrower than Go, which grants every resource (`*`) of this group: the
    // controller only reads MachineConfigPool `worker` and merge-patches its `spec.paused` (to
    // pause the pool while it labels nodes), so a `*` would hand it MachineConfigs too, and with
    // them root on every node.
    rule(
        &["machineconfiguration.openshift.io"],
        &["machineconfigpools"],
        &["patch", "get"],
    ),
];

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

impl Rule {
    fn policy_rule(&self) -> PolicyRule {
        PolicyRule {
            api_groups: Some(strings(self.api_groups)),
            resources: Some(strings(self.resources)),
            resource_names: (!self.resource_names.is_empty()).then(|| strings(self.resource_names)),
            verbs: strings(self.verbs),
            non_resource_urls: None,
        }
    }
}

/// `ClusterRole assisted-installer-controller`. Like Go's, it carries a namespace although
/// cluster-scoped (the API server ignores it).
pub(crate) fn cluster_role() -> ClusterRole {
    ClusterRole {
        metadata: meta(NAME, Some(NAMESPACE)),
        rules: Some(RULES.iter().map(Rule::policy_rule).collect()),
        aggregation_rule: None,
    }
}
