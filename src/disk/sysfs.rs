//! What sysfs shows of a block device: its directory, its device number and the partitions the
//! kernel knows. Read by the busy check (who holds the disk), the install-disk cleanup (what is
//! built on the disk) and the code that makes partition nodes appear; no udev needed.

use std::path::{Path, PathBuf};

/// A partition as the kernel has it (sysfs counts in 512-byte units whatever the sector size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KernelPartition {
    pub number: u32,
    pub name: String,
    pub start: u64,
    pub length: u64,
    pub devno: Option<(u64, u64)>,
}

/// The sysfs directory of block device `major:minor` (links resolved, so its file name is the
/// kernel's name for the device).
pub(super) fn block_dir(major: u64, minor: u64) -> std::io::Result<PathBuf> {
    std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}"))
}

/// `major:minor` from the `dev` file of a sysfs block directory.
pub(super) fn devno(dir: &Path) -> Option<(u64, u64)> {
    let dev = std::fs::read_to_string(dir.join("dev")).ok()?;
    let (major, minor) = dev.trim().split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The device-mapper name and uuid of a dm device (`dm/name`, `dm/uuid`; the uuid may be
/// empty); `None` for any other block device.
pub(super) fn dm_identity(dir: &Path) -> Option<(String, String)> {
    let name = std::fs::read_to_string(dir.join("dm/name")).ok()?;
    let uuid = std::fs::read_to_string(dir.join("dm/uuid")).unwrap_or_default();
    Some((name.trim().to_string(), uuid.trim().to_string()))
}

/// Whether a sysfs block directory is a dm-multipath map (its dm uuid is `mpath-…`).
pub(super) fn is_multipath(dir: &Path) -> bool {
    dm_identity(dir).is_some_and(|(_, uuid)| uuid.starts_with("mpath-"))
}

/// The trimmed text of sysfs attribute `name` under `dir` (`md/level`, `device/state` ...).
pub(super) fn attr(dir: &Path, name: &str) -> Option<String> {
    Some(
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .to_string(),
    )
}

/// The kernel names of the entries of a sysfs list directory (`holders`, `slaves`), sorted.
pub(super) fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn read_num(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// The partitions sysfs lists under a disk's directory, in number order.
pub(super) fn partitions(sys_disk: &Path) -> Vec<KernelPartition> {
    let Ok(entries) = std::fs::read_dir(sys_disk) else {
        return Vec::new();
    };
    let mut out: Vec<KernelPartition> = entries
        .flatten()
        .filter_map(|e| {
            let dir = e.path();
            Some(KernelPartition {
                number: read_num(&dir.join("partition"))? as u32,
                name: e.file_name().to_string_lossy().into_owned(),
                start: read_num(&dir.join("start"))? * 512,
                length: read_num(&dir.join("size"))? * 512,
                devno: devno(&dir),
            })
        })
        .collect();
    out.sort_by_key(|p| p.number);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_read_in_bytes() {
        let dir = tempfile::tempdir().unwrap();
        for (name, n, start, size) in [("loop0p2", 2, 4096, 16384), ("loop0p1", 1, 2048, 2048)] {
            let p = dir.path().join(name);
            std::fs::create_dir(&p).unwrap();
            std::fs::write(p.join("partition"), format!("{n}\n")).unwrap();
            std::fs::write(p.join("start"), format!("{start}\n")).unwrap();
            std::fs::write(p.join("size"), format!("{size}\n")).unwrap();
            std::fs::write(p.join("dev"), format!("259:{n}\n")).unwrap();
        }
        std::fs::create_dir(dir.path().join("queue")).unwrap();
        let parts = partitions(dir.path());
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].number, 1);
        assert_eq!(parts[0].name, "loop0p1");
        assert_eq!(parts[0].start, 2048 * 512);
        assert_eq!(parts[1].length, 16384 * 512);
        assert_eq!(parts[1].devno, Some((259, 2)));
    }

    #[test]
    fn device_mapper_identity_and_lists() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(dm_identity(dir.path()), None, "not a dm device");
        std::fs::create_dir_all(dir.path().join("dm")).unwrap();
        std::fs::write(dir.path().join("dm/name"), "mpatha\n").unwrap();
        assert_eq!(
            dm_identity(dir.path()),
            Some(("mpatha".into(), String::new()))
        );
        std::fs::write(dir.path().join("dm/uuid"), "mpath-3600a\n").unwrap();
        assert_eq!(
            dm_identity(dir.path()),
            Some(("mpatha".into(), "mpath-3600a".into()))
        );
        std::fs::create_dir_all(dir.path().join("holders/dm-3")).unwrap();
        std::fs::create_dir_all(dir.path().join("holders/dm-1")).unwrap();
        assert_eq!(names_in(&dir.path().join("holders")), ["dm-1", "dm-3"]);
        assert!(names_in(&dir.path().join("slaves")).is_empty());
    }
}
