//! The assisted-installer-controller manifests the bootstrap host drops into
//! /opt/openshift/manifests, so bootkube creates them with the cluster: a ConfigMap with the
//! controller's settings, a Secret with the agent token, the Job that runs the controller on a
//! master, and its namespace, service account, RBAC and network policy. Built as typed
//! Kubernetes objects and written as YAML, the form the Go installer's templates produce; the
//! ClusterRole's rules are in `role`, the Job in `job`, what they are built from in `settings`.
//! The bootstrap flow renders them (`PrepareController` in Go).

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::path::Path;

use crate::postinstall::ignition::{write_secret_file, Existing};
use job::job;
use role::cluster_role;
pub(crate) use settings::ControllerSettings;
use settings::{app_label, meta, strings, CONFIG_MAP_NAME, NAME, NAMESPACE, SECRET_NAME};

mod job;
pub(crate) mod role;
mod settings;

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

#[cfg(test)]
mod tests;
