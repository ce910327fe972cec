//! The manifests as cluster-bootstrap reads them: written into a directory and read back from
//! YAML into an untyped tree, so that a number or a boolean where a string belongs shows (`"3"`
//! is not `3`), and each one read as its Kubernetes type to catch a misspelt field.

use super::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use std::collections::BTreeMap;

const TOKEN: &str = "s3cr3t\"token";

/// The installer's settings of a three-master or a single-node cluster, and which.
fn settings(sno: bool) -> (InstallerConfig, bool) {
    let cfg = InstallerConfig {
        cluster_id: "c-1".into(),
        url: "https://svc:8090".into(),
        check_cluster_version: true,
        control_plane_count: if sno { 1 } else { 3 },
        must_gather_image: r#"{"ocp":"quay.io/mg:1"}"#.into(),
        controller_image: "quay.io/ai/controller:1".into(),
        openshift_version: "4.17".into(),
        notify_num_reboots: false,
        service_ips: "192.0.2.5".into(),
        ..InstallerConfig::default()
    };
    (cfg, sno)
}

fn render((cfg, sno): &(InstallerConfig, bool), dir: &std::path::Path) {
    render_manifests(dir, cfg, TOKEN, *sno).unwrap();
}

/// The files `render_manifests` writes, read back, by file name.
fn rendered(s: &(InstallerConfig, bool)) -> BTreeMap<String, Value> {
    let dir = tempfile::tempdir().unwrap();
    render(s, dir.path());
    std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let doc = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, doc)
        })
        .collect()
}

/// A manifest read as its Kubernetes type and written again.
type AsTyped = fn(&Value) -> Value;
/// A change of the test settings.
type Change<'a> = &'a dyn Fn(&mut (InstallerConfig, bool));

fn read(s: &(InstallerConfig, bool), name: &str) -> Value {
    rendered(s).remove(name).unwrap()
}

/// `doc` read as a `T` and written again is `doc`: every field is one `T` has.
fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(doc: &Value) -> Value {
    serde_json::to_value(serde_json::from_value::<T>(doc.clone()).unwrap()).unwrap()
}

#[test]
fn every_manifest_is_its_kubernetes_type_and_the_secret_is_private() {
    use std::os::unix::fs::PermissionsExt;
    for sno in [false, true] {
        let mut s = settings(sno);
        s.0.cacert = Some("/etc/ca.pem".into());
        let docs = rendered(&s);
        let check: [(&str, AsTyped); 8] = [
            (CONFIG_MAP_FILE, typed::<ConfigMap>),
            (NETWORK_POLICY_FILE, typed::<NetworkPolicy>),
            (NAMESPACE_FILE, typed::<Namespace>),
            (JOB_FILE, typed::<Job>),
            (ROLE_BINDING_FILE, typed::<ClusterRoleBinding>),
            (ROLE_FILE, typed::<ClusterRole>),
            (SERVICE_ACCOUNT_FILE, typed::<ServiceAccount>),
            (SECRET_FILE, typed::<Secret>),
        ];
        let names: Vec<&str> = check.iter().map(|c| c.0).collect();
        assert_eq!(docs.keys().collect::<Vec<_>>(), names, "sorted by name");
        for (name, as_typed) in check {
            assert_eq!(as_typed(&docs[name]), docs[name], "{name}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mode = || {
        let meta = std::fs::metadata(dir.path().join(SECRET_FILE)).unwrap();
        meta.permissions().mode() & 0o777
    };
    render(&settings(false), dir.path());
    assert_eq!(mode(), 0o600);
    // A rerun replaces the files, and the Secret stays private.
    render(&settings(true), dir.path());
    assert_eq!(mode(), 0o600);
}

#[test]
fn the_manifests_beside_the_job_are_gos() {
    let docs = rendered(&settings(false));
    let meta = json!({"name": NAME, "namespace": NAMESPACE});
    let labelled = |name: &str| json!({"name": name, "namespace": NAMESPACE, "labels": {"app": "assisted-installer-controller"}});
    let want = [
        (
            NAMESPACE_FILE,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {
                "security.openshift.io/scc.podSecurityLabelSync": "false",
                "pod-security.kubernetes.io/enforce": "privileged",
                "pod-security.kubernetes.io/audit": "privileged",
                "pod-security.kubernetes.io/warn": "privileged",
            }}}),
        ),
        (
            SERVICE_ACCOUNT_FILE,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}),
        ),
        (
            ROLE_BINDING_FILE,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": meta,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
                "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]}),
        ),
        (
            NETWORK_POLICY_FILE,
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "assisted-installer-network-policy", "namespace": NAMESPACE}}),
        ),
        (
            CONFIG_MAP_FILE,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": labelled("assisted-installer-controller-config"),
            "data": {
                "cluster-id": "c-1",
                "inventory-url": "https://svc:8090",
                "control-plane-count": "3",
                "skip-cert-verification": "false",
                "check-cluster-version": "true",
                "ca-cert-path": "",
                "must-gather-image": r#"{"ocp":"quay.io/mg:1"}"#,
            }}),
        ),
        (
            SECRET_FILE,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": labelled("assisted-installer-controller-secret"),
                "stringData": {"pull-secret-token": "s3cr3t\"token"}}),
        ),
    ];
    for (name, doc) in want {
        assert_eq!(docs[name], doc, "{name}");
    }
}

#[test]
fn the_multi_node_job_is_gos() {
    let key = |k: &str, optional: bool| {
        let mut r = json!({"name": "assisted-installer-controller-config", "key": k});
        if optional {
            r["optional"] = json!(true);
        }
        json!({"configMapKeyRef": r})
    };
    let want = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {"backoffLimit": 100, "template": {
            "metadata": {"labels": {"app": "assisted-installer-controller"}},
            "spec": {
                "containers": [{
                    "name": NAME,
                    "image": "quay.io/ai/controller:1",
                    "imagePullPolicy": "IfNotPresent",
                    "env": [
                        {"name": "CLUSTER_ID", "valueFrom": key("cluster-id", false)},
                        {"name": "INVENTORY_URL", "valueFrom": key("inventory-url", false)},
                        {"name": "CA_CERT_PATH", "valueFrom": key("ca-cert-path", true)},
                        {"name": "SKIP_CERT_VERIFICATION", "valueFrom": key("skip-cert-verification", true)},
                        {"name": "OPENSHIFT_VERSION", "value": "4.17"},
                        {"name": "NOTIFY_NUM_REBOOTS", "value": "false"},
                        {"name": "CONTROL_PLANE_COUNT", "valueFrom": key("control-plane-count", true)},
                        {"name": "CHECK_CLUSTER_VERSION", "valueFrom": key("check-cluster-version", true)},
                        {"name": "MUST_GATHER_IMAGE", "valueFrom": key("must-gather-image", true)},
                    ],
                    "volumeMounts": [
                        {"name": "host-pki", "mountPath": "/etc/pki"},
                        {"name": "var-run-resolv", "mountPath": "/tmp/var-run-resolv.conf"},
                        {"name": "host-resolv", "mountPath": "/tmp/host-resolv.conf"},
                        {"name": "controller-token", "mountPath": "/etc/assisted-installer-controller"},
                    ],
                }],
                "restartPolicy": "OnFailure",
                "hostNetwork": true,
                "serviceAccountName": NAME,
                "nodeSelector": {"node-role.kubernetes.io/master": ""},
                "tolerations": [
                    {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"}
                ],
                "hostAliases": [{"ip": "192.0.2.5", "hostnames": ["assisted-api.local.openshift.io"]}],
                "volumes": [
                    {"name": "host-pki", "hostPath": {"path": "/etc/pki"}},
                    {"name": "var-run-resolv", "hostPath": {"path": "/var/run/NetworkManager/resolv.conf"}},
                    {"name": "host-resolv", "hostPath": {"path": "/etc/resolv.conf"}},
                    {"name": "controller-token", "secret": {
                        "secretName": "assisted-installer-controller-secret",
                        "items": [{"key": "pull-secret-token", "path": "token", "mode": 256}],
                    }},
                ],
            },
        }},
    });
    let s = settings(false);
    assert_eq!(read(&s, JOB_FILE), want);
    // Every key the environment reads is one the ConfigMap has.
    let cm = read(&s, CONFIG_MAP_FILE);
    for var in want
        .pointer("/spec/template/spec/containers/0/env")
        .unwrap()
        .as_array()
        .unwrap()
    {
        if let Some(k) = var.pointer("/valueFrom/configMapKeyRef/key") {
            assert!(cm["data"].get(k.as_str().unwrap()).is_some(), "{k}");
        }
    }
}

/// Single node, a CA file and the service IPs each change the Job of `the_multi_node_job_is_gos`
/// in its volumes, tolerations and host aliases only.
#[test]
fn single_node_ca_file_and_service_ips_change_the_pod() {
    let single_node = |s: &mut (InstallerConfig, bool)| *s = settings(true);
    let ca_file = |s: &mut (InstallerConfig, bool)| s.0.cacert = Some("/etc/ca.pem".into());
    let sno_ca_file = |s: &mut (InstallerConfig, bool)| {
        *s = settings(true);
        s.0.cacert = Some("/etc/ca.pem".into());
    };
    let two_ips = |s: &mut (InstallerConfig, bool)| s.0.service_ips.push_str(", 2001:db8::5,");
    let no_ip = |s: &mut (InstallerConfig, bool)| s.0.service_ips = " ,".into();
    let secrets = (
        "bootstrap-secrets",
        "/tmp/bootstrap-secrets",
        "/etc/kubernetes/bootstrap-secrets",
    );
    let ca = ("ca-cert", "/etc/ca.pem", "/etc/ca.pem");
    let sno_tolerations = [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/network-unavailable",
    ];
    let cases: [(Change, Vec<_>, &[&str], &[&str]); 5] = [
        (
            &single_node,
            vec![secrets],
            &sno_tolerations,
            &["192.0.2.5"],
        ),
        (&ca_file, vec![ca], &[], &["192.0.2.5"]),
        (
            &sno_ca_file,
            vec![secrets, ca],
            &sno_tolerations,
            &["192.0.2.5"],
        ),
        (&two_ips, vec![], &[], &["192.0.2.5", "2001:db8::5"]),
        (&no_ip, vec![], &[], &[]),
    ];
    let base = read(&settings(false), JOB_FILE);
    for (i, (change, mounts, tolerations, ips)) in cases.into_iter().enumerate() {
        let mut s = settings(false);
        change(&mut s);
        let mut want = base.clone();
        let pod = want.pointer_mut("/spec/template/spec").unwrap();
        for (name, path, host) in mounts {
            let container = &mut pod["containers"][0]["volumeMounts"];
            container
                .as_array_mut()
                .unwrap()
                .push(json!({"name": name, "mountPath": path}));
            let volume = json!({"name": name, "hostPath": {"path": host}});
            pod["volumes"].as_array_mut().unwrap().push(volume);
        }
        for key in tolerations {
            let toleration = json!({"key": key, "operator": "Exists", "effect": "NoSchedule"});
            pod["tolerations"].as_array_mut().unwrap().push(toleration);
        }
        let aliases = ips.iter();
        pod["hostAliases"] = aliases
            .map(|ip| json!({"ip": ip, "hostnames": [SERVICE_HOSTNAME]}))
            .collect();
        if ips.is_empty() {
            pod.as_object_mut().unwrap().remove("hostAliases");
        }
        assert_eq!(read(&s, JOB_FILE), want, "case {i}");
    }
}

#[test]
fn the_rendered_role_has_the_go_rules_in_order_with_the_last_narrowed() {
    let role = read(&settings(false), ROLE_FILE);
    assert_eq!(
        role["metadata"],
        json!({"name": NAME, "namespace": NAMESPACE})
    );
    let rules = role["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 25);
    let at = |i: usize| rules[i - 1].clone();
    assert_eq!(
        at(1),
        json!({"apiGroups": [""], "resources": ["pods", "configmaps", "pods/log"],
            "verbs": ["get", "list", "watch"]})
    );
    assert_eq!(
        at(13),
        json!({"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
            "resourceNames": ["kubernetes.io/kube-apiserver-client-kubelet",
                "kubernetes.io/kubelet-serving"],
            "verbs": ["approve"]})
    );
    assert_eq!(
        at(25),
        json!({"apiGroups": ["machineconfiguration.openshift.io"],
            "resources": ["machineconfigpools"], "verbs": ["patch", "get"]}),
        "the last rule grants MachineConfigPools only"
    );
    let named: Vec<usize> = (1..=25)
        .filter(|&i| at(i).get("resourceNames").is_some())
        .collect();
    assert_eq!(named, [11, 13, 24]);
    // No wildcard anywhere (every other manifest is compared whole in the tests above).
    for (i, rule) in rules.iter().enumerate() {
        assert!(!rule.to_string().contains('*'), "rule {}: {rule}", i + 1);
        assert!(rule.get("nonResourceURLs").is_none(), "rule {}", i + 1);
        for key in ["apiGroups", "resources", "verbs"] {
            let list = rule[key].as_array().unwrap();
            assert!(!list.is_empty(), "rule {} has no {key}", i + 1);
        }
    }
}
