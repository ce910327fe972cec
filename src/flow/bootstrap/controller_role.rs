//! The ClusterRole of the assisted-installer-controller's service account: the Go deploy
//! template's rules, in its order, as typed data (one exception, rule 25, narrowed below). The
//! controller uses some of them no more (see the controller reference, §1.4); they stay, so that
//! a controller image built for the Go installer finds what it was granted there.

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};

use super::controller_manifests::{meta, NAME, NAMESPACE};

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

/// The rules, numbered as in the reference table (§1.4 of the controller reference).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::bootstrap::controller_manifests::testing::{read, settings};
    use crate::flow::bootstrap::controller_manifests::{manifests, ROLE_FILE};
    use serde_json::Value;

    /// The reference's table (§1.4), as written there, with rule 25 narrowed:
    /// `apiGroups | resources | resourceNames | verbs`.
    const TABLE: &str = r#"
        "" | pods, configmaps, pods/log | – | get, list, watch
        "" | nodes | – | get, list, watch, patch
        "" | events | – | create
        "" | namespaces | – | patch
        certificates.k8s.io | certificatesigningrequests | – | get, list, watch
        batch | jobs | – | get, list, delete
        certificates.k8s.io | certificatesigningrequests/approval | – | update
        authentication.k8s.io | tokenreviews | – | create
        authorization.k8s.io | subjectaccessreviews | – | create
        config.openshift.io | clusteroperators | – | get, create, list, watch
        config.openshift.io | clusteroperators/status | machine-approver | update
        config.openshift.io | proxies | – | get, list
        certificates.k8s.io | signers | kubernetes.io/kube-apiserver-client-kubelet, kubernetes.io/kubelet-serving | approve
        operator.openshift.io | etcds, ingresscontrollers | – | patch
        metal3.io | baremetalhosts | – | get, list, watch, update, patch
        metal3.io | baremetalhosts/status | – | get, patch, update
        machine.openshift.io | machines | – | get, list, watch
        metal3.io | provisionings | – | get, list
        config.openshift.io | clusterversions | – | get, list
        operators.coreos.com | clusterserviceversions | – | get, list
        operators.coreos.com | subscriptions, installplans | – | get, list, update, delete
        "" | services | – | list, delete
        "" | pods | – | deletecollection
        security.openshift.io | securitycontextconstraints | anyuid, nonroot, hostmount-anyuid, machine-api-termination-handler, hostnetwork, hostaccess, node-exporter | use
        machineconfiguration.openshift.io | machineconfigpools | – | patch, get
    "#;

    /// A table cell as the rendered list: `""` is the core group, `–` no list at all.
    fn cell(text: &str) -> Option<Value> {
        match text.trim() {
            "–" => None,
            "\"\"" => Some(Value::from(vec![""])),
            list => Some(Value::from(
                list.split(", ").map(str::trim).collect::<Vec<_>>(),
            )),
        }
    }

    fn expected() -> Vec<Value> {
        TABLE
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|line| {
                let cols: Vec<&str> = line.split(" | ").collect();
                assert_eq!(cols.len(), 4, "{line}");
                let mut rule = serde_json::Map::new();
                for (key, text) in ["apiGroups", "resources", "resourceNames", "verbs"]
                    .into_iter()
                    .zip(cols)
                {
                    if let Some(v) = cell(text) {
                        rule.insert(key.to_string(), v);
                    }
                }
                Value::Object(rule)
            })
            .collect()
    }

    #[test]
    fn the_rendered_role_has_the_go_rules_in_order_with_rule_25_narrowed() {
        let role = read(false, ROLE_FILE);
        assert_eq!(role["apiVersion"], "rbac.authorization.k8s.io/v1");
        assert_eq!(role["kind"], "ClusterRole");
        assert_eq!(role["metadata"]["name"], NAME);
        assert_eq!(role["metadata"]["namespace"], NAMESPACE);
        let rules = role["rules"].as_array().expect("rules");
        let want = expected();
        assert_eq!(rules.len(), want.len());
        for (i, (got, want)) in rules.iter().zip(&want).enumerate() {
            assert_eq!(got, want, "rule {}", i + 1);
        }
        assert_eq!(
            rules[24]["resources"],
            Value::from(vec!["machineconfigpools"]),
            "rule 25 grants MachineConfigPools only"
        );
    }

    /// Every string of a manifest, with where it is.
    fn all_strings(value: &Value, at: String, out: &mut Vec<(String, String)>) {
        match value {
            Value::String(s) => out.push((at, s.clone())),
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    all_strings(v, format!("{at}[{i}]"), out);
                }
            }
            Value::Object(map) => {
                for (k, v) in map {
                    all_strings(v, format!("{at}.{k}"), out);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn no_manifest_grants_a_wildcard() {
        for sno in [false, true] {
            let all = manifests(&settings(sno)).unwrap();
            for (name, text) in &all {
                let doc: Value = serde_saphyr::from_str(text).unwrap();
                let mut found = Vec::new();
                all_strings(&doc, name.to_string(), &mut found);
                for (at, s) in found {
                    assert!(!s.contains('*'), "{at} is {s:?}");
                }
            }
            let role = read(sno, ROLE_FILE);
            for (i, rule) in role["rules"].as_array().unwrap().iter().enumerate() {
                assert!(
                    rule.get("nonResourceURLs").is_none(),
                    "rule {}: {rule}",
                    i + 1
                );
                for key in ["apiGroups", "resources", "verbs"] {
                    assert!(
                        !rule[key].as_array().unwrap().is_empty(),
                        "rule {} has no {key}",
                        i + 1
                    );
                }
            }
        }
    }
}
