//! Pure decisions the bootstrap flow takes from cluster configuration: replica counts from the
//! install-config stored in the cluster, how many Ready nodes to wait for, whether to remove the
//! cloud-provider "uninitialized" taint, and whether the vSphere credentials are real.
//!
//! No I/O here: callers fetch the ConfigMaps through [`super::ClusterApi`] and the cluster through the
//! assisted-service client, and pass the strings in.

use anyhow::{Context, Result};
use serde::Deserialize;

/// Namespace, name and key of the ConfigMap holding the install-config (YAML).
pub(crate) const INSTALL_CONFIG_NAMESPACE: &str = "kube-system";
pub(crate) const INSTALL_CONFIG_NAME: &str = "cluster-config-v1";
pub(crate) const INSTALL_CONFIG_KEY: &str = "install-config";

pub(crate) use crate::openshift::INVOKER_AGENT;

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
pub(crate) struct Replicas {
    pub(crate) control_plane: Option<i64>,
    pub(crate) arbiter: Option<i64>,
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
pub(crate) fn replicas(install_config_yaml: &str) -> Result<Replicas> {
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
pub(crate) fn needed_ready_masters(replicas: i64) -> usize {
    if replicas < 1 {
        return 0;
    }
    (replicas - 1).min(2) as usize
}

/// Whether to remove the `node.cloudprovider.kubernetes.io/uninitialized` taint from nodes that
/// are not Ready: yes on nutanix and vsphere, except the agent-based installer on vsphere with
/// valid credentials from OpenShift 4.15 on (the vSphere cloud controller manager removes it then).
///
/// `platform` is the assisted-service cluster's `platform.type` (empty when unknown). An
/// OpenShift version that cannot be parsed counts as older than 4.15.
pub(crate) fn remove_uninitialized_taint(
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
pub(crate) fn parse_version(version: &str) -> Option<(u64, u64, u64)> {
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
pub(crate) fn has_valid_vsphere_credentials(install_config_overrides_json: &str) -> bool {
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

/// Fallback of the vSphere credentials check when the assisted-service cannot be reached: the
/// install-config stored in the cluster has the user and password redacted, so only
/// `platform.vsphere.vcenters[0].server` is checked (non-empty and not the placeholder).
/// Unparsable YAML → false.
pub(crate) fn install_config_has_vsphere_server(install_config_yaml: &str) -> bool {
    let Ok(doc) = serde_saphyr::from_str::<serde_json::Value>(install_config_yaml) else {
        return false;
    };
    let server = doc.pointer("/platform/vsphere/vcenters/0/server");
    let server = server
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    !server.is_empty() && server != VCENTER_PLACEHOLDER
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openshift::INVOKER_ASSISTED;

    /// An install-config with the compute pool's replicas too, and a platform other than vSphere.
    const INSTALL_CONFIG: &str = "\
apiVersion: v1
compute:
- name: worker
  replicas: 2
controlPlane:
  name: master
  replicas: 3
platform:
  baremetal:
    apiVIPs:
    - 192.168.126.100
";

    #[test]
    fn replicas_of_install_configs() {
        let both = "controlPlane:\n  name: master\n  replicas: 2\narbiter:\n  replicas: 1\n";
        for (yaml, control_plane, arbiter) in [
            (INSTALL_CONFIG, Some(3), None),
            (both, Some(2), Some(1)),
            ("controlPlane:\n  name: master\n", None, None),
            ("apiVersion: v1\n", None, None),
            ("", None, None),
            ("arbiter: null\n", None, None),
        ] {
            let want = Replicas {
                control_plane,
                arbiter,
            };
            assert_eq!(replicas(yaml).unwrap(), want, "{yaml}");
        }
        let err = replicas("controlPlane: [unclosed").unwrap_err();
        assert!(format!("{err:#}").contains("install-config"), "{err:#}");
        assert!(replicas("controlPlane:\n  replicas: three\n").is_err());
    }

    #[test]
    fn needed_ready_nodes() {
        for (replicas, masters) in [(-1, 0), (0, 0), (1, 0), (2, 1), (3, 2)] {
            assert_eq!(needed_ready_masters(replicas), masters, "{replicas}");
        }
        assert_eq!(needed_ready_masters(5), 2);
    }

    #[test]
    fn versions() {
        for (text, want) in [
            ("4.15", Some((4, 15, 0))),
            ("4.15.0-rc.1", Some((4, 15, 0))),
            ("4.14.0-rc0", Some((4, 14, 0))),
            ("4.7-pre-release", Some((4, 7, 0))),
            ("4.7.1", Some((4, 7, 1))),
            ("4.16.3+build.1", Some((4, 16, 3))),
            ("", None),
            ("4", None),
            ("latest", None),
            ("4.x", None),
            ("1.2.3.4", None),
        ] {
            assert_eq!(parse_version(text), want, "{text}");
        }
        for (version, at_least) in [("4.15.0-rc.1", true), ("5.0", true), ("4.14.9", false)] {
            assert_eq!(version_at_least(version, (4, 15, 0)), at_least, "{version}");
        }
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
        let placeholder_user = r#"{"platform":{"vsphere":{"vcenters":[{"server":"","user":"usernameplaceholder","password":"some-password","datacenters":["datacenter"]}]}}}"#;
        // Only the first vCenter counts.
        let second = r#"{"platform":{"vsphere":{"vcenters":[{"server":"vcenterplaceholder"},{"server":"s","user":"u","password":"p"}]}}}"#;
        let baremetal = r#"{"fips":"false","platform":{"baremetal":{}}}"#;
        let (deprecated, empty) = (DEPRECATED_OVERRIDES, "");
        let invalid = [
            deprecated,
            placeholder_user,
            second,
            baremetal,
            empty,
            "not json",
        ];
        let mut docs: Vec<String> = invalid.map(String::from).into();
        let placeholders = [
            ("user", "usernameplaceholder"),
            ("password", "passwordplaceholder"),
            ("server", "vcenterplaceholder"),
        ];
        for (field, placeholder) in placeholders {
            let mut doc: serde_json::Value = serde_json::from_str(VALID_OVERRIDES).unwrap();
            let vcenter = "/platform/vsphere/vcenters/0";
            for value in [placeholder, ""] {
                doc.pointer_mut(vcenter).unwrap()[field] = value.into();
                docs.push(doc.to_string());
            }
            let vcenter = doc.pointer_mut(vcenter).unwrap().as_object_mut().unwrap();
            vcenter.remove(field);
            docs.push(doc.to_string());
        }
        for doc in docs {
            assert!(!has_valid_vsphere_credentials(&doc), "{doc}");
        }
    }

    #[test]
    fn vsphere_server_from_install_config() {
        let config = |server: &str, user: &str| {
            format!("platform:\n  vsphere:\n    apiVIPs:\n    - 192.168.111.5\n    vcenters:\n    - datacenters:\n      - datacenter\n      password: \"{user}\"\n      server: {server}\n      user: \"{user}\"\npublish: External\n")
        };
        assert!(install_config_has_vsphere_server(&config(
            "machine1.server.com",
            ""
        )));
        for yaml in [
            &config("vcenterplaceholder", "")[..],
            &config("vcenterplaceholder", "goodusername"),
            INSTALL_CONFIG,
            "",
            "platform: [unclosed",
        ] {
            assert!(!install_config_has_vsphere_server(yaml), "{yaml}");
        }
    }
}
