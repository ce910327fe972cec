//! The disks the firmware sees under an install target, for the UEFI boot entry.
//!
//! A boot entry names the EFI system partition by the hardware path of its disk (PCI, SATA,
//! SCSI, NVMe ...) and its GPT partition. `efibootmgr -d` builds that path from the disk's
//! sysfs device, which an md array or a device-mapper map does not have: they are virtual
//! block devices, made by Linux, that the firmware never sees. An entry for `/dev/md127` or
//! `/dev/dm-0` cannot be made; one is made for each disk under it that the firmware can boot:
//!
//! - **md RAID1.** The assisted install disk is the array itself (whole disks mirrored, as
//!   Intel VROC/RST or `mdadm --level=1 --metadata=1.0` make it), not CoreOS's own boot-on-RAID
//!   layout (one ESP per disk, only /boot and root mirrored), so the image and its GPT are
//!   written onto the array. Each member holds the array's data at its `md/dev-*/offset`. When
//!   that offset is 0 (metadata 0.90 and 1.0 at the disk's end, or the first volume of
//!   firmware RAID metadata), the member's own first sectors are the array's: its GPT is the
//!   array's GPT, and the ESP has the same partition number on it as on the array. The
//!   firmware reads that member as a plain GPT disk and can start the shim from its ESP, so
//!   each working member gets an entry (either one boots if the other fails). With another
//!   offset (metadata 1.1 or 1.2, a second firmware volume), a RAID level that keeps no whole
//!   copy on one disk, or members that are partitions (the ESP would sit inside a partition),
//!   no disk the firmware reads holds the ESP: no entry can be made, and the caller says so.
//! - **dm-multipath** (`dm/uuid` `mpath-…`): every path (`slaves`) is the whole LUN, GPT and
//!   ESP at the same numbers; each path that the kernel has running gets an entry, so the
//!   firmware finds the disk whichever port or HBA it boots from.
//!
//! Anything else (a disk, an NVMe namespace, other device-mapper maps whose table sysfs does
//! not show) gets the entry on the device as given, as the Go installer does.

use std::path::{Path, PathBuf};

use super::sysfs;

/// One boot entry's place: a disk the firmware sees and the number of the EFI system
/// partition on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EntryDisk {
    pub node: PathBuf,
    pub partition: u32,
}

/// Where the boot entry for an install target goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FirmwareDisks {
    /// The target is a disk the firmware sees (or one we cannot look under): the entry is
    /// made on it.
    Itself,
    /// The firmware sees these disks instead; `what` names the target (`md RAID1 array
    /// md127`, `multipath map mpatha (dm-0)`).
    Under { what: String, disks: Vec<EntryDisk> },
    /// No disk the firmware sees holds the EFI system partition whole: why.
    Hidden(String),
}

/// Arrays of arrays or maps over arrays are looked under this deep, no deeper.
const MAX_DEPTH: usize = 4;

/// Where the boot entry for `device` goes, its EFI system partition being number `esp`, read
/// from this host's /sys/block. A device that cannot be looked up (not a block device, no
/// sysfs) gets [`FirmwareDisks::Itself`].
pub(crate) fn firmware_disks(device: &Path, esp: u32) -> FirmwareDisks {
    let Some(name) = sysfs::block_device_name(Path::new("/sys"), device) else {
        tracing::debug!(
            "{}: not a block device known to sysfs; the boot entry names it as it is",
            device.display()
        );
        return FirmwareDisks::Itself;
    };
    firmware_disks_in(Path::new("/sys/block"), Path::new("/dev"), &name, esp)
}

/// [`firmware_disks`] of the device with kernel name `name`, over the sysfs tree `sys_block`
/// (`/sys/block`) and device nodes in `dev`.
pub(crate) fn firmware_disks_in(
    sys_block: &Path,
    dev: &Path,
    name: &str,
    esp: u32,
) -> FirmwareDisks {
    under(sys_block, dev, name, esp, 0)
}

fn under(sys_block: &Path, dev: &Path, name: &str, esp: u32, depth: usize) -> FirmwareDisks {
    let dir = sys_block.join(name);
    let found = if dir.join("md").is_dir() {
        md_members(&dir, name)
    } else if sysfs::is_multipath(&dir) {
        Ok(multipath_paths(&dir, name))
    } else {
        return FirmwareDisks::Itself;
    };
    let (what, members) = match found {
        Ok(found) => found,
        Err(why) => return FirmwareDisks::Hidden(why),
    };
    if members.is_empty() {
        return FirmwareDisks::Hidden(format!("{what} has no working member disk"));
    }
    if depth >= MAX_DEPTH {
        return FirmwareDisks::Hidden(format!("{what} is built on too many layers of arrays"));
    }
    let mut disks = Vec::new();
    for member in members {
        // The ESP keeps its number on each member (see the module documentation), and on
        // what that member is built from in turn (md over multipath).
        match under(sys_block, dev, &member, esp, depth + 1) {
            FirmwareDisks::Itself => disks.push(EntryDisk {
                node: dev.join(&member),
                partition: esp,
            }),
            FirmwareDisks::Under { disks: more, .. } => disks.extend(more),
            FirmwareDisks::Hidden(why) => {
                return FirmwareDisks::Hidden(format!("{what}: member {member}: {why}"))
            }
        }
    }
    FirmwareDisks::Under { what, disks }
}

/// The members of md array `name` (its sysfs directory `dir`) that hold a whole bootable
/// copy of it, with the array described; or why none can.
fn md_members(dir: &Path, name: &str) -> Result<(String, Vec<String>), String> {
    let md = dir.join("md");
    let level = sysfs::attr(&md, "level").unwrap_or_default();
    let what = match level.as_str() {
        "" => format!("md array {name}"),
        level => format!("md {} array {name}", level.to_uppercase()),
    };
    if level != "raid1" {
        return Err(format!(
            "{what}: only a RAID1 member holds a whole copy of the disk, with the EFI system \
             partition the firmware can read"
        ));
    }
    let mut members = Vec::new();
    for member in sysfs::names_in(&dir.join("slaves")) {
        if dir.join("slaves").join(&member).join("partition").exists() {
            return Err(format!(
                "{what}: member {member} is a partition, so the EFI system partition lies inside it \
                 where the firmware does not look"
            ));
        }
        let rdev = md.join(format!("dev-{member}"));
        let state = sysfs::attr(&rdev, "state").unwrap_or_default();
        if state.split(',').any(|s| s == "faulty" || s == "spare") {
            tracing::info!("{what}: member {member} is {state}: no boot entry on it");
            continue;
        }
        match sysfs::attr(&rdev, "offset").as_deref() {
            Some("0") => members.push(member),
            offset => {
                let metadata = sysfs::attr(&md, "metadata_version").unwrap_or_default();
                return Err(format!(
                    "{what}: its data starts at sector {} of member {member} (metadata {metadata}), \
                     so the firmware finds no partition table there; only metadata 1.0, 0.90 or \
                     firmware RAID keep the data at the start of each disk",
                    offset.unwrap_or("(unknown)")
                ));
            }
        }
    }
    Ok((what, members))
}

/// The running paths of multipath map `name`, with the map described.
fn multipath_paths(dir: &Path, name: &str) -> (String, Vec<String>) {
    let map = sysfs::dm_identity(dir).map(|(n, _)| n).unwrap_or_default();
    let what = format!("multipath map {map} ({name})");
    let sys_block = dir.parent().unwrap_or(Path::new("/"));
    let paths = sysfs::names_in(&dir.join("slaves"))
        .into_iter()
        .filter(|path| {
            // A SCSI path the kernel took offline cannot be read, by efibootmgr or later by
            // the firmware through that port.
            let state = sysfs::attr(&sys_block.join(path).join("device"), "state");
            let running = state
                .as_deref()
                .is_none_or(|s| s == "running" || s == "live");
            if !running {
                tracing::info!(
                    "{what}: path {path} is {}: no boot entry on it",
                    state.unwrap_or_default()
                );
            }
            running
        })
        .collect();
    (what, paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A fake /sys/block.
    struct Sys(tempfile::TempDir);

    impl Sys {
        fn new() -> Sys {
            Sys(tempfile::tempdir().unwrap())
        }
        fn root(&self) -> &Path {
            self.0.path()
        }
        fn write(&self, path: &str, value: &str) {
            let p = self.root().join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, format!("{value}\n")).unwrap();
        }
        fn disk(&self, name: &str) {
            fs::create_dir_all(self.root().join(name).join("holders")).unwrap();
            self.write(&format!("{name}/dev"), "8:0");
        }
        /// md array `name` at `level` over `members` (name, data offset, state).
        fn md(&self, name: &str, level: &str, metadata: &str, members: &[(&str, u64, &str)]) {
            self.write(&format!("{name}/md/level"), level);
            self.write(&format!("{name}/md/metadata_version"), metadata);
            for (m, offset, state) in members {
                self.disk(m);
                fs::create_dir_all(self.root().join(name).join("slaves").join(m)).unwrap();
                self.write(&format!("{name}/md/dev-{m}/offset"), &offset.to_string());
                self.write(&format!("{name}/md/dev-{m}/state"), state);
            }
        }
        fn multipath(&self, name: &str, map: &str, paths: &[(&str, &str)]) {
            self.write(&format!("{name}/dm/name"), map);
            self.write(&format!("{name}/dm/uuid"), "mpath-36001405abcdef");
            for (p, state) in paths {
                self.disk(p);
                self.write(&format!("{p}/device/state"), state);
                fs::create_dir_all(self.root().join(name).join("slaves").join(p)).unwrap();
            }
        }
        fn of(&self, name: &str) -> FirmwareDisks {
            firmware_disks_in(self.root(), Path::new("/dev"), name, 2)
        }
    }

    fn entries(found: FirmwareDisks) -> Vec<(String, u32)> {
        match found {
            FirmwareDisks::Under { disks, .. } => disks
                .into_iter()
                .map(|d| (d.node.display().to_string(), d.partition))
                .collect(),
            other => panic!("no entries: {other:?}"),
        }
    }

    fn hidden(found: FirmwareDisks) -> String {
        match found {
            FirmwareDisks::Hidden(why) => why,
            other => panic!("not hidden: {other:?}"),
        }
    }

    #[test]
    fn a_plain_disk_or_another_map_is_itself() {
        let s = Sys::new();
        s.disk("sda");
        s.disk("nvme0n1");
        s.write("dm-3/dm/name", "agent");
        s.write("dm-3/dm/uuid", "");
        s.write("dm-4/dm/uuid", "LVM-abc");
        for name in ["sda", "nvme0n1", "dm-3", "dm-4", "missing"] {
            assert_eq!(s.of(name), FirmwareDisks::Itself, "{name}");
        }
    }

    #[test]
    fn an_md_raid1_array_gets_an_entry_on_each_working_member_at_the_arrays_esp() {
        let s = Sys::new();
        s.md(
            "md127",
            "raid1",
            "1.0",
            &[("sda", 0, "in_sync"), ("sdb", 0, "in_sync,write_mostly")],
        );
        let found = s.of("md127");
        let FirmwareDisks::Under { what, .. } = &found else {
            panic!("{found:?}")
        };
        assert_eq!(what, "md RAID1 array md127");
        assert_eq!(
            entries(found),
            [("/dev/sda".into(), 2), ("/dev/sdb".into(), 2)]
        );
        // A failed member and a spare are left out; the working one still boots.
        s.md(
            "md126",
            "raid1",
            "external:/md127/0",
            &[
                ("sdc", 0, "faulty"),
                ("sdd", 0, "in_sync"),
                ("sde", 0, "spare"),
            ],
        );
        assert_eq!(entries(s.of("md126")), [("/dev/sdd".into(), 2)]);
        s.md("md125", "raid1", "1.0", &[("sdf", 0, "faulty")]);
        assert_eq!(
            hidden(s.of("md125")),
            "md RAID1 array md125 has no working member disk"
        );
    }

    #[test]
    fn an_md_array_whose_members_do_not_start_with_its_table_is_hidden() {
        let s = Sys::new();
        s.md(
            "md0",
            "raid1",
            "1.2",
            &[("sda", 0, "in_sync"), ("sdb", 2048, "in_sync")],
        );
        let why = hidden(s.of("md0"));
        assert!(
            why.contains(
                "md RAID1 array md0: its data starts at sector 2048 of member sdb (metadata 1.2)"
            ),
            "{why}"
        );
        s.md("md1", "raid5", "1.0", &[("sdc", 0, "in_sync")]);
        assert!(hidden(s.of("md1")).starts_with("md RAID5 array md1: only a RAID1 member"));
        s.md("md2", "raid1", "1.0", &[("sdd", 0, "in_sync")]);
        s.write("md2/slaves/sdd3/partition", "3");
        assert!(hidden(s.of("md2")).contains("member sdd3 is a partition"));
    }

    #[test]
    fn a_multipath_map_gets_an_entry_on_each_running_path() {
        let s = Sys::new();
        s.multipath(
            "dm-0",
            "mpatha",
            &[("sda", "running"), ("sdb", "offline"), ("sdc", "running")],
        );
        let found = s.of("dm-0");
        let FirmwareDisks::Under { what, .. } = &found else {
            panic!("{found:?}")
        };
        assert_eq!(what, "multipath map mpatha (dm-0)");
        assert_eq!(
            entries(found),
            [("/dev/sda".into(), 2), ("/dev/sdc".into(), 2)]
        );
        s.multipath("dm-1", "mpathb", &[("sdd", "offline")]);
        assert_eq!(
            hidden(s.of("dm-1")),
            "multipath map mpathb (dm-1) has no working member disk"
        );
    }

    #[test]
    fn a_mirror_of_multipath_maps_gets_an_entry_on_every_path() {
        let s = Sys::new();
        s.multipath("dm-0", "mpatha", &[("sda", "running"), ("sdb", "running")]);
        s.multipath("dm-1", "mpathb", &[("sdc", "running")]);
        s.md("md0", "raid1", "1.0", &[]);
        for m in ["dm-0", "dm-1"] {
            fs::create_dir_all(s.root().join("md0/slaves").join(m)).unwrap();
            s.write(&format!("md0/md/dev-{m}/offset"), "0");
            s.write(&format!("md0/md/dev-{m}/state"), "in_sync");
        }
        assert_eq!(
            entries(s.of("md0")),
            [
                ("/dev/sda".into(), 2),
                ("/dev/sdb".into(), 2),
                ("/dev/sdc".into(), 2)
            ]
        );
    }
}
