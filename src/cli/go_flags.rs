//! The installer entrypoint's flags, parsed the way Go's `flag` package does (the agent launches
//! the installer with Go-style flags, as it launches the Go installer):
//!
//! - `-flag` and `--flag` are the same; values as `--flag value` or `--flag=value`;
//! - booleans are bare or `--flag=<bool>` (`1 0 t f T F true false TRUE FALSE True False`);
//!   `--flag true` leaves `true` as a positional argument;
//! - a value flag takes the next argument whatever it looks like (`--role --url` sets the role
//!   to `--url`);
//! - parsing stops at the first non-flag argument and after `--`; the rest is ignored (and
//!   reported through [`InstallerConfig::ignored_args_warning`], since older agents passing
//!   `--enable-skip-mco-reboot true` silently lost every later flag);
//! - an unknown flag, a missing value or a bad number or boolean is a [`UsageError`] (exit 2);
//!   `-h` / `-help` asks for the usage (exit 0).
//!
//! One table, `FLAG_USAGES`, lists the flags and their usage lines, and `field` names the field
//! each sets; the field's type says how it parses (Go's `flag.Value`), its type name in the usage
//! and which default the usage shows.
//!
//! Unlike Go, a bad `--installer-args` JSON is a usage error (exit 2), not a silent exit 0.
//! Parsing is pure: the environment is a parameter and nothing is logged or exported here (the
//! caller sets `NO_PROXY`/`no_proxy` from `--no-proxy` and logs the warning).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub(crate) use crate::config::go_values::{parse_go_bool, parse_go_int};
use crate::config::{InstallerConfig, Role};

/// Exit code for a command-line error (Go `flag.ExitOnError`).
const USAGE_EXIT_CODE: i32 = 2;

/// What the command line asks for.
// Built once per run and moved straight out: boxing the config would only add noise.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ParseOutcome {
    Run(InstallerConfig),
    /// `-h`, `-help`: print [`usage`] and exit 0.
    Help,
}

/// A command-line error. Print [`UsageError::render`] to stderr and exit with `exit_code`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct UsageError {
    pub message: String,
    pub exit_code: i32,
    /// Whether the usage text should follow the message.
    pub show_usage: bool,
}

impl UsageError {
    fn usage(message: impl Into<String>) -> Self {
        UsageError {
            message: message.into(),
            exit_code: USAGE_EXIT_CODE,
            show_usage: true,
        }
    }

    /// The message, followed by the usage text when relevant.
    pub(crate) fn render(&self) -> String {
        if self.show_usage {
            format!("{}\n{}", self.message, usage())
        } else {
            self.message.clone()
        }
    }
}

/// What the flags set: the configuration, and the two flags that are not configuration.
#[derive(Default)]
struct Parsed {
    cfg: InstallerConfig,
    /// `--help` is a flag of the Go installer (so `--help=false` is allowed); `-h` is the
    /// `flag` package's own and never reaches the table.
    help: bool,
    /// `--installer-args`, decoded once every flag is read, so that a later `--help` wins
    /// over bad JSON.
    installer_args_json: String,
}

/// A field a flag sets, the way Go's `flag.Value` is.
trait FlagValue {
    /// Go's `IsBoolFlag`: bare `--flag` means true and a value only comes as `--flag=value`.
    fn is_bool(&self) -> bool {
        false
    }
    /// The type name the usage shows after the flag ("" for booleans).
    fn type_name(&self) -> &'static str {
        "string"
    }
    /// Sets the value from the flag's text; the error is Go's reason text.
    fn set(&mut self, text: String) -> Result<(), &'static str>;
    /// The value the usage shows as the default, or `None` for the type's zero value, which
    /// Go does not show.
    fn shown_default(&self) -> Option<String>;
}

fn quoted_unless_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| format!("{s:?}"))
}

impl FlagValue for bool {
    fn is_bool(&self) -> bool {
        true
    }
    fn type_name(&self) -> &'static str {
        ""
    }
    fn set(&mut self, text: String) -> Result<(), &'static str> {
        *self = parse_go_bool(&text).ok_or("parse error")?;
        Ok(())
    }
    fn shown_default(&self) -> Option<String> {
        self.then(|| "true".to_string())
    }
}

impl FlagValue for i64 {
    fn type_name(&self) -> &'static str {
        "int"
    }
    fn set(&mut self, text: String) -> Result<(), &'static str> {
        *self = parse_go_int(&text)?;
        Ok(())
    }
    fn shown_default(&self) -> Option<String> {
        (*self != 0).then(|| self.to_string())
    }
}

/// Flags taking any text (a role too: the Go installer takes an unknown role down the master
/// path), shown quoted unless empty.
macro_rules! text_flags {
    ($($t:ty => $text:expr),+) => {$(
        impl FlagValue for $t {
            fn set(&mut self, text: String) -> Result<(), &'static str> {
                *self = <$t>::from(text);
                Ok(())
            }
            fn shown_default(&self) -> Option<String> {
                quoted_unless_empty(&$text(self))
            }
        }
    )+};
}

text_flags!(String => String::as_str, Role => Role::as_str, PathBuf => Path::to_string_lossy);

/// A string flag whose empty value means "not given".
impl<T: From<String> + AsRef<std::ffi::OsStr>> FlagValue for Option<T> {
    fn set(&mut self, text: String) -> Result<(), &'static str> {
        *self = non_empty(text).map(T::from);
        Ok(())
    }
    fn shown_default(&self) -> Option<String> {
        quoted_unless_empty(&self.as_ref()?.as_ref().to_string_lossy())
    }
}

/// A repeatable flag: each occurrence adds one.
impl FlagValue for Vec<PathBuf> {
    fn type_name(&self) -> &'static str {
        "value"
    }
    fn set(&mut self, text: String) -> Result<(), &'static str> {
        self.push(PathBuf::from(text));
        Ok(())
    }
    fn shown_default(&self) -> Option<String> {
        None
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// The flags, sorted by name as Go prints them, each with its usage line.
const FLAG_USAGES: &str = "\
agent-image: Image of the assisted-installer agent whose logs_sender uploads the host logs before the reboot
boot-device: The device to install to (symlinks are resolved)
cacert: Path to a custom CA certificate (PEM) for assisted-service
check-cluster-version: Passed to the controller (check-cluster-version)
cluster-id: The cluster id
control-plane-count: Number of control-plane nodes (1 means single node); forced to 0 for workers
controller-image: Assisted installer controller image
coreos-image: CoreOS container image to install to the running root instead of writing the disk
dry-run: Dry run: avoid or fake host-changing actions while talking to the service (env DRY_ENABLE)
dry-run-cluster-hosts-path: Dry run: JSON file describing the hosts of the cluster (env DRY_CLUSTER_HOSTS_PATH)
enable-skip-mco-reboot: Also deploy the release OS image so the first boot needs no MCO reboot
fake-reboot-marker-path: Dry run: file created instead of rebooting (env DRY_FAKE_REBOOT_MARKER_PATH)
force-id: Dry run: fake host id for the log file name and journal field (env DRY_HOST_ID)
format-disk: Disk whose first sector is zeroed before installing; may be repeated
help: Print this help
host-id: This host's id
http-proxy: Proxy URL for HTTP connections of child processes
https-proxy: Proxy URL for HTTPS connections of child processes
infra-env-id: This host's infra-env id (defaults to the cluster id)
insecure: Do not verify the TLS certificate of assisted-service
installer-args: JSON array of extra coreos-installer arguments
mco-image: Machine-config-operator image (bootstrap and single node)
must-gather-image: Custom must-gather image (passed to the controller)
no-proxy: Comma-separated destinations not to proxy
notify-num-reboots: Report the number of node reboots as events (passed to the controller)
openshift-version: OpenShift version being installed
role: The node role: master, worker or bootstrap
service-ips: Comma-separated IPs of assisted-service (host aliases of the controller)
skip-installation-disk-cleanup: Skip the LVM/RAID/wipefs cleanup of the boot device
url: Base URL of assisted-service: scheme, host and optional port
verbose: Log debug messages too";

/// The flags' names and usage lines.
pub(super) fn flags() -> impl Iterator<Item = (&'static str, &'static str)> {
    FLAG_USAGES
        .lines()
        .map(|line| line.split_once(": ").expect("name: usage"))
}

/// The field the flag `name` sets, `None` for a flag not in [`FLAG_USAGES`].
fn field<'a>(p: &'a mut Parsed, name: &str) -> Option<&'a mut dyn FlagValue> {
    Some(match name {
        "agent-image" => &mut p.cfg.agent_image,
        "boot-device" => &mut p.cfg.boot_device,
        "cacert" => &mut p.cfg.cacert,
        "check-cluster-version" => &mut p.cfg.check_cluster_version,
        "cluster-id" => &mut p.cfg.cluster_id,
        "control-plane-count" => &mut p.cfg.control_plane_count,
        "controller-image" => &mut p.cfg.controller_image,
        "coreos-image" => &mut p.cfg.coreos_image,
        "dry-run" => &mut p.cfg.dry_run,
        "dry-run-cluster-hosts-path" => &mut p.cfg.dry_run_cluster_hosts_path,
        "enable-skip-mco-reboot" => &mut p.cfg.enable_skip_mco_reboot,
        "fake-reboot-marker-path" => &mut p.cfg.fake_reboot_marker_path,
        "force-id" => &mut p.cfg.force_id,
        "format-disk" => &mut p.cfg.format_disks,
        "help" => &mut p.help,
        "host-id" => &mut p.cfg.host_id,
        "http-proxy" => &mut p.cfg.http_proxy,
        "https-proxy" => &mut p.cfg.https_proxy,
        "infra-env-id" => &mut p.cfg.infra_env_id,
        "insecure" => &mut p.cfg.insecure,
        "installer-args" => &mut p.installer_args_json,
        "mco-image" => &mut p.cfg.mco_image,
        "must-gather-image" => &mut p.cfg.must_gather_image,
        "no-proxy" => &mut p.cfg.no_proxy,
        "notify-num-reboots" => &mut p.cfg.notify_num_reboots,
        "openshift-version" => &mut p.cfg.openshift_version,
        "role" => &mut p.cfg.role,
        "service-ips" => &mut p.cfg.service_ips,
        "skip-installation-disk-cleanup" => &mut p.cfg.skip_installation_disk_cleanup,
        "url" => &mut p.cfg.url,
        "verbose" => &mut p.cfg.verbose,
        _ => return None,
    })
}

fn env_default(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(&format!("DRYCONFIG_{name}")).or_else(|| env(name))
}

/// Go's flag defaults: the zero value but for these.
fn go_defaults() -> InstallerConfig {
    InstallerConfig {
        openshift_version: "4.4".into(),
        controller_image: "quay.io/ocpmetal/assisted-installer-controller:latest".into(),
        agent_image: "quay.io/ocpmetal/assisted-installer-agent:latest".into(),
        ..InstallerConfig::default()
    }
}

/// Go's defaults, with the dry-run ones taken from the environment (`DRYCONFIG_<NAME>` first,
/// then `<NAME>`).
fn defaults_from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<InstallerConfig, UsageError> {
    let mut cfg = go_defaults();
    if let Some(v) = env_default(env, "DRY_ENABLE") {
        if !v.is_empty() {
            cfg.dry_run = parse_go_bool(&v).ok_or_else(|| UsageError {
                message: format!("envconfig error: DRY_ENABLE: invalid boolean value {v:?}"),
                exit_code: 1,
                show_usage: false,
            })?;
        }
    }
    let path = |name| {
        env_default(env, name)
            .and_then(non_empty)
            .map(PathBuf::from)
    };
    cfg.force_id = env_default(env, "DRY_HOST_ID").and_then(non_empty);
    cfg.fake_reboot_marker_path = path("DRY_FAKE_REBOOT_MARKER_PATH");
    cfg.dry_run_cluster_hosts_path = path("DRY_CLUSTER_HOSTS_PATH");
    Ok(cfg)
}

/// Parses the installer's arguments (without the program name) like Go's `flag` package, then
/// applies Go's `SetDefaults`. `env` supplies the dry-run defaults.
pub(crate) fn parse(
    args: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ParseOutcome, UsageError> {
    let mut parsed = Parsed {
        cfg: defaults_from_env(env)?,
        ..Parsed::default()
    };
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if arg.len() < 2 || !arg.starts_with('-') {
            break;
        }
        let dashes = if arg.as_bytes()[1] == b'-' {
            if arg.len() == 2 {
                i += 1; // "--" ends the flags and is consumed
                break;
            }
            2
        } else {
            1
        };
        let body = &arg[dashes..];
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(UsageError::usage(format!("bad flag syntax: {arg}")));
        }
        i += 1;
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        let Some(value) = field(&mut parsed, name) else {
            // Go's `flag` package answers an undefined -h itself, whatever its value.
            if name == "h" {
                return Ok(ParseOutcome::Help);
            }
            return Err(UsageError::usage(format!(
                "flag provided but not defined: -{name}"
            )));
        };
        let text = match inline {
            Some(v) => v.to_string(),
            None if value.is_bool() => "true".to_string(),
            None if i < args.len() => {
                i += 1;
                args[i - 1].clone()
            }
            None => {
                return Err(UsageError::usage(format!(
                    "flag needs an argument: -{name}"
                )))
            }
        };
        if let Err(reason) = value.set(text.clone()) {
            return Err(UsageError::usage(if value.is_bool() {
                format!("invalid boolean value {text:?} for -{name}: {reason}")
            } else {
                format!("invalid value {text:?} for flag -{name}: {reason}")
            }));
        }
    }
    let mut cfg = parsed.cfg;
    cfg.ignored_args = args[i..].to_vec();

    if parsed.help {
        return Ok(ParseOutcome::Help);
    }
    if !parsed.installer_args_json.is_empty() {
        let decoded: Option<Vec<String>> = serde_json::from_str(&parsed.installer_args_json)
            .map_err(|e| {
                UsageError::usage(format!(
                    "invalid value for -installer-args: expected a JSON array of strings, \
                     like [\"--append-karg\",\"ip=eth0:dhcp\"]: {e}"
                ))
            })?;
        cfg.installer_args = decoded.unwrap_or_default();
    }
    cfg.set_defaults();
    Ok(ParseOutcome::Run(cfg))
}

/// The usage text, in Go's `PrintDefaults` layout.
pub(crate) fn usage() -> String {
    let mut defaults = Parsed {
        cfg: go_defaults(),
        ..Parsed::default()
    };
    let mut out = String::from("Usage of assisted-installer:\n");
    for (name, text) in flags() {
        let value = field(&mut defaults, name).expect("every listed flag has a field");
        let _ = write!(out, "  -{name}");
        if !value.type_name().is_empty() {
            let _ = write!(out, " {}", value.type_name());
        }
        let _ = write!(out, "\n    \t{text}");
        if let Some(d) = value.shown_default() {
            let _ = write!(out, " (default {d})");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    fn run(a: &[&str]) -> InstallerConfig {
        match parse(&args(a), &no_env) {
            Ok(ParseOutcome::Run(c)) => c,
            other => panic!("{a:?}: {other:?}"),
        }
    }

    fn err(a: &[&str]) -> UsageError {
        match parse(&args(a), &no_env) {
            Err(e) => e,
            other => panic!("{a:?}: expected an error, got {other:?}"),
        }
    }

    /// Go's default values themselves: usage_lists_every_flag_go_style.
    #[test]
    fn defaults() {
        let c = run(&[]);
        assert_eq!(c, go_defaults());
        assert!(c.ignored_args_warning().is_none());
    }

    #[test]
    fn every_value_flag_in_all_syntaxes() {
        let flags = [
            ("role", "bootstrap"),
            ("cluster-id", "c-1"),
            ("infra-env-id", "ie-1"),
            ("host-id", "h-1"),
            ("boot-device", "/dev/sdb"),
            ("url", "http://10.0.0.1:6000"),
            ("openshift-version", "4.18"),
            ("mco-image", "quay.io/mco:1"),
            ("controller-image", "quay.io/c:1"),
            ("agent-image", "quay.io/a:1"),
            ("cacert", "/etc/ca.pem"),
            ("http-proxy", "http://p:3128"),
            ("https-proxy", "http://p:3129"),
            ("no-proxy", ".local,10.0.0.0/8"),
            ("service-ips", "10.0.0.1,10.0.0.2"),
            ("control-plane-count", "3"),
            ("must-gather-image", "{\"cnv\":\"q/x\"}"),
            ("format-disk", "/dev/sdc"),
            ("coreos-image", "quay.io/rhcos:x"),
            ("installer-args", "[\"-n\"]"),
            ("force-id", "f-1"),
            ("fake-reboot-marker-path", "/tmp/m"),
            ("dry-run-cluster-hosts-path", "/tmp/h.json"),
        ];
        let want = InstallerConfig {
            role: Role::Bootstrap,
            cluster_id: "c-1".into(),
            infra_env_id: "ie-1".into(),
            host_id: "h-1".into(),
            boot_device: "/dev/sdb".into(),
            url: "http://10.0.0.1:6000".into(),
            openshift_version: "4.18".into(),
            mco_image: "quay.io/mco:1".into(),
            controller_image: "quay.io/c:1".into(),
            agent_image: "quay.io/a:1".into(),
            cacert: Some("/etc/ca.pem".into()),
            http_proxy: Some("http://p:3128".into()),
            https_proxy: Some("http://p:3129".into()),
            no_proxy: Some(".local,10.0.0.0/8".into()),
            service_ips: "10.0.0.1,10.0.0.2".into(),
            control_plane_count: 3,
            must_gather_image: "{\"cnv\":\"q/x\"}".into(),
            format_disks: vec!["/dev/sdc".into()],
            coreos_image: Some("quay.io/rhcos:x".into()),
            installer_args: vec!["-n".into()],
            force_id: Some("f-1".into()),
            fake_reboot_marker_path: Some("/tmp/m".into()),
            dry_run_cluster_hosts_path: Some("/tmp/h.json".into()),
            ..go_defaults()
        };
        for dashes in ["-", "--"] {
            let separate: Vec<String> = flags
                .iter()
                .flat_map(|(name, value)| [format!("{dashes}{name}"), value.to_string()])
                .collect();
            let joined: Vec<String> = flags
                .iter()
                .map(|(name, value)| format!("{dashes}{name}={value}"))
                .collect();
            for a in [separate, joined] {
                assert_eq!(
                    parse(&a, &no_env),
                    Ok(ParseOutcome::Run(want.clone())),
                    "{a:?}"
                );
            }
        }
    }

    #[test]
    fn every_bool_flag() {
        type Get = fn(&InstallerConfig) -> bool;
        let flags: Vec<(&str, Get)> = vec![
            ("insecure", |c| c.insecure),
            ("check-cluster-version", |c| c.check_cluster_version),
            ("skip-installation-disk-cleanup", |c| {
                c.skip_installation_disk_cleanup
            }),
            ("enable-skip-mco-reboot", |c| c.enable_skip_mco_reboot),
            ("notify-num-reboots", |c| c.notify_num_reboots),
            ("verbose", |c| c.verbose),
            ("dry-run", |c| c.dry_run),
        ];
        for (name, get) in flags {
            for dashes in ["-", "--"] {
                assert!(get(&run(&[&format!("{dashes}{name}")])), "{name}");
                for t in ["1", "t", "T", "true", "TRUE", "True"] {
                    assert!(get(&run(&[&format!("{dashes}{name}={t}")])), "{name}={t}");
                }
                for f in ["0", "f", "F", "false", "FALSE", "False"] {
                    assert!(!get(&run(&[&format!("{dashes}{name}={f}")])), "{name}={f}");
                }
            }
            let e = err(&[&format!("--{name}=yes")]);
            assert_eq!(
                e.message,
                format!("invalid boolean value \"yes\" for -{name}: parse error")
            );
            assert_eq!(e.exit_code, 2);
        }
    }

    #[test]
    fn help_forms() {
        for a in ["-h", "--h", "-help", "--help", "-help=true", "--h=x"] {
            assert_eq!(parse(&args(&[a]), &no_env), Ok(ParseOutcome::Help), "{a}");
        }
        // Help wins over a bad --installer-args.
        assert_eq!(
            parse(&args(&["--installer-args", "{", "--help"]), &no_env),
            Ok(ParseOutcome::Help)
        );
        for a in [&["--help=false"][..], &["--help", "--help=false"]] {
            assert!(
                matches!(parse(&args(a), &no_env), Ok(ParseOutcome::Run(_))),
                "{a:?}"
            );
        }
    }

    #[test]
    fn where_parsing_stops_and_what_a_value_flag_takes() {
        // (arguments, then "<role> <host id> <insecure> | <the ignored rest>")
        let cases = [
            // A bool flag takes no separate value: "true" stops the parsing.
            (
                "--enable-skip-mco-reboot true --role worker",
                "master  false | true --role worker",
            ),
            (
                "--role worker extra --host-id h",
                "worker  false | extra --host-id h",
            ),
            (
                "--role worker -- --host-id h",
                "worker  false | --host-id h",
            ),
            ("--insecure --", "master  true | "),
            // A lone "-" is a positional argument.
            ("- --insecure", "master  false | - --insecure"),
            // A value flag takes the next argument whatever it is.
            ("--role --url x", "--url  false | x"),
            // The last value wins.
            ("--role worker --role=bootstrap", "bootstrap  false | "),
            ("--host-id=a=b", "master a=b false | "),
        ];
        for (a, expected) in cases {
            let c = run(&a.split(' ').collect::<Vec<_>>());
            let got = format!(
                "{} {} {} | {}",
                c.role,
                c.host_id,
                c.insecure,
                c.ignored_args.join(" ")
            );
            assert_eq!(got, expected, "{a}");
        }
        // --format-disk repeats, in either syntax.
        let a = "--format-disk /dev/sdb -format-disk=/dev/sdc --format-disk /dev/nvme0n1";
        assert_eq!(
            run(&a.split(' ').collect::<Vec<_>>()).format_disks,
            ["/dev/sdb", "/dev/sdc", "/dev/nvme0n1"].map(PathBuf::from)
        );
        let c = run(&["--enable-skip-mco-reboot", "true", "--role", "worker"]);
        assert!(c.enable_skip_mco_reboot);
        let w = c.ignored_args_warning().unwrap();
        assert!(w.contains("\"true\", \"--role\", \"worker\""), "{w}");
    }

    #[test]
    fn usage_errors() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--role", "master", "--high-availability-mode", "None"],
                "flag provided but not defined: -high-availability-mode",
            ),
            (&["---role", "x"], "bad flag syntax: ---role"),
            (&["-=x"], "bad flag syntax: -=x"),
            (&["--=x"], "bad flag syntax: --=x"),
            (
                &["--host-id", "h", "--boot-device"],
                "flag needs an argument: -boot-device",
            ),
            (&["--format-disk"], "flag needs an argument: -format-disk"),
            (
                &["-control-plane-count"],
                "flag needs an argument: -control-plane-count",
            ),
            (
                &["--control-plane-count", "three"],
                "invalid value \"three\" for flag -control-plane-count: parse error",
            ),
            (
                &["--control-plane-count=99999999999999999999"],
                "invalid value \"99999999999999999999\" for flag -control-plane-count: \
                 value out of range",
            ),
            (
                &["--control-plane-count="],
                "invalid value \"\" for flag -control-plane-count: parse error",
            ),
        ];
        for (a, message) in cases {
            let e = err(a);
            assert_eq!(
                (e.message.as_str(), e.exit_code, e.show_usage),
                (*message, 2, true),
                "{a:?}"
            );
        }
        let r = err(cases[0].0).render();
        assert!(r.starts_with("flag provided but not defined: -high-availability-mode\n"));
        assert!(r.contains("  -role string\n"));
    }

    #[test]
    fn go_int_parsing() {
        let cases = [
            ("0", Ok(0)),
            ("+7", Ok(7)),
            ("-2", Ok(-2)),
            ("0x10", Ok(16)),
            ("010", Ok(8)),
            ("1_000", Ok(1000)),
            ("0b101", Ok(5)),
            ("0o17", Ok(15)),
            ("0x_1F", Ok(31)),
            ("9223372036854775807", Ok(i64::MAX)),
            ("-9223372036854775808", Ok(i64::MIN)),
            ("9223372036854775808", Err("value out of range")),
            ("08", Err("parse error")),
            ("_1", Err("parse error")),
            ("1__0", Err("parse error")),
            ("1_", Err("parse error")),
            ("-", Err("parse error")),
            ("1.0", Err("parse error")),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_go_int(text), expected, "{text}");
        }
        // The flag takes Go's integers.
        let c = run(&["--control-plane-count=0x10"]);
        assert_eq!(c.control_plane_count, 16);
    }

    #[test]
    fn installer_args_decoding() {
        for empty in ["", "[]", "null"] {
            assert!(run(&["--installer-args", empty]).installer_args.is_empty());
        }
        assert_eq!(
            run(&[
                "--installer-args",
                r#"["-n","--append-karg","nameserver=8.8.8.8"]"#
            ])
            .installer_args,
            vec!["-n", "--append-karg", "nameserver=8.8.8.8"]
        );
        for bad in ["{", "[1]", "\"-n\"", "[\"-n\",]"] {
            let e = err(&["--installer-args", bad]);
            assert!(
                e.message
                    .starts_with("invalid value for -installer-args: expected a JSON array"),
                "{bad}: {}",
                e.message
            );
            assert_eq!(e.exit_code, 2);
        }
    }

    #[test]
    fn set_defaults_after_parsing() {
        // A worker has no control plane to count, whatever the flag's place.
        for a in [
            &["--role", "worker", "--control-plane-count", "3"][..],
            &["--control-plane-count", "3", "--role=worker"],
        ] {
            assert_eq!(run(a).control_plane_count, 0, "{a:?}");
        }
        let c = run(&["--role", "master", "--control-plane-count", "1"]);
        assert!(c.control_plane_count == 1 && c.is_single_node());
        let c = run(&["--role", "bootstrap", "--control-plane-count", "3"]);
        assert!(c.control_plane_count == 3 && !c.is_single_node());
        // The infra-env defaults to the cluster.
        assert_eq!(run(&["--cluster-id", "c-1"]).infra_env_id, "c-1");
        let c = run(&["--cluster-id", "c-1", "--infra-env-id", "ie-2"]);
        assert_eq!(c.infra_env_id, "ie-2");
    }

    #[test]
    fn empty_value_means_not_given() {
        let c = run(&[
            "--cacert=",
            "--http-proxy",
            "",
            "--coreos-image=",
            "--force-id=",
            "--fake-reboot-marker-path=",
        ]);
        assert_eq!(c, go_defaults());
        // The last value wins, an empty one too.
        assert_eq!(run(&["--cacert", "/ca.pem", "--cacert="]).cacert, None);
        let env = |k: &str| k.starts_with("DRY_").then(String::new);
        let Ok(ParseOutcome::Run(c)) = parse(&[], &env) else {
            panic!()
        };
        assert_eq!(c, go_defaults());
    }

    #[test]
    fn dry_flags_from_env() {
        let env: HashMap<&str, &str> = HashMap::from([
            ("DRY_ENABLE", "true"),
            ("DRYCONFIG_DRY_HOST_ID", "forced-1"),
            ("DRY_HOST_ID", "ignored"),
            ("DRY_FAKE_REBOOT_MARKER_PATH", "/tmp/marker"),
            ("DRY_CLUSTER_HOSTS_PATH", "/tmp/hosts.json"),
        ]);
        let lookup = |k: &str| env.get(k).map(|v| v.to_string());
        let Ok(ParseOutcome::Run(c)) = parse(&[], &lookup) else {
            panic!()
        };
        assert!(c.dry_run);
        assert_eq!(c.force_id.as_deref(), Some("forced-1"));
        assert_eq!(
            c.fake_reboot_marker_path.as_deref(),
            Some(Path::new("/tmp/marker"))
        );
        assert_eq!(
            c.dry_run_cluster_hosts_path.as_deref(),
            Some(Path::new("/tmp/hosts.json"))
        );

        // Flags override the environment.
        let Ok(ParseOutcome::Run(c)) = parse(
            &args(&["--dry-run=false", "--force-id", "flag-id"]),
            &lookup,
        ) else {
            panic!()
        };
        assert!(!c.dry_run);
        assert_eq!(c.force_id.as_deref(), Some("flag-id"));

        // The prefixed name wins over the bare one.
        let env2 = |k: &str| match k {
            "DRYCONFIG_DRY_ENABLE" => Some("0".to_string()),
            "DRY_ENABLE" => Some("1".to_string()),
            _ => None,
        };
        let Ok(ParseOutcome::Run(c)) = parse(&[], &env2) else {
            panic!()
        };
        assert!(!c.dry_run);

        let bad = |k: &str| (k == "DRY_ENABLE").then(|| "maybe".to_string());
        let e = parse(&[], &bad).unwrap_err();
        assert_eq!(e.exit_code, 1);
        assert!(!e.show_usage);
        assert!(e.message.contains("DRY_ENABLE"));
        // An empty variable is not given: empty_value_means_not_given.
    }

    #[test]
    fn usage_lists_every_flag_go_style() {
        let u = usage();
        assert!(u.starts_with("Usage of assisted-installer:\n"));
        for (name, _) in flags() {
            assert!(u.contains(&format!("  -{name}")), "{name}");
        }
        assert!(u.contains("  -role string\n    \tThe node role: master, worker or bootstrap (default \"master\")\n"));
        assert!(u.contains("  -openshift-version string\n    \tOpenShift version being installed (default \"4.4\")\n"));
        assert!(u.contains("  -control-plane-count int\n"));
        assert!(u.contains("  -format-disk value\n"));
        assert!(u.contains("  -insecure\n    \tDo not verify"));
        assert!(u.contains("(default \"quay.io/ocpmetal/assisted-installer-agent:latest\")"));
        assert!(u.contains("(default \"quay.io/ocpmetal/assisted-installer-controller:latest\")"));
        // Zero values are not shown, as in Go: only the four non-empty defaults are.
        assert_eq!(u.matches("(default ").count(), 4, "{u}");
        let names: Vec<&str> = flags().map(|(name, _)| name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert_eq!(names.len(), 31);
    }
}
