//! Empty disks for the tests: test images start from one.

use anyhow::Result;

use super::DiskWindows;
use crate::disk::table;

/// An empty, valid GPT (fresh random disk GUID, no partitions) and a protective MBR over
/// zeroed first and last MiB of a disk of `disk_size` bytes (test images start from one).
pub fn empty_table(disk_size: u64, sector_size: u64) -> Result<DiskWindows> {
    let mut w = DiskWindows::zeroed(disk_size)?;
    table::write_new(&mut w, sector_size, &[], "an empty GPT")?;
    Ok(w)
}
