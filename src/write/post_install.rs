//! The post-install steps on a disk (`postinstall` works on a mounted /boot; this mounts it):
//! make its partitions appear (BLKRRPART, then BLKPG from our own GPT parse, or partition maps
//! on a device-mapper disk), find /boot by label, mount it in a private namespace, apply the
//! edits, and put the kernel's view back as it was. During a write (before the partition table
//! is committed), or on a disk written earlier (`embed`).

use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;

use crate::disk::boot::{find_boot, BootPartition};
use crate::disk::gpt::DiskWindows;
use crate::disk::loopdev::LoopAttachment;
use crate::disk::mount::{with_private_mount, with_private_mount_read_only};
use crate::disk::partitions::{ensure_nodes, publish, PartitionSpec};
use crate::disk::table;
use crate::disk::{Device, DeviceKind};
use crate::image::WriteOptions;
use crate::postinstall::{self, PostInstall};

use super::reset::{node_list, reset, show_partitions, table_on};

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
    let path = dev.path().to_path_buf();
    // mount(2) refuses a partition of a disk held with O_EXCL, and device-mapper cannot build
    // partition maps over one: let go of the disk until the steps are done.
    drop(dev);
    let nodes = ensure_nodes(&path, table)?;
    let applied = match nodes.node(boot.number) {
        Some(node) => {
            tracing::info!("applying post-install steps to /boot on {}", node.display());
            with_private_mount(node, boot.fstype, |root| postinstall::apply(root, post))
                .with_context(|| format!("post-install steps on {}", node.display()))
        }
        None => Err(anyhow!(
            "no device node for partition {} of {}",
            boot.number,
            path.display()
        )),
    };
    // The table is not on the disk yet: the kernel must not keep these partitions, and
    // partition maps would keep the disk from being opened exclusively again.
    let released = nodes.release();
    let dev = Device::open_for_write(&path)
        .with_context(|| format!("reopening {} after the post-install steps", path.display()))?;
    applied?;
    released?;
    Ok(dev)
}

/// After a host command changed the partition table of the block device `path` (growpart):
/// give the kernel's partitions, or a device-mapper disk's partition maps, the new table.
/// Unlike [`show_partitions`] a failure is an error: the caller's next step needs them.
pub(crate) fn reload_partitions(path: &Path) -> Result<()> {
    let dev = Device::open_for_write(path)?;
    let table = table_on(&dev)
        .with_context(|| format!("reading the partition table of {}", path.display()))?;
    drop(dev);
    let nodes = publish(path, &table)?;
    tracing::info!(
        "partitions of {} reloaded: {}",
        path.display(),
        node_list(&nodes)
    );
    Ok(())
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
    // Refuses a disk without a CoreOS /boot before anything changes (it would not be reset).
    let (ss, table, _) = written(&dev, ": write the image first")?;
    let path = dev.path().to_path_buf();
    match apply_to_disk(dev, &table, ss, post) {
        Ok(dev) => {
            dev.sync()?;
            show_partitions(dev);
            Ok(())
        }
        Err(e) if preserve_on_error => Err(e),
        // A half-applied configuration must not boot: reset like a failed write (embed takes
        // no --save-part* options: no partition is kept).
        Err(e) => Err(reset(None, &path, ss, &WriteOptions::default(), e)),
    }
}

/// The partition table on the written disk `dev`, its sector size and its /boot; `hint` ends
/// the error of a disk without a GPT.
fn written(dev: &Device, hint: &str) -> Result<(u64, Vec<PartitionSpec>, BootPartition)> {
    let mut w = DiskWindows::load(dev)?;
    let gpt = table::read(&mut w, dev.sector_size())
        .map_err(|e| anyhow!("{} has no readable GPT ({e}){hint}", dev.path().display()))?;
    let table = PartitionSpec::from_gpt(&gpt);
    let boot = find_boot(dev, &table)?;
    Ok((gpt.sector_size, table, boot))
}

/// Call `f` on the /boot of a written disk (its partition table on the disk), mounted
/// read-only: a block device through its partition node, a disk-image file through a loop
/// device. What the kexec load reads the installed system from.
pub(crate) fn with_written_boot<T: Send>(
    device: &Path,
    f: impl FnOnce(&Path) -> Result<T> + Send,
) -> Result<T> {
    let dev = Device::open_for_write(device)?;
    let (ss, table, boot) = written(&dev, "")?;
    let kind = dev.kind();
    // mount(2) refuses a partition of a disk held with O_EXCL.
    drop(dev);
    match kind {
        DeviceKind::Block => mount_boot_read_only(device, &table, &boot, f),
        DeviceKind::File => {
            let attached = LoopAttachment::attach(device, ss)?;
            mount_boot_read_only(attached.path(), &table, &boot, f)
        }
    }
}

fn mount_boot_read_only<T: Send>(
    disk: &Path,
    table: &[PartitionSpec],
    boot: &BootPartition,
    f: impl FnOnce(&Path) -> Result<T> + Send,
) -> Result<T> {
    // The table is on the disk for good: the nodes may stay, as after a write.
    let nodes = publish(disk, table)?;
    let Some((_, node)) = nodes.iter().find(|(n, _)| *n == boot.number) else {
        bail!(
            "no device node for partition {} of {}",
            boot.number,
            disk.display()
        );
    };
    with_private_mount_read_only(node, boot.fstype, f)
        .with_context(|| format!("reading /boot ({}) of {}", node.display(), disk.display()))
}
