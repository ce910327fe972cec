//! Partitions of a device-mapper disk: a multipath map, or the appliance's linear `agent`
//! device. The kernel makes dm disks without partition support (BLKRRPART and BLKPG answer
//! EINVAL), so their partitions are dm `linear` maps over the disk, which kpartx makes on a
//! multipath host. We make them the way kpartx does, so that lsblk, multipath-tools and the
//! host's udev rules take them for kpartx's own:
//!
//! - name `<disk><delimiter><N>`: the delimiter of the maps the disk already has, else kpartx's
//!   default (`p` when the disk's name ends in a digit, nothing otherwise);
//! - uuid `part<N>-<disk uuid>` (lsblk shows such a device as type `part`), none when the disk
//!   has none;
//! - table `0 <length> linear <disk major:minor> <start>`, in 512-byte sectors;
//! - node `/dev/mapper/<name>`: udev's link where udev runs, else ours (a link to `../dm-N`, as
//!   udev makes it).
//!
//! Maps that hold the disk open stop it from being opened exclusively, so the writer removes
//! the disk's own maps before it opens it (and refuses when anything else holds it), and makes
//! them again from the new table after the write.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::dm::{self, Control, Linear};
use super::holders::DeviceBusy;
use super::sysfs;
use super::table::PartitionSpec;
use super::udev::{settle_udev, udev_running, wait_until};

/// Partition numbers and their nodes.
pub(crate) type PartitionNodeList = Vec<(u32, PathBuf)>;

/// A device-mapper disk, as sysfs shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DmDisk {
    /// Its device-mapper name (`mpatha`, `agent`).
    pub name: String,
    pub uuid: String,
    pub devno: (u64, u64),
    /// Its sysfs directory (`/sys/devices/virtual/block/dm-0`).
    pub sys: PathBuf,
}

/// A partition map of a [`DmDisk`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PartitionMap {
    pub name: String,
    pub number: u32,
    /// The delimiter between the disk's name and the number in `name`.
    pub delimiter: String,
}

/// kpartx's default delimiter for a disk named `disk`.
pub(crate) fn default_delimiter(disk: &str) -> &'static str {
    if disk.ends_with(|c: char| c.is_ascii_digit()) {
        "p"
    } else {
        ""
    }
}

/// The partition number and delimiter of map `name` if it is named as a partition of `disk`
/// (`mpatha1`, `mpatha-part1`, `mpath0p1`). Pure.
pub(crate) fn parse_map_name(disk: &str, name: &str) -> Option<(String, u32)> {
    let rest = name.strip_prefix(disk)?;
    let digits = rest.len() - rest.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (delimiter, number) = rest.split_at(rest.len() - digits);
    let number: u32 = number.parse().ok().filter(|n| *n > 0)?;
    ["", "p", "-part", "_part"]
        .contains(&delimiter)
        .then(|| (delimiter.to_string(), number))
}

impl DmDisk {
    /// The dm disk whose sysfs directory is `sys`; `None` when it is not a dm device.
    pub(crate) fn of(sys: &Path) -> Option<DmDisk> {
        let (name, uuid) = sysfs::dm_identity(sys)?;
        Some(DmDisk {
            name,
            uuid,
            devno: sysfs::devno(sys)?,
            sys: sys.to_path_buf(),
        })
    }

    /// The uuid kpartx gives partition `n`'s map (none when the disk has none).
    pub(crate) fn map_uuid(&self, n: u32) -> String {
        if self.uuid.is_empty() {
            String::new()
        } else {
            format!("part{n}-{}", self.uuid)
        }
    }

    /// Whether a dm device named `name` with uuid `uuid` that sits on this disk alone is one of
    /// its partition maps. Pure.
    pub(crate) fn recognise(&self, name: &str, uuid: &str) -> Option<PartitionMap> {
        let (delimiter, number) = parse_map_name(&self.name, name)?;
        let uuid_ok = if self.uuid.is_empty() {
            uuid.is_empty() || uuid.starts_with(&format!("part{number}-"))
        } else {
            uuid == self.map_uuid(number)
        };
        uuid_ok.then(|| PartitionMap {
            name: name.to_string(),
            number,
            delimiter,
        })
    }

    /// What holds the disk: its own partition maps, and descriptions of anything else.
    pub(crate) fn holders(&self) -> (Vec<PartitionMap>, Vec<String>) {
        let mut own = Vec::new();
        let mut others = Vec::new();
        let me = self
            .sys
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        for h in sysfs::names_in(&self.sys.join("holders")) {
            let dir = self.sys.join("holders").join(&h);
            let on_me_alone =
                sysfs::names_in(&dir.join("slaves")) == me.iter().cloned().collect::<Vec<_>>();
            match sysfs::dm_identity(&dir) {
                Some((name, uuid)) if on_me_alone => match self.recognise(&name, &uuid) {
                    Some(map) => own.push(map),
                    None => others.push(format!("{h} ({name})")),
                },
                Some((name, _)) => others.push(format!("{h} ({name})")),
                None => others.push(h),
            }
        }
        own.sort_by_key(|m| m.number);
        (own, others)
    }

    /// The delimiter new maps get: the one the disk's maps already use, else kpartx's default.
    fn delimiter(&self, existing: &[PartitionMap]) -> String {
        existing
            .first()
            .map(|m| m.delimiter.clone())
            .unwrap_or_else(|| default_delimiter(&self.name).to_string())
    }

    fn table(&self, p: &PartitionSpec) -> Linear {
        Linear {
            length: p.length / 512,
            major: self.devno.0,
            minor: self.devno.1,
            start: p.start / 512,
        }
    }
}

/// Whether the map `name` of `disk` is open exclusively by someone (a mount, a holder): the
/// kernel then refuses our exclusive open of it, which we close at once.
fn map_in_use(disk: &DmDisk, name: &str) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(kname) = kernel_name(disk, name) else {
        return false;
    };
    let open = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL | libc::O_CLOEXEC)
        .open(Path::new("/dev").join(kname));
    matches!(open, Err(e) if e.raw_os_error() == Some(libc::EBUSY))
}

/// `/dev/mapper/<name>`.
pub(crate) fn mapper_node(name: &str) -> PathBuf {
    Path::new("/dev/mapper").join(name)
}

/// The kernel name (`dm-5`) of the dm device named `name`, from sysfs.
fn kernel_name(disk: &DmDisk, name: &str) -> Option<String> {
    sysfs::names_in(&disk.sys.join("holders"))
        .into_iter()
        .find(|h| {
            sysfs::dm_identity(&disk.sys.join("holders").join(h)).is_some_and(|(n, _)| n == name)
        })
}

/// Make `/dev/mapper/<name>` lead to the map: udev's link where udev runs and made it; else a
/// link to `../dm-N` (what udev would have made).
fn ensure_mapper_node(disk: &DmDisk, name: &str) -> Result<PathBuf> {
    let node = mapper_node(name);
    let kname = kernel_name(disk, name)
        .with_context(|| format!("the new map {name} does not show in sysfs"))?;
    let target = Path::new("/dev").join(&kname);
    let same = |p: &Path| {
        std::fs::canonicalize(p).is_ok_and(|c| c == target)
            || std::fs::metadata(p)
                .ok()
                .zip(std::fs::metadata(&target).ok())
                .is_some_and(|(a, b)| {
                    use std::os::unix::fs::MetadataExt;
                    a.rdev() == b.rdev()
                })
    };
    let by_udev = || {
        wait_until(Duration::from_secs(5), Duration::from_millis(50), || {
            same(&node)
        })
    };
    if (udev_running() && by_udev()) || same(&node) {
        return Ok(node);
    }
    if node.symlink_metadata().is_ok() {
        std::fs::remove_file(&node)
            .with_context(|| format!("removing the stale {}", node.display()))?;
    }
    std::os::unix::fs::symlink(format!("../{kname}"), &node)
        .with_context(|| format!("creating {} -> ../{kname}", node.display()))?;
    Ok(node)
}

/// Remove the maps named `names`; their `/dev/mapper` links too where no udev does it.
pub(crate) fn remove(names: &[String]) -> Result<()> {
    if names.is_empty() {
        return Ok(());
    }
    let control = Control::open()?;
    for name in names {
        control.remove(name).map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::EBUSY) {
                " (it is open: mounted, or used by LVM, MD or another map)"
            } else {
                ""
            };
            anyhow::Error::new(e).context(format!(
                "removing the device-mapper partition map {name}{hint}"
            ))
        })?;
        tracing::debug!("removed the partition map {name}");
        if !udev_running() {
            let _ = std::fs::remove_file(mapper_node(name));
        }
    }
    Ok(())
}

/// Make the disk's partition maps match `want`: maps for partitions not in `want` are removed,
/// existing maps of wanted partitions get the new table, missing ones are created. Returns
/// each wanted partition's node, and the names of the maps now there.
pub(crate) fn ensure(
    disk: &DmDisk,
    want: &[PartitionSpec],
) -> Result<(PartitionNodeList, Vec<String>)> {
    settle_udev();
    let control = Control::open()?;
    let (existing, _) = disk.holders();
    let delimiter = disk.delimiter(&existing);
    let stale: Vec<String> = existing
        .iter()
        .filter(|m| !want.iter().any(|w| w.number == m.number))
        .map(|m| m.name.clone())
        .collect();
    remove(&stale)?;
    let mut names = Vec::new();
    for p in want {
        let table = [disk.table(p)];
        let name = match existing.iter().find(|m| m.number == p.number) {
            Some(m) => m.name.clone(),
            None => {
                let name = format!("{}{delimiter}{}", disk.name, p.number);
                match control.create(&name, &disk.map_uuid(p.number)) {
                    Ok(()) => name,
                    // udev's kpartx on the host may have made it since we looked: take that one.
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => disk
                        .holders()
                        .0
                        .into_iter()
                        .find(|m| m.number == p.number)
                        .map(|m| m.name)
                        .with_context(|| {
                            format!(
                                "creating the partition map {name} of {}: the name or uuid {:?} is taken by a device that is not its partition map",
                                disk.name,
                                disk.map_uuid(p.number)
                            )
                        })?,
                    Err(e) => {
                        return Err(e).with_context(|| {
                            format!("creating the partition map {name} of {}", disk.name)
                        })
                    }
                }
            }
        };
        let params = table[0].params();
        control.load_and_resume(&name, &table).with_context(|| {
            format!("loading the table of partition map {name} (linear {params})")
        })?;
        tracing::debug!(
            "partition map {name}: 0 {} linear {params}",
            table[0].length
        );
        names.push(name);
    }
    settle_udev();
    let nodes = want.iter().zip(&names);
    let nodes = nodes.map(|(p, name)| Ok((p.number, ensure_mapper_node(disk, name)?)));
    Ok((nodes.collect::<Result<_>>()?, names))
}

/// Before an exclusive open of `disk`: when its own partition maps are all that holds it,
/// remove them (they are made again after the write, as kpartx would). Returns whether it
/// removed any. A map in use (mounted) makes this fail with its name.
pub(crate) fn release_own_maps(path: &Path, disk: &DmDisk) -> Result<bool> {
    let (own, others) = disk.holders();
    if own.is_empty() || !others.is_empty() {
        return Ok(false);
    }
    if !dm::available() {
        bail!(
            "{} is held by its partition maps, and {} is missing to remove them",
            disk.name,
            dm::CONTROL
        );
    }
    // All or nothing: a map in use (a mounted partition) refuses the disk before any map goes.
    let busy: Vec<String> = own
        .iter()
        .filter(|m| map_in_use(disk, &m.name))
        .map(|m| m.name.clone())
        .collect();
    if !busy.is_empty() {
        bail!(DeviceBusy {
            path: path.display().to_string(),
            holders: format!(
                "the partition map {} of {} is mounted, or used by LVM, MD or another map",
                busy.join(", "),
                disk.name
            ),
        });
    }
    let names: Vec<String> = own.into_iter().map(|m| m.name).collect();
    tracing::info!(
        "removing the old partition maps of {} ({}): they hold the disk, and are made again from the new partition table after the write",
        disk.name,
        names.join(", ")
    );
    remove(&names)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(name: &str, uuid: &str) -> DmDisk {
        DmDisk {
            name: name.into(),
            uuid: uuid.into(),
            devno: (253, 0),
            sys: PathBuf::from("/nonexistent"),
        }
    }

    #[test]
    fn map_names_are_parsed_with_every_delimiter_multipath_tools_uses() {
        assert_eq!(parse_map_name("mpatha", "mpatha1"), Some(("".into(), 1)));
        assert_eq!(
            parse_map_name("mpatha", "mpatha-part4"),
            Some(("-part".into(), 4))
        );
        assert_eq!(
            parse_map_name("mpath0", "mpath0p12"),
            Some(("p".into(), 12))
        );
        assert_eq!(parse_map_name("mpatha", "mpathb1"), None);
        assert_eq!(parse_map_name("mpatha", "mpatha"), None);
        assert_eq!(parse_map_name("mpatha", "mpatha0"), None);
        assert_eq!(parse_map_name("mpatha", "mpatha-lvm1"), None);
    }

    #[test]
    fn a_map_is_the_disks_only_with_the_matching_uuid() {
        let mp = disk("mpatha", "mpath-3600a");
        assert_eq!(mp.map_uuid(3), "part3-mpath-3600a");
        let m = mp.recognise("mpatha3", "part3-mpath-3600a").unwrap();
        assert_eq!((m.number, m.delimiter.as_str()), (3, ""));
        assert!(mp.recognise("mpatha3", "part2-mpath-3600a").is_none());
        assert!(
            mp.recognise("mpatha3", "").is_none(),
            "an LVM volume named like a partition"
        );
        assert!(mp.recognise("mpatha3", "LVM-abc").is_none());
        let agent = disk("agent", "");
        assert_eq!(agent.map_uuid(1), "");
        assert!(agent.recognise("agent1", "").is_some());
        assert!(agent.recognise("agent1", "LVM-xyz").is_none());
    }

    #[test]
    fn a_partition_becomes_a_linear_table_in_512_byte_sectors() {
        let mp = disk("mpatha", "mpath-3600a");
        let p = PartitionSpec {
            number: 4,
            start: 42 << 20,
            length: 48 << 20,
            label: "root".into(),
        };
        let t = mp.table(&p);
        assert_eq!((t.start, t.length), (86016, 98304));
        assert_eq!(t.params(), "253:0 86016");
        assert_eq!(mp.delimiter(&[]), "");
        let existing = [PartitionMap {
            name: "mpatha-part1".into(),
            number: 1,
            delimiter: "-part".into(),
        }];
        assert_eq!(mp.delimiter(&existing), "-part", "keep the host's naming");
        assert_eq!(disk("mpath0", "").delimiter(&[]), "p");
    }
}
