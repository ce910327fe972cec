//! The assisted-installer-controller manifests the bootstrap host drops into
//! /opt/openshift/manifests, so bootkube creates them with the cluster: a ConfigMap with the
//! controller's settings, a Secret with the agent token, the Job that runs the controller on a
//! master, and its namespace, service account, RBAC and network policy. Hand-written YAML: every
//! value is emitted as a JSON string, which YAML reads verbatim.

use anyhow::{Context, Result};
use std::path::Path;

use crate::config::InstallerConfig;

pub const NAMESPACE: &str = "assisted-installer";
pub const NAME: &str = "assisted-installer-controller";

/// What the manifests carry.
#[derive(Clone)]
pub struct ControllerSettings {
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
    pub fn from_config(cfg: &InstallerConfig, token: &str, single_node: bool) -> Self {
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

/// A YAML scalar that reads back as exactly `s`.
fn q(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

pub fn config_map(s: &ControllerSettings) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {NAME}-config\n  namespace: {NAMESPACE}\ndata:\n  \
         cluster-id: {}\n  inventory-url: {}\n  skip-cert-verification: {}\n  ca-cert-path: {}\n  \
         check-cluster-version: {}\n  control-plane-count: {}\n  must-gather-image: {}\n",
        q(&s.cluster_id),
        q(&s.inventory_url),
        q(&s.skip_cert_verification.to_string()),
        q(&s.ca_cert_path),
        q(&s.check_cluster_version.to_string()),
        q(&s.control_plane_count.to_string()),
        q(&s.must_gather_image),
    )
}

pub fn secret(s: &ControllerSettings) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {NAME}-secret\n  namespace: {NAMESPACE}\ntype: Opaque\nstringData:\n  pull-secret-token: {}\n",
        q(&s.token)
    )
}

pub fn job(s: &ControllerSettings) -> String {
    let env_from_config = [
        ("CLUSTER_ID", "cluster-id"),
        ("INVENTORY_URL", "inventory-url"),
        ("SKIP_CERT_VERIFICATION", "skip-cert-verification"),
        ("CA_CERT_PATH", "ca-cert-path"),
        ("CHECK_CLUSTER_VERSION", "check-cluster-version"),
        ("CONTROL_PLANE_COUNT", "control-plane-count"),
        ("MUST_GATHER_IMAGE", "must-gather-image"),
    ];
    let mut env = String::new();
    for (var, key) in env_from_config {
        env.push_str(&format!(
            "        - name: {var}\n          valueFrom:\n            configMapKeyRef:\n              name: {NAME}-config\n              key: {key}\n"
        ));
    }
    env.push_str(&format!(
        "        - name: OPENSHIFT_VERSION\n          value: {}\n        - name: NOTIFY_NUM_REBOOTS\n          value: {}\n        - name: NAMESPACE\n          value: {NAMESPACE}\n",
        q(&s.openshift_version),
        q(&s.notify_num_reboots.to_string())
    ));
    let mut mounts = String::from(
        "        - name: token\n          mountPath: /etc/assisted-installer-controller\n          readOnly: true\n",
    );
    let mut volumes = format!("      - name: token\n        secret:\n          secretName: {NAME}-secret\n          items:\n          - key: pull-secret-token\n            path: token\n");
    let mut tolerations = String::from(
        "      - key: node-role.kubernetes.io/master\n        operator: Exists\n        effect: NoSchedule\n",
    );
    if s.single_node {
        // Single node: the controller starts before the node is Ready and needs the bootstrap
        // kubeconfig.
        mounts.push_str(
            "        - name: bootstrap-secrets\n          mountPath: /tmp/bootstrap-secrets\n",
        );
        volumes.push_str("      - name: bootstrap-secrets\n        hostPath:\n          path: /etc/kubernetes/bootstrap-secrets\n");
        tolerations.push_str(
            "      - key: node.kubernetes.io/not-ready\n        operator: Exists\n        effect: NoSchedule\n      \
             - key: node.kubernetes.io/network-unavailable\n        operator: Exists\n        effect: NoSchedule\n",
        );
    }
    let aliases = if s.service_ips.is_empty() {
        String::new()
    } else {
        let ips: Vec<String> = s.service_ips.iter().map(|ip| format!("        - ip: {}\n          hostnames:\n          - assisted-api.local.openshift.io\n", q(ip))).collect();
        format!("      hostAliases:\n{}", ips.concat())
    };
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {NAME}\n  namespace: {NAMESPACE}\nspec:\n  backoffLimit: 100\n  template:\n    metadata:\n      labels:\n        job-name: {NAME}\n    spec:\n      serviceAccountName: {NAME}\n      restartPolicy: OnFailure\n      hostNetwork: true\n      nodeSelector:\n        node-role.kubernetes.io/master: \"\"\n      tolerations:\n{tolerations}{aliases}      containers:\n      - name: {NAME}\n        image: {}\n        imagePullPolicy: IfNotPresent\n        env:\n{env}        volumeMounts:\n{mounts}      volumes:\n{volumes}",
        q(&s.controller_image)
    )
}

/// The fixed manifests: namespace (privileged, the controller runs on the host network),
/// service account, cluster-wide RBAC (it approves CSRs, labels nodes, reads operators) and a
/// network policy letting it reach the API and the service.
pub fn static_manifests() -> Vec<(&'static str, String)> {
    vec![
        (
            "assisted-installer-controller-nm.yaml",
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n  labels:\n    pod-security.kubernetes.io/enforce: privileged\n    pod-security.kubernetes.io/audit: privileged\n    pod-security.kubernetes.io/warn: privileged\n    openshift.io/run-level: \"0\"\n  annotations:\n    openshift.io/node-selector: \"\"\n"),
        ),
        (
            "assisted-installer-controller-sa.yaml",
            format!("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {NAME}\n  namespace: {NAMESPACE}\n"),
        ),
        (
            "assisted-installer-controller-role.yaml",
            format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {NAME}\nrules:\n- apiGroups: [\"*\"]\n  resources: [\"*\"]\n  verbs: [\"*\"]\n- nonResourceURLs: [\"*\"]\n  verbs: [\"*\"]\n"),
        ),
        (
            "assisted-installer-controller-rolebinding.yaml",
            format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {NAME}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: {NAME}\nsubjects:\n- kind: ServiceAccount\n  name: {NAME}\n  namespace: {NAMESPACE}\n"),
        ),
        (
            "assisted-installer-controller-networkpolicy.yaml",
            format!("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: {NAME}\n  namespace: {NAMESPACE}\nspec:\n  podSelector: {{}}\n  policyTypes:\n  - Ingress\n  - Egress\n  egress:\n  - {{}}\n  ingress:\n  - {{}}\n"),
        ),
    ]
}

/// Write every manifest into `dir` (created if needed). The Secret holds the token: 0600.
pub fn render_manifests(dir: &Path, s: &ControllerSettings) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut files = static_manifests();
    files.push(("assisted-installer-controller-cm.yaml", config_map(s)));
    files.push(("assisted-installer-controller-secret.yaml", secret(s)));
    files.push(("assisted-installer-controller-job.yaml", job(s)));
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        if name.ends_with("-secret.yaml") {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn config_map_quotes_every_value() {
        let cm = config_map(&settings(false));
        assert!(cm.contains("  cluster-id: \"c-1\"\n"), "{cm}");
        assert!(cm.contains("  control-plane-count: \"3\"\n"), "{cm}");
        assert!(
            cm.contains(r#"  must-gather-image: "{\"ocp\":\"quay.io/mg:1\"}""#),
            "{cm}"
        );
    }

    #[test]
    fn secret_escapes_the_token_and_debug_hides_it() {
        let s = settings(false);
        assert!(secret(&s).contains(r#"pull-secret-token: "s3cr3t\"token""#));
        assert!(!format!("{s:?}").contains("s3cr3t"));
    }

    #[test]
    fn job_has_the_image_env_and_aliases_and_sno_extras_only_on_sno() {
        let ha = job(&settings(false));
        assert!(ha.contains("image: \"quay.io/ai/controller:1\""), "{ha}");
        assert!(
            ha.contains("- name: OPENSHIFT_VERSION\n          value: \"4.17\""),
            "{ha}"
        );
        assert!(ha.contains("backoffLimit: 100") && ha.contains("hostNetwork: true"));
        assert!(
            ha.contains("- ip: \"192.0.2.5\"") && ha.contains("assisted-api.local.openshift.io")
        );
        assert!(!ha.contains("bootstrap-secrets") && !ha.contains("not-ready"));
        let sno = job(&settings(true));
        assert!(
            sno.contains("/etc/kubernetes/bootstrap-secrets")
                && sno.contains("node.kubernetes.io/not-ready")
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
        let mode = std::fs::metadata(dir.path().join("assisted-installer-controller-secret.yaml"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
