//! The one reset of a disk after a failure past the stream (the stream resets its own, in
//! `image`): to an empty partition table, keeping saved partitions, unless the caller chose
//! to preserve the disk as it is; and, once a table is on the disk for good, the kernel's view
//! of it (`show_partitions`).

use anyhow::Result;
use std::path::{Path, PathBuf};

use crate::disk::gpt::DiskWindows;
use crate::disk::partitions::{publish, PartitionSpec};
use crate::disk::table;
use crate::disk::{Device, DeviceKind};
use crate::image::{reset_after_failure, WriteOptions};

/// The one reset after a streamed write failed or was given up (and after a failed `embed`):
/// the disk, reopened when the failure came while it was not held.
pub(super) fn reset(
    held: Option<Device>,
    path: &Path,
    sector_size: u64,
    opts: &WriteOptions,
    e: anyhow::Error,
) -> anyhow::Error {
    let dev = match held.map_or_else(|| Device::open_for_write(path), Ok) {
        Ok(dev) => dev,
        Err(reopen) => {
            let display = path.display();
            return reopen.context(format!("{e:#}; and reopening {display} to reset it failed"));
        }
    };
    let e = reset_after_failure(&dev, sector_size, opts, e);
    show_partitions(dev);
    e
}

/// Once the partition table on `dev` changed for good (written, reset, or a failed write that
/// left it as it was): let go of the disk and leave the kernel with exactly the partitions of
/// the table now on it, with their nodes, as a kernel that parses partition tables (or kpartx,
/// on a device-mapper disk) would. Then `lsblk`, the steps after the write and the user's own
/// tools find them, and no node is left for a partition that is gone. Best effort: the disk is
/// what it is whatever the kernel shows, so a failure here is only logged.
pub(crate) fn show_partitions(dev: Device) {
    if dev.kind() != DeviceKind::Block {
        return;
    }
    let table = table_on(&dev);
    let path = dev.path().to_path_buf();
    drop(dev);
    let table = table.unwrap_or_else(|e| {
        tracing::debug!("no readable partition table on {}: {e:#}", path.display());
        Vec::new()
    });
    match publish(&path, &table) {
        Ok(nodes) => tracing::info!("partitions of {}: {}", path.display(), node_list(&nodes)),
        Err(e) => tracing::warn!(
            "the kernel's partitions of {} could not be brought in line with its partition table ({e:#}); the disk itself is as reported, but steps that look for its partitions may not find them",
            path.display()
        ),
    }
}

/// The partition nodes for a log line: their paths, or "none".
pub(super) fn node_list(nodes: &[(u32, PathBuf)]) -> String {
    if nodes.is_empty() {
        return "none".to_string();
    }
    let paths: Vec<String> = nodes.iter().map(|(_, n)| n.display().to_string()).collect();
    paths.join(" ")
}

/// The partitions of the table on `dev`.
pub(super) fn table_on(dev: &Device) -> Result<Vec<PartitionSpec>> {
    let mut w = DiskWindows::load(dev)?;
    let gpt = table::read(&mut w, dev.sector_size())?;
    Ok(PartitionSpec::from_gpt(&gpt))
}
