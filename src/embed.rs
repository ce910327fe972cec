//! Post-install steps on a disk: make its partitions appear (BLKRRPART, then BLKPG from our own
//! GPT parse), find /boot by label, mount it in a private namespace, apply the edits, and put
//! the kernel's view back as it was.

use anyhow::{Context, Result};

use crate::disk::boot::find_boot;
use crate::disk::loopdev::LoopAttachment;
use crate::disk::mount::with_private_mount;
use crate::disk::partitions::{ensure_nodes, PartitionSpec};
use crate::disk::{Device, DeviceKind};
use crate::postinstall::{self, PostInstall};

/// Apply `post` to the /boot partition of `dev`, whose partitions are `table` (the table on the
/// disk, or the one about to be committed). Consumes the exclusive handle, because mount(2)
/// refuses a partition of a disk held with O_EXCL, and returns it reopened.
pub fn apply_to_disk(
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
pub fn refresh_kernel_view(dev: &Device) {
    if dev.kind() == DeviceKind::Block {
        if let Err(e) = dev.reread_partitions() {
            tracing::debug!(
                "rereading the partition table of {}: {e}",
                dev.path().display()
            );
        }
    }
}
