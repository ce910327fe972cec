//! After an install: other disks with a filesystem labelled `boot`. GRUB and CoreOS find /boot
//! by that label, so a second one (an old install on another disk) can make the installed system
//! boot with the wrong /boot. coreos-installer warns about them after re-reading every partition
//! table and running `blkid` on every node; we read each disk's GPT and superblocks ourselves,
//! read-only, so no partition node or udev is needed.
//!
//! Only devices that exist when the installed system boots matter: loop, ram, zram and nbd
//! devices are made at run time (the live ISO's own root is a loop device), optical and floppy
//! drives are skipped. Neither is the target, nor what it is built from or what is built on it
//! (a multipath map's paths, its partition maps, an md array's members).

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::boot::BOOT_LABEL;
use super::probe::{probe, PROBE_LEN};
use super::sysfs;
use super::table::{self, PartitionSpec};

/// A filesystem labelled `boot` found on another device: the device node, and the partition
/// (`None`: the filesystem is on the whole device) with its node where one is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BootLabelled {
    pub node: PathBuf,
    pub partition: Option<u32>,
    /// The filesystem's node: the device's, or its partition's (`None`: a partition of a
    /// device-mapper disk without a partition map).
    pub fs_node: Option<PathBuf>,
    /// As `mount(2)` names it: `ext4`, `xfs`, `vfat`.
    pub fs_type: &'static str,
}

impl std::fmt::Display for BootLabelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.partition {
            Some(n) => write!(f, "{} partition {n}", self.node.display()),
            None => write!(f, "{}", self.node.display()),
        }
    }
}

impl BootLabelled {
    /// What clears it: `wipefs -a` on its node, or a new label that keeps its data.
    fn remedy(&self) -> String {
        let Some(node) = &self.fs_node else {
            return format!(
                "wipefs -a on the node of {self} (kpartx -a {} makes one)",
                self.node.display()
            );
        };
        let node = node.display();
        let relabel = match self.fs_type {
            "xfs" => format!("xfs_admin -L old-boot {node}"),
            "vfat" => format!("fatlabel {node} OLD-BOOT"),
            _ => format!("e2label {node} old-boot"),
        };
        format!("wipefs -a {node} (or, to keep its data, {relabel})")
    }
}

/// The warning about `found`: where they are, what they do to the first boot, and what clears
/// each before the host reboots.
fn warning(found: &[BootLabelled]) -> String {
    let list: Vec<String> = found.iter().map(ToString::to_string).collect();
    let remedies: Vec<String> = found.iter().map(BootLabelled::remedy).collect();
    format!(
        "other disks also have a filesystem labelled {BOOT_LABEL:?}: {}. GRUB and CoreOS find /boot \
         by that label, so the installed system's first boot stops in CoreOS's check for a unique \
         boot filesystem (or boots with the wrong /boot). Before the host reboots, on the host \
         (ssh core@<host>, then sudo): {}; or detach that disk",
        list.join(", "),
        remedies.join("; ")
    )
}

/// Kernel name prefixes of devices that do not exist when the installed system boots, or that
/// are not disks.
const NOT_AT_BOOT: [&str; 6] = ["loop", "ram", "zram", "nbd", "sr", "fd"];

/// How long the look at the other disks may take. A read can wait for minutes (SCSI timeouts
/// of a failing path) or for ever (a multipath map queueing I/O without a path): the install
/// it follows succeeded, and must not wait on a disk it does not use.
const TIME_LIMIT: Duration = Duration::from_secs(10);

/// One warning naming every other device with a filesystem labelled `boot`, if any, and what
/// clears each. `sys` and `dev`: where sysfs and the device nodes are (`/sys`, `/dev`);
/// `target`: the installed disk (a disk-image file is no device: every disk is another one
/// then). Best effort: a device that cannot be read is skipped, and the look is given up
/// after [`TIME_LIMIT`], which the warning then says.
pub(crate) fn other_boot_filesystems_warning(
    sys: &Path,
    dev: &Path,
    target: &Path,
) -> Option<String> {
    let target = sysfs::kernel_name(sys, target);
    let (sys_block, dev) = (sys.join("block"), dev.to_path_buf());
    let scan = move || other_boot_filesystems(&sys_block, &dev, target);
    let Some(found) = within(TIME_LIMIT, scan) else {
        return Some(format!(
            "looking at the other disks for a filesystem labelled {BOOT_LABEL:?} took more than {} s \
             (a disk that does not answer?): given up; check them with blkid before rebooting",
            TIME_LIMIT.as_secs()
        ));
    };
    (!found.is_empty()).then(|| warning(&found))
}

/// What `f` returns, run on its own thread, unless it takes longer than `limit` (the thread is
/// then left to finish, or to hang, alone).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let spawned = std::thread::Builder::new()
        .name("other-boot".into())
        .spawn(move || {
            let _ = tx.send(f());
        });
    spawned.ok()?;
    rx.recv_timeout(limit).ok()
}

/// The devices under `sys_block` (nodes in `dev`) other than `target` (a kernel name) and the
/// devices related to it, with a filesystem labelled `boot` on the whole device or on a
/// partition (of its GPT, or one the kernel lists).
pub(crate) fn other_boot_filesystems(
    sys_block: &Path,
    dev: &Path,
    target: Option<String>,
) -> Vec<BootLabelled> {
    let skip = target.map(|t| related(sys_block, &t)).unwrap_or_default();
    let mut found = Vec::new();
    for name in sysfs::names_in(sys_block) {
        let dir = sys_block.join(&name);
        if skip.contains(&name)
            || NOT_AT_BOOT.iter().any(|p| name.starts_with(p))
            || is_partition_map(&dir)
            || is_multipath_path(sys_block, &dir)
        {
            continue;
        }
        let node = dev.join(&name);
        match labelled_boot(&node, &dir) {
            Ok(parts) => found.extend(parts.into_iter().map(|(partition, fs_type)| {
                let fs_node = match partition {
                    None => Some(node.clone()),
                    Some(n) => partition_node(dev, &dir, &name, n),
                };
                BootLabelled {
                    node: node.clone(),
                    partition,
                    fs_node,
                    fs_type,
                }
            })),
            Err(e) => tracing::debug!(
                "looking for a {BOOT_LABEL:?} label on {}: {e}",
                node.display()
            ),
        }
    }
    found
}

/// `target` and everything it is built from (slaves, transitively) or that is built on it
/// (holders, transitively), and the other paths of a multipath map built on it (the same
/// disk). The two directions are not mixed otherwise: an LVM volume over the target and another
/// disk must not hide that other disk.
fn related(sys_block: &Path, target: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::from([target.to_string()]);
    for list in ["slaves", "holders"] {
        let mut todo = vec![target.to_string()];
        while let Some(name) = todo.pop() {
            for next in sysfs::names_in(&sys_block.join(&name).join(list)) {
                if out.insert(next.clone()) {
                    todo.push(next);
                }
            }
        }
    }
    let paths: Vec<String> = out
        .iter()
        .filter(|name| sysfs::is_multipath(&sys_block.join(name)))
        .flat_map(|map| sysfs::names_in(&sys_block.join(map).join("slaves")))
        .collect();
    out.extend(paths);
    out
}

/// A path of a multipath map: the map is looked at instead (one disk, named once).
fn is_multipath_path(sys_block: &Path, dir: &Path) -> bool {
    sysfs::names_in(&dir.join("holders"))
        .iter()
        .any(|h| sysfs::is_multipath(&sys_block.join(h)))
}

/// A device-mapper partition map of another disk (uuid `partN-…`, as kpartx and we name
/// them): the disk itself is probed at the partition's offset already.
fn is_partition_map(dir: &Path) -> bool {
    sysfs::dm_identity(dir).is_some_and(|(_, uuid)| uuid.starts_with("part"))
}

/// The node of partition `n` of disk `name`: the one the kernel lists, else the kernel's
/// naming (`sdb3`, `nvme0n1p3`); none for a device-mapper disk, whose partition maps are
/// named by whoever made them.
fn partition_node(dev: &Path, sys_dir: &Path, name: &str, n: u32) -> Option<PathBuf> {
    if let Some(p) = sysfs::partitions(sys_dir)
        .into_iter()
        .find(|p| p.number == n)
    {
        return Some(dev.join(p.name));
    }
    if sysfs::dm_identity(sys_dir).is_some() {
        return None;
    }
    let sep = if name.ends_with(|c: char| c.is_ascii_digit()) {
        "p"
    } else {
        ""
    };
    Some(dev.join(format!("{name}{sep}{n}")))
}

/// Where on `node` a filesystem is labelled `boot`: `None` for the whole device, else the
/// partition numbers; each with the filesystem's type.
fn labelled_boot(node: &Path, sys_dir: &Path) -> std::io::Result<Vec<(Option<u32>, &'static str)>> {
    let mut file = File::open(node)?;
    let mut at: Vec<(Option<u32>, u64)> = vec![(None, 0)];
    if let Ok(gpt) = table::read(&mut file, None) {
        at.extend(
            PartitionSpec::from_gpt(&gpt)
                .iter()
                .map(|p| (Some(p.number), p.start)),
        );
    }
    for p in sysfs::partitions(sys_dir) {
        if !at.iter().any(|&(_, start)| start == p.start) {
            at.push((Some(p.number), p.start));
        }
    }
    let mut head = vec![0u8; PROBE_LEN];
    let mut found = Vec::new();
    for (partition, start) in at {
        let n = read_up_to(&file, &mut head, start)?;
        match probe(&head[..n]) {
            Some((fs_type, label)) if label == BOOT_LABEL => found.push((partition, fs_type)),
            _ => {}
        }
    }
    Ok(found)
}

/// Fill `buf` from `offset` as far as the device goes; the bytes read.
fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64)? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gptman::GPTPartitionEntry;
    use std::fs;

    const MIB: u64 = 1 << 20;

    /// An ext4 superblock labelled `label` at `offset` of `file`.
    fn ext4_at(file: &File, offset: u64, label: &str) {
        file.write_all_at(&[0x53, 0xef], offset + 1024 + 0x38)
            .unwrap();
        file.write_all_at(label.as_bytes(), offset + 1024 + 0x78)
            .unwrap();
    }

    /// A fake /sys/block and /dev: `disks` are (name, slaves, holders, dm uuid), each node an
    /// 8 MiB file.
    struct Host {
        dir: tempfile::TempDir,
    }

    impl Host {
        fn new() -> Host {
            let dir = tempfile::tempdir().unwrap();
            fs::create_dir_all(dir.path().join("sys")).unwrap();
            fs::create_dir_all(dir.path().join("dev")).unwrap();
            Host { dir }
        }
        fn sys(&self) -> PathBuf {
            self.dir.path().join("sys")
        }
        fn disk(&self, name: &str) -> File {
            let sys = self.sys().join(name);
            for list in ["slaves", "holders"] {
                fs::create_dir_all(sys.join(list)).unwrap();
            }
            let f = fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .read(true)
                .write(true)
                .open(self.dir.path().join("dev").join(name))
                .unwrap();
            f.set_len(8 * MIB).unwrap();
            f
        }
        fn link(&self, from: &str, list: &str, to: &str) {
            fs::write(self.sys().join(from).join(list).join(to), "").unwrap();
        }
        fn found(&self, target: Option<&str>) -> Vec<String> {
            other_boot_filesystems(
                &self.sys(),
                &self.dir.path().join("dev"),
                target.map(Into::into),
            )
            .iter()
            .map(|b| {
                b.to_string()
                    .replace(&*self.dir.path().to_string_lossy(), "")
            })
            .collect()
        }
    }

    /// A GPT whose partition 2 (at 2 MiB) holds an ext4 filesystem labelled `label`.
    fn gpt_disk(mut f: File, label: &str) {
        let entry = GPTPartitionEntry {
            partition_type_guid: [1; 16],
            unique_partition_guid: [2; 16],
            starting_lba: 2 * MIB / 512,
            ending_lba: 4 * MIB / 512 - 1,
            attribute_bits: 0,
            partition_name: "boot".into(),
        };
        table::write_new(&mut f, 512, &[(2, entry)], "a test GPT").unwrap();
        ext4_at(&f, 2 * MIB, label);
    }

    #[test]
    fn other_disks_labelled_boot_are_found_on_their_gpt_kernel_partitions_or_whole() {
        let h = Host::new();
        gpt_disk(h.disk("sdb"), "boot");
        ext4_at(&h.disk("sdc"), 0, "boot");
        // An MBR disk: only the kernel knows its partition 1, at 1 MiB.
        ext4_at(&h.disk("sdd"), MIB, "boot");
        let part = h.sys().join("sdd/sdd1");
        fs::create_dir_all(&part).unwrap();
        for (k, v) in [("partition", "1"), ("start", "2048"), ("size", "4096")] {
            fs::write(part.join(k), v).unwrap();
        }
        // Other labels and blank disks are not reported.
        gpt_disk(h.disk("sde"), "root");
        h.disk("sdf");
        // Not there at boot: a loop device holding an installed image.
        gpt_disk(h.disk("loop3"), "boot");
        let want = ["/dev/sdb partition 2", "/dev/sdc", "/dev/sdd partition 1"];
        assert_eq!(h.found(None), want);
        assert_eq!(h.found(Some("sde")), want);
        // The target itself is not "another" disk.
        assert_eq!(
            h.found(Some("sdc")),
            ["/dev/sdb partition 2", "/dev/sdd partition 1"]
        );
    }

    #[test]
    fn a_look_that_takes_too_long_is_given_up() {
        let quick = within(Duration::from_secs(5), || 7);
        assert_eq!(quick, Some(7));
        let (release, wait) = crossbeam_channel::bounded::<()>(0);
        let stuck = within(Duration::from_millis(50), move || wait.recv().is_ok());
        assert_eq!(stuck, None);
        drop(release);
    }

    #[test]
    fn the_targets_own_paths_and_maps_are_not_other_disks() {
        let h = Host::new();
        // The target dm-0 is a multipath map over sda and sdb; dm-1 is its partition map
        // (and a holder); dm-2 a partition map of another disk, sdc.
        for name in ["sda", "sdb", "sdc", "dm-0", "dm-1", "dm-2"] {
            gpt_disk(h.disk(name), "boot");
        }
        for path in ["sda", "sdb"] {
            h.link("dm-0", "slaves", path);
            h.link(path, "holders", "dm-0");
        }
        h.link("dm-0", "holders", "dm-1");
        let maps = [
            ("dm-0", "mpath-36001"),
            ("dm-1", "part2-mpath-36001"),
            ("dm-2", "part2-sdc"),
        ];
        for (map, uuid) in maps {
            fs::create_dir_all(h.sys().join(map).join("dm")).unwrap();
            fs::write(h.sys().join(map).join("dm/name"), map).unwrap();
            fs::write(h.sys().join(map).join("dm/uuid"), uuid).unwrap();
        }
        assert_eq!(h.found(Some("dm-0")), ["/dev/sdc partition 2"]);
        // Written through one of the map's paths: the other path is the same disk.
        assert_eq!(h.found(Some("sda")), ["/dev/sdc partition 2"]);
        // Another disk's multipath map is named once, not once more for each of its paths.
        assert_eq!(
            h.found(Some("sdc")),
            ["/dev/dm-0 partition 2"],
            "sda and sdb are paths of dm-0"
        );
        // An LVM volume over the target and sdc does not hide sdc.
        fs::write(h.sys().join("dm-0/dm/uuid"), "LVM-abc").unwrap();
        h.link("dm-0", "slaves", "sdc");
        assert_eq!(
            h.found(Some("sda")),
            ["/dev/sdb partition 2", "/dev/sdc partition 2"]
        );
    }
}
