//! `batch/v1 Job assisted-installer/assisted-installer-controller`: the controller on a master,
//! on the host network, as the Go installer's pod template renders it: settings from the
//! ConfigMap, the token as a file from the Secret, and the host files the controller reads.

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapKeySelector, Container, EnvVar, EnvVarSource, HostAlias, HostPathVolumeSource,
    KeyToPath, PodSpec, PodTemplateSpec, SecretVolumeSource, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::settings::{
    app_label, meta, strings, ControllerSettings, CONFIG_MAP_NAME, NAME, NAMESPACE, SECRET_NAME,
};

/// The Job's restarts of a failing controller (Go: 100).
const BACKOFF_LIMIT: i32 = 100;
/// The name the service IPs are given in the pod's /etc/hosts.
const SERVICE_HOSTNAME: &str = "assisted-api.local.openshift.io";
/// Where the controller reads its token (`<dir>/token`).
const TOKEN_DIR: &str = "/etc/assisted-installer-controller";
/// Owner-read only: the token is the agent's credential.
const TOKEN_MODE: i32 = 0o400;

/// The environment: each variable from a ConfigMap key (`Some(optional)`) or a literal value
/// (`None`), in Go's order.
fn env(s: &ControllerSettings) -> Vec<EnvVar> {
    let from_config = |name: &str, key: &str, optional: bool| EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name: CONFIG_MAP_NAME.into(),
                key: key.into(),
                optional: optional.then_some(true),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    };
    let literal = |name: &str, value: String| EnvVar {
        name: name.into(),
        value: Some(value),
        ..EnvVar::default()
    };
    vec![
        from_config("CLUSTER_ID", "cluster-id", false),
        from_config("INVENTORY_URL", "inventory-url", false),
        from_config("CA_CERT_PATH", "ca-cert-path", true),
        from_config("SKIP_CERT_VERIFICATION", "skip-cert-verification", true),
        literal("OPENSHIFT_VERSION", s.openshift_version.clone()),
        literal("NOTIFY_NUM_REBOOTS", s.notify_num_reboots.to_string()),
        from_config("CONTROL_PLANE_COUNT", "control-plane-count", true),
        from_config("CHECK_CLUSTER_VERSION", "check-cluster-version", true),
        from_config("MUST_GATHER_IMAGE", "must-gather-image", true),
    ]
}

/// A volume and where the container mounts it.
struct Mount {
    name: &'static str,
    path: String,
    volume: Volume,
}

/// A host path mounted at `path` (no `type`: the kubelet checks nothing, as in Go's template).
fn host_path(name: &'static str, path: &str, host: &str) -> Mount {
    Mount {
        name,
        path: path.into(),
        volume: Volume {
            name: name.into(),
            host_path: Some(HostPathVolumeSource {
                path: host.into(),
                type_: None,
            }),
            ..Volume::default()
        },
    }
}

fn mounts(s: &ControllerSettings) -> Vec<Mount> {
    let mut mounts = vec![
        // The host's trust store: the system pool then includes CAs the cluster added.
        host_path("host-pki", "/etc/pki", "/etc/pki"),
        // Logged by the controller when it fails, to debug DNS.
        host_path(
            "var-run-resolv",
            "/tmp/var-run-resolv.conf",
            "/var/run/NetworkManager/resolv.conf",
        ),
        host_path("host-resolv", "/tmp/host-resolv.conf", "/etc/resolv.conf"),
        Mount {
            name: "controller-token",
            path: TOKEN_DIR.into(),
            volume: Volume {
                name: "controller-token".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(SECRET_NAME.into()),
                    items: Some(vec![KeyToPath {
                        key: "pull-secret-token".into(),
                        path: "token".into(),
                        mode: Some(TOKEN_MODE),
                    }]),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            },
        },
    ];
    if s.single_node {
        // Single node: the controller starts before the node is Ready and reaches the API with
        // the bootstrap kubeconfig (`/tmp/bootstrap-secrets/kubeconfig`).
        mounts.push(host_path(
            "bootstrap-secrets",
            "/tmp/bootstrap-secrets",
            "/etc/kubernetes/bootstrap-secrets",
        ));
    }
    if !s.ca_cert_path.is_empty() {
        // CA_CERT_PATH names a host file: the controller reads it at the same path.
        mounts.push(host_path("ca-cert", &s.ca_cert_path, &s.ca_cert_path));
    }
    mounts
}

fn toleration(key: &str) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Toleration::default()
    }
}

fn tolerations(single_node: bool) -> Vec<Toleration> {
    let mut all = vec![toleration("node-role.kubernetes.io/master")];
    if single_node {
        // The only node is not Ready (no network yet) when the controller must start.
        all.push(toleration("node.kubernetes.io/not-ready"));
        all.push(toleration("node.kubernetes.io/network-unavailable"));
    }
    all
}

/// The controller reaches the service by the name its URL may use, at each service IP.
fn host_aliases(service_ips: &[String]) -> Option<Vec<HostAlias>> {
    (!service_ips.is_empty()).then(|| {
        service_ips
            .iter()
            .map(|ip| HostAlias {
                ip: ip.clone(),
                hostnames: Some(vec![SERVICE_HOSTNAME.into()]),
            })
            .collect()
    })
}

/// The Job. Its pod carries `app: assisted-installer-controller`; the Job controller adds
/// `job-name: assisted-installer-controller`, by which the bootstrap finds the pod.
pub(crate) fn job(s: &ControllerSettings) -> Job {
    let (volume_mounts, volumes): (Vec<VolumeMount>, Vec<Volume>) = mounts(s)
        .into_iter()
        .map(|m| {
            let mount = VolumeMount {
                name: m.name.into(),
                mount_path: m.path,
                ..VolumeMount::default()
            };
            (mount, m.volume)
        })
        .unzip();
    let pod = PodSpec {
        host_aliases: host_aliases(&s.service_ips),
        containers: vec![Container {
            name: NAME.into(),
            image: Some(s.controller_image.clone()),
            image_pull_policy: Some("IfNotPresent".into()),
            env: Some(env(s)),
            volume_mounts: Some(volume_mounts),
            ..Container::default()
        }],
        restart_policy: Some("OnFailure".into()),
        host_network: Some(true),
        node_selector: Some(strings([("node-role.kubernetes.io/master", "")])),
        service_account_name: Some(NAME.into()),
        tolerations: Some(tolerations(s.single_node)),
        volumes: Some(volumes),
        ..PodSpec::default()
    };
    Job {
        metadata: meta(NAME, Some(NAMESPACE)),
        spec: Some(JobSpec {
            backoff_limit: Some(BACKOFF_LIMIT),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(app_label()),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}
