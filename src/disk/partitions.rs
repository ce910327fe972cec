//! Make the partitions of a freshly written disk appear as device nodes without udev, and keep
//! the kernel's view in step with the table on the disk.
//!
//! `BLKRRPART` asks the kernel to parse the table, but kernels built without partition-table
//! parsers (and some container setups) succeed without creating anything. So after the reread
//! we compare what sysfs shows with our own GPT parse, and add what is missing (or wrong) with
//! `BLKPG`, as `partx -a` does. devtmpfs then creates the nodes; where /dev is not devtmpfs we
//! create them ourselves. udev is used only when it runs, and only to settle. Device-mapper
//! disks (multipath, linear) have no kernel partitions at all: they get kpartx-style partition
//! maps (`partition_maps`).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::clock::{Failure, NeverStop, Schedule, WaitError, SYSTEM_CLOCK};

use super::partition_maps::{self, DmDisk};
use super::sys;
use super::sysfs::{self, KernelPartition};
use super::udev::{settle_udev, wait_until};

pub(crate) use super::table::PartitionSpec;

/// Node name of partition `n` of disk `disk`: a `p` goes between when the disk name ends in a
/// digit (loop0p3, nvme0n1p3, mmcblk0p3), not otherwise (sda3, vda3), as kpartx's default.
pub(crate) fn partition_name(disk: &str, n: u32) -> String {
    format!("{disk}{}{n}", partition_maps::default_delimiter(disk))
}

/// What to do so the kernel's partitions match ours: (delete, add) lists. Pure.
pub(crate) fn reconcile(
    want: &[PartitionSpec],
    have: &[KernelPartition],
) -> (Vec<u32>, Vec<PartitionSpec>) {
    let same = |w: &PartitionSpec, k: &KernelPartition| {
        (w.number, w.start, w.length) == (k.number, k.start, k.length)
    };
    let delete = have.iter().filter(|k| !want.iter().any(|w| same(w, k)));
    let add = want.iter().filter(|w| !have.iter().any(|k| same(w, k)));
    (delete.map(|k| k.number).collect(), add.cloned().collect())
}

/// What we changed in the kernel to get a disk's partition nodes, so it can be undone.
#[derive(Debug)]
enum Changes {
    /// Partitions added with BLKPG.
    Blkpg(Vec<u32>),
    /// The device-mapper partition maps now on the disk (made or given a new table).
    DmMaps(Vec<String>),
}

/// The partition nodes of a disk, and what we changed to get them.
#[derive(Debug)]
pub(crate) struct PartitionNodes {
    disk: PathBuf,
    nodes: Vec<(u32, PathBuf)>,
    changes: Changes,
    /// Nodes we created with mknod because /dev did not.
    made: Vec<PathBuf>,
}

impl PartitionNodes {
    pub(crate) fn node(&self, number: u32) -> Option<&Path> {
        self.nodes
            .iter()
            .find(|(n, _)| *n == number)
            .map(|(_, p)| p.as_path())
    }

    /// Undo what we did, while the partition table is not the one on the disk yet (the
    /// post-install steps run before the commit): the kernel must not keep partitions for a
    /// table that may never be written, and device-mapper maps would keep the disk from being
    /// opened exclusively again.
    pub(crate) fn release(self) -> Result<()> {
        for p in &self.made {
            let _ = std::fs::remove_file(p);
        }
        match &self.changes {
            Changes::Blkpg(added) => {
                let view = KernelView::open(&self.disk)?;
                for n in added.iter().rev() {
                    sys::delete_partition(view.fd(), *n).with_context(|| {
                        format!("removing partition {n} of {}", self.disk.display())
                    })?;
                }
                Ok(())
            }
            Changes::DmMaps(names) => partition_maps::remove(names),
        }
    }
}

/// A plain (shared, read-only) descriptor of a disk for the partition ioctls: the writer's own
/// handle is exclusive, and device-mapper cannot build a map over a disk held that way.
struct KernelView {
    file: std::fs::File,
    path: PathBuf,
    sys: PathBuf,
}

impl KernelView {
    fn open(path: &Path) -> Result<KernelView> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let file = std::fs::File::open(path)
            .with_context(|| format!("opening {} to update its partitions", path.display()))?;
        let meta = file.metadata()?;
        if !meta.file_type().is_block_device() {
            bail!(
                "partition nodes exist only for block devices ({})",
                path.display()
            );
        }
        let rdev = meta.rdev();
        let sys = sysfs::block_dir(libc::major(rdev).into(), libc::minor(rdev).into())
            .with_context(|| format!("finding {} in sysfs", path.display()))?;
        Ok(KernelView {
            file,
            path: path.to_path_buf(),
            sys,
        })
    }

    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.file.as_fd()
    }
}

/// BLKRRPART, retried while the kernel reports the disk busy (a node still closing). EINVAL
/// means the kernel does not scan partitions of this disk at all (a loop device without
/// partscan, for one): not an error, BLKPG still works there.
fn reread(view: &KernelView) -> Result<()> {
    let busy = Schedule::tries(20, Duration::from_millis(100));
    let reread = SYSTEM_CLOCK.retry(
        &NeverStop,
        &busy,
        |_| match sys::reread_partitions(view.fd()) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!(
                    "the kernel does not scan partitions of {} ({e}); adding them ourselves",
                    view.path.display()
                );
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(Failure::Retry(e)),
            Err(e) => Err(Failure::Fatal(e)),
        },
        |_, _| {},
    );
    match reread {
        Ok(()) => Ok(()),
        Err(WaitError::GaveUp { last, .. }) => Err(last).with_context(|| {
            format!(
                "rereading the partition table of {}: still busy after 2 s",
                view.path.display()
            )
        }),
        Err(e) => Err(e.into_anyhow())
            .with_context(|| format!("rereading the partition table of {}", view.path.display())),
    }
}

/// Make the kernel's partitions of `disk` (a block device) match `want`, and return their
/// nodes: on an ordinary disk through BLKRRPART, then BLKPG for what the kernel did not create
/// (kernels without partition-table parsers, loop devices without partscan), removing stale
/// partitions; on a device-mapper disk (multipath, linear) as kpartx's partition maps. The
/// caller must not hold `disk` exclusively (device-mapper needs to claim it).
pub(crate) fn ensure_nodes(disk: &Path, want: &[PartitionSpec]) -> Result<PartitionNodes> {
    let view = KernelView::open(disk)?;
    if let Some(dm) = DmDisk::of(&view.sys) {
        let (nodes, names) = partition_maps::ensure(&dm, want).with_context(|| {
            format!(
                "making the partition maps of {} ({})",
                disk.display(),
                dm.name
            )
        })?;
        return Ok(PartitionNodes {
            disk: disk.to_path_buf(),
            nodes,
            changes: Changes::DmMaps(names),
            made: Vec::new(),
        });
    }
    let disk_name = view
        .sys
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    reread(&view)?;
    settle_udev();
    let (delete, add) = reconcile(want, &sysfs::partitions(&view.sys));
    for n in &delete {
        tracing::debug!("removing stale partition {n} of {}", disk.display());
        sys::delete_partition(view.fd(), *n).with_context(|| {
            format!("BLKPG: removing stale partition {n} of {}", disk.display())
        })?;
    }
    let mut added = Vec::new();
    for p in &add {
        tracing::debug!(
            "adding partition {} ({} bytes at {}) of {} with BLKPG",
            p.number,
            p.length,
            p.start,
            disk.display()
        );
        sys::add_partition(view.fd(), p.number, p.start, p.length).with_context(|| {
            format!(
                "BLKPG: adding partition {} of {} (the kernel did not create it on reread)",
                p.number,
                disk.display()
            )
        })?;
        added.push(p.number);
    }
    if !add.is_empty() {
        tracing::info!(
            "the kernel did not create the partitions of {}; added {} with BLKPG",
            disk.display(),
            add.len()
        );
        settle_udev();
    }
    let mut nodes = Vec::new();
    let mut made = Vec::new();
    let have = sysfs::partitions(&view.sys);
    for w in want {
        let known = have.iter().find(|k| k.number == w.number);
        let name = known.map_or_else(|| partition_name(&disk_name, w.number), |k| k.name.clone());
        let node = PathBuf::from("/dev").join(&name);
        let devno = known.and_then(|k| k.devno);
        if wait_until(Duration::from_secs(5), Duration::from_millis(20), || {
            node.exists()
        }) {
            nodes.push((w.number, node));
            continue;
        }
        let Some((maj, min)) = devno else {
            bail!(
                "partition {} of {} has no device number in sysfs",
                w.number,
                disk.display()
            );
        };
        // /dev is not devtmpfs (a container with a static /dev): make the node ourselves.
        nix::sys::stat::mknod(
            &node,
            nix::sys::stat::SFlag::S_IFBLK,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
            nix::sys::stat::makedev(maj, min),
        )
        .with_context(|| format!("creating {}", node.display()))?;
        made.push(node.clone());
        nodes.push((w.number, node));
    }
    Ok(PartitionNodes {
        disk: disk.to_path_buf(),
        nodes,
        changes: Changes::Blkpg(added),
        made,
    })
}

/// After the partition table on `disk` changed for good (a commit, a reset): leave the kernel
/// with exactly its partitions and their nodes, as a kernel that parses partition tables
/// (or kpartx, on a device-mapper disk) would, so the steps after the write, and the user's
/// own tools, find them.
pub(crate) fn publish(disk: &Path, table: &[PartitionSpec]) -> Result<Vec<(u32, PathBuf)>> {
    Ok(ensure_nodes(disk, table)?.nodes)
}

/// Before an exclusive open of the block device `path`: a device-mapper disk held only by its
/// own partition maps is released from them (removed; [`publish`] makes them again). Returns
/// whether anything was removed.
pub(crate) fn release_own_maps(path: &Path) -> Result<bool> {
    let Ok(view) = KernelView::open(path) else {
        return Ok(false);
    };
    match DmDisk::of(&view.sys) {
        Some(dm) => partition_maps::release_own_maps(path, &dm),
        None => Ok(false),
    }
}

/// Whether the block device `path` is a device-mapper disk, whose partitions are partition
/// maps rather than the kernel's.
pub(crate) fn has_partition_maps(path: &Path) -> bool {
    KernelView::open(path).is_ok_and(|view| DmDisk::of(&view.sys).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(number: u32, start: u64, length: u64) -> PartitionSpec {
        PartitionSpec {
            number,
            start,
            length,
            label: String::new(),
        }
    }

    fn kp(number: u32, start: u64, length: u64) -> KernelPartition {
        KernelPartition {
            number,
            name: format!("loop0p{number}"),
            start,
            length,
            devno: None,
        }
    }

    #[test]
    fn node_names_follow_the_kernel_convention() {
        assert_eq!(partition_name("sda", 3), "sda3");
        assert_eq!(partition_name("vda", 1), "vda1");
        assert_eq!(partition_name("loop0", 3), "loop0p3");
        assert_eq!(partition_name("nvme0n1", 4), "nvme0n1p4");
        assert_eq!(partition_name("mmcblk1", 2), "mmcblk1p2");
    }

    #[test]
    fn reconcile_adds_missing_and_replaces_stale() {
        let want = [spec(1, 1 << 20, 1 << 20), spec(2, 2 << 20, 8 << 20)];
        assert_eq!(reconcile(&want, &[]), (vec![], want.to_vec()));
        let have = [
            kp(1, 1 << 20, 1 << 20),
            kp(2, 2 << 20, 4 << 20),
            kp(5, 99, 1),
        ];
        let (del, add) = reconcile(&want, &have);
        assert_eq!(del, vec![2, 5], "wrong size and unexpected partitions go");
        assert_eq!(add, vec![want[1].clone()]);
        let exact = [kp(1, 1 << 20, 1 << 20), kp(2, 2 << 20, 8 << 20)];
        assert_eq!(reconcile(&want, &exact), (vec![], vec![]));
    }
}
