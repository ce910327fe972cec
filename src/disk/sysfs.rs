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

/// The kernel's name for `device` (`sda`, `dm-0`, `nvme0n1`) under `sys` (`/sys`): found by
/// its device number when it is a block device (a `/dev/disk/by-*` link or a node of our own
/// making may be named otherwise), else the name its path resolves to.
pub(super) fn kernel_name(sys: &Path, device: &Path) -> Option<String> {
    block_device_name(sys, device).or_else(|| {
        let path = std::fs::canonicalize(device).ok();
        let path = path.as_deref().unwrap_or(device);
        Some(path.file_name()?.to_string_lossy().into_owned())
    })
}

/// The kernel's name for `device` by its device number, under `sys` (`/sys`); `None` when it
/// is not a block device sysfs knows.
pub(super) fn block_device_name(sys: &Path, device: &Path) -> Option<String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata(device).ok()?;
    if !meta.file_type().is_block_device() {
        return None;
    }
    let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
    let dir = std::fs::canonicalize(sys.join(format!("dev/block/{major}:{minor}"))).ok()?;
    Some(dir.file_name()?.to_string_lossy().into_owned())
}

/// Where block device `name` (under `sys_block`) reaches its disk over iSCSI: the device
/// (`name`, or what it is built from: a multipath map's paths, an array's members) whose
/// sysfs path runs through an iSCSI session (a `session<N>` directory holding the
/// `iscsi_session` class entry), and that session's name.
pub(crate) fn iscsi_session(sys_block: &Path, name: &str) -> Option<(String, String)> {
    let mut todo = vec![name.to_string()];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let dir = sys_block.join(&name);
        if let Ok(path) = std::fs::canonicalize(&dir) {
            let session = path.ancestors().find(|a| {
                a.file_name()
                    .and_then(|n| n.to_str()?.strip_prefix("session"))
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                    && a.join("iscsi_session").is_dir()
            });
            if let Some(session) = session.and_then(Path::file_name) {
                return Some((name, session.to_string_lossy().into_owned()));
            }
        }
        todo.extend(names_in(&dir.join("slaves")));
    }
    None
}

/// [`iscsi_session`] of `device` (a path), with sysfs at `sys`.
pub(crate) fn iscsi_session_of(sys: &Path, device: &Path) -> Option<(String, String)> {
    iscsi_session(&sys.join("block"), &kernel_name(sys, device)?)
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

    /// A fake /sys: `sdb` on iSCSI session 3 (as iscsi_tcp lays it out), `sda` on a local
    /// controller, `dm-0` a multipath map over `sdc` (another iSCSI path) and `sda`, `dm-1` over
    /// `sda` only; and a `session7` directory that is not an iSCSI session.
    #[test]
    fn iscsi_sessions_are_found_on_the_device_path_or_below_a_map() {
        let sys = tempfile::tempdir().unwrap();
        let block = sys.path().join("block");
        std::fs::create_dir_all(&block).unwrap();
        let device = |name: &str, under: &str| {
            let dir = sys
                .path()
                .join("devices")
                .join(under)
                .join("block")
                .join(name);
            std::fs::create_dir_all(dir.join("slaves")).unwrap();
            std::os::unix::fs::symlink(&dir, block.join(name)).unwrap();
            dir
        };
        let session = |host: &str, n: u32| {
            let s = format!("platform/{host}/session{n}");
            std::fs::create_dir_all(
                sys.path()
                    .join("devices")
                    .join(&s)
                    .join(format!("iscsi_session/session{n}")),
            )
            .unwrap();
            format!("{s}/target2:0:0/2:0:0:{n}")
        };
        device("sdb", &session("host2", 3));
        device("sdc", &session("host3", 4));
        device(
            "sda",
            "pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0",
        );
        device("sdd", "platform/host9/session7/target9:0:0/9:0:0:0");
        for (map, paths) in [("dm-0", ["sda", "sdc"]), ("dm-1", ["sda", "sda"])] {
            let dir = device(map, "virtual");
            for p in paths {
                std::fs::write(dir.join("slaves").join(p), "").unwrap();
            }
        }
        let found = |name| iscsi_session(&block, name);
        assert_eq!(found("sdb"), Some(("sdb".into(), "session3".into())));
        assert_eq!(found("dm-0"), Some(("sdc".into(), "session4".into())));
        assert_eq!(found("sda"), None);
        assert_eq!(found("dm-1"), None);
        assert_eq!(found("sdd"), None, "no iscsi_session class entry");
        assert_eq!(found("nvme0n1"), None, "not there at all");
        // A path that is no block device is named by what it resolves to.
        let file = sys.path().join("disk.img");
        std::fs::write(&file, "").unwrap();
        assert_eq!(kernel_name(sys.path(), &file).as_deref(), Some("disk.img"));
        assert_eq!(
            kernel_name(sys.path(), Path::new("/dev/vdz")).as_deref(),
            Some("vdz")
        );
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
