//! The assisted-installer-controller manifests the bootstrap host drops into
//! /opt/openshift/manifests, so bootkube creates them with the cluster: a ConfigMap with the
//! controller's settings, a Secret with the agent token, the Job that runs the controller on a
//! master, and its namespace, service account, RBAC and network policy. Built as typed
//! Kubernetes objects and written as YAML, the form the Go installer's templates produce.

use anyhow::{Context, Result};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapKeySelector, Container, EnvVar, EnvVarSource, HostAlias,
    HostPathVolumeSource, KeyToPath, Namespace, PodSpec, PodTemplateSpec, Secret,
    SecretVolumeSource, ServiceAccount, Toleration, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use std::collections::BTreeMap;
use std::path::Path;

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
fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        ..ObjectMeta::default()
    }
}

fn strings<const N: usize>(pairs: [(&str, &str); N]) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The controller's settings, read by the Job's environment.
pub(crate) fn config_map(s: &ControllerSettings) -> ConfigMap {
    ConfigMap {
        metadata: meta(&format!("{NAME}-config"), Some(NAMESPACE)),
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

/// The agent token, mounted into the controller.
pub(crate) fn secret(s: &ControllerSettings) -> Secret {
    Secret {
        metadata: meta(&format!("{NAME}-secret"), Some(NAMESPACE)),
        type_: Some("Opaque".into()),
        string_data: Some(strings([("pull-secret-token", &s.token)])),
        ..Secret::default()
    }
}

fn toleration(key: &str) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Toleration::default()
    }
}

fn env_value(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

/// The Job running the controller on a master, on the host network.
pub(crate) fn job(s: &ControllerSettings) -> Job {
    let from_config = [
        ("CLUSTER_ID", "cluster-id"),
        ("INVENTORY_URL", "inventory-url"),
        ("SKIP_CERT_VERIFICATION", "skip-cert-verification"),
        ("CA_CERT_PATH", "ca-cert-path"),
        ("CHECK_CLUSTER_VERSION", "check-cluster-version"),
        ("CONTROL_PLANE_COUNT", "control-plane-count"),
        ("MUST_GATHER_IMAGE", "must-gather-image"),
    ];
    let mut env: Vec<EnvVar> = from_config
        .into_iter()
        .map(|(var, key)| EnvVar {
            name: var.into(),
            value_from: Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: format!("{NAME}-config"),
                    key: key.into(),
                    ..ConfigMapKeySelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        })
        .collect();
    env.extend([
        env_value("OPENSHIFT_VERSION", &s.openshift_version),
        env_value("NOTIFY_NUM_REBOOTS", &s.notify_num_reboots.to_string()),
        env_value("NAMESPACE", NAMESPACE),
    ]);
    let mut mounts = vec![VolumeMount {
        name: "token".into(),
        mount_path: "/etc/assisted-installer-controller".into(),
        read_only: Some(true),
        ..VolumeMount::default()
    }];
    let mut volumes = vec![Volume {
        name: "token".into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(format!("{NAME}-secret")),
            items: Some(vec![KeyToPath {
                key: "pull-secret-token".into(),
                path: "token".into(),
                ..KeyToPath::default()
            }]),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }];
    let mut tolerations = vec![toleration("node-role.kubernetes.io/master")];
    if s.single_node {
        // Single node: the controller starts before the node is Ready and needs the bootstrap
        // kubeconfig.
        mounts.push(VolumeMount {
            name: "bootstrap-secrets".into(),
            mount_path: "/tmp/bootstrap-secrets".into(),
            ..VolumeMount::default()
        });
        volumes.push(Volume {
            name: "bootstrap-secrets".into(),
            host_path: Some(HostPathVolumeSource {
                path: "/etc/kubernetes/bootstrap-secrets".into(),
                ..HostPathVolumeSource::default()
            }),
            ..Volume::default()
        });
        tolerations.push(toleration("node.kubernetes.io/not-ready"));
        tolerations.push(toleration("node.kubernetes.io/network-unavailable"));
    }
    let host_aliases = (!s.service_ips.is_empty()).then(|| {
        s.service_ips
            .iter()
            .map(|ip| HostAlias {
                ip: ip.clone(),
                hostnames: Some(vec!["assisted-api.local.openshift.io".into()]),
            })
            .collect()
    });
    Job {
        metadata: meta(NAME, Some(NAMESPACE)),
        spec: Some(JobSpec {
            backoff_limit: Some(100),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(strings([("job-name", NAME)])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(NAME.into()),
                    restart_policy: Some("OnFailure".into()),
                    host_network: Some(true),
                    node_selector: Some(strings([("node-role.kubernetes.io/master", "")])),
                    tolerations: Some(tolerations),
                    host_aliases,
                    containers: vec![Container {
                        name: NAME.into(),
                        image: Some(s.controller_image.clone()),
                        image_pull_policy: Some("IfNotPresent".into()),
                        env: Some(env),
                        volume_mounts: Some(mounts),
                        ..Container::default()
                    }],
                    volumes: Some(volumes),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

/// Privileged: the controller runs on the host network.
pub(crate) fn namespace() -> Namespace {
    let privileged = "privileged";
    Namespace {
        metadata: ObjectMeta {
            labels: Some(strings([
                ("pod-security.kubernetes.io/enforce", privileged),
                ("pod-security.kubernetes.io/audit", privileged),
                ("pod-security.kubernetes.io/warn", privileged),
                ("openshift.io/run-level", "0"),
            ])),
            annotations: Some(strings([("openshift.io/node-selector", "")])),
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

/// Cluster-wide: it approves CSRs, labels nodes, reads operators.
pub(crate) fn cluster_role() -> ClusterRole {
    let all = || Some(vec!["*".to_string()]);
    ClusterRole {
        metadata: meta(NAME, None),
        rules: Some(vec![
            PolicyRule {
                api_groups: all(),
                resources: all(),
                verbs: vec!["*".into()],
                ..PolicyRule::default()
            },
            PolicyRule {
                non_resource_urls: all(),
                verbs: vec!["*".into()],
                ..PolicyRule::default()
            },
        ]),
        ..ClusterRole::default()
    }
}

pub(crate) fn cluster_role_binding() -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: meta(NAME, None),
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

/// Lets the controller reach the API and the service.
pub(crate) fn network_policy() -> NetworkPolicy {
    NetworkPolicy {
        metadata: meta(NAME, Some(NAMESPACE)),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector::default()),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            egress: Some(vec![NetworkPolicyEgressRule::default()]),
            ingress: Some(vec![NetworkPolicyIngressRule::default()]),
        }),
    }
}

/// Every manifest as YAML (what cluster-bootstrap reads from the manifests directory), by file
/// name.
pub(crate) fn manifests(s: &ControllerSettings) -> Result<Vec<(&'static str, String)>> {
    fn yaml<T: serde::Serialize>(name: &'static str, object: &T) -> Result<(&'static str, String)> {
        let text = serde_saphyr::to_string(object).with_context(|| format!("rendering {name}"))?;
        Ok((name, text))
    }
    Ok(vec![
        yaml("assisted-installer-controller-nm.yaml", &namespace())?,
        yaml("assisted-installer-controller-sa.yaml", &service_account())?,
        yaml("assisted-installer-controller-role.yaml", &cluster_role())?,
        yaml(
            "assisted-installer-controller-rolebinding.yaml",
            &cluster_role_binding(),
        )?,
        yaml(
            "assisted-installer-controller-networkpolicy.yaml",
            &network_policy(),
        )?,
        yaml("assisted-installer-controller-cm.yaml", &config_map(s))?,
        yaml(SECRET_FILE, &secret(s))?,
        yaml("assisted-installer-controller-job.yaml", &job(s))?,
    ])
}

/// The manifest holding the token.
const SECRET_FILE: &str = "assisted-installer-controller-secret.yaml";

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
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn settings(sno: bool) -> ControllerSettings {
        ControllerSettings {
            cluster_id: "c-1".into(),
            inventory_url: "https://svc:8090".into(),
            skip_cert_verification: false,
            ca_cert_path: String::new(),
            check_cluster_version: true,
            control_plane_count: 3,
            must_gather_image: r#"{"ocp":"quay.io/mg:1"}"#.into(),
            controller_image: "quay.io/ai/controller:1".into(),
            openshift_version: "4.17".into(),
            notify_num_reboots: false,
            service_ips: vec!["192.0.2.5".into()],
            token: "s3cr3t\"token".into(),
            single_node: sno,
        }
    }

    /// The manifest `name` as cluster-bootstrap reads it: YAML into an untyped tree, so that a
    /// number or a boolean where a string belongs shows (`"3"` is not `3`).
    fn read(sno: bool, name: &str) -> Value {
        let (_, text) = manifests(&settings(sno))
            .unwrap()
            .into_iter()
            .find(|(n, _)| *n == name)
            .unwrap();
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"))
    }

    #[test]
    fn config_map_values_read_back_as_strings() {
        let cm = read(false, "assisted-installer-controller-cm.yaml");
        assert_eq!(cm["kind"], "ConfigMap");
        assert_eq!(
            cm["metadata"]["name"],
            "assisted-installer-controller-config"
        );
        let data = &cm["data"];
        assert_eq!(data["cluster-id"], json!("c-1"));
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
            secret["stringData"]["pull-secret-token"],
            json!("s3cr3t\"token")
        );
        assert!(!format!("{s:?}").contains("s3cr3t"));
    }

    #[test]
    fn job_has_the_image_env_and_aliases_and_sno_extras_only_on_sno() {
        let ha = read(false, "assisted-installer-controller-job.yaml");
        assert_eq!(ha["apiVersion"], "batch/v1");
        assert_eq!(ha["spec"]["backoffLimit"], json!(100));
        let pod = &ha["spec"]["template"]["spec"];
        assert_eq!(pod["hostNetwork"], json!(true));
        assert_eq!(
            pod["nodeSelector"]["node-role.kubernetes.io/master"],
            json!("")
        );
        let container = &pod["containers"][0];
        assert_eq!(container["image"], json!("quay.io/ai/controller:1"));
        let env = container["env"].as_array().unwrap();
        assert!(env.contains(&json!({"name": "OPENSHIFT_VERSION", "value": "4.17"})));
        assert!(env.contains(&json!({"name": "NOTIFY_NUM_REBOOTS", "value": "false"})));
        assert!(env.contains(&json!({"name": "CONTROL_PLANE_COUNT", "valueFrom": {
            "configMapKeyRef": {"name": "assisted-installer-controller-config", "key": "control-plane-count"}
        }})));
        assert_eq!(
            pod["hostAliases"],
            json!([{"ip": "192.0.2.5", "hostnames": ["assisted-api.local.openshift.io"]}])
        );
        let text = |v: &Value| v.to_string();
        assert!(!text(&ha).contains("bootstrap-secrets") && !text(&ha).contains("not-ready"));
        let sno = read(true, "assisted-installer-controller-job.yaml");
        assert!(
            text(&sno).contains("/etc/kubernetes/bootstrap-secrets")
                && text(&sno).contains("node.kubernetes.io/not-ready")
        );
        let mut no_ips = settings(false);
        no_ips.service_ips.clear();
        assert!(job(&no_ips)
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .host_aliases
            .is_none());
    }

    #[test]
    fn fixed_manifests_keep_their_content() {
        let ns = read(false, "assisted-installer-controller-nm.yaml");
        assert_eq!(
            ns["metadata"]["labels"]["openshift.io/run-level"],
            json!("0")
        );
        assert_eq!(
            ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
            "privileged"
        );
        assert_eq!(
            ns["metadata"]["annotations"]["openshift.io/node-selector"],
            json!("")
        );
        let role = read(false, "assisted-installer-controller-role.yaml");
        assert_eq!(
            role["rules"],
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]}
            ])
        );
        let binding = read(false, "assisted-installer-controller-rolebinding.yaml");
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}])
        );
        let policy = read(false, "assisted-installer-controller-networkpolicy.yaml");
        assert_eq!(
            policy["spec"],
            json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "egress": [{}], "ingress": [{}]})
        );
        let sa = read(false, "assisted-installer-controller-sa.yaml");
        assert_eq!(
            sa["metadata"],
            json!({"name": NAME, "namespace": NAMESPACE})
        );
    }

    #[test]
    fn every_manifest_is_written_with_a_private_secret() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        render_manifests(dir.path(), &settings(false)).unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 8, "{names:?}");
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
