//! `write-image`: plan, open the source (headers only), open the device, read the partitions
//! to save, stream and verify, apply the post-install steps, and only then write the table.

use anyhow::{Context, Result};

use crate::cli::write_image::{WriteImageArgs, WritePlan};
use crate::disk::gpt::DiskWindows;
use crate::disk::partitions::PartitionSpec;
use crate::disk::saved::SavedPartitions;
use crate::disk::Device;
use crate::embed;
use crate::image::progress::ProgressSink;
use crate::image::{
    reset_after_failure, source, stream_image, Cancel, Input, Interrupted, Origin, Staged,
    WriteOptions, WriteSummary,
};
use crate::postinstall::PostInstall;

pub fn run(
    args: &WriteImageArgs,
    progress: &dyn ProgressSink,
    stop: &Cancel,
) -> Result<WriteSummary> {
    run_plan(&args.plan()?, progress, stop)
}

/// The whole write from a checked plan (the install flows build one from `--installer-args`).
pub fn run_plan(
    plan: &WritePlan,
    progress: &dyn ProgressSink,
    stop: &Cancel,
) -> Result<WriteSummary> {
    let streamed = stream_plan(plan, progress, stop)?;
    streamed.finish(&plan.post, stop)
}

/// A verified image on a disk whose partition table is not written yet (it cannot boot), with
/// the disk still held exclusively: what the install flows keep while the control plane forms.
pub struct Streamed {
    dev: Device,
    staged: Staged,
    opts: WriteOptions,
}

impl Streamed {
    /// Apply the post-install steps, then write the partition table.
    pub fn finish(self, post: &PostInstall, stop: &Cancel) -> Result<WriteSummary> {
        let path = self.dev.path().display().to_string();
        finish(self.dev, self.staged, &self.opts, post, stop)
            .with_context(|| format!("writing the image to {path}"))
    }

    /// Give up: reset the disk to an empty partition table (keeping saved partitions).
    pub fn abandon(self, why: anyhow::Error) -> anyhow::Error {
        let ss = self.staged.layout().sector_size;
        reset_after_failure(&self.dev, ss, &self.opts, why)
    }
}

/// Stream and verify, without post-install steps and without writing the partition table.
pub fn stream_plan(
    plan: &WritePlan,
    progress: &dyn ProgressSink,
    stop: &Cancel,
) -> Result<Streamed> {
    let (input, dev): (Input, Device) = match &plan.origin {
        Origin::Given(location) => {
            // The source first: a wrong URL or an unreachable server fails before the disk
            // is opened.
            let src = source::open(location, &plan.http, stop)?;
            (src.into(), Device::open_for_write(&plan.device)?)
        }
        Origin::Live(live) => {
            // The device first: its sector size chooses the osmet file. A disk-image file has
            // none of its own; it gets the usual 512-byte image.
            let dev = Device::open_for_write(&plan.device)?;
            let ss = dev.sector_size().unwrap_or(512);
            (Input::Raw(Box::new(live.open(ss)?)), dev)
        }
    };
    let mut opts = plan.write.clone();
    if !plan.save.is_empty() {
        let mut w = DiskWindows::load(&dev)?;
        opts.saved =
            SavedPartitions::select(&mut w, dev.sector_size(), &plan.save).with_context(|| {
                format!(
                    "reading the partitions to save from {}",
                    dev.path().display()
                )
            })?;
    }
    let staged = stream_image(input, &dev, &opts, progress, stop)
        .with_context(|| format!("writing the image to {}", plan.device.display()))?;
    Ok(Streamed { dev, staged, opts })
}

/// Post-install on the streamed (not yet bootable) disk, then commit the partition table. Any
/// failure resets the table like a failed stream does.
fn finish(
    dev: Device,
    staged: Staged,
    opts: &WriteOptions,
    post: &PostInstall,
    stop: &Cancel,
) -> Result<WriteSummary> {
    let ss = staged.layout().sector_size;
    let path = dev.path().to_path_buf();
    let dev = if post.is_empty() {
        dev
    } else {
        let table = match staged.final_table(dev.size(), &opts.saved) {
            Ok(t) => PartitionSpec::from_gpt(&t),
            Err(e) => return Err(reset_after_failure(&dev, ss, opts, e)),
        };
        match embed::apply_to_disk(dev, &table, ss, post) {
            Ok(d) => d,
            Err(e) => {
                let d = Device::open_for_write(&path).with_context(|| {
                    format!("{e:#}; and reopening {} to reset it failed", path.display())
                })?;
                return Err(reset_after_failure(&d, ss, opts, e));
            }
        }
    };
    if stop.is_cancelled() {
        return Err(reset_after_failure(&dev, ss, opts, Interrupted.into()));
    }
    let summary = staged
        .commit(&dev, &opts.saved)
        .map_err(|e| reset_after_failure(&dev, ss, opts, e))?;
    embed::refresh_kernel_view(&dev);
    Ok(summary)
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
