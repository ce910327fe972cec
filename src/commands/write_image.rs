//! `write-image`: the plan from the command line, then the write.

use anyhow::Result;

use crate::cli::write_image::WriteImageArgs;
use crate::image::progress::ProgressSink;
use crate::image::{Cancel, WriteSummary};

pub fn run(
    args: &WriteImageArgs,
    progress: &dyn ProgressSink,
    stop: &Cancel,
) -> Result<WriteSummary> {
    crate::write::run(&args.plan()?, progress, stop)
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
