//! The manifests as cluster-bootstrap reads them: the ConfigMap, Secret, namespace, RBAC and
//! network policy, the Job, and the ClusterRole's rules.

use super::settings::NAME;
use super::*;
use serde_json::{json, Value};

fn settings(sno: bool) -> ControllerSettings {
    ControllerSettings {
        cluster_id: "c-1".into(),
        inventory_url: "https://svc:8090".into(),
        skip_cert_verification: false,
        ca_cert_path: String::new(),
        check_cluster_version: true,
        control_plane_count: if sno { 1 } else { 3 },
        must_gather_image: r#"{"ocp":"quay.io/mg:1"}"#.into(),
        controller_image: "quay.io/ai/controller:1".into(),
        openshift_version: "4.17".into(),
        notify_num_reboots: false,
        service_ips: vec!["192.0.2.5".into()],
        token: "s3cr3t\"token".into(),
        single_node: sno,
    }
}

/// The manifest `name` rendered with `s`, as YAML read into an untyped tree, so that a
/// number or a boolean where a string belongs shows (`"3"` is not `3`).
fn read_with(s: &ControllerSettings, name: &str) -> Value {
    let (_, text) = manifests(s)
        .unwrap()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no manifest {name}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"))
}

fn read(sno: bool, name: &str) -> Value {
    read_with(&settings(sno), name)
}

#[test]
fn config_map_values_read_back_as_strings() {
    let cm = read(false, CONFIG_MAP_FILE);
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(
        cm["metadata"],
        json!({"name": "assisted-installer-controller-config", "namespace": NAMESPACE,
            "labels": {"app": "assisted-installer-controller"}})
    );
    let data = &cm["data"];
    assert_eq!(data["cluster-id"], json!("c-1"));
    assert_eq!(data["inventory-url"], json!("https://svc:8090"));
    assert_eq!(data["control-plane-count"], json!("3"));
    assert_eq!(data["skip-cert-verification"], json!("false"));
    assert_eq!(data["check-cluster-version"], json!("true"));
    assert_eq!(data["ca-cert-path"], json!(""));
    assert_eq!(
        data["must-gather-image"],
        json!(r#"{"ocp":"quay.io/mg:1"}"#)
    );
    assert_eq!(data.as_object().unwrap().len(), 7);
}

#[test]
fn secret_keeps_the_token_verbatim_and_debug_hides_it() {
    let s = settings(false);
    let secret = read(false, SECRET_FILE);
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(
        secret["metadata"],
        json!({"name": "assisted-installer-controller-secret", "namespace": NAMESPACE,
            "labels": {"app": "assisted-installer-controller"}})
    );
    assert_eq!(
        secret["stringData"],
        json!({"pull-secret-token": "s3cr3t\"token"})
    );
    assert!(!format!("{s:?}").contains("s3cr3t"));
}

#[test]
fn namespace_has_exactly_the_pod_security_labels() {
    let ns = read(false, NAMESPACE_FILE);
    assert_eq!(ns["apiVersion"], "v1");
    assert_eq!(ns["kind"], "Namespace");
    assert_eq!(
        ns["metadata"],
        json!({"name": NAMESPACE, "labels": {
            "security.openshift.io/scc.podSecurityLabelSync": "false",
            "pod-security.kubernetes.io/enforce": "privileged",
            "pod-security.kubernetes.io/audit": "privileged",
            "pod-security.kubernetes.io/warn": "privileged",
        }})
    );
    assert!(ns.get("spec").is_none());
}

#[test]
fn service_account_and_binding() {
    let sa = read(false, SERVICE_ACCOUNT_FILE);
    assert_eq!(sa["kind"], "ServiceAccount");
    assert_eq!(
        sa["metadata"],
        json!({"name": NAME, "namespace": NAMESPACE})
    );
    let binding = read(false, ROLE_BINDING_FILE);
    assert_eq!(binding["apiVersion"], "rbac.authorization.k8s.io/v1");
    assert_eq!(binding["kind"], "ClusterRoleBinding");
    assert_eq!(
        binding["metadata"],
        json!({"name": NAME, "namespace": NAMESPACE})
    );
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}])
    );
}

#[test]
fn network_policy_has_no_spec() {
    let policy = read(false, NETWORK_POLICY_FILE);
    assert_eq!(
        policy,
        json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "assisted-installer-network-policy", "namespace": NAMESPACE},
        })
    );
}

#[test]
fn every_manifest_is_written_with_a_private_secret() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    render_manifests(dir.path(), &settings(false)).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            CONFIG_MAP_FILE,
            NETWORK_POLICY_FILE,
            NAMESPACE_FILE,
            JOB_FILE,
            ROLE_BINDING_FILE,
            ROLE_FILE,
            SERVICE_ACCOUNT_FILE,
            SECRET_FILE,
        ]
    );
    let mode = |name: &str| {
        std::fs::metadata(dir.path().join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(SECRET_FILE), 0o600);
    // A rerun replaces the files, and the Secret stays private.
    render_manifests(dir.path(), &settings(true)).unwrap();
    assert_eq!(mode(SECRET_FILE), 0o600);
}

// The Job.

fn rendered(s: &ControllerSettings) -> Value {
    read_with(s, JOB_FILE)
}

fn pod(job: &Value) -> &Value {
    &job["spec"]["template"]["spec"]
}

/// mountPath → the volume it mounts.
fn mounted(job: &Value) -> Vec<(String, Value)> {
    let pod = pod(job);
    let volumes = pod["volumes"].as_array().unwrap();
    pod["containers"][0]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(
                m.as_object().unwrap().len(),
                2,
                "only name and mountPath: {m}"
            );
            let volume = volumes
                .iter()
                .find(|v| v["name"] == m["name"])
                .unwrap_or_else(|| panic!("no volume for {m}"))
                .clone();
            let mut source = volume.as_object().unwrap().clone();
            source.remove("name");
            (
                m["mountPath"].as_str().unwrap().to_string(),
                Value::Object(source),
            )
        })
        .collect()
}

fn host(path: &str) -> Value {
    json!({"hostPath": {"path": path}})
}

fn token() -> Value {
    json!({"secret": {"secretName": "assisted-installer-controller-secret",
        "items": [{"key": "pull-secret-token", "path": "token", "mode": 256}]}})
}

#[test]
fn job_level_fields_match_go() {
    let job = rendered(&settings(false));
    assert_eq!(job["apiVersion"], "batch/v1");
    assert_eq!(job["kind"], "Job");
    assert_eq!(
        job["metadata"],
        json!({"name": NAME, "namespace": NAMESPACE})
    );
    let spec = job["spec"].as_object().unwrap();
    assert_eq!(spec["backoffLimit"], json!(100));
    assert_eq!(spec.len(), 2, "backoffLimit and template only: {spec:?}");
    assert_eq!(
        job["spec"]["template"]["metadata"],
        json!({"labels": {"app": "assisted-installer-controller"}})
    );
    let pod = pod(&job);
    assert_eq!(pod["restartPolicy"], "OnFailure");
    assert_eq!(pod["hostNetwork"], json!(true));
    assert_eq!(pod["serviceAccountName"], NAME);
    assert_eq!(
        pod["nodeSelector"],
        json!({"node-role.kubernetes.io/master": ""})
    );
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"}])
    );
    assert_eq!(
        pod["hostAliases"],
        json!([{"ip": "192.0.2.5", "hostnames": ["assisted-api.local.openshift.io"]}])
    );
    let container = &pod["containers"][0];
    assert_eq!(container["name"], NAME);
    assert_eq!(container["image"], "quay.io/ai/controller:1");
    assert_eq!(container["imagePullPolicy"], "IfNotPresent");
    for absent in ["command", "args", "resources", "securityContext"] {
        assert!(container.get(absent).is_none(), "{absent}: {container}");
    }
}

#[test]
fn env_comes_from_the_config_map_and_two_literals() {
    let job = rendered(&settings(false));
    let key = |k: &str, optional: bool| {
        let mut r = json!({"name": "assisted-installer-controller-config", "key": k});
        if optional {
            r["optional"] = json!(true);
        }
        json!({"configMapKeyRef": r})
    };
    let want = json!([
        {"name": "CLUSTER_ID", "valueFrom": key("cluster-id", false)},
        {"name": "INVENTORY_URL", "valueFrom": key("inventory-url", false)},
        {"name": "CA_CERT_PATH", "valueFrom": key("ca-cert-path", true)},
        {"name": "SKIP_CERT_VERIFICATION", "valueFrom": key("skip-cert-verification", true)},
        {"name": "OPENSHIFT_VERSION", "value": "4.17"},
        {"name": "NOTIFY_NUM_REBOOTS", "value": "false"},
        {"name": "CONTROL_PLANE_COUNT", "valueFrom": key("control-plane-count", true)},
        {"name": "CHECK_CLUSTER_VERSION", "valueFrom": key("check-cluster-version", true)},
        {"name": "MUST_GATHER_IMAGE", "valueFrom": key("must-gather-image", true)},
    ]);
    assert_eq!(pod(&job)["containers"][0]["env"], want);
    // Every key read is one the ConfigMap has.
    let cm = read_with(&settings(false), CONFIG_MAP_FILE);
    for var in want.as_array().unwrap() {
        if let Some(k) = var.pointer("/valueFrom/configMapKeyRef/key") {
            assert!(cm["data"].get(k.as_str().unwrap()).is_some(), "{k}");
        }
    }
}

#[test]
fn multi_node_mounts_pki_resolv_files_and_the_token() {
    let job = rendered(&settings(false));
    assert_eq!(
        mounted(&job),
        vec![
            ("/etc/pki".to_string(), host("/etc/pki")),
            (
                "/tmp/var-run-resolv.conf".to_string(),
                host("/var/run/NetworkManager/resolv.conf")
            ),
            (
                "/tmp/host-resolv.conf".to_string(),
                host("/etc/resolv.conf")
            ),
            ("/etc/assisted-installer-controller".to_string(), token()),
        ]
    );
}

#[test]
fn single_node_adds_the_bootstrap_secrets_and_tolerations() {
    let job = rendered(&settings(true));
    let mounts = mounted(&job);
    assert_eq!(mounts.len(), 5);
    assert_eq!(
        mounts[4],
        (
            "/tmp/bootstrap-secrets".to_string(),
            host("/etc/kubernetes/bootstrap-secrets")
        )
    );
    let keys: Vec<&str> = pod(&job)["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["effect"], "NoSchedule");
            assert_eq!(t["operator"], "Exists");
            t["key"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        keys,
        [
            "node-role.kubernetes.io/master",
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/network-unavailable"
        ]
    );
}

#[test]
fn a_ca_cert_is_mounted_at_its_own_path_only_when_given() {
    let mut s = settings(false);
    s.ca_cert_path = "/etc/assisted/service-ca.pem".into();
    let mounts = mounted(&rendered(&s));
    assert_eq!(mounts.len(), 5);
    assert_eq!(
        mounts[4],
        (
            "/etc/assisted/service-ca.pem".to_string(),
            host("/etc/assisted/service-ca.pem")
        )
    );
    let mut sno = settings(true);
    sno.ca_cert_path = "/etc/ca.pem".into();
    let paths: Vec<String> = mounted(&rendered(&sno)).into_iter().map(|m| m.0).collect();
    assert_eq!(paths[4..], ["/tmp/bootstrap-secrets", "/etc/ca.pem"]);
}

#[test]
fn host_aliases_only_with_service_ips() {
    let mut s = settings(false);
    s.service_ips = vec!["192.0.2.5".into(), "2001:db8::5".into()];
    let job = rendered(&s);
    assert_eq!(
        pod(&job)["hostAliases"],
        json!([
            {"ip": "192.0.2.5", "hostnames": ["assisted-api.local.openshift.io"]},
            {"ip": "2001:db8::5", "hostnames": ["assisted-api.local.openshift.io"]}
        ])
    );
    s.service_ips.clear();
    assert!(pod(&rendered(&s)).get("hostAliases").is_none());
}

// The ClusterRole.

#[test]
fn the_rendered_role_has_the_go_rules_in_order_with_the_last_narrowed() {
    let role = read(false, ROLE_FILE);
    assert_eq!(role["apiVersion"], "rbac.authorization.k8s.io/v1");
    assert_eq!(role["kind"], "ClusterRole");
    assert_eq!(role["metadata"]["name"], NAME);
    assert_eq!(role["metadata"]["namespace"], NAMESPACE);
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
