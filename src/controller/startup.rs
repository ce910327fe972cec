//! What the controller knows before it touches any API. Each failure here is a startup error,
//! which the process turns into exit code 1 (the Job restarts the container).
//!
//! 1. The environment: `required key CLUSTER_ID missing value` and the like.
//! 2. The token: the Secret mounted as a file, with the environment's `PULL_SECRET_TOKEN` only
//!    when that file does not exist. A file that exists but cannot be read is an error (Go:
//!    fatal). The token is trimmed of surrounding whitespace; an existing file that is empty (or
//!    only whitespace) gives an empty token, without the environment fallback.
//! 3. Dry mode only: the cluster-hosts file is parsed, then the controller waits, checking every
//!    second, for the fake-reboot marker file.
//! 4. The log file is opened; the caller then installs the log and writes the
//!    configuration, token masked, as the first line ([`config_line`]).
//!
//! Deliberate differences from Go, both in dry mode only (load testing): an unset
//! `DRY_CLUSTER_HOSTS_PATH` is reported as such (Go fails reading the path ""), and an empty
//! `DRY_FAKE_REBOOT_MARKER_PATH` is an error instead of a wait that can never end.

use anyhow::{anyhow, bail, Context, Result};
use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::config::ControllerConfig;
use super::log::LOG_PATH;
use super::tasks::logs::MUST_GATHER_DIR;
use crate::clock::poll;
use crate::clock::{Clock, Stop};
use crate::config::cluster_hosts::{self, ClusterHost};
use crate::kube::client::SERVICE_ACCOUNT_DIR;

/// Where the Job mounts the Secret's `pull-secret-token` item.
const TOKEN_PATH: &str = "/etc/assisted-installer-controller/token";
/// How often dry mode looks for the fake-reboot marker.
pub(crate) const DRY_MARKER_POLL: Duration = Duration::from_secs(1);

/// Test hooks: the environment variables that move the token and log files, the service
/// account and the must-gather directory (the Go controller has none; the Job never sets them).
pub(crate) const TOKEN_FILE_ENV: &str = "ASSISTED_CONTROLLER_TOKEN_FILE";
pub(crate) const LOG_FILE_ENV: &str = "ASSISTED_CONTROLLER_LOG_FILE";
pub(crate) const SERVICE_ACCOUNT_DIR_ENV: &str = "ASSISTED_CONTROLLER_SERVICE_ACCOUNT_DIR";
pub(crate) const MUST_GATHER_DIR_ENV: &str = "ASSISTED_CONTROLLER_MUST_GATHER_DIR";

/// The files startup reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Paths {
    pub token: PathBuf,
    pub log_file: PathBuf,
    /// The pod's service account (token and CA), used when there is no bootstrap kubeconfig.
    pub service_account_dir: PathBuf,
    /// Where must-gather runs and leaves its tarball.
    pub must_gather_dir: PathBuf,
}

impl Paths {
    /// The Go paths, unless the test hooks move them.
    pub(crate) fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Self {
        let path = |hook: &str, go: &str| PathBuf::from(env(hook).as_deref().unwrap_or(go));
        Paths {
            token: path(TOKEN_FILE_ENV, TOKEN_PATH),
            log_file: path(LOG_FILE_ENV, LOG_PATH),
            service_account_dir: path(SERVICE_ACCOUNT_DIR_ENV, SERVICE_ACCOUNT_DIR),
            must_gather_dir: path(MUST_GATHER_DIR_ENV, MUST_GATHER_DIR),
        }
    }
}

/// What startup produces.
#[derive(Debug)]
pub(crate) struct Startup {
    /// The configuration, with the token file's content in `pull_secret_token`.
    pub config: ControllerConfig,
    /// Dry mode's pretend hosts (empty otherwise).
    pub dry_hosts: Vec<ClusterHost>,
    /// The log file, open for appending.
    pub log_file: File,
}

/// Runs the startup over the variables `env` gives; `stop` ends the dry-mode wait.
pub(crate) fn prepare(
    env: &dyn Fn(&str) -> Option<String>,
    paths: &Paths,
    clock: &dyn Clock,
    stop: &dyn Stop,
) -> Result<Startup> {
    let mut config = ControllerConfig::from_env(env)?;
    config.pull_secret_token = read_token(&paths.token, env("PULL_SECRET_TOKEN").as_deref())?;
    let dry_hosts = if config.dry_enable {
        dry_mode(&config, clock, stop)?
    } else {
        Vec::new()
    };
    let log_file = super::log::open_log_file(&paths.log_file)?;
    Ok(Startup {
        config,
        dry_hosts,
        log_file,
    })
}

/// The token from `path`, or `env_fallback` (unset: empty) when `path` does not exist.
fn read_token(path: &Path, env_fallback: Option<&str>) -> Result<String> {
    let raw = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == ErrorKind::NotFound => env_fallback.unwrap_or_default().to_string(),
        Err(e) => {
            return Err(e).with_context(|| format!("reading the token file {}", path.display()))
        }
    };
    Ok(raw.trim().to_string())
}

/// Dry mode: the hosts file, then the wait for the marker.
fn dry_mode(
    config: &ControllerConfig,
    clock: &dyn Clock,
    stop: &dyn Stop,
) -> Result<Vec<ClusterHost>> {
    let hosts_path = config
        .dry_cluster_hosts_path
        .as_deref()
        .ok_or_else(|| anyhow!("DRY_ENABLE is set but DRY_CLUSTER_HOSTS_PATH is not"))?;
    let hosts = cluster_hosts::load(Path::new(hosts_path))?;
    let marker = Path::new(&config.dry_fake_reboot_marker_path);
    if marker.as_os_str().is_empty() {
        bail!("DRY_ENABLE is set but DRY_FAKE_REBOOT_MARKER_PATH is empty");
    }
    poll(clock, stop, DRY_MARKER_POLL, None, || marker.exists())
        .with_context(|| format!("waiting for the dry-run reboot marker {}", marker.display()))?;
    Ok(hosts)
}

/// The log's first line: the configuration, token masked.
pub(crate) fn config_line(config: &ControllerConfig) -> String {
    format!("Start running the assisted-installer-controller. Configuration: {config}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{FakeClock, NeverStop};

    /// The required variables, then `extra` (a later duplicate wins).
    fn env(extra: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let required = [
            ("CLUSTER_ID", "c-1"),
            ("INVENTORY_URL", "http://svc:8090"),
            ("OPENSHIFT_VERSION", "4.17"),
        ];
        let vars: Vec<(String, String)> = (required.iter().chain(extra))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| vars.iter().rev().find(|v| v.0 == k).map(|v| v.1.clone())
    }

    fn paths(dir: &Path) -> Paths {
        Paths {
            token: dir.join("token"),
            log_file: dir.join("controller_logs.log"),
            service_account_dir: dir.join("serviceaccount"),
            must_gather_dir: dir.join("must-gather"),
        }
    }

    #[test]
    fn the_go_paths_unless_the_test_hooks_move_them() {
        let go = Paths {
            token: "/etc/assisted-installer-controller/token".into(),
            log_file: "/tmp/controller_logs.log".into(),
            service_account_dir: "/var/run/secrets/kubernetes.io/serviceaccount".into(),
            must_gather_dir: "/tmp/must-gather-logs".into(),
        };
        assert_eq!(Paths::from_env(&|_| None), go);
        let moved = Paths::from_env(&|k| Some(format!("/x/{k}")));
        let at = |hook: &str| PathBuf::from(format!("/x/{hook}"));
        let want = Paths {
            token: at(TOKEN_FILE_ENV),
            log_file: at(LOG_FILE_ENV),
            service_account_dir: at(SERVICE_ACCOUNT_DIR_ENV),
            must_gather_dir: at(MUST_GATHER_DIR_ENV),
        };
        assert_eq!(moved, want);
    }

    #[test]
    fn prepares_config_token_and_log_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        let clock = FakeClock::new();
        let env = env(&[("PULL_SECRET_TOKEN", " env-token\n")]);
        // No token file: the environment's, trimmed.
        let s = prepare(&env, &p, &clock, &NeverStop).unwrap();
        assert_eq!(s.config.pull_secret_token, "env-token");
        assert_eq!(read_token(&p.token, None).unwrap(), "");
        // The file wins, trimmed; an empty one gives an empty token, no fallback.
        for (file, token) in [("  file-token\n", "file-token"), (" \n\t", "")] {
            std::fs::write(&p.token, file).unwrap();
            let s = prepare(&env, &p, &clock, &NeverStop).unwrap();
            assert_eq!(s.config.pull_secret_token, token);
            assert_eq!(s.config.cluster_id, "c-1");
            assert!(s.dry_hosts.is_empty());
        }
        assert!(clock.sleeps().is_empty());
        assert!(p.log_file.exists(), "opened (appending: `log`'s test)");
        let line = config_line(&prepare(&env, &p, &clock, &NeverStop).unwrap().config);
        assert!(line.starts_with("Start running the assisted-installer-controller."));
    }

    #[test]
    fn each_step_fails_before_the_log_file_exists() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        let clock = FakeClock::new();
        let fail = |env: &dyn Fn(&str) -> Option<String>, p: &Paths| {
            format!("{:#}", prepare(env, p, &clock, &NeverStop).unwrap_err())
        };
        let no_id = |k: &str| env(&[])(k).filter(|_| k != "CLUSTER_ID");
        assert_eq!(fail(&no_id, &p), "required key CLUSTER_ID missing value");
        let e = fail(&env(&[("NOTIFY_NUM_REBOOTS", "yes")]), &p);
        assert!(e.contains("NOTIFY_NUM_REBOOTS"), "{e}");
        // A token path that exists but cannot be read as a file.
        std::fs::create_dir(&p.token).unwrap();
        let e = fail(&env(&[]), &p);
        let want = format!("reading the token file {}", p.token.display());
        assert!(e.starts_with(&want), "{e}");
        assert!(!p.log_file.exists());
        // And the log file's own failure.
        let bad = Paths {
            token: dir.path().join("none"),
            log_file: dir.path().join("no-dir").join("log"),
            ..paths(dir.path())
        };
        let e = fail(&env(&[]), &bad);
        assert!(e.starts_with("opening the log file"), "{e}");
        assert!(e.contains("no-dir"), "{e}");
    }

    #[test]
    fn dry_mode_parses_the_hosts_and_waits_for_the_marker_every_second() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("hosts.json");
        let marker = dir.path().join("rebooted");
        let json = serde_json::json!([
            {"hostname": "master-1", "ip": "192.0.2.11", "rebootMarkerPath": marker},
        ]);
        std::fs::write(&hosts, json.to_string()).unwrap();
        let (h, m) = (hosts.display().to_string(), marker.display().to_string());
        let env = env(&[
            ("DRY_ENABLE", "true"),
            ("DRY_CLUSTER_HOSTS_PATH", &h),
            ("DRY_FAKE_REBOOT_MARKER_PATH", &m),
        ]);
        // The marker appears during the third wait.
        struct MarkerClock<'a> {
            fake: FakeClock,
            marker: &'a Path,
        }
        impl Clock for MarkerClock<'_> {
            fn sleep(&self, d: Duration) {
                self.fake.sleep(d);
                if self.fake.sleeps().len() == 3 {
                    std::fs::write(self.marker, "").unwrap();
                }
            }
            fn now(&self) -> std::time::Instant {
                self.fake.now()
            }
        }
        let clock = MarkerClock {
            fake: FakeClock::new(),
            marker: &marker,
        };
        let s = prepare(&env, &paths(dir.path()), &clock, &NeverStop).unwrap();
        assert_eq!(s.dry_hosts.len(), 1);
        assert_eq!(s.dry_hosts[0].hostname, "master-1");
        assert_eq!(clock.fake.sleeps(), vec![Duration::from_secs(1); 3]);
    }

    #[test]
    fn dry_mode_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = paths(dir.path());
        let hosts = dir.path().join("hosts.json");
        let h = hosts.display().to_string();
        let (clock, stop) = (FakeClock::new(), crate::image::Cancel::new());
        stop.cancel();
        let fail = |env: &[(&str, &str)], hosts_file: &str| {
            std::fs::write(&hosts, hosts_file).unwrap();
            let env = self::env(&[&[("DRY_ENABLE", "1")][..], env].concat());
            format!("{:#}", prepare(&env, &p, &clock, &stop).unwrap_err())
        };
        let e = fail(&[], "[]");
        assert!(e.contains("DRY_CLUSTER_HOSTS_PATH"), "{e}");
        let e = fail(&[("DRY_CLUSTER_HOSTS_PATH", &h)], "not json");
        assert!(e.starts_with("parsing the dry-run cluster hosts"), "{e}");
        let e = fail(&[("DRY_CLUSTER_HOSTS_PATH", &h)], "[]");
        assert!(e.contains("DRY_FAKE_REBOOT_MARKER_PATH"), "{e}");
        // A stop ends the marker wait.
        let marker = ("DRY_FAKE_REBOOT_MARKER_PATH", "/nonexistent/marker");
        let e = fail(&[("DRY_CLUSTER_HOSTS_PATH", &h), marker], "[]");
        let want = "waiting for the dry-run reboot marker /nonexistent/marker: context canceled";
        assert_eq!(e, want);
        assert!(!p.log_file.exists());
    }
}
