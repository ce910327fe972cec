//! The post-install steps on a disk (`postinstall` works on a mounted /boot; this mounts it):
//! make its partitions appear (BLKRRPART, then BLKPG from our own GPT parse), find /boot by
//! label, mount it in a private namespace, apply the edits, and put the kernel's view back as
//! it was. During a write (before the partition table is committed), or on a disk written
//! earlier (`embed`).

use anyhow::{anyhow, Context, Result};
use std::path::Path;

use crate::disk::boot::find_boot;
use crate::disk::gpt::DiskWindows;
use crate::disk::loopdev::LoopAttachment;
use crate::disk::mount::with_private_mount;
use crate::disk::partitions::{ensure_nodes, PartitionSpec};
use crate::disk::table;
use crate::disk::{Device, DeviceKind};
use crate::image::WriteOptions;
use crate::postinstall::{self, PostInstall};

use super::reset::reset;

/// Apply `post` to the /boot partition of `dev`, whose partitions are `table` (the table on the
/// disk, or the one about to be committed). Consumes the exclusive handle, because mount(2)
/// refuses a partition of a disk held with O_EXCL, and returns it reopened.
pub(crate) fn apply_to_disk(
    dev: Device,
    table: &[PartitionSpec],
    sector_size: u64,
    post: &PostInstall,
) -> Result<Device> {
    match dev.kind() {
        DeviceKind::Block => apply_on_block(dev, table, post),
        DeviceKind::File => {
            // A disk-image file: mount its /boot through a loop device.
            dev.sync()?;
            let attached = LoopAttachment::attach(dev.path(), sector_size)?;
            let loop_dev = Device::open_for_write(attached.path())?;
            let loop_dev = apply_on_block(loop_dev, table, post)?;
            loop_dev.sync()?;
            drop(loop_dev);
            drop(attached);
            Ok(dev)
        }
    }
}

fn apply_on_block(dev: Device, table: &[PartitionSpec], post: &PostInstall) -> Result<Device> {
    let boot = find_boot(&dev, table)?;
    let nodes = ensure_nodes(&dev, table)?;
    let node = nodes
        .node(boot.number)
        .with_context(|| {
            format!(
                "no device node for partition {} of {}",
                boot.number,
                dev.path().display()
            )
        })?
        .to_path_buf();
    let path = dev.path().to_path_buf();
    drop(dev);
    tracing::info!("applying post-install steps to /boot on {}", node.display());
    let applied = with_private_mount(&node, boot.fstype.mount_name(), |root| {
        postinstall::apply(root, post)
    });
    let dev = Device::open_for_write(&path)
        .with_context(|| format!("reopening {} after the post-install steps", path.display()))?;
    let released = nodes.release(&dev);
    applied.with_context(|| format!("post-install steps on {}", node.display()))?;
    released?;
    Ok(dev)
}

/// Best effort, after the final table is on disk: let a kernel that parses partition tables
/// show it (on one that does not, this drops any partition we added).
pub(crate) fn refresh_kernel_view(dev: &Device) {
    if dev.kind() == DeviceKind::Block {
        if let Err(e) = dev.reread_partitions() {
            tracing::debug!(
                "rereading the partition table of {}: {e}",
                dev.path().display()
            );
        }
    }
}

/// `post` on a disk written earlier, whose partition table is on the disk. A failure resets
/// the table (a half-applied configuration must not boot: the rule of a failed write), unless
/// `preserve_on_error`.
pub(crate) fn apply_to_written_disk(
    device: &Path,
    post: &PostInstall,
    preserve_on_error: bool,
) -> Result<()> {
    let dev = Device::open_for_write(device)?;
    let mut w = DiskWindows::load(&dev)?;
    let gpt = table::read(&mut w, dev.sector_size()).map_err(|e| {
        anyhow!(
            "{} has no readable GPT ({e}): write the image first",
            dev.path().display()
        )
    })?;
    let ss = gpt.sector_size;
    let table = PartitionSpec::from_gpt(&gpt);
    // Refuse a disk without a CoreOS /boot before anything changes (it would not be reset).
    find_boot(&dev, &table)?;
    let path = dev.path().to_path_buf();
    match apply_to_disk(dev, &table, ss, post) {
        Ok(dev) => {
            dev.sync()?;
            refresh_kernel_view(&dev);
            Ok(())
        }
        Err(e) if preserve_on_error => Err(e),
        // A half-applied configuration must not boot: reset like a failed write (embed takes
        // no --save-part* options: no partition is kept).
        Err(e) => Err(reset(None, &path, ss, &WriteOptions::default(), e)),
    }
}
