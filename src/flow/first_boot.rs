//! After the write: what on the host may stop the installed system's first boot (see
//! `write::first_boot`), reported to the service as the info of `Writing image to disk`, and
//! carried into the stages the host then waits in, whose info the UI shows until the reboot
//! and, when the first boot fails, after it.

use super::writer::WriteRequest;
use super::Flow;
use crate::service::stages::HostStage;
use crate::write::{first_boot_warnings, FirstBootCheck};

/// The warnings about the disk `req` wrote, each reported. None with `--coreos-image` (no disk
/// was written). A dry run only logs them: its reports keep Go's exact sequence.
pub(super) fn check(f: &Flow, req: &WriteRequest) -> Vec<String> {
    if f.cfg.coreos_image.is_some() {
        return Vec::new();
    }
    let cmdline = std::fs::read_to_string(&f.paths.live_cmdline).unwrap_or_default();
    let network = &req.args.kargs_network;
    let warnings = first_boot_warnings(&FirstBootCheck {
        device: &req.device,
        sys: &f.paths.sys,
        dev: &f.paths.dev,
        copy_network: network.copy_network,
        append_kargs: &network.append_kargs,
        live_cmdline: &cmdline,
    });
    if f.cfg.dry_run {
        return Vec::new();
    }
    for w in &warnings {
        f.reporter.stage(HostStage::WritingImageToDisk, w.as_str());
    }
    warnings
}

/// A stage's `info` with the warnings after it.
pub(super) fn with_warnings(info: &str, warnings: &[String]) -> String {
    let parts = std::iter::once(info).chain(warnings.iter().map(String::as_str));
    let parts: Vec<&str> = parts.filter(|p| !p.is_empty()).collect();
    parts.join(". ")
}
