//! `batch/v1 Job assisted-installer/assisted-installer-controller`: the controller on a master,
//! on the host network, as the Go installer's pod template renders it (controller reference
//! §1.8): settings from the ConfigMap, the token as a file from the Secret, and the host files
//! the controller reads.

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapKeySelector, Container, EnvVar, EnvVarSource, HostAlias, HostPathVolumeSource,
    KeyToPath, PodSpec, PodTemplateSpec, SecretVolumeSource, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::controller_manifests::{
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::bootstrap::controller_manifests::testing::{read_with, settings};
    use crate::flow::bootstrap::controller_manifests::JOB_FILE;
    use serde_json::{json, Value};

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
        let cm = read_with(
            &settings(false),
            crate::flow::bootstrap::controller_manifests::CONFIG_MAP_FILE,
        );
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
}
