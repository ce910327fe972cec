//! `write-image`: plan, open the source (headers only), open the device, stream.

use anyhow::{Context, Result};

use crate::cli::write_image::WriteImageArgs;
use crate::disk::Device;
use crate::image::progress::ProgressSink;
use crate::image::{source, write_image, Cancel, WriteSummary};

pub fn run(
    args: &WriteImageArgs,
    progress: &dyn ProgressSink,
    stop: &Cancel,
) -> Result<WriteSummary> {
    let plan = args.plan()?;
    // The source first: a wrong URL or an unreachable server fails before the disk is opened.
    let src = source::open(&plan.location, &plan.http, stop)?;
    let dev = Device::open_for_write(&plan.device)?;
    write_image(src, &dev, &plan.write, progress, stop)
        .with_context(|| format!("writing the image to {}", plan.device.display()))
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
