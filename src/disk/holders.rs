//! Who holds a busy disk: mounts (from /proc/self/mountinfo), swap (/proc/swaps) and kernel
//! holders such as device-mapper or MD (/sys/dev/block/M:m/holders), for the disk and each of
//! its partitions. Parsing is pure; only `describe` reads the system.

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

/// The disk and its partitions as sysfs knows them: name, `major:minor`, sysfs directory.
fn nodes(sys_disk: &Path) -> Vec<(String, String, PathBuf)> {
    let name = sys_disk
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let disk = sysfs::devno(sys_disk).map(|devno| (name, devno, sys_disk.to_path_buf()));
    let parts = sysfs::partitions(sys_disk).into_iter().filter_map(|p| {
        let dir = sys_disk.join(&p.name);
        Some((p.name, p.devno?, dir))
    });
    disk.into_iter()
        .chain(parts)
        .map(|(name, (major, minor), dir)| (name, format!("{major}:{minor}"), dir))
        .collect()
}

/// Human descriptions of everything that holds `disk` or one of its partitions.
pub(crate) fn describe(disk: &Path) -> std::io::Result<Vec<String>> {
    let rdev = std::fs::metadata(disk)?.rdev();
    let sys_disk = sysfs::block_dir(libc::major(rdev).into(), libc::minor(rdev).into())?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    let mut found = Vec::new();
    for (name, devno, sys) in nodes(&sys_disk) {
        for mp in mounts_of(&mountinfo, &devno) {
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
}
