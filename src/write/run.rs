//! A write from a checked plan: open the source (headers only) and the device, read the
//! partitions to save, stream and verify; then the post-install steps and, last, the partition
//! table. A failure after the disk was touched resets it to an empty partition table (keeping
//! saved partitions): the stream resets in `image`, everything after it in `reset`.

use anyhow::{Context, Result};

use super::plan::WritePlan;
use super::post_install::apply_to_disk;
use super::reset::reset;
use super::reset::show_partitions;
use crate::disk::gpt::DiskWindows;
use crate::disk::partitions::PartitionSpec;
use crate::disk::saved::SavedPartitions;
use crate::disk::Device;
use crate::image::progress::ProgressSink;
use crate::image::{
    stream_image, Cancel, Input, Interrupted, Origin, Staged, WriteOptions, WriteSummary,
};
use crate::postinstall::PostInstall;

/// The whole write, post-install steps included.
pub fn run(plan: &WritePlan, progress: &dyn ProgressSink, stop: &Cancel) -> Result<WriteSummary> {
    stream(plan, progress, stop)?.finish(&plan.post, stop)
}

/// A verified image on a disk whose partition table is not written yet (it cannot boot), with
/// the disk still held exclusively: what the install flows keep while the control plane forms.
pub struct Streamed {
    dev: Device,
    staged: Staged,
    opts: WriteOptions,
}

/// Stream and verify, without post-install steps and without writing the partition table.
pub fn stream(plan: &WritePlan, progress: &dyn ProgressSink, stop: &Cancel) -> Result<Streamed> {
    let mut opts = plan.write.clone();
    let (input, dev): (Input, Device) = match &plan.origin {
        Origin::Given(location) => super::signed::open_given(plan, location, &mut opts, stop)?,
        Origin::Stream(spec) => super::signed::open_stream(plan, spec, &mut opts, stop)?,
        Origin::Live(live) => {
            // The device first: its sector size chooses the osmet file. A disk-image file has
            // none of its own; it gets the usual 512-byte image.
            let dev = Device::open_for_write(&plan.device)?;
            let ss = dev.sector_size().unwrap_or(512);
            (Input::Raw(Box::new(live.open(ss)?)), dev)
        }
    };
    if !plan.save.is_empty() {
        let mut w = DiskWindows::load(&dev)?;
        opts.saved = SavedPartitions::select(&mut w, dev.path(), dev.sector_size(), &plan.save)
            .with_context(|| {
                format!(
                    "reading the partitions to save from {}",
                    dev.path().display()
                )
            })?;
    }
    match stream_image(input, &dev, &opts, progress, stop) {
        Ok(staged) => Ok(Streamed { dev, staged, opts }),
        Err(e) => {
            // Reset (or left untouched): the kernel must not keep partitions the disk lost.
            show_partitions(dev);
            Err(e).with_context(|| format!("writing the image to {}", plan.device.display()))
        }
    }
}

impl Streamed {
    /// Apply the post-install steps, then write the partition table: from here on the disk
    /// boots. Any failure resets the table like a failed stream does.
    pub fn finish(self, post: &PostInstall, stop: &Cancel) -> Result<WriteSummary> {
        let Streamed { dev, staged, opts } = self;
        let path = dev.path().to_path_buf();
        let ss = staged.layout().sector_size;
        let mut held = Some(dev);
        let summary = post_install_then_commit(&mut held, staged, &opts.saved, post, stop)
            .map_err(|e| reset(held.take(), &path, ss, &opts, e))
            .with_context(|| format!("writing the image to {}", path.display()))?;
        if let Some(dev) = held {
            show_partitions(dev);
        }
        Ok(summary)
    }

    /// Give up: reset the disk to an empty partition table (keeping saved partitions).
    pub fn abandon(self, why: anyhow::Error) -> anyhow::Error {
        let path = self.dev.path().to_path_buf();
        let ss = self.staged.layout().sector_size;
        reset(Some(self.dev), &path, ss, &self.opts, why)
    }
}

/// The disk is in `held` from the stream to the commit, except while the post-install steps
/// have /boot mounted (mount(2) refuses a partition of a disk held with O_EXCL): it stays
/// `None` when they fail.
fn post_install_then_commit(
    held: &mut Option<Device>,
    staged: Staged,
    saved: &SavedPartitions,
    post: &PostInstall,
    stop: &Cancel,
) -> Result<WriteSummary> {
    const HELD: &str = "the disk is held from the stream to the commit";
    if !post.is_empty() {
        let size = held.as_ref().expect(HELD).size();
        let table = PartitionSpec::from_gpt(&staged.final_table(size, saved)?);
        let dev = held.take().expect(HELD);
        *held = Some(apply_to_disk(
            dev,
            &table,
            staged.layout().sector_size,
            post,
        )?);
    }
    if stop.is_cancelled() {
        return Err(Interrupted.into());
    }
    staged.commit(held.as_ref().expect(HELD), saved)
}
