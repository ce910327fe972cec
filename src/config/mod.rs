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

use crate::image::proxy::{mask_url_password, DownloadProxy, ProxySetting};

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

    /// The proxies of the installer's own downloads (an `--installer-args` image and its
    /// signature): what its coreos-installer child got from Go, the environment (`env`) with
    /// the flags of [`Self::child_proxy_env`] on top. `--no-proxy` counts even alone, as the
    /// installer copies it into its own environment.
    pub(crate) fn download_proxy(&self, env: impl Fn(&str) -> Option<String>) -> DownloadProxy {
        let mut p = DownloadProxy::from_vars(env);
        let flag = |name: &str, v: &Option<String>| {
            v.as_ref()
                .map(|v| ProxySetting::new(format!("--{name}"), v))
        };
        if self.http_proxy.is_some() || self.https_proxy.is_some() {
            p.http = flag("http-proxy", &self.http_proxy).or(p.http);
            p.https = flag("https-proxy", &self.https_proxy).or(p.https);
        }
        p.no_proxy = flag("no-proxy", &self.no_proxy).or(p.no_proxy);
        p
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
    fn downloads_use_the_flags_over_the_environment_as_the_child_did() {
        let env = |k: &str| match k {
            "HTTP_PROXY" => Some("http://env-http:1".to_string()),
            "https_proxy" => Some("http://env-https:2".to_string()),
            "NO_PROXY" => Some(".env".to_string()),
            _ => None,
        };
        let shown = |c: &InstallerConfig| c.download_proxy(env).describe();
        // No flag: the environment, as the Go installer's child inherited it.
        let none = InstallerConfig::default();
        assert_eq!(
            shown(&none),
            "http URLs through http://env-http:1 (from HTTP_PROXY); https URLs through \
             http://env-https:2 (from https_proxy); not for .env (from NO_PROXY)"
        );
        // A flag replaces its variable; the other scheme keeps the environment's.
        let c = InstallerConfig {
            http_proxy: Some("http://u:pw@flag:3128".into()),
            no_proxy: Some("images.example".into()),
            ..InstallerConfig::default()
        };
        assert_eq!(
            shown(&c),
            "http URLs through http://u:<SECRET>@flag:3128 (from --http-proxy); https URLs \
             through http://env-https:2 (from https_proxy); not for images.example (from \
             --no-proxy)"
        );
        let c = InstallerConfig {
            https_proxy: Some("http://flag:3129".into()),
            ..InstallerConfig::default()
        };
        let p = c.download_proxy(|_| None);
        assert!(p.http.is_none() && p.no_proxy.is_none());
        assert_eq!(p.https.unwrap().value, "http://flag:3129");
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
    }
}
