//! The controller's configuration from the Job's environment, parsed as
//! the Go controller's envconfig does, by a pure function over a variable lookup.
//!
//! - Required variables that are absent fail with `required key <NAME> missing value` (the Go
//!   text; the Job's logs show it). Present-but-empty is accepted for strings.
//! - Bools take Go's `strconv.ParseBool` spellings only; anything else, the empty string too, is
//!   an error naming the variable. Ints take Go's `strconv.ParseInt(s, 0, 64)` syntax (sign,
//!   `0x`/`0o`/`0b`/leading-`0` prefixes, `_` between digits).
//! - A default applies only when the variable is absent.
//! - Variables are checked in the table's order and the first error is returned, as envconfig
//!   does.
//!
//! Not reproduced: envconfig's alternative `MYAPP_CONTROLLERCONFIG_<NAME>` spelling, which wins
//! over `<NAME>` in Go. Nothing sets it (the Job sets the plain names), so it is ignored here.
//!
//! The token is not an environment setting any more (it comes from a mounted file, see
//! [`super::token`]); `PULL_SECRET_TOKEN` is only kept here as that file's fallback. Neither
//! `Debug` nor `Display` ever shows it.

use std::fmt;

use crate::config::go_values::{parse_go_bool, parse_go_int};

/// The namespace of the ready Event, the own-pod lookup and the ABI ConfigMap by default.
pub const DEFAULT_NAMESPACE: &str = "assisted-installer";
/// The control-plane size when `CONTROL_PLANE_COUNT` is absent.
pub const DEFAULT_CONTROL_PLANE_COUNT: i64 = 3;

#[derive(Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// `CLUSTER_ID` (required).
    pub cluster_id: String,
    /// `INVENTORY_URL` (required): the service base URL.
    pub inventory_url: String,
    /// `SKIP_CERT_VERIFICATION` (default false).
    pub skip_cert_verification: bool,
    /// `CA_CERT_PATH` (default ""): a PEM added to the system roots.
    pub ca_cert_path: String,
    /// `NAMESPACE` (default `assisted-installer`).
    pub namespace: String,
    /// `OPENSHIFT_VERSION` (required, may be empty).
    pub openshift_version: String,
    /// `CONTROL_PLANE_COUNT` (default 3).
    pub control_plane_count: i64,
    /// `CHECK_CLUSTER_VERSION` (default false).
    pub check_cluster_version: bool,
    /// `MUST_GATHER_IMAGE` (default ""): an image, or a JSON object of images.
    pub must_gather_image: String,
    /// `NOTIFY_NUM_REBOOTS` (default false).
    pub notify_num_reboots: bool,
    /// `DRY_ENABLE` (default false).
    pub dry_enable: bool,
    /// `DRY_FAKE_REBOOT_MARKER_PATH` (default "").
    pub dry_fake_reboot_marker_path: String,
    /// `DRY_CLUSTER_HOSTS_PATH` (unset by default).
    pub dry_cluster_hosts_path: Option<String>,
    /// The service token: `PULL_SECRET_TOKEN` after parsing, replaced by the token file's
    /// content at startup (the token file). Never shown.
    pub pull_secret_token: String,
}

/// Why the environment does not make a configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("required key {0} missing value")]
    Missing(&'static str),
    #[error("invalid value {value:?} for {name}: {reason}")]
    Invalid {
        name: &'static str,
        value: String,
        reason: String,
    },
}

/// A string variable: present (any value, the empty one too), or its default, or nothing.
fn string(
    env: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    default: Option<&str>,
    required: bool,
) -> Result<Option<String>, ConfigError> {
    match env(name) {
        Some(v) => Ok(Some(v)),
        None => match default {
            Some(d) => Ok(Some(d.to_string())),
            None if required => Err(ConfigError::Missing(name)),
            None => Ok(None),
        },
    }
}

fn invalid(name: &'static str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        name,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// An optional bool variable, false when absent.
fn boolean(env: &dyn Fn(&str) -> Option<String>, name: &'static str) -> Result<bool, ConfigError> {
    match env(name) {
        None => Ok(false),
        Some(v) => parse_go_bool(&v).ok_or_else(|| {
            invalid(
                name,
                &v,
                "want one of 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False",
            )
        }),
    }
}

/// An optional int variable, `default` when absent.
fn int(
    env: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    default: i64,
) -> Result<i64, ConfigError> {
    match env(name) {
        None => Ok(default),
        Some(v) => parse_go_int(&v).map_err(|e| invalid(name, &v, format!("not an integer ({e})"))),
    }
}

impl ControllerConfig {
    /// Parses the variables `env` gives (`None`: not set), in the spec's table order.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let cluster_id = string(env, "CLUSTER_ID", None, true)?.unwrap_or_default();
        let inventory_url = string(env, "INVENTORY_URL", None, true)?.unwrap_or_default();
        let skip_cert_verification = boolean(env, "SKIP_CERT_VERIFICATION")?;
        let ca_cert_path = string(env, "CA_CERT_PATH", None, false)?.unwrap_or_default();
        let namespace =
            string(env, "NAMESPACE", Some(DEFAULT_NAMESPACE), false)?.unwrap_or_default();
        let openshift_version = string(env, "OPENSHIFT_VERSION", None, true)?.unwrap_or_default();
        let control_plane_count = int(env, "CONTROL_PLANE_COUNT", DEFAULT_CONTROL_PLANE_COUNT)?;
        let check_cluster_version = boolean(env, "CHECK_CLUSTER_VERSION")?;
        let must_gather_image = string(env, "MUST_GATHER_IMAGE", None, false)?.unwrap_or_default();
        let notify_num_reboots = boolean(env, "NOTIFY_NUM_REBOOTS")?;
        let dry_enable = boolean(env, "DRY_ENABLE")?;
        let dry_fake_reboot_marker_path =
            string(env, "DRY_FAKE_REBOOT_MARKER_PATH", None, false)?.unwrap_or_default();
        let dry_cluster_hosts_path = string(env, "DRY_CLUSTER_HOSTS_PATH", None, false)?;
        let pull_secret_token = string(env, "PULL_SECRET_TOKEN", None, false)?.unwrap_or_default();
        Ok(ControllerConfig {
            cluster_id,
            inventory_url,
            skip_cert_verification,
            ca_cert_path,
            namespace,
            openshift_version,
            control_plane_count,
            check_cluster_version,
            must_gather_image,
            notify_num_reboots,
            dry_enable,
            dry_fake_reboot_marker_path,
            dry_cluster_hosts_path,
            pull_secret_token,
        })
    }

    /// The token as logs show it: `<masked>` when set, empty when not.
    fn masked_token(&self) -> &'static str {
        if self.pull_secret_token.is_empty() {
            ""
        } else {
            "<masked>"
        }
    }
}

impl fmt::Debug for ControllerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerConfig")
            .field("cluster_id", &self.cluster_id)
            .field("inventory_url", &self.inventory_url)
            .field("skip_cert_verification", &self.skip_cert_verification)
            .field("ca_cert_path", &self.ca_cert_path)
            .field("namespace", &self.namespace)
            .field("openshift_version", &self.openshift_version)
            .field("control_plane_count", &self.control_plane_count)
            .field("check_cluster_version", &self.check_cluster_version)
            .field("must_gather_image", &self.must_gather_image)
            .field("notify_num_reboots", &self.notify_num_reboots)
            .field("dry_enable", &self.dry_enable)
            .field(
                "dry_fake_reboot_marker_path",
                &self.dry_fake_reboot_marker_path,
            )
            .field("dry_cluster_hosts_path", &self.dry_cluster_hosts_path)
            .field("pull_secret_token", &self.masked_token())
            .finish()
    }
}

/// One line of `NAME=value` pairs, by the variables' names, the token masked: the controller
/// log's first line.
impl fmt::Display for ControllerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CLUSTER_ID={} INVENTORY_URL={} SKIP_CERT_VERIFICATION={} CA_CERT_PATH={:?} \
             NAMESPACE={} OPENSHIFT_VERSION={:?} CONTROL_PLANE_COUNT={} CHECK_CLUSTER_VERSION={} \
             MUST_GATHER_IMAGE={:?} NOTIFY_NUM_REBOOTS={} DRY_ENABLE={} \
             DRY_FAKE_REBOOT_MARKER_PATH={:?} DRY_CLUSTER_HOSTS_PATH={:?} token={:?}",
            self.cluster_id,
            self.inventory_url,
            self.skip_cert_verification,
            self.ca_cert_path,
            self.namespace,
            self.openshift_version,
            self.control_plane_count,
            self.check_cluster_version,
            self.must_gather_image,
            self.notify_num_reboots,
            self.dry_enable,
            self.dry_fake_reboot_marker_path,
            self.dry_cluster_hosts_path.as_deref().unwrap_or(""),
            self.masked_token(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)]) -> Result<ControllerConfig, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ControllerConfig::from_env(&|name| map.get(name).cloned())
    }

    const REQUIRED: &[(&str, &str)] = &[
        ("CLUSTER_ID", "c-1"),
        ("INVENTORY_URL", "http://svc:8090"),
        ("OPENSHIFT_VERSION", "4.17"),
    ];

    fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
        let mut v = REQUIRED.to_vec();
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn the_required_keys_give_the_defaults_for_the_rest() {
        let c = parse(REQUIRED).unwrap();
        assert_eq!(c.cluster_id, "c-1");
        assert_eq!(c.inventory_url, "http://svc:8090");
        assert_eq!(c.openshift_version, "4.17");
        assert_eq!(c.namespace, "assisted-installer");
        assert_eq!(c.control_plane_count, 3);
        assert!(!c.skip_cert_verification);
        assert!(!c.check_cluster_version);
        assert!(!c.notify_num_reboots);
        assert!(!c.dry_enable);
        assert_eq!(c.ca_cert_path, "");
        assert_eq!(c.must_gather_image, "");
        assert_eq!(c.dry_fake_reboot_marker_path, "");
        assert_eq!(c.dry_cluster_hosts_path, None);
        assert_eq!(c.pull_secret_token, "");
    }

    #[test]
    fn every_variable_is_read() {
        let c = parse(&with(&[
            ("SKIP_CERT_VERIFICATION", "T"),
            ("CA_CERT_PATH", "/etc/ca.pem"),
            ("NAMESPACE", "other"),
            ("CONTROL_PLANE_COUNT", "1"),
            ("CHECK_CLUSTER_VERSION", "1"),
            ("MUST_GATHER_IMAGE", "quay.io/mg:1"),
            ("NOTIFY_NUM_REBOOTS", "true"),
            ("DRY_ENABLE", "True"),
            ("DRY_FAKE_REBOOT_MARKER_PATH", "/tmp/m"),
            ("DRY_CLUSTER_HOSTS_PATH", "/tmp/h.json"),
            ("PULL_SECRET_TOKEN", "tok"),
        ]))
        .unwrap();
        assert!(c.skip_cert_verification && c.check_cluster_version);
        assert!(c.notify_num_reboots && c.dry_enable);
        assert_eq!(c.ca_cert_path, "/etc/ca.pem");
        assert_eq!(c.namespace, "other");
        assert_eq!(c.control_plane_count, 1);
        assert_eq!(c.must_gather_image, "quay.io/mg:1");
        assert_eq!(c.dry_fake_reboot_marker_path, "/tmp/m");
        assert_eq!(c.dry_cluster_hosts_path.as_deref(), Some("/tmp/h.json"));
        assert_eq!(c.pull_secret_token, "tok");
    }

    #[test]
    fn a_missing_required_key_is_named_in_go_words_in_table_order() {
        for missing in ["CLUSTER_ID", "INVENTORY_URL", "OPENSHIFT_VERSION"] {
            let vars: Vec<_> = REQUIRED
                .iter()
                .copied()
                .filter(|(k, _)| *k != missing)
                .collect();
            let e = parse(&vars).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("required key {missing} missing value")
            );
        }
        assert_eq!(
            parse(&[]).unwrap_err(),
            ConfigError::Missing("CLUSTER_ID"),
            "the first in table order"
        );
    }

    #[test]
    fn present_but_empty_strings_are_accepted_and_beat_defaults() {
        let c = parse(&[
            ("CLUSTER_ID", ""),
            ("INVENTORY_URL", ""),
            ("OPENSHIFT_VERSION", ""),
            ("NAMESPACE", ""),
        ])
        .unwrap();
        assert_eq!(c.cluster_id, "");
        assert_eq!(c.openshift_version, "");
        assert_eq!(c.namespace, "", "present beats the default, as in Go");
    }

    #[test]
    fn bools_take_go_spellings_only() {
        for (s, want) in [
            ("1", true),
            ("t", true),
            ("T", true),
            ("TRUE", true),
            ("true", true),
            ("True", true),
            ("0", false),
            ("f", false),
            ("F", false),
            ("FALSE", false),
            ("false", false),
            ("False", false),
        ] {
            let c = parse(&with(&[("CHECK_CLUSTER_VERSION", s)])).unwrap();
            assert_eq!(c.check_cluster_version, want, "{s}");
        }
        for bad in ["", "yes", "tRUE", " true", "2"] {
            let e = parse(&with(&[("DRY_ENABLE", bad)])).unwrap_err();
            match &e {
                ConfigError::Invalid { name, value, .. } => {
                    assert_eq!(*name, "DRY_ENABLE");
                    assert_eq!(value, bad);
                }
                other => panic!("{other:?}"),
            }
            assert!(e.to_string().contains("DRY_ENABLE"), "{e}");
        }
    }

    #[test]
    fn ints_take_go_syntax() {
        for (s, want) in [
            ("5", 5),
            ("+5", 5),
            ("-1", -1),
            ("0x10", 16),
            ("0X10", 16),
            ("0o10", 8),
            ("010", 8),
            ("0b101", 5),
            ("1_000", 1000),
            ("0x_1F", 31),
        ] {
            let c = parse(&with(&[("CONTROL_PLANE_COUNT", s)])).unwrap();
            assert_eq!(c.control_plane_count, want, "{s}");
        }
        for bad in [
            "",
            "three",
            "1_",
            "_1",
            "08",
            "1__0",
            "0x",
            " 1",
            "99999999999999999999",
        ] {
            let e = parse(&with(&[("CONTROL_PLANE_COUNT", bad)])).unwrap_err();
            assert!(
                matches!(
                    e,
                    ConfigError::Invalid {
                        name: "CONTROL_PLANE_COUNT",
                        ..
                    }
                ),
                "{bad}: {e:?}"
            );
        }
    }

    #[test]
    fn the_token_never_shows() {
        let c = parse(&with(&[("PULL_SECRET_TOKEN", "s3cr3t-token")])).unwrap();
        let debug = format!("{c:?}");
        let display = c.to_string();
        for text in [&debug, &display] {
            assert!(!text.contains("s3cr3t"), "{text}");
            assert!(text.contains("<masked>"), "{text}");
            assert!(text.contains("c-1"), "{text}");
        }
        assert!(display.starts_with("CLUSTER_ID=c-1 INVENTORY_URL=http://svc:8090 "));
        let none = parse(REQUIRED).unwrap().to_string();
        assert!(none.ends_with("token=\"\""), "{none}");
    }
}
