//! The assisted-installer-controller manifests the bootstrap host drops into
//! /opt/openshift/manifests, so bootkube creates them with the cluster: a ConfigMap with the
//! controller's settings, a Secret with the agent token, the Job that runs the controller on a
//! master, and its namespace, service account, RBAC and network policy. Written as data, as the
//! Go installer keeps them (YAML templates under the same file names); the ClusterRole's rules
//! are in `role`. The bootstrap flow renders them (`PrepareController` in Go).

use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::Path;

use crate::config::InstallerConfig;
use crate::openshift::{CONTROLLER_JOB as NAME, CONTROLLER_NAMESPACE as NAMESPACE};
use crate::postinstall::ignition::{write_secret_file, Existing};

pub(crate) mod role;

const CONFIG_MAP_NAME: &str = "assisted-installer-controller-config";
const SECRET_NAME: &str = "assisted-installer-controller-secret";
/// The name the service IPs are given in the pod's /etc/hosts.
const SERVICE_HOSTNAME: &str = "assisted-api.local.openshift.io";
/// Owner-read only: the token is the agent's credential.
const TOKEN_MODE: i32 = 0o400;

// The file names of Go's deploy directory and templates (cluster-bootstrap applies whatever is
// in the directory; keeping the names keeps the logs and the must-gathers comparable).
const NAMESPACE_FILE: &str = "assisted-installer-controller-nm.yaml";
const SERVICE_ACCOUNT_FILE: &str = "assisted-installer-controller-sa.yaml";
const ROLE_FILE: &str = "assisted-installer-controller-role.yaml";
const ROLE_BINDING_FILE: &str = "assisted-installer-controller-role-binding.yaml";
const NETWORK_POLICY_FILE: &str = "assisted-installer-controller-network-policy.yaml";
const CONFIG_MAP_FILE: &str = "assisted-installer-controller-cm.yaml";
/// The manifest holding the token.
const SECRET_FILE: &str = "assisted-installer-controller-secret.yaml";
const JOB_FILE: &str = "assisted-installer-controller-pod.yaml";

/// A name in the controller's namespace, with `app: assisted-installer-controller` when
/// `labelled`. Like Go's, the cluster-scoped RBAC objects carry the namespace too (the API server
/// ignores it).
fn metadata(name: &str, labelled: bool) -> Value {
    let mut meta = json!({"name": name, "namespace": NAMESPACE});
    if labelled {
        meta["labels"] = json!({"app": NAME});
    }
    meta
}

/// The Job's environment, in Go's order: each variable from a ConfigMap key (required or
/// optional), but for two literal values.
fn env(cfg: &InstallerConfig) -> Value {
    let from_config = |name: &str, key: &str, optional: bool| {
        let mut source = json!({"name": CONFIG_MAP_NAME, "key": key});
        if optional {
            source["optional"] = json!(true);
        }
        json!({"name": name, "valueFrom": {"configMapKeyRef": source}})
    };
    json!([
        from_config("CLUSTER_ID", "cluster-id", false),
        from_config("INVENTORY_URL", "inventory-url", false),
        from_config("CA_CERT_PATH", "ca-cert-path", true),
        from_config("SKIP_CERT_VERIFICATION", "skip-cert-verification", true),
        {"name": "OPENSHIFT_VERSION", "value": cfg.openshift_version},
        {"name": "NOTIFY_NUM_REBOOTS", "value": cfg.notify_num_reboots.to_string()},
        from_config("CONTROL_PLANE_COUNT", "control-plane-count", true),
        from_config("CHECK_CLUSTER_VERSION", "check-cluster-version", true),
        from_config("MUST_GATHER_IMAGE", "must-gather-image", true),
    ])
}

/// The Job: the controller on a master, on the host network, with its settings from the
/// ConfigMap, the token as a file from the Secret, and the host files it reads. Its pod carries
/// `app: assisted-installer-controller`; the Job controller adds `job-name:
/// assisted-installer-controller`, by which the bootstrap finds the pod.
fn job(cfg: &InstallerConfig, single_node: bool) -> Value {
    let ca_cert_path = ca_cert_path(cfg);
    // A host path has no `type`: the kubelet checks nothing, as in Go's template.
    let host = |path: &str| json!({"hostPath": {"path": path}});
    // (volume name, mount path, volume source)
    let mut mounts = vec![
        // The host's trust store: the system pool then includes CAs the cluster added.
        ("host-pki", "/etc/pki", host("/etc/pki")),
        // Logged by the controller when it fails, to debug DNS.
        (
            "var-run-resolv",
            "/tmp/var-run-resolv.conf",
            host("/var/run/NetworkManager/resolv.conf"),
        ),
        (
            "host-resolv",
            "/tmp/host-resolv.conf",
            host("/etc/resolv.conf"),
        ),
        (
            "controller-token",
            "/etc/assisted-installer-controller",
            json!({"secret": {"secretName": SECRET_NAME, "items": [
                {"key": "pull-secret-token", "path": "token", "mode": TOKEN_MODE}
            ]}}),
        ),
    ];
    let mut tolerations = vec!["node-role.kubernetes.io/master"];
    if single_node {
        // The controller starts before the node is Ready (no network yet) and reaches the API
        // with the bootstrap kubeconfig (`/tmp/bootstrap-secrets/kubeconfig`).
        let secrets = host("/etc/kubernetes/bootstrap-secrets");
        mounts.push(("bootstrap-secrets", "/tmp/bootstrap-secrets", secrets));
        tolerations.extend([
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/network-unavailable",
        ]);
    }
    if !ca_cert_path.is_empty() {
        // CA_CERT_PATH names a host file: the controller reads it at the same path.
        mounts.push(("ca-cert", &ca_cert_path, host(&ca_cert_path)));
    }
    let volume_mounts: Vec<Value> = mounts
        .iter()
        .map(|(name, path, _)| json!({"name": name, "mountPath": path}))
        .collect();
    let volumes: Vec<Value> = mounts
        .into_iter()
        .map(|(name, _, mut volume)| {
            volume["name"] = json!(name);
            volume
        })
        .collect();
    let tolerations: Vec<Value> = tolerations
        .into_iter()
        .map(|key| json!({"key": key, "operator": "Exists", "effect": "NoSchedule"}))
        .collect();
    let mut pod = json!({
        "containers": [{
            "name": NAME,
            "image": cfg.controller_image,
            "imagePullPolicy": "IfNotPresent",
            "env": env(cfg),
            "volumeMounts": volume_mounts,
        }],
        "restartPolicy": "OnFailure",
        "hostNetwork": true,
        "nodeSelector": {"node-role.kubernetes.io/master": ""},
        "serviceAccountName": NAME,
        "tolerations": tolerations,
        "volumes": volumes,
    });
    // The controller reaches the service by the name its URL may use, at each service IP.
    let aliases: Vec<Value> = (cfg.service_ips.split(',').map(str::trim))
        .filter(|ip| !ip.is_empty())
        .map(|ip| json!({"ip": ip, "hostnames": [SERVICE_HOSTNAME]}))
        .collect();
    if !aliases.is_empty() {
        pod["hostAliases"] = aliases.into();
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(NAME, false),
        "spec": {
            // The Job's restarts of a failing controller, as Go's.
            "backoffLimit": 100,
            "template": {"metadata": {"labels": {"app": NAME}}, "spec": pod},
        },
    })
}

/// `--cacert` as the ConfigMap's `ca-cert-path` ("" for none).
fn ca_cert_path(cfg: &InstallerConfig) -> String {
    let path = cfg.cacert.as_ref().map(|p| p.display().to_string());
    path.unwrap_or_default()
}

/// Every manifest by file name (what cluster-bootstrap reads from the manifests directory).
fn documents(cfg: &InstallerConfig, token: &str, single_node: bool) -> Vec<(&'static str, Value)> {
    let privileged = "privileged";
    vec![
        // Privileged: the controller's pod uses the host network and host paths. Pod-security
        // label syncing is off, so that OpenShift does not lower the level again.
        (
            NAMESPACE_FILE,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": NAMESPACE,
                "labels": {
                    "security.openshift.io/scc.podSecurityLabelSync": "false",
                    "pod-security.kubernetes.io/enforce": privileged,
                    "pod-security.kubernetes.io/audit": privileged,
                    "pod-security.kubernetes.io/warn": privileged,
                },
            }}),
        ),
        (
            SERVICE_ACCOUNT_FILE,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(NAME, false)}),
        ),
        (ROLE_FILE, role::cluster_role(metadata(NAME, false))),
        (
            ROLE_BINDING_FILE,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": metadata(NAME, false),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
                "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
            }),
        ),
        // No spec at all, as in Go: the API defaults it to every pod of the namespace and policy
        // type Ingress with no rule, which denies ingress to the namespace's pods that are not on
        // the host network. The controller is on the host network and only calls out, so it is
        // not affected; the policy is there so that the namespace has one.
        (
            NETWORK_POLICY_FILE,
            json!({
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": metadata("assisted-installer-network-policy", false),
            }),
        ),
        // The settings the Job's environment reads, all strings.
        (
            CONFIG_MAP_FILE,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(CONFIG_MAP_NAME, true),
                "data": {
                    "cluster-id": cfg.cluster_id,
                    "inventory-url": cfg.url,
                    "skip-cert-verification": cfg.insecure.to_string(),
                    "ca-cert-path": ca_cert_path(cfg),
                    "check-cluster-version": cfg.check_cluster_version.to_string(),
                    "control-plane-count": cfg.control_plane_count.to_string(),
                    "must-gather-image": cfg.must_gather_image,
                },
            }),
        ),
        // The agent token, mounted into the controller as a file (not an environment variable,
        // which would show in the pod's spec).
        (
            SECRET_FILE,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata(SECRET_NAME, true),
                "type": "Opaque", "stringData": {"pull-secret-token": token}}),
        ),
        (JOB_FILE, job(cfg, single_node)),
    ]
}

/// Write every manifest of the controller of `cfg`'s cluster into `dir` (created if needed) as
/// YAML, with the agent `token` in the Secret, which is private from the start.
pub(crate) fn render_manifests(
    dir: &Path,
    cfg: &InstallerConfig,
    token: &str,
    single_node: bool,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, doc) in documents(cfg, token, single_node) {
        let text = serde_saphyr::to_string(&doc).with_context(|| format!("rendering {name}"))?;
        let path = dir.join(name);
        if name == SECRET_FILE {
            write_secret_file(&path, text.as_bytes(), Existing::Replace)
        } else {
            std::fs::write(&path, text).map_err(anyhow::Error::from)
        }
        .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
