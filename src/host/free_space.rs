//! How much of the install disk to leave unallocated when growing the root partition (Go
//! `calculateFreePercent`): skip-MCO grows the root by the size of the root partition itself,
//! the registry copy by what the registry data needs, and both leave the rest free, as a
//! percentage of the disk for `growpart --free-percent`.

use anyhow::{bail, Result};

use super::commands::CommandRunner;
use super::lsblk::{disk_sizes, DiskSizes};

/// The root partition of a CoreOS disk, the one that is grown.
pub(crate) const ROOT_PARTITION: u32 = 4;

/// The whole percentage of the disk to leave free so the root partition can grow by
/// `required` bytes (by the root partition's own size when `None`): `(disk − used − required)
/// × 100 / disk`, rounded down, or 0 when that does not fit. A CoreOS disk has at least four
/// partitions; fewer means this is not one.
pub(crate) fn free_percent(sizes: &DiskSizes, required: Option<u64>, device: &str) -> Result<u64> {
    if sizes.partitions.len() < ROOT_PARTITION as usize {
        bail!(
            "device {device} has {} partitions, expected at least {ROOT_PARTITION} (a CoreOS disk)",
            sizes.partitions.len()
        );
    }
    let used: u64 = sizes.partitions.iter().sum();
    let required = required.unwrap_or(sizes.partitions[ROOT_PARTITION as usize - 1]);
    let taken = used.saturating_add(required);
    if sizes.disk == 0 || taken >= sizes.disk {
        return Ok(0);
    }
    // u128: a multi-TiB disk times 100 fits in u64, but there is no reason to find out.
    Ok(((sizes.disk - taken) as u128 * 100 / sizes.disk as u128) as u64)
}

/// `free_percent` of `device` as `lsblk --bytes --json` reports it now.
pub(crate) fn calculate_free_percent(
    runner: &dyn CommandRunner,
    device: &str,
    required: Option<u64>,
) -> Result<u64> {
    free_percent(&disk_sizes(runner, device)?, required, device)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn disk(disk: u64, partitions: &[u64]) -> DiskSizes {
        DiskSizes {
            disk,
            partitions: partitions.to_vec(),
        }
    }

    #[test]
    fn the_free_percentage() {
        // 100 GiB disk, 1 + 127 MiB + 384 MiB + 3 GiB used: root 3 GiB more, the rest free:
        // (100 GiB - used - 3 GiB) * 100 / 100 GiB, rounded down.
        let coreos = disk(100 * GIB, &[1 << 20, 127 << 20, 384 << 20, 3 * GIB]);
        let four = disk(100 * GIB, &[GIB, GIB, GIB, GIB]);
        // 7 GiB used: the root's own 4 GiB more overflow the disk; 3 GiB fill it exactly.
        let small = disk(10 * GIB, &[GIB, GIB, GIB, 4 * GIB]);
        let cases = [
            (&coreos, None, 93),
            // A requested size replaces the root's; rounded down.
            (&four, Some(46 * GIB), 50),
            (&four, Some(46 * GIB + 1), 49),
            (&small, None, 0),
            (&small, Some(3 * GIB), 0),
            (&small, Some(u64::MAX), 0),
        ];
        for (sizes, required, expected) in cases {
            let got = free_percent(sizes, required, "/dev/sda").unwrap();
            assert_eq!(got, expected, "{sizes:?} {required:?}");
        }
        // Fewer than four partitions: not a CoreOS disk.
        let e = free_percent(&disk(10 * GIB, &[GIB, GIB, GIB]), None, "/dev/sdb").unwrap_err();
        assert_eq!(
            e.to_string(),
            "device /dev/sdb has 3 partitions, expected at least 4 (a CoreOS disk)"
        );
    }
}
