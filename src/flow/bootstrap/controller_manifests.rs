//! The assisted-installer-controller manifests the bootstrap host drops into
//! /opt/openshift/manifests, so bootkube creates them with the cluster: a ConfigMap with the
//! controller's settings, a Secret with the agent token, the Job that runs the controller on a
//! master, and its namespace, service account, RBAC and network policy. Built as typed
//! Kubernetes objects and written as YAML, the form the Go installer's templates produce; the
//! ClusterRole's rules are in `controller_role`, the Job in `controller_job`.

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;
use std::path::Path;

use super::controller_job::job;
use super::controller_role::cluster_role;
use crate::config::InstallerConfig;
use crate::postinstall::ignition::{write_secret_file, Existing};

pub(crate) const NAMESPACE: &str = "assisted-installer";
pub(crate) const NAME: &str = "assisted-installer-controller";

/// What the manifests carry.
#[derive(Clone)]
pub(crate) struct ControllerSettings {
    pub cluster_id: String,
    pub inventory_url: String,
    pub skip_cert_verification: bool,
    pub ca_cert_path: String,
    pub check_cluster_version: bool,
    pub control_plane_count: i64,
    pub must_gather_image: String,
    pub controller_image: String,
    pub openshift_version: String,
    pub notify_num_reboots: bool,
    pub service_ips: Vec<String>,
    pub token: String,
    pub single_node: bool,
}

impl std::fmt::Debug for ControllerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerSettings")
            .field("cluster_id", &self.cluster_id)
            .field("controller_image", &self.controller_image)
            .field("single_node", &self.single_node)
            .finish_non_exhaustive()
    }
}

impl ControllerSettings {
    pub(crate) fn from_config(cfg: &InstallerConfig, token: &str, single_node: bool) -> Self {
        ControllerSettings {
            cluster_id: cfg.cluster_id.clone(),
            inventory_url: cfg.url.clone(),
            skip_cert_verification: cfg.insecure,
            ca_cert_path: cfg
                .cacert
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            check_cluster_version: cfg.check_cluster_version,
            control_plane_count: cfg.control_plane_count,
            must_gather_image: cfg.must_gather_image.clone(),
            controller_image: cfg.controller_image.clone(),
            openshift_version: cfg.openshift_version.clone(),
            notify_num_reboots: cfg.notify_num_reboots,
            service_ips: cfg
                .service_ips
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            token: token.to_string(),
            single_node,
        }
    }
}

/// A name and namespace.
pub(super) fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        ..ObjectMeta::default()
    }
}

pub(super) fn strings<const N: usize>(pairs: [(&str, &str); N]) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `app: assisted-installer-controller`, on the ConfigMap, the Secret and the controller's pod.
pub(super) fn app_label() -> BTreeMap<String, String> {
    strings([("app", NAME)])
}

/// A name, the namespace and the app label.
fn labelled(name: &str) -> ObjectMeta {
    ObjectMeta {
        labels: Some(app_label()),
        ..meta(name, Some(NAMESPACE))
    }
}

/// The controller's settings, read by the Job's environment.
pub(crate) fn config_map(s: &ControllerSettings) -> ConfigMap {
    ConfigMap {
        metadata: labelled(CONFIG_MAP_NAME),
        data: Some(strings([
            ("cluster-id", &s.cluster_id),
            ("inventory-url", &s.inventory_url),
            (
                "skip-cert-verification",
                &s.skip_cert_verification.to_string(),
            ),
            ("ca-cert-path", &s.ca_cert_path),
            (
                "check-cluster-version",
                &s.check_cluster_version.to_string(),
            ),
            ("control-plane-count", &s.control_plane_count.to_string()),
            ("must-gather-image", &s.must_gather_image),
        ])),
        ..ConfigMap::default()
    }
}

/// The agent token, mounted into the controller as a file (not an environment variable, which
/// would show in the pod's spec).
pub(crate) fn secret(s: &ControllerSettings) -> Secret {
    Secret {
        metadata: labelled(SECRET_NAME),
        type_: Some("Opaque".into()),
        string_data: Some(strings([("pull-secret-token", &s.token)])),
        ..Secret::default()
    }
}

/// Privileged: the controller's pod uses the host network and host paths. Pod-security label
/// syncing is off, so that OpenShift does not lower the level again.
pub(crate) fn namespace() -> Namespace {
    let privileged = "privileged";
    Namespace {
        metadata: ObjectMeta {
            labels: Some(strings([
                ("security.openshift.io/scc.podSecurityLabelSync", "false"),
                ("pod-security.kubernetes.io/enforce", privileged),
                ("pod-security.kubernetes.io/audit", privileged),
                ("pod-security.kubernetes.io/warn", privileged),
            ])),
            ..meta(NAMESPACE, None)
        },
        ..Namespace::default()
    }
}

pub(crate) fn service_account() -> ServiceAccount {
    ServiceAccount {
        metadata: meta(NAME, Some(NAMESPACE)),
        ..ServiceAccount::default()
    }
}

/// Binds the ClusterRole to the service account. Like Go's, it carries a namespace although
/// cluster-scoped (the API server ignores it).
pub(crate) fn cluster_role_binding() -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(NAME, Some(NAMESPACE)),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: NAME.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: NAME.into(),
            namespace: Some(NAMESPACE.into()),
            ..Subject::default()
        }]),
    }
}

/// No spec at all, as in Go: the API defaults it to every pod of the namespace and policy type
/// Ingress with no rule, which denies ingress to the namespace's pods that are not on the host
/// network. The controller is on the host network and only calls out, so it is not affected;
/// the policy is there so that the namespace has one.
pub(crate) fn network_policy() -> NetworkPolicy {
    NetworkPolicy {
        metadata: meta("assisted-installer-network-policy", Some(NAMESPACE)),
        spec: None,
    }
}

pub(super) const CONFIG_MAP_NAME: &str = "assisted-installer-controller-config";
pub(super) const SECRET_NAME: &str = "assisted-installer-controller-secret";

// The file names of Go's deploy directory and templates (cluster-bootstrap applies whatever is
// in the directory; keeping the names keeps the logs and the must-gathers comparable).
pub(super) const NAMESPACE_FILE: &str = "assisted-installer-controller-nm.yaml";
pub(super) const SERVICE_ACCOUNT_FILE: &str = "assisted-installer-controller-sa.yaml";
pub(super) const ROLE_FILE: &str = "assisted-installer-controller-role.yaml";
pub(super) const ROLE_BINDING_FILE: &str = "assisted-installer-controller-role-binding.yaml";
pub(super) const NETWORK_POLICY_FILE: &str = "assisted-installer-controller-network-policy.yaml";
pub(super) const CONFIG_MAP_FILE: &str = "assisted-installer-controller-cm.yaml";
/// The manifest holding the token.
pub(super) const SECRET_FILE: &str = "assisted-installer-controller-secret.yaml";
pub(super) const JOB_FILE: &str = "assisted-installer-controller-pod.yaml";

/// Every manifest as YAML (what cluster-bootstrap reads from the manifests directory), by file
/// name.
pub(crate) fn manifests(s: &ControllerSettings) -> Result<Vec<(&'static str, String)>> {
    fn yaml<T: serde::Serialize>(name: &'static str, object: &T) -> Result<(&'static str, String)> {
        let text = serde_saphyr::to_string(object).with_context(|| format!("rendering {name}"))?;
        Ok((name, text))
    }
    Ok(vec![
        yaml(NAMESPACE_FILE, &namespace())?,
        yaml(SERVICE_ACCOUNT_FILE, &service_account())?,
        yaml(ROLE_FILE, &cluster_role())?,
        yaml(ROLE_BINDING_FILE, &cluster_role_binding())?,
        yaml(NETWORK_POLICY_FILE, &network_policy())?,
        yaml(CONFIG_MAP_FILE, &config_map(s))?,
        yaml(SECRET_FILE, &secret(s))?,
        yaml(JOB_FILE, &job(s))?,
    ])
}

/// Write every manifest into `dir` (created if needed); the Secret is private from the start.
pub(crate) fn render_manifests(dir: &Path, s: &ControllerSettings) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, text) in manifests(s)? {
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

/// The manifests as cluster-bootstrap reads them, for the tests of this file and of the Job's
/// and the role's.
#[cfg(test)]
pub(super) mod testing {
    use super::*;
    use serde_json::Value;

    pub(crate) fn settings(sno: bool) -> ControllerSettings {
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
    pub(crate) fn read_with(s: &ControllerSettings, name: &str) -> Value {
        let (_, text) = manifests(s)
            .unwrap()
            .into_iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no manifest {name}"));
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"))
    }

    pub(crate) fn read(sno: bool, name: &str) -> Value {
        read_with(&settings(sno), name)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{read, settings};
    use super::*;
    use serde_json::json;

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
}
