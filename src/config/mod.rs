//! The installer's configuration: every flag of the Go installer, typed.
//! The dispatch layer parses the command line, with Go's defaults, into it; the flows read it.
//!
//! Paths are `PathBuf`s, and a flag whose empty value means "not given" is an `Option` (`None`
//! for an empty value too, as the Go installer tests for `""`). Values passed through verbatim
//! to somewhere else (images, the controller's `must-gather-image`, `service-ips`) stay text.

pub(crate) mod cluster_hosts;
pub(crate) mod go_values;
pub mod kernel_options;
mod role;

pub use kernel_options::KernelOptions;
pub use role::Role;

use std::path::PathBuf;

/// Every flag of the Go installer. `Default` is the zero value (role master); the flags' non-zero
/// defaults are the command line's (`cli::go_flags`), as in Go.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstallerConfig {
    pub role: Role,
    pub cluster_id: String,
    pub infra_env_id: String,
    pub host_id: String,
    pub boot_device: PathBuf,
    pub url: String,
    pub openshift_version: String,
    pub mco_image: String,
    pub controller_image: String,
    pub agent_image: String,
    /// `--insecure`: skip TLS verification towards assisted-service (not coreos-installer's).
    pub insecure: bool,
    pub cacert: Option<PathBuf>,
    pub http_proxy: Option<String>,
    pub https_proxy: Option<String>,
    pub no_proxy: Option<String>,
    /// Comma-separated, rendered into the controller's host aliases.
    pub service_ips: String,
    /// 1 means single node (bootstrap in place). Forced to 0 for workers.
    pub control_plane_count: i64,
    pub check_cluster_version: bool,
    pub must_gather_image: String,
    /// `--format-disk`, repeatable.
    pub format_disks: Vec<PathBuf>,
    pub skip_installation_disk_cleanup: bool,
    pub enable_skip_mco_reboot: bool,
    pub notify_num_reboots: bool,
    /// A container image reference (installing onto the running root), not a path.
    pub coreos_image: Option<String>,
    /// `--installer-args`, decoded from its JSON array.
    pub installer_args: Vec<String>,
    pub verbose: bool,
    pub dry_run: bool,
    pub force_id: Option<String>,
    pub fake_reboot_marker_path: Option<PathBuf>,
    pub dry_run_cluster_hosts_path: Option<PathBuf>,
    /// Arguments left after the first non-flag argument (or after `--`): ignored, as in Go.
    pub ignored_args: Vec<String>,
}

impl InstallerConfig {
    /// Go's `SetDefaults`: a worker has no control-plane count; the infra-env defaults to the
    /// cluster.
    pub fn set_defaults(&mut self) {
        if self.role == Role::Worker {
            self.control_plane_count = 0;
        }
        if self.infra_env_id.is_empty() {
            self.infra_env_id = self.cluster_id.clone();
        }
    }

    /// Single node (bootstrap in place).
    pub(crate) fn is_single_node(&self) -> bool {
        self.control_plane_count == 1
    }

    /// The warning to log when arguments were ignored, naming them.
    pub(crate) fn ignored_args_warning(&self) -> Option<String> {
        if self.ignored_args.is_empty() {
            return None;
        }
        Some(format!(
            "ignoring {} command-line argument(s) after the first non-flag argument: {:?}. \
             Flags stop at the first non-flag argument; a boolean takes its value only as \
             --flag=value (\"--flag true\" ends the flags)",
            self.ignored_args.len(),
            self.ignored_args
        ))
    }

    /// The proxy variables children get (Go's executor): `HTTP_PROXY`, `HTTPS_PROXY` and
    /// `NO_PROXY` from the flags, only when `--http-proxy` or `--https-proxy` is set.
    pub(crate) fn child_proxy_env(&self) -> Vec<(String, String)> {
        if self.http_proxy.is_none() && self.https_proxy.is_none() {
            return Vec::new();
        }
        [
            ("HTTP_PROXY", &self.http_proxy),
            ("HTTPS_PROXY", &self.https_proxy),
            ("NO_PROXY", &self.no_proxy),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k.to_string(), v.clone()?)))
        .collect()
    }

    /// The configuration for the log: the flags hold no secret, but proxy URLs may carry a
    /// password, which is masked.
    pub(crate) fn redacted(&self) -> String {
        let mut c = self.clone();
        c.http_proxy = c.http_proxy.as_deref().map(mask_url_password);
        c.https_proxy = c.https_proxy.as_deref().map(mask_url_password);
        format!("{c:?}")
    }
}

/// `scheme://user:password@host` → `scheme://user:<SECRET>@host`.
fn mask_url_password(url: &str) -> String {
    let auth_start = url.find("://").map_or(0, |i| i + 3);
    let auth_end = url[auth_start..]
        .find('/')
        .map_or(url.len(), |i| auth_start + i);
    let authority = &url[auth_start..auth_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_string();
    };
    let userinfo = &authority[..at];
    let Some(colon) = userinfo.find(':') else {
        return url.to_string();
    };
    format!(
        "{}{}:<SECRET>{}",
        &url[..auth_start],
        &userinfo[..colon],
        &url[auth_start + at..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_env_for_children() {
        let c = InstallerConfig {
            no_proxy: Some("x".into()),
            ..InstallerConfig::default()
        };
        assert!(c.child_proxy_env().is_empty());
        let c = InstallerConfig {
            https_proxy: Some("http://p:1".into()),
            no_proxy: Some(".svc".into()),
            ..InstallerConfig::default()
        };
        assert_eq!(
            c.child_proxy_env(),
            vec![
                ("HTTPS_PROXY".to_string(), "http://p:1".to_string()),
                ("NO_PROXY".to_string(), ".svc".to_string())
            ]
        );
    }

    #[test]
    fn redacted_masks_proxy_passwords() {
        let c = InstallerConfig {
            http_proxy: Some("http://user:pa55@proxy:3128".into()),
            https_proxy: Some("user:pw@proxy2:3129/x".into()),
            host_id: "h1".into(),
            ..InstallerConfig::default()
        };
        let r = c.redacted();
        assert!(!r.contains("pa55") && !r.contains("pw@"), "{r}");
        assert!(r.contains("http://user:<SECRET>@proxy:3128"), "{r}");
        assert!(r.contains("user:<SECRET>@proxy2:3129/x"), "{r}");
        assert!(r.contains("host_id: \"h1\""));
        assert_eq!(mask_url_password("http://proxy:3128"), "http://proxy:3128");
        assert_eq!(mask_url_password("http://user@proxy"), "http://user@proxy");
        assert_eq!(mask_url_password(""), "");
    }
}
