//! The ClusterRole of the assisted-installer-controller's service account: the Go deploy
//! template's rules, in its order, as a table (one exception, the last rule, narrowed below). The
//! controller uses some of them no more (jobs, tokenreviews, services...); they stay, so that a
//! controller image built for the Go installer finds what it was granted there.

use serde_json::{json, Value};
use std::sync::LazyLock;

/// One rule: API groups (`""` is the core group), resources, resource names (empty: any) and
/// verbs. No field ever holds `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    pub api_groups: Vec<&'static str>,
    pub resources: Vec<&'static str>,
    pub resource_names: Vec<&'static str>,
    pub verbs: Vec<&'static str>,
}

/// The rules in the Go template's order, one a line: `apiGroups | resources | resourceNames |
/// verbs`, lists split at ", ", `""` the core group, `–` no resource names (any). The last is
/// deliberately narrower than Go, which grants every resource (`*`) of its group: the
/// controller only reads MachineConfigPool `worker` and merge-patches its `spec.paused` (to
/// pause the pool while it labels nodes), so a `*` would hand it MachineConfigs too, and with
/// them root on every node.
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

/// [`TABLE`], parsed.
pub(crate) static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let list = |cell: &'static str| -> Vec<&'static str> {
        match cell.trim() {
            "–" => Vec::new(),
            "\"\"" => vec![""],
            items => items.split(", ").map(str::trim).collect(),
        }
    };
    TABLE
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let cells: Vec<&'static str> = line.split(" | ").collect();
            assert_eq!(cells.len(), 4, "a rule has 4 cells: {line}");
            Rule {
                api_groups: list(cells[0]),
                resources: list(cells[1]),
                resource_names: list(cells[2]),
                verbs: list(cells[3]),
            }
        })
        .collect()
});

/// `ClusterRole assisted-installer-controller` with `metadata`: the rules of [`RULES`], no
/// `resourceNames` where any name goes.
pub(super) fn cluster_role(metadata: Value) -> Value {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|r| {
            let mut rule =
                json!({"apiGroups": r.api_groups, "resources": r.resources, "verbs": r.verbs});
            if !r.resource_names.is_empty() {
                rule["resourceNames"] = json!(r.resource_names);
            }
            rule
        })
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata,
        "rules": rules,
    })
}
