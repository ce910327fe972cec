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
pub(crate) const DEFAULT_NAMESPACE: &str = "assisted-installer";
/// The control-plane size when `CONTROL_PLANE_COUNT` is absent.
pub(crate) const DEFAULT_CONTROL_PLANE_COUNT: i64 = 3;

/// Each field is the variable of its name in capitals (see [`ControllerConfig::from_env`]).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ControllerConfig {
    pub cluster_id: String,
    /// The service base URL.
    pub inventory_url: String,
    pub skip_cert_verification: bool,
    /// A PEM added to the system roots.
    pub ca_cert_path: String,
    pub namespace: String,
    pub openshift_version: String,
    pub control_plane_count: i64,
    pub check_cluster_version: bool,
    /// An image, or a JSON object of images.
    pub must_gather_image: String,
    pub notify_num_reboots: bool,
    pub dry_enable: bool,
    pub dry_fake_reboot_marker_path: String,
    pub dry_cluster_hosts_path: Option<String>,
    /// The service token: `PULL_SECRET_TOKEN` after parsing, replaced by the token file's
    /// content at startup (the token file). Never shown.
    pub pull_secret_token: String,
}

/// Why the environment does not make a configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("required key {0} missing value")]
    Missing(&'static str),
    #[error("invalid value {value:?} for {name}: {reason}")]
    Invalid {
        name: &'static str,
        value: String,
        reason: String,
    },
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
    /// Parses the variables `env` gives (`None`: not set), in the spec's table order (the order
    /// of the fields below, which Rust evaluates in the order written).
    pub(crate) fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let required = |name: &'static str| env(name).ok_or(ConfigError::Missing(name));
        let string = |name: &str| env(name).unwrap_or_default();
        Ok(ControllerConfig {
            cluster_id: required("CLUSTER_ID")?,
            inventory_url: required("INVENTORY_URL")?,
            skip_cert_verification: boolean(env, "SKIP_CERT_VERIFICATION")?,
            ca_cert_path: string("CA_CERT_PATH"),
            namespace: env("NAMESPACE").unwrap_or_else(|| DEFAULT_NAMESPACE.to_string()),
            openshift_version: required("OPENSHIFT_VERSION")?,
            control_plane_count: int(env, "CONTROL_PLANE_COUNT", DEFAULT_CONTROL_PLANE_COUNT)?,
            check_cluster_version: boolean(env, "CHECK_CLUSTER_VERSION")?,
            must_gather_image: string("MUST_GATHER_IMAGE"),
            notify_num_reboots: boolean(env, "NOTIFY_NUM_REBOOTS")?,
            dry_enable: boolean(env, "DRY_ENABLE")?,
            dry_fake_reboot_marker_path: string("DRY_FAKE_REBOOT_MARKER_PATH"),
            dry_cluster_hosts_path: env("DRY_CLUSTER_HOSTS_PATH"),
            pull_secret_token: string("PULL_SECRET_TOKEN"),
        })
    }
}

/// The [`fmt::Display`] line: the token never shows.
impl fmt::Debug for ControllerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ControllerConfig {{ {self} }}")
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
            // `<masked>` when set, empty when not.
            if self.pull_secret_token.is_empty() {
                ""
            } else {
                "<masked>"
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUIRED: &[(&str, &str)] = &[
        ("CLUSTER_ID", "c-1"),
        ("INVENTORY_URL", "http://svc:8090"),
        ("OPENSHIFT_VERSION", "4.17"),
    ];

    /// The required variables, then `extra` (a later duplicate wins).
    fn parse(extra: &[(&str, &str)]) -> Result<ControllerConfig, ConfigError> {
        let vars: Vec<_> = REQUIRED.iter().chain(extra).copied().collect();
        let env = |name: &str| {
            vars.iter()
                .rev()
                .find(|v| v.0 == name)
                .map(|v| v.1.to_string())
        };
        ControllerConfig::from_env(&env)
    }

    #[test]
    fn the_required_keys_give_the_defaults_for_the_rest_and_every_variable_is_read() {
        let defaults = ControllerConfig {
            cluster_id: "c-1".into(),
            inventory_url: "http://svc:8090".into(),
            skip_cert_verification: false,
            ca_cert_path: String::new(),
            namespace: "assisted-installer".into(),
            openshift_version: "4.17".into(),
            control_plane_count: 3,
            check_cluster_version: false,
            must_gather_image: String::new(),
            notify_num_reboots: false,
            dry_enable: false,
            dry_fake_reboot_marker_path: String::new(),
            dry_cluster_hosts_path: None,
            pull_secret_token: String::new(),
        };
        assert_eq!(parse(&[]).unwrap(), defaults);
        let every = parse(&[
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
        ]);
        let want = ControllerConfig {
            skip_cert_verification: true,
            ca_cert_path: "/etc/ca.pem".into(),
            namespace: "other".into(),
            control_plane_count: 1,
            check_cluster_version: true,
            must_gather_image: "quay.io/mg:1".into(),
            notify_num_reboots: true,
            dry_enable: true,
            dry_fake_reboot_marker_path: "/tmp/m".into(),
            dry_cluster_hosts_path: Some("/tmp/h.json".into()),
            pull_secret_token: "tok".into(),
            ..defaults
        };
        assert_eq!(every.unwrap(), want);
    }

    #[test]
    fn a_missing_required_key_is_named_in_go_words_in_table_order() {
        for missing in ["CLUSTER_ID", "INVENTORY_URL", "OPENSHIFT_VERSION"] {
            let vars: Vec<_> = REQUIRED.iter().filter(|(k, _)| *k != missing).collect();
            let env = |name: &str| vars.iter().find(|v| v.0 == name).map(|v| v.1.to_string());
            let e = ControllerConfig::from_env(&env).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("required key {missing} missing value")
            );
        }
        let e = ControllerConfig::from_env(&|_| None).unwrap_err();
        assert_eq!(
            e,
            ConfigError::Missing("CLUSTER_ID"),
            "the first in table order"
        );
        // Present but empty is accepted, and beats a default, as in Go.
        let c = parse(&[
            ("CLUSTER_ID", ""),
            ("OPENSHIFT_VERSION", ""),
            ("NAMESPACE", ""),
        ])
        .unwrap();
        assert_eq!(
            (c.cluster_id, c.openshift_version, c.namespace),
            Default::default()
        );
    }

    /// Go's `strconv` spellings (`go_values`, each spelling tested with the installer's flags
    /// in `go_flags`), wired to the variables; what no flag test has: "" and near misses.
    #[test]
    fn bools_and_ints_take_go_syntax_only() {
        for (s, want) in [("1", true), ("True", true), ("F", false), ("false", false)] {
            let c = parse(&[("CHECK_CLUSTER_VERSION", s)]).unwrap();
            assert_eq!(c.check_cluster_version, want, "{s}");
        }
        for (s, want) in [("-1", -1), ("0X10", 16), ("010", 8), ("1_000", 1000)] {
            let c = parse(&[("CONTROL_PLANE_COUNT", s)]).unwrap();
            assert_eq!(c.control_plane_count, want, "{s}");
        }
        let bad_bools = ["", "yes", "tRUE", " true", "2"].map(|v| ("DRY_ENABLE", v));
        let bad_ints = ["", "three", "0x", " 1", "99999999999999999999"];
        for (var, bad) in bad_bools
            .into_iter()
            .chain(bad_ints.map(|v| ("CONTROL_PLANE_COUNT", v)))
        {
            let e = parse(&[(var, bad)]).unwrap_err();
            let ConfigError::Invalid { name, value, .. } = &e else {
                panic!("{e:?}")
            };
            assert_eq!((*name, value.as_str()), (var, bad));
            assert!(e.to_string().contains(var), "{e}");
        }
    }

    #[test]
    fn the_token_never_shows() {
        let c = parse(&[("PULL_SECRET_TOKEN", "s3cr3t-token")]).unwrap();
        let debug = format!("{c:?}");
        let display = c.to_string();
        for text in [&debug, &display] {
            assert!(!text.contains("s3cr3t"), "{text}");
            assert!(text.contains("<masked>"), "{text}");
            assert!(text.contains("c-1"), "{text}");
        }
        assert!(display.starts_with("CLUSTER_ID=c-1 INVENTORY_URL=http://svc:8090 "));
        let none = parse(&[]).unwrap().to_string();
        assert!(none.ends_with("token=\"\""), "{none}");
    }
}
