//! Make the partitions of a freshly written disk appear as device nodes without udev.
//!
//! `BLKRRPART` asks the kernel to parse the table, but kernels built without partition-table
//! parsers (and some container setups) succeed without creating anything. So after the reread
//! we compare what sysfs shows with our own GPT parse, and add what is missing (or wrong) with
//! `BLKPG`, as `partx -a` does. devtmpfs then creates the nodes; where /dev is not devtmpfs we
//! create them ourselves. udev is used only when it runs, and only to settle.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::clock::{Failure, NeverStop, Schedule, WaitError, SYSTEM_CLOCK};

use super::device::Device;
use super::sys;
use super::sysfs::{self, KernelPartition};
use super::table;

/// A partition as our own parse of the GPT sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PartitionSpec {
    pub number: u32,
    /// Byte offset and length on the disk.
    pub start: u64,
    pub length: u64,
    /// GPT partition name (PARTLABEL).
    pub label: String,
}

impl PartitionSpec {
    /// The used entries of a GPT, numbered as the kernel numbers them (1-based).
    pub(crate) fn from_gpt(gpt: &gptman::GPT) -> Vec<PartitionSpec> {
        gpt.iter()
            .filter(|(_, p)| p.is_used())
            .map(|(n, p)| {
                let bytes = table::byte_range(p, gpt.sector_size);
                PartitionSpec {
                    number: n,
                    start: bytes.start,
                    length: bytes.end - bytes.start,
                    label: p.partition_name.as_str().to_string(),
                }
            })
            .collect()
    }
}

/// Node name of partition `n` of disk `disk`: a `p` goes between when the disk name ends in a
/// digit (loop0p3, nvme0n1p3, mmcblk0p3), not otherwise (sda3, vda3).
pub(crate) fn partition_name(disk: &str, n: u32) -> String {
    if disk.ends_with(|c: char| c.is_ascii_digit()) {
        format!("{disk}p{n}")
    } else {
        format!("{disk}{n}")
    }
}

/// What to do so the kernel's partitions match ours: (delete, add) lists. Pure.
pub(crate) fn reconcile(
    want: &[PartitionSpec],
    have: &[KernelPartition],
) -> (Vec<u32>, Vec<PartitionSpec>) {
    let mut delete = Vec::new();
    let mut add = Vec::new();
    for k in have {
        let matches = want
            .iter()
            .any(|w| w.number == k.number && w.start == k.start && w.length == k.length);
        if !matches {
            delete.push(k.number);
        }
    }
    for w in want {
        let present = have
            .iter()
            .any(|k| w.number == k.number && w.start == k.start && w.length == k.length);
        if !present {
            add.push(w.clone());
        }
    }
    (delete, add)
}

/// The partition nodes of a disk, and what we changed to get them.
#[derive(Debug)]
pub(crate) struct PartitionNodes {
    nodes: Vec<(u32, PathBuf)>,
    /// Partitions we added with BLKPG; removed again by `release`.
    added: Vec<u32>,
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

    /// Undo what we did: the kernel would not have these partitions on its own (it did not
    /// create them on reread), so leaving our additions would leave it believing in a layout
    /// nobody will keep in sync when the disk is written again.
    pub(crate) fn release(self, dev: &Device) -> Result<()> {
        for p in &self.made {
            let _ = std::fs::remove_file(p);
        }
        for n in self.added.iter().rev() {
            dev.delete_partition(*n)
                .with_context(|| format!("removing partition {n} of {}", dev.path().display()))?;
        }
        Ok(())
    }
}

fn sys_dir(dev: &Device) -> Result<PathBuf> {
    let (maj, min) = dev
        .devno()
        .context("partition nodes exist only for block devices")?;
    sysfs::block_dir(maj, min).with_context(|| format!("finding {} in sysfs", dev.path().display()))
}

/// BLKRRPART, retried while the kernel reports the disk busy (a node still closing). EINVAL
/// means the kernel does not scan partitions of this disk at all (a loop device without
/// partscan, for one): not an error, BLKPG still works there.
fn reread(dev: &Device) -> Result<()> {
    let busy = Schedule::tries(20, Duration::from_millis(100));
    let reread = SYSTEM_CLOCK.retry(
        &NeverStop,
        &busy,
        |_| match dev.reread_partitions() {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!(
                    "the kernel does not scan partitions of {} ({e}); adding them ourselves",
                    dev.path().display()
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
                dev.path().display()
            )
        }),
        Err(e) => Err(e.into_anyhow())
            .with_context(|| format!("rereading the partition table of {}", dev.path().display())),
    }
}

/// Let udev catch up when it runs (it may be renaming or probing the new nodes); without
/// /run/udev there is no udev and nothing to wait for.
fn settle_udev() {
    if !Path::new("/run/udev/control").exists() {
        return;
    }
    let status = std::process::Command::new("udevadm")
        .args(["settle", "--timeout=30"])
        .status();
    if let Err(e) = status {
        tracing::debug!("udevadm settle: {e}");
    }
}

/// Make sure `/dev/<name>` exists for every partition in `want`, adding partitions with BLKPG
/// where the kernel did not create them.
pub(crate) fn ensure_nodes(dev: &Device, want: &[PartitionSpec]) -> Result<PartitionNodes> {
    let sys = sys_dir(dev)?;
    let disk_name = sys
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    reread(dev)?;
    settle_udev();
    let (delete, add) = reconcile(want, &sysfs::partitions(&sys));
    for n in &delete {
        tracing::debug!("removing stale partition {n} of {}", dev.path().display());
        dev.delete_partition(*n).with_context(|| {
            format!(
                "BLKPG: removing stale partition {n} of {}",
                dev.path().display()
            )
        })?;
    }
    let mut added = Vec::new();
    for p in &add {
        tracing::debug!(
            "adding partition {} ({} bytes at {}) of {} with BLKPG",
            p.number,
            p.length,
            p.start,
            dev.path().display()
        );
        dev.add_partition(p.number, p.start, p.length)
            .with_context(|| {
                format!(
                    "BLKPG: adding partition {} of {} (the kernel did not create it on reread)",
                    p.number,
                    dev.path().display()
                )
            })?;
        added.push(p.number);
    }
    if !add.is_empty() {
        tracing::info!(
            "the kernel did not create the partitions of {}; added {} with BLKPG",
            dev.path().display(),
            add.len()
        );
        settle_udev();
    }
    let mut nodes = Vec::new();
    let mut made = Vec::new();
    let have = sysfs::partitions(&sys);
    for w in want {
        let name = have
            .iter()
            .find(|k| k.number == w.number)
            .map(|k| k.name.clone())
            .unwrap_or_else(|| partition_name(&disk_name, w.number));
        let node = PathBuf::from("/dev").join(&name);
        let devno = have
            .iter()
            .find(|k| k.number == w.number)
            .and_then(|k| k.devno);
        if wait_for_node(&node, Duration::from_secs(5)) {
            nodes.push((w.number, node));
            continue;
        }
        let Some((maj, min)) = devno else {
            bail!(
                "partition {} of {} has no device number in sysfs",
                w.number,
                dev.path().display()
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
    Ok(PartitionNodes { nodes, added, made })
}

fn wait_for_node(node: &Path, limit: Duration) -> bool {
    let appears = Schedule::within(limit, Duration::from_millis(20));
    SYSTEM_CLOCK
        .retry(
            &NeverStop,
            &appears,
            |_| node.exists().then_some(()).ok_or(Failure::Retry(())),
            |_, _| {},
        )
        .is_ok()
}

impl Device {
    pub fn add_partition(&self, number: u32, start: u64, length: u64) -> std::io::Result<()> {
        sys::add_partition(self.fd(), number, start, length)
    }

    pub fn delete_partition(&self, number: u32) -> std::io::Result<()> {
        sys::delete_partition(self.fd(), number)
    }
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
