//! Where `write-image`'s options may come from besides its command line: `-c/--config-file`
//! YAML files, and with `--from-kernel-args` the live system's `/etc/coreos/installer.d` files
//! and `coreos.inst.*` kernel arguments. Each source becomes arguments; they are put before the
//! command line, lowest precedence first (installer.d files in name order, `-c` files in the
//! order given, kernel arguments, then the command line), and everything is parsed again by
//! clap with every option overriding itself: a later single value replaces an earlier one,
//! lists accumulate, as with coreos-installer.

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, CommandFactory, FromArgMatches};
use std::path::{Path, PathBuf};

use super::config_file::file_args;
use super::live_install::karg_args;
use super::write_image::WriteImageArgs;
use super::{Cli, Command};
use crate::host::root::{HostRoot, PID1_ROOT};
use crate::image::source::shown_url;

/// Where the live system's config files are, as coreos-installer's live install service.
const INSTALLER_D: &str = "/etc/coreos/installer.d";
const PROC_CMDLINE: &str = "/proc/cmdline";

/// Target devices, each with where it was given.
type Targets = Vec<(String, String)>;

/// `args` (parsed from `argv`: `write-image` and its arguments) with the options of its config
/// files and kernel arguments; `args` itself when it names neither.
pub fn resolve(args: WriteImageArgs, argv: &[String]) -> Result<WriteImageArgs> {
    if args.config_file.is_empty() && !args.from_kernel_args {
        return Ok(args);
    }
    let (front, mut devices) = sources(&args)?;
    let given = args.device.as_ref().map(|d| d.display().to_string());
    devices.extend(given.map(|d| ("the command line".to_string(), d)));
    let device = one_device(&devices)?;
    let (subcommand, rest) = argv.split_first().context("no subcommand")?;
    let mut equivalent = front.clone();
    equivalent.extend(without_sources(rest));
    if args.device.is_none() {
        equivalent.push(device.clone());
    }
    tracing::info!("installing as: write-image {}", for_log(&equivalent));
    let full = ["assisted-installer", subcommand.as_str()]
        .into_iter()
        .map(str::to_string)
        .chain(front)
        .chain(rest.iter().cloned());
    let cli = Cli::command().mut_subcommand(subcommand, |c| c.args_override_self(true));
    let matches = cli.try_get_matches_from(full).map_err(|e| {
        let rendered = e.render().to_string();
        let first = rendered.lines().next().unwrap_or_default();
        let first = first.trim_start_matches("error: ");
        anyhow!("with the options of the config files and kernel arguments: {first}")
    })?;
    let Command::WriteImage(mut resolved) = Cli::from_arg_matches(&matches)?.command else {
        bail!("{subcommand}: not write-image");
    };
    resolved.device = Some(PathBuf::from(device));
    Ok(resolved)
}

/// The arguments of `args`' config files and kernel arguments, lowest precedence first, and
/// the targets they name (where, which).
fn sources(args: &WriteImageArgs) -> Result<(Vec<String>, Targets)> {
    let mut front = Vec::new();
    let mut devices = Vec::new();
    let mut files = Vec::new();
    let mut kargs = None;
    if args.from_kernel_args {
        // The live install service retries forever: it has nothing to lose.
        front.push("--fetch-retries=infinite".to_string());
        let dir = args.installer_config_dir.clone();
        if let Some(dir) = dir.or_else(default_installer_d) {
            files = installer_d(&dir)?;
        }
        let path = args.cmdline.as_deref().unwrap_or(Path::new(PROC_CMDLINE));
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the kernel command line {}", path.display()))?;
        let k = karg_args(&text)
            .with_context(|| format!("the kernel command line {}", path.display()))?;
        k.warnings.iter().for_each(|w| tracing::warn!("{w}"));
        kargs = Some(k);
    }
    files.extend(args.config_file.iter().cloned());
    let command = WriteImageArgs::augment_args(clap::Command::new("write-image"));
    for file in &files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading the config file {}", file.display()))?;
        let f = file_args(&command, file, &text)?;
        front.extend(f.args);
        let from = || format!("config file {}", file.display());
        devices.extend(f.device.map(|d| (from(), d)));
    }
    if let Some(k) = kargs {
        front.extend(k.args);
        devices.extend(k.device.map(|d| ("coreos.inst.install_dev".to_string(), d)));
    }
    Ok((front, devices))
}

/// The live system's installer.d: here if it exists, else the host's through /proc/1/root (as
/// the live image's default paths, for a run in a container); none where neither is there
/// or the host cannot be seen.
fn default_installer_d() -> Option<PathBuf> {
    let here = Path::new(INSTALLER_D);
    if here.is_dir() {
        return Some(here.to_path_buf());
    }
    let host = HostRoot::At(PathBuf::from(PID1_ROOT)).path(here).ok()?;
    host.is_dir().then_some(host)
}

/// The regular files of `dir` (symlinks to one too) in name order; none if it does not exist.
fn installer_d(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading {}", dir.display()))?
            .path();
        if path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The one target all sources name. Two different ones are refused rather than one chosen: a
/// write to the wrong disk cannot be undone (coreos-installer refuses them too).
fn one_device(devices: &Targets) -> Result<String> {
    let Some((from, first)) = devices.first() else {
        bail!("no target device: give DEVICE, dest-device in a config file, or coreos.inst.install_dev");
    };
    if let Some((other, second)) = devices.iter().find(|(_, d)| d != first) {
        bail!("two target devices: {first} ({from}) and {second} ({other}); give one");
    }
    Ok(first.clone())
}

/// The command line without the options that name the sources (they are expanded already).
fn without_sources(argv: &[String]) -> Vec<String> {
    const WITH_VALUE: &[&str] = &["-c", "--config-file", "--cmdline", "--installer-config-dir"];
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in argv {
        let name = a.split('=').next().unwrap_or(a);
        let attached_c = a.starts_with("-c") && a.len() > 2 && !a.starts_with("--");
        if std::mem::take(&mut skip_value) || a == "--from-kernel-args" || attached_c {
            continue;
        }
        if WITH_VALUE.contains(&name) {
            skip_value = !a.contains('=');
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// Arguments as one line for the log: URLs without credentials or query (see [`shown_url`]),
/// arguments with spaces quoted.
fn for_log(args: &[String]) -> String {
    let safe = |a: &String| match a.split_once('=') {
        Some((option, url)) if option.starts_with("--") && url.contains("://") => {
            format!("{option}={}", shown_url(url))
        }
        _ if a.contains("://") => shown_url(a),
        _ => a.clone(),
    };
    let quoted = |a: String| if a.contains(' ') { format!("'{a}'") } else { a };
    args.iter()
        .map(safe)
        .map(quoted)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
#[path = "config_sources_tests.rs"]
mod tests;
