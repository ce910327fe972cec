//! Who holds a busy disk: mounts (from /proc/self/mountinfo), swap (/proc/swaps) and kernel
//! holders such as device-mapper or MD (/sys/dev/block/M:m/holders), for the disk and each of
//! its partitions; and the whole stack built on a disk ([`DiskStack`]: partition maps, LVM
//! volumes, arrays, and what sits on those), found by device number in sysfs, which the
//! install-disk cleanup takes down. Parsing and ordering are pure; the reading is thin.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::sysfs;

/// Raised when the target is mounted or otherwise in use; callers branch on it.
#[derive(Debug, thiserror::Error)]
#[error("{path} is in use ({holders}); refusing to write to it. Unmount it, stop what holds it, or choose another disk")]
pub struct DeviceBusy {
    pub path: String,
    pub holders: String,
}

/// A block device as sysfs shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BlockNode {
    /// The kernel's name: `sda3`, `dm-5`, `md127`.
    pub name: String,
    pub devno: (u64, u64),
    /// The device-mapper name (`vg0-data`, `mpatha3`) of a dm device.
    pub dm_name: Option<String>,
}

/// A device built on a disk, directly or through others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Holder {
    pub node: BlockNode,
    /// Something that is not device-mapper (an md array) is built on it, directly or further
    /// up: it can be removed only once that is stopped.
    pub under_other: bool,
}

/// A disk, its partitions, and everything built on them, transitively: a multipath map's
/// partition maps, the LVM volumes on those, an array on a partition and the volumes on the
/// array. Found through each device's sysfs `holders`, so by device number whatever the
/// devices' names and links (`/dev/mapper/mpatha3` and `/dev/dm-3` are one device).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DiskStack {
    /// The disk, then its kernel partitions.
    pub base: Vec<BlockNode>,
    /// What is built on them, each before everything it is built on: the order in which they
    /// can be taken down.
    pub holders: Vec<Holder>,
}

impl DiskStack {
    /// The stack of the block device at `path` (a `/dev` node, links followed), from /sys.
    pub(crate) fn of_device(path: &Path) -> std::io::Result<DiskStack> {
        Ok(DiskStack::read(&sys_dir_of(path)?))
    }

    /// The stack of the disk whose sysfs directory is `sys_disk`. Each entry of a `holders`
    /// directory leads to the holder's own sysfs directory (a link, in sysfs), where its own
    /// `holders` are read in turn; a device reached twice (a volume over two partitions) is
    /// read once.
    pub(crate) fn read(sys_disk: &Path) -> DiskStack {
        let base: Vec<(BlockNode, PathBuf)> = nodes(sys_disk);
        let mut graph: BTreeMap<String, (bool, Vec<String>)> = BTreeMap::new();
        let mut found: BTreeMap<String, BlockNode> = BTreeMap::new();
        let mut todo: Vec<(String, PathBuf)> = base
            .iter()
            .map(|(n, dir)| (n.name.clone(), dir.clone()))
            .collect();
        let mut read = BTreeSet::new();
        while let Some((name, dir)) = todo.pop() {
            if !read.insert(name.clone()) {
                continue;
            }
            let held_by = sysfs::names_in(&dir.join("holders"));
            for h in &held_by {
                let hdir = dir.join("holders").join(h);
                if !found.contains_key(h) {
                    if let Some(node) = node_at(h, &hdir) {
                        found.insert(h.clone(), node);
                    }
                }
                todo.push((h.clone(), hdir));
            }
            // The disk and its partitions are never taken down: what they are does not matter.
            let is_dm = found.get(&name).is_none_or(|n| n.dm_name.is_some());
            graph.insert(name, (is_dm, held_by));
        }
        let roots: Vec<String> = base.iter().map(|(n, _)| n.name.clone()).collect();
        let holders = take_down_order(&roots, &graph)
            .into_iter()
            .filter_map(|(name, under_other)| {
                let node = found.remove(&name)?;
                Some(Holder { node, under_other })
            })
            .collect();
        DiskStack {
            base: base.into_iter().map(|(n, _)| n).collect(),
            holders,
        }
    }

    /// Whether the device `devno` is the disk, one of its partitions or built on them.
    pub(crate) fn contains(&self, devno: (u64, u64)) -> bool {
        self.nodes().any(|n| n.devno == devno)
    }

    /// Whether the kernel name `name` (`dm-3`, `sda2`) is the disk, one of its partitions or
    /// built on them.
    pub(crate) fn has_kernel_name(&self, name: &str) -> bool {
        self.nodes().any(|n| n.name == name)
    }

    /// The device-mapper names of the holders that `dmsetup remove` can take down now, in
    /// order: those with no array above them.
    pub(crate) fn dm_take_down(&self) -> Vec<String> {
        self.holders
            .iter()
            .filter(|h| !h.under_other)
            .filter_map(|h| h.node.dm_name.clone())
            .collect()
    }

    fn nodes(&self) -> impl Iterator<Item = &BlockNode> {
        self.base.iter().chain(self.holders.iter().map(|h| &h.node))
    }
}

/// The devices built on `roots`, transitively, each before every device it is built on, with
/// whether a device that is not device-mapper sits above it. `graph`: each device's name →
/// (whether it is device-mapper, the names of the devices built directly on it). Pure; a
/// cycle (which sysfs never shows) cannot loop.
fn take_down_order(
    roots: &[String],
    graph: &BTreeMap<String, (bool, Vec<String>)>,
) -> Vec<(String, bool)> {
    fn visit(
        name: &str,
        graph: &BTreeMap<String, (bool, Vec<String>)>,
        seen: &mut BTreeMap<String, bool>,
        out: &mut Vec<(String, bool)>,
    ) -> bool {
        if let Some(&under_other) = seen.get(name) {
            return under_other;
        }
        seen.insert(name.to_string(), false);
        let mut under_other = false;
        for h in graph
            .get(name)
            .map(|(_, hs)| hs.as_slice())
            .unwrap_or_default()
        {
            let h_is_dm = graph.get(h).is_none_or(|(dm, _)| *dm);
            under_other |= visit(h, graph, seen, out) || !h_is_dm;
        }
        seen.insert(name.to_string(), under_other);
        out.push((name.to_string(), under_other));
        under_other
    }
    let mut seen = BTreeMap::new();
    let mut out = Vec::new();
    for r in roots {
        visit(r, graph, &mut seen, &mut out);
    }
    out.retain(|(name, _)| !roots.contains(name));
    out
}

/// The sysfs directory of the block device at `path`.
fn sys_dir_of(path: &Path) -> std::io::Result<PathBuf> {
    let rdev = std::fs::metadata(path)?.rdev();
    sysfs::block_dir(libc::major(rdev).into(), libc::minor(rdev).into())
}

/// The node sysfs shows in `dir` under the kernel name `name`.
fn node_at(name: &str, dir: &Path) -> Option<BlockNode> {
    Some(BlockNode {
        name: name.to_string(),
        devno: sysfs::devno(dir)?,
        dm_name: sysfs::dm_identity(dir).map(|(n, _)| n),
    })
}

/// Mount points in `mountinfo` text whose source device number is `devno` ("7:3").
pub(crate) fn mounts_of(mountinfo: &str, devno: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let dev = fields.nth(2)?;
            let _root = fields.next()?;
            let mountpoint = fields.next()?;
            (dev == devno).then(|| unescape_mount_path(mountpoint))
        })
        .collect()
}

/// /proc/self/mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mount_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v as char);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i] as char);
        i += 1;
    }
    out
}

/// Whether `/proc/swaps` text lists `/dev/<name>` as swap.
pub(crate) fn is_swap(swaps: &str, name: &str) -> bool {
    let dev = format!("/dev/{name}");
    swaps
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().next() == Some(dev.as_str()))
}

/// The disk and its partitions as sysfs knows them, with their sysfs directories.
fn nodes(sys_disk: &Path) -> Vec<(BlockNode, PathBuf)> {
    let name = sys_disk
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let disk = node_at(&name, sys_disk).map(|n| (n, sys_disk.to_path_buf()));
    let parts = sysfs::partitions(sys_disk).into_iter().filter_map(|p| {
        let dir = sys_disk.join(&p.name);
        let node = BlockNode {
            name: p.name,
            devno: p.devno?,
            dm_name: None,
        };
        Some((node, dir))
    });
    disk.into_iter().chain(parts).collect()
}

/// Human descriptions of everything that holds `disk` or one of its partitions.
pub(crate) fn describe(disk: &Path) -> std::io::Result<Vec<String>> {
    let sys_disk = sys_dir_of(disk)?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    let mut found = Vec::new();
    for (node, sys) in nodes(&sys_disk) {
        let (name, (major, minor)) = (node.name, node.devno);
        for mp in mounts_of(&mountinfo, &format!("{major}:{minor}")) {
            found.push(format!("/dev/{name} is mounted on {mp}"));
        }
        if is_swap(&swaps, &name) {
            found.push(format!("/dev/{name} is an active swap device"));
        }
        for h in sysfs::names_in(&sys.join("holders")) {
            let dm = sysfs::dm_identity(&sys.join("holders").join(&h));
            let dm_name = dm.map(|(n, _)| format!(" ({n})")).unwrap_or_default();
            found.push(format!("/dev/{name} is held by {h}{dm_name}"));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 7:3 / /mnt/with\\040space rw,relatime shared:50 - ext4 /dev/loop3 rw
91 22 259:1 / /var/lib/data rw,relatime shared:51 - xfs /dev/nvme0n1p1 rw
";

    #[test]
    fn mounts_are_found_by_device_number_and_unescaped() {
        assert_eq!(mounts_of(MOUNTINFO, "7:3"), vec!["/mnt/with space"]);
        assert_eq!(mounts_of(MOUNTINFO, "259:1"), vec!["/var/lib/data"]);
        assert!(mounts_of(MOUNTINFO, "7:4").is_empty());
    }

    #[test]
    fn swap_is_found_by_name() {
        let swaps = "Filename\tType\tSize\tUsed\tPriority\n/dev/sdb2  partition\t1000\t0\t-2\n";
        assert!(is_swap(swaps, "sdb2"));
        assert!(!is_swap(swaps, "sdb"));
    }

    /// A fake sysfs: each device's directory under `block/`, a partition's inside its disk's,
    /// and each `holders` entry a link to the holder's directory, as sysfs has them.
    struct FakeSys(tempfile::TempDir);

    impl FakeSys {
        fn new() -> FakeSys {
            FakeSys(tempfile::tempdir().unwrap())
        }

        fn dir(&self, path: &str) -> PathBuf {
            self.0.path().join("block").join(path)
        }

        /// `path`: `sda`, `sda/sda2` (a partition) or `dm-3`; `dm`: its device-mapper name.
        fn device(&self, path: &str, devno: &str, dm: Option<&str>) -> &Self {
            let dir = self.dir(path);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("dev"), format!("{devno}\n")).unwrap();
            if let Some(name) = dm {
                std::fs::create_dir_all(dir.join("dm")).unwrap();
                std::fs::write(dir.join("dm/name"), format!("{name}\n")).unwrap();
            }
            if path.contains('/') {
                for (file, value) in [("partition", "1"), ("start", "2048"), ("size", "2048")] {
                    std::fs::write(dir.join(file), value).unwrap();
                }
            }
            self
        }

        /// `holder` (a top-level device) is built on `on`.
        fn hold(&self, on: &str, holder: &str) -> &Self {
            let list = self.dir(on).join("holders");
            std::fs::create_dir_all(&list).unwrap();
            std::os::unix::fs::symlink(self.dir(holder), list.join(holder)).unwrap();
            self
        }
    }

    fn names(stack: &DiskStack) -> Vec<(&str, bool)> {
        let holders = stack.holders.iter();
        holders
            .map(|h| (h.node.name.as_str(), h.under_other))
            .collect()
    }

    /// A multipath map with four partition maps, an LVM volume on the third: the volume before
    /// its map, found by device number whatever the names.
    #[test]
    fn a_multipath_maps_partition_maps_and_the_volume_on_one() {
        let sys = FakeSys::new();
        sys.device("dm-0", "253:0", Some("mpatha"));
        for n in 1..=4 {
            let kname = format!("dm-{n}");
            sys.device(&kname, &format!("253:{n}"), Some(&format!("mpatha{n}")))
                .hold("dm-0", &kname);
        }
        sys.device("dm-5", "253:5", Some("vgsan-data"))
            .hold("dm-3", "dm-5");
        let stack = DiskStack::read(&sys.dir("dm-0"));
        assert_eq!(stack.base.len(), 1);
        assert_eq!(stack.base[0].dm_name.as_deref(), Some("mpatha"));
        assert_eq!(
            names(&stack),
            [
                ("dm-1", false),
                ("dm-2", false),
                ("dm-5", false),
                ("dm-3", false),
                ("dm-4", false)
            ]
        );
        assert_eq!(
            stack.dm_take_down(),
            ["mpatha1", "mpatha2", "vgsan-data", "mpatha3", "mpatha4"]
        );
        assert!(stack.contains((253, 5)) && stack.contains((253, 0)));
        assert!(!stack.contains((253, 6)) && !stack.contains((8, 0)));
        assert!(stack.has_kernel_name("dm-3") && !stack.has_kernel_name("dm-30"));
    }

    /// A plain disk: a volume over both partitions (read once), an array on the second with a
    /// volume on the array, and a map that sits under a second array: it waits for the array.
    #[test]
    fn a_disks_partitions_volumes_and_arrays() {
        let sys = FakeSys::new();
        sys.device("sda", "8:0", None)
            .device("sda/sda1", "8:1", None)
            .device("sda/sda2", "8:2", None)
            .device("dm-6", "253:6", Some("vg-both"))
            .device("md127", "9:127", None)
            .device("dm-7", "253:7", Some("raidvg-lv"))
            .device("dm-8", "253:8", Some("under-md"))
            .device("md126", "9:126", None)
            .hold("sda/sda1", "dm-6")
            .hold("sda/sda2", "dm-6")
            .hold("sda/sda2", "md127")
            .hold("md127", "dm-7")
            .hold("sda", "dm-8")
            .hold("dm-8", "md126");
        let stack = DiskStack::read(&sys.dir("sda"));
        let base: Vec<&str> = stack.base.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(base, ["sda", "sda1", "sda2"]);
        assert_eq!(
            names(&stack),
            [
                ("md126", false),
                ("dm-8", true),
                ("dm-6", false),
                ("dm-7", false),
                ("md127", false)
            ]
        );
        assert_eq!(stack.dm_take_down(), ["vg-both", "raidvg-lv"]);
        assert!(stack.contains((8, 2)) && stack.contains((9, 127)));
    }

    #[test]
    fn nothing_on_a_disk_or_no_sysfs() {
        let sys = FakeSys::new();
        sys.device("nvme0n1", "259:0", None);
        let stack = DiskStack::read(&sys.dir("nvme0n1"));
        assert!(stack.holders.is_empty() && stack.contains((259, 0)));
        assert_eq!(DiskStack::read(&sys.dir("missing")), DiskStack::default());
    }

    #[test]
    fn take_down_order_survives_a_cycle() {
        let graph = BTreeMap::from([
            ("a".to_string(), (true, vec!["b".to_string()])),
            ("b".to_string(), (true, vec!["a".to_string()])),
        ]);
        assert_eq!(
            take_down_order(&["a".into()], &graph),
            [("b".into(), false)]
        );
    }
}
