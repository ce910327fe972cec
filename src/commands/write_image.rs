//! `write-image`: the plan from the command line, then the write.

use anyhow::Result;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use crate::cli::write_image::WriteImageArgs;
use crate::image::progress::ProgressSink;
use crate::image::{Cancel, WriteSummary};
use crate::kexec::{load_installed, KexecLoader, Loaded};
use crate::write::{first_boot_warnings, FirstBootCheck};

pub fn run(
    args: &WriteImageArgs,
    progress: &dyn ProgressSink,
    stop: &Cancel,
) -> Result<WriteSummary> {
    let mut plan = args.plan()?;
    // Fetched once everything else checked out, still before the disk is opened.
    if let Some(config) = args.post.fetch_ignition(&plan.http, stop)? {
        plan.post.ignition = Some(config);
    }
    let summary = crate::write::run(&plan, progress, stop)?;
    // The live system's command line counts only when the disk is this host's.
    let is_disk = std::fs::metadata(&plan.device).is_ok_and(|m| m.file_type().is_block_device());
    let cmdline = if is_disk {
        std::fs::read_to_string("/proc/cmdline").unwrap_or_default()
    } else {
        String::new()
    };
    first_boot_warnings(&FirstBootCheck {
        device: &plan.device,
        sys: Path::new("/sys"),
        dev: Path::new("/dev"),
        copy_network: plan.post.network_dir.is_some(),
        append_kargs: &plan.post.append_kargs,
        live_cmdline: &cmdline,
    });
    Ok(summary)
}

/// `--kexec`, once the write succeeded: load the installed system of `device`. A failure is
/// one warning saying why: the disk is written and boots through the firmware as ever.
pub fn load_for_kexec(device: &Path, loader: &dyn KexecLoader) -> Option<Loaded> {
    let loaded = load_installed(device, loader).inspect_err(|e| {
        tracing::warn!("kexec: not loaded, reboot through the firmware as usual: {e:#}")
    });
    loaded.ok()
}

/// Peak resident memory of this process (VmHWM), for the summary.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib * 1024)
}
