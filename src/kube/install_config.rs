//! Pure decisions the bootstrap flow takes from cluster configuration: replica counts from the
//! install-config stored in the cluster, how many Ready nodes to wait for, whether to remove the
//! cloud-provider "uninitialized" taint, and whether the vSphere credentials are real.
//!
//! No I/O here: callers fetch the ConfigMaps through [`super::KubeApi`] and the cluster through the
//! assisted-service client, and pass the strings in.

use anyhow::{Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Namespace, name and key of the ConfigMap holding the install-config (YAML).
pub const INSTALL_CONFIG_NAMESPACE: &str = "kube-system";
pub const INSTALL_CONFIG_NAME: &str = "cluster-config-v1";
pub const INSTALL_CONFIG_KEY: &str = "install-config";

/// Namespace, name and key of the ConfigMap naming who invoked the OpenShift installer.
pub const INVOKER_NAMESPACE: &str = "openshift-config";
pub const INVOKER_CONFIG_MAP: &str = "openshift-install-manifests";
pub const INVOKER_KEY: &str = "invoker";

/// The invoker when the ConfigMap does not exist.
pub const INVOKER_ASSISTED: &str = "assisted-service";
/// The agent-based installer.
pub const INVOKER_AGENT: &str = "agent-installer";

/// Platforms whose nodes carry `node.cloudprovider.kubernetes.io/uninitialized` until a cloud
/// controller manager with real credentials initialises them.
const PLATFORMS_WITH_UNINITIALIZED_TAINT: [&str; 2] = ["nutanix", "vsphere"];

/// From 4.15 the agent-based installer can pass real vSphere credentials, and the vSphere cloud
/// controller manager then removes the taint itself.
const AGENT_VSPHERE_CREDENTIALS_SINCE: (u64, u64, u64) = (4, 15, 0);

const USERNAME_PLACEHOLDER: &str = "usernameplaceholder";
const PASSWORD_PLACEHOLDER: &str = "passwordplaceholder";
const VCENTER_PLACEHOLDER: &str = "vcenterplaceholder";

/// Replica counts of the install-config; `None` when the pool or its `replicas` is absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replicas {
    pub control_plane: Option<i64>,
    pub arbiter: Option<i64>,
}

#[derive(Deserialize)]
struct InstallConfigDoc {
    #[serde(rename = "controlPlane", default)]
    control_plane: Option<MachinePool>,
    #[serde(default)]
    arbiter: Option<MachinePool>,
}

#[derive(Deserialize)]
struct MachinePool {
    #[serde(default)]
    replicas: Option<i64>,
}

/// `controlPlane.replicas` and `arbiter.replicas` of the install-config YAML (the
/// `install-config` key of ConfigMap `kube-system/cluster-config-v1`).
pub fn replicas(install_config_yaml: &str) -> Result<Replicas> {
    let doc: Option<InstallConfigDoc> =
        serde_saphyr::from_str(install_config_yaml).context("parsing the install-config YAML")?;
    let Some(doc) = doc else {
        return Ok(Replicas::default());
    };
    Ok(Replicas {
        control_plane: doc.control_plane.and_then(|p| p.replicas),
        arbiter: doc.arbiter.and_then(|p| p.replicas),
    })
}

/// Ready masters the bootstrap waits for: `min(replicas − 1, 2)`, so 2 with three or more control
/// plane replicas and 1 with two; 0 (done at once) when `replicas` < 1.
pub fn needed_ready_masters(replicas: i64) -> usize {
    if replicas < 1 {
        return 0;
    }
    (replicas - 1).min(2) as usize
}

/// Ready arbiters the bootstrap waits for: 1 when there are arbiter replicas, else 0.
pub fn needed_ready_arbiters(replicas: i64) -> usize {
    usize::from(replicas >= 1)
}

/// The invoker from the data of ConfigMap `openshift-config/openshift-install-manifests`:
/// [`INVOKER_ASSISTED`] when the ConfigMap does not exist, else its `invoker` value (empty when the
/// key is missing, as the Go installer reads it).
pub fn invoker(config_map_data: Option<&BTreeMap<String, String>>) -> String {
    match config_map_data {
        None => INVOKER_ASSISTED.to_string(),
        Some(data) => data.get(INVOKER_KEY).cloned().unwrap_or_default(),
    }
}

/// Whether to remove the `node.cloudprovider.kubernetes.io/uninitialized` taint from nodes that
/// are not Ready: yes on nutanix and vsphere, except the agent-based installer on vsphere with
/// valid credentials from OpenShift 4.15 on (the vSphere cloud controller manager removes it then).
///
/// `platform` is the assisted-service cluster's `platform.type` (empty when unknown). An
/// OpenShift version that cannot be parsed counts as older than 4.15.
pub fn remove_uninitialized_taint(
    platform: &str,
    invoker: &str,
    openshift_version: &str,
    has_valid_vsphere_credentials: bool,
) -> bool {
    if invoker == INVOKER_AGENT
        && platform == "vsphere"
        && has_valid_vsphere_credentials
        && version_at_least(openshift_version, AGENT_VSPHERE_CREDENTIALS_SINCE)
    {
        return false;
    }
    PLATFORMS_WITH_UNINITIALIZED_TAINT.contains(&platform)
}

/// `major.minor[.patch]` of an OpenShift version, ignoring any `-pre-release` or `+build` suffix:
/// "4.15.0-rc.1" → (4, 15, 0), "4.7-pre-release" → (4, 7, 0). `None` when not numeric.
pub fn parse_version(version: &str) -> Option<(u64, u64, u64)> {
    let core = version.trim();
    let core = core.strip_prefix('v').unwrap_or(core);
    let core = core.split(['-', '+']).next().unwrap_or_default();
    let mut parts = core.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    let patch = match parts.next() {
        Some(p) => p.parse().ok()?,
        None => 0,
    };
    if parts.next().is_some() {
        return None;
    }
    Some((major, minor, patch))
}

fn version_at_least(version: &str, min: (u64, u64, u64)) -> bool {
    parse_version(version).is_some_and(|v| v >= min)
}

/// Whether the cluster's `install_config_overrides` (a JSON string, as the assisted-service
/// returns it) carries real vSphere credentials: `platform.vsphere.vcenters[0].{user,password,server}`
/// all non-empty and none of them the placeholders the service writes. The deprecated top-level
/// `username`/`password`/`vCenter` fields do not count. Invalid or empty JSON → false.
pub fn has_valid_vsphere_credentials(install_config_overrides_json: &str) -> bool {
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(install_config_overrides_json) else {
        return false;
    };
    let vcenter = doc.pointer("/platform/vsphere/vcenters/0");
    let field = |name: &str| -> String {
        match vcenter.and_then(|v| v.get(name)) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        }
    };
    let (user, password, server) = (field("user"), field("password"), field("server"));
    !user.is_empty()
        && user != USERNAME_PLACEHOLDER
        && !password.is_empty()
        && password != PASSWORD_PLACEHOLDER
        && !server.is_empty()
        && server != VCENTER_PLACEHOLDER
}

#[derive(Deserialize)]
struct VsphereInstallConfig {
    #[serde(default)]
    platform: Option<VspherePlatformWrapper>,
}

#[derive(Deserialize)]
struct VspherePlatformWrapper {
    #[serde(default)]
    vsphere: Option<VspherePlatform>,
}

#[derive(Deserialize)]
struct VspherePlatform {
    #[serde(default)]
    vcenters: Vec<VCenter>,
}

#[derive(Deserialize)]
struct VCenter {
    #[serde(default)]
    server: Option<String>,
}

/// Fallback of the vSphere credentials check when the assisted-service cannot be reached: the
/// install-config stored in the cluster has the user and password redacted, so only
/// `platform.vsphere.vcenters[0].server` is checked (non-empty and not the placeholder).
/// Unparsable YAML → false.
pub fn install_config_has_vsphere_server(install_config_yaml: &str) -> bool {
    let Ok(Some(doc)) = serde_saphyr::from_str::<Option<VsphereInstallConfig>>(install_config_yaml)
    else {
        return false;
    };
    let server = doc
        .platform
        .and_then(|p| p.vsphere)
        .and_then(|v| v.vcenters.into_iter().next())
        .and_then(|c| c.server)
        .unwrap_or_default();
    !server.is_empty() && server != VCENTER_PLACEHOLDER
}

#[cfg(test)]
mod tests {
    use super::*;

    const INSTALL_CONFIG: &str = "\
apiVersion: v1
baseDomain: example.com
compute:
- architecture: amd64
  hyperthreading: Enabled
  name: worker
  platform: {}
  replicas: 2
controlPlane:
  architecture: amd64
  hyperthreading: Enabled
  name: master
  platform: {}
  replicas: 3
metadata:
  name: test-cluster
networking:
  clusterNetwork:
  - cidr: 10.128.0.0/14
    hostPrefix: 23
  machineNetwork:
  - cidr: 192.168.126.0/24
platform:
  baremetal:
    apiVIPs:
    - 192.168.126.100
pullSecret: \"\"
sshKey: |
  ssh-rsa AAAA test
";

    #[test]
    fn replicas_of_a_full_install_config() {
        let r = replicas(INSTALL_CONFIG).unwrap();
        assert_eq!(
            r,
            Replicas {
                control_plane: Some(3),
                arbiter: None
            }
        );
    }

    #[test]
    fn replicas_with_arbiter() {
        let yaml = "controlPlane:\n  name: master\n  replicas: 2\narbiter:\n  name: arbiter\n  replicas: 1\n";
        let r = replicas(yaml).unwrap();
        assert_eq!(
            r,
            Replicas {
                control_plane: Some(2),
                arbiter: Some(1)
            }
        );
    }

    #[test]
    fn replicas_absent() {
        assert_eq!(
            replicas("controlPlane:\n  name: master\n").unwrap(),
            Replicas::default()
        );
        assert_eq!(replicas("apiVersion: v1\n").unwrap(), Replicas::default());
        assert_eq!(replicas("").unwrap(), Replicas::default());
        assert_eq!(replicas("arbiter: null\n").unwrap(), Replicas::default());
    }

    #[test]
    fn replicas_rejects_invalid_yaml() {
        let err = replicas("controlPlane: [unclosed").unwrap_err();
        assert!(format!("{err:#}").contains("install-config"), "{err:#}");
        assert!(replicas("controlPlane:\n  replicas: three\n").is_err());
    }

    #[test]
    fn needed_masters() {
        assert_eq!(needed_ready_masters(-1), 0);
        assert_eq!(needed_ready_masters(0), 0);
        assert_eq!(needed_ready_masters(1), 0);
        assert_eq!(needed_ready_masters(2), 1);
        assert_eq!(needed_ready_masters(3), 2);
        assert_eq!(needed_ready_masters(5), 2);
    }

    #[test]
    fn needed_arbiters() {
        assert_eq!(needed_ready_arbiters(0), 0);
        assert_eq!(needed_ready_arbiters(-3), 0);
        assert_eq!(needed_ready_arbiters(1), 1);
        assert_eq!(needed_ready_arbiters(2), 1);
    }

    #[test]
    fn invoker_from_config_map() {
        assert_eq!(invoker(None), "assisted-service");
        let mut data = BTreeMap::new();
        assert_eq!(invoker(Some(&data)), "");
        data.insert("invoker".to_string(), "agent-installer".to_string());
        assert_eq!(invoker(Some(&data)), INVOKER_AGENT);
    }

    #[test]
    fn versions() {
        assert_eq!(parse_version("4.15"), Some((4, 15, 0)));
        assert_eq!(parse_version("4.15.0"), Some((4, 15, 0)));
        assert_eq!(parse_version("4.15.0-rc.1"), Some((4, 15, 0)));
        assert_eq!(parse_version("4.14.0-rc0"), Some((4, 14, 0)));
        assert_eq!(parse_version("4.7-pre-release"), Some((4, 7, 0)));
        assert_eq!(parse_version("4.7.1"), Some((4, 7, 1)));
        assert_eq!(parse_version("4.16.3+build.1"), Some((4, 16, 3)));
        assert_eq!(parse_version(""), None);
        assert_eq!(parse_version("4"), None);
        assert_eq!(parse_version("latest"), None);
        assert_eq!(parse_version("4.x"), None);
        assert_eq!(parse_version("1.2.3.4"), None);
        assert!(version_at_least("4.15.0-rc.1", (4, 15, 0)));
        assert!(version_at_least("4.16", (4, 15, 0)));
        assert!(version_at_least("5.0", (4, 15, 0)));
        assert!(!version_at_least("4.14.9", (4, 15, 0)));
        assert!(!version_at_least("garbage", (4, 15, 0)));
    }

    const VALID_OVERRIDES: &str = r#"{"platform":{"vsphere":{"vcenters":[{"server":"server.openshift.com","user":"some-user","password":"some-password","datacenters":["datacenter"]}],"failureDomains":[{"name":"fd","region":"r","zone":"z","server":"server.openshift.com","topology":{"datacenter":"datacenter","computeCluster":"/datacenter/host/cluster","networks":["segment-a"],"datastore":"/datacenter/datastore/mystore"}}]}}}"#;
    const DEPRECATED_OVERRIDES: &str = r#"{"platform":{"vsphere":{"username":"a-user","password":"a-password","vCenter":"a-server.com"}}}"#;

    /// The RemoveUninitializedTaint table of the Go `common` tests, plus the uninitialized-taint
    /// platform cases of the installer's "Bootstrap role" tests.
    #[test]
    fn remove_uninitialized_taint_table() {
        let valid = has_valid_vsphere_credentials(VALID_OVERRIDES);
        let invalid = has_valid_vsphere_credentials(DEPRECATED_OVERRIDES);
        assert!(valid);
        assert!(!invalid);
        let cases: &[(&str, &str, &str, bool, bool)] = &[
            // platform, invoker, version, valid credentials, expected
            ("", "", "", false, false),
            ("nutanix", "", "", false, true),
            ("vsphere", "", "", invalid, true),
            ("none", "", "", false, false),
            ("baremetal", "", "", false, false),
            ("vsphere", INVOKER_AGENT, "4.14.0-rc0", invalid, true),
            ("vsphere", INVOKER_AGENT, "4.15.0", invalid, true),
            ("vsphere", INVOKER_AGENT, "4.14.0", valid, true),
            ("vsphere", INVOKER_AGENT, "4.15", valid, false),
            // Beyond the Go table.
            ("vsphere", INVOKER_AGENT, "4.15.0-rc.1", valid, false),
            ("vsphere", INVOKER_AGENT, "4.16.2", valid, false),
            ("vsphere", INVOKER_ASSISTED, "4.16.2", valid, true),
            ("vsphere", INVOKER_AGENT, "4.7-pre-release", valid, true),
            ("vsphere", INVOKER_AGENT, "not-a-version", valid, true),
            ("nutanix", INVOKER_AGENT, "4.16", true, true),
            ("external", "", "4.16", false, false),
        ];
        for &(platform, invoker, version, creds, expected) in cases {
            assert_eq!(
                remove_uninitialized_taint(platform, invoker, version, creds),
                expected,
                "platform {platform:?} invoker {invoker:?} version {version:?} credentials {creds}"
            );
        }
    }

    #[test]
    fn vsphere_credentials_from_overrides() {
        assert!(has_valid_vsphere_credentials(VALID_OVERRIDES));
        assert!(!has_valid_vsphere_credentials(DEPRECATED_OVERRIDES));
        let placeholder_user = r#"{"platform":{"vsphere":{"vcenters":[{"server":"","user":"usernameplaceholder","password":"some-password","datacenters":["datacenter"]}]}}}"#;
        assert!(!has_valid_vsphere_credentials(placeholder_user));
        assert!(!has_valid_vsphere_credentials(
            r#"{"fips":"false","platform":{"baremetal":{}}}"#
        ));
        assert!(!has_valid_vsphere_credentials(""));
        assert!(!has_valid_vsphere_credentials("not json"));
        for (field, placeholder) in [
            ("user", "usernameplaceholder"),
            ("password", "passwordplaceholder"),
            ("server", "vcenterplaceholder"),
        ] {
            let mut doc: serde_json::Value = serde_json::from_str(VALID_OVERRIDES).unwrap();
            doc["platform"]["vsphere"]["vcenters"][0][field] = placeholder.into();
            assert!(
                !has_valid_vsphere_credentials(&doc.to_string()),
                "{field} placeholder"
            );
            doc["platform"]["vsphere"]["vcenters"][0][field] = "".into();
            assert!(
                !has_valid_vsphere_credentials(&doc.to_string()),
                "{field} empty"
            );
            doc["platform"]["vsphere"]["vcenters"][0]
                .as_object_mut()
                .unwrap()
                .remove(field);
            assert!(
                !has_valid_vsphere_credentials(&doc.to_string()),
                "{field} missing"
            );
        }
        // Only the first vCenter counts.
        let second = r#"{"platform":{"vsphere":{"vcenters":[{"server":"vcenterplaceholder"},{"server":"s","user":"u","password":"p"}]}}}"#;
        assert!(!has_valid_vsphere_credentials(second));
    }

    fn vsphere_install_config(server: &str, user: &str, password: &str) -> String {
        format!(
            "platform:\n  vsphere:\n    apiVIPs:\n    - 192.168.111.5\n    failureDomains:\n    - name: generated-failure-domain\n      region: generated-region\n      server: {server}\n      zone: generated-zone\n    vcenters:\n    - datacenters:\n      - datacenter\n      password: \"{password}\"\n      server: {server}\n      user: \"{user}\"\npublish: External\n"
        )
    }

    #[test]
    fn vsphere_server_from_install_config() {
        assert!(install_config_has_vsphere_server(&vsphere_install_config(
            "machine1.server.com",
            "",
            ""
        )));
        assert!(!install_config_has_vsphere_server(&vsphere_install_config(
            "vcenterplaceholder",
            "",
            ""
        )));
        assert!(!install_config_has_vsphere_server(&vsphere_install_config(
            "vcenterplaceholder",
            "goodusername",
            "goodpassword"
        )));
        assert!(!install_config_has_vsphere_server(INSTALL_CONFIG));
        assert!(!install_config_has_vsphere_server(""));
        assert!(!install_config_has_vsphere_server("platform: [unclosed"));
    }
}
