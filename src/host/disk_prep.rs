//! Disk preparation before the write (the Go `FormatDisks` and `CleanupInstallDevice`):
//! `--format-disk`, and the install-device cleanup that removes LVM, device-mapper and RAID users
//! of the target and wipes its signatures.
//!
//! The parsers of `vgs`, `pvs`, `dmsetup` and `mdadm` output are pure; [`cleanup_install_device`]
//! runs the host commands in the Go installer's order (preinstall-utils `CleanupInstallDevice`).
//! Every step is attempted; the errors are collected into one [`CleanupError`], which callers
//! treat as non-fatal.
//!
//! What is on the disk is decided by path, as Go does (the device or a partition by kernel
//! naming), and also by device number against what sysfs shows built on the disk
//! ([`DiskStack`]). Go's path match alone misses every device-mapper user of a multipath disk:
//! the disk is resolved to `/dev/dm-0` while LVM names its volume `/dev/mapper/mpatha3` and
//! `dmsetup deps` names the partition map `dm-3`, so nothing was removed and the write then
//! refused the busy disk. The device-mapper devices built on the disk are removed in the order
//! sysfs gives (what sits on top first).

use std::path::{Path, PathBuf};

use super::commands::{CommandRunner, ExecError};
use crate::disk::holders::DiskStack;

/// What the cleanup reads of the system besides the commands' output.
pub(crate) trait BlockDevices {
    /// The disk at `device`, its partitions and everything built on them, as sysfs shows them
    /// now (empty when they cannot be read).
    fn stack(&self, device: &str) -> DiskStack;
    /// The device number of the block device at `path` (links followed).
    fn devno(&self, path: &str) -> Option<(u64, u64)>;
}

/// The running system. The installer's container has the host's /dev (`-v /dev:/dev`) and,
/// privileged, the host's block devices in /sys, so the paths the host's commands print
/// resolve here as on the host.
struct LiveBlockDevices;

impl BlockDevices for LiveBlockDevices {
    fn stack(&self, device: &str) -> DiskStack {
        DiskStack::of_device(Path::new(device)).unwrap_or_else(|e| {
            tracing::warn!(
                "Could not read from sysfs what is built on {device} ({e}): matching its users by name only"
            );
            DiskStack::default()
        })
    }

    fn devno(&self, path: &str) -> Option<(u64, u64)> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let meta = std::fs::metadata(path).ok()?;
        let rdev = meta.rdev();
        let block = meta.file_type().is_block_device();
        block.then(|| (libc::major(rdev).into(), libc::minor(rdev).into()))
    }
}

/// The install disk as other devices are matched against it.
struct InstallDisk<'a> {
    path: &'a str,
    stack: DiskStack,
    blocks: &'a dyn BlockDevices,
}

impl<'a> InstallDisk<'a> {
    fn read(blocks: &'a dyn BlockDevices, path: &'a str) -> Self {
        InstallDisk {
            path,
            stack: blocks.stack(path),
            blocks,
        }
    }

    /// Whether the device at `path` (as `vgs`, `pvs` and `mdadm` print it) is the disk, one of
    /// its partitions or built on them.
    fn has_path(&self, path: &str) -> bool {
        is_device_or_partition(path, self.path)
            || self
                .blocks
                .devno(path)
                .is_some_and(|d| self.stack.contains(d))
    }

    /// The same for a kernel name, as `dmsetup deps -o devname` prints it (`sda2`, `dm-3`).
    fn has_kernel_name(&self, name: &str) -> bool {
        let base = self.path.rsplit('/').next().unwrap_or(self.path);
        is_device_or_partition(name, base) || self.stack.has_kernel_name(name)
    }

    /// The device-mapper devices to remove, in order: those sysfs shows built on the disk
    /// (the top ones first; those under an array wait for it to stop), then those only
    /// `dmsetup deps` named, in Go's order.
    fn dm_removal_order(&self, named_by_deps: &[String]) -> Vec<String> {
        let known = |d: &String| {
            let mut names = self.stack.holders.iter();
            names.any(|h| h.node.dm_name.as_ref() == Some(d))
        };
        let rest: Vec<String> = named_by_deps
            .iter()
            .filter(|d| !known(d))
            .cloned()
            .collect();
        let mut order = self.stack.dm_take_down();
        for d in order_dm_devices_for_removal(&rest) {
            if !order.contains(&d) {
                order.push(d);
            }
        }
        order
    }
}

/// Whether `candidate` is `device` itself or one of its partitions, by kernel naming:
/// `sda` → `sda1`; a name ending in a digit takes a `p` (`nvme0n1p1`, `mmcblk0p2`, `md127p1`);
/// udev/multipath `-partN` names are accepted too. Anchored, unlike Go's unanchored
/// `<device>\d*` regex, so `/dev/sda` does not match `/dev/sdab`, nor `/dev/nvme0n1` match
/// `/dev/nvme0n11`.
fn is_device_or_partition(candidate: &str, device: &str) -> bool {
    if device.is_empty() {
        return false;
    }
    let Some(rest) = candidate.strip_prefix(device) else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if rest.strip_prefix("-part").is_some_and(digits) {
        return true;
    }
    if device.ends_with(|c: char| c.is_ascii_digit()) {
        rest.strip_prefix('p').is_some_and(digits)
    } else {
        digits(rest)
    }
}

/// The volume groups with a physical volume on the disk, once each, from `vgs --noheadings -o
/// vg_name,pv_name`.
fn volume_groups_on_device(vgs_output: &str, disk: &InstallDisk) -> Vec<String> {
    let device = disk.path;
    let mut vgs: Vec<String> = Vec::new();
    for line in vgs_output.lines() {
        let mut fields = line.split_whitespace();
        let (Some(vg), Some(pv)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !disk.has_path(pv) {
            tracing::info!(
                "Skipping removal of Volume Group {vg}, does not belong to disk {device}"
            );
        } else if !vgs.iter().any(|v| v == vg) {
            vgs.push(vg.to_string());
        }
    }
    vgs
}

/// `pvs --noheadings -o pv_name` → the physical volumes on the disk.
fn physical_volumes_on_device(pvs_output: &str, disk: &InstallDisk) -> Vec<String> {
    pvs_output
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|pv| disk.has_path(pv))
        .map(str::to_string)
        .collect()
}

/// `dmsetup ls` → device-mapper names (the text before the tab on each line).
fn parse_dmsetup_ls(output: &str) -> Vec<String> {
    if output.trim() == "No devices found" {
        return Vec::new();
    }
    output
        .lines()
        .filter_map(|l| {
            let name = match l.split_once('\t') {
                Some((name, _)) => name.trim(),
                None => l.split_whitespace().next().unwrap_or(""),
            };
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
}

/// Whether a `dmsetup deps -o devname <dm>` output (` 1 dependencies  : (sda2)`) names, in
/// parentheses, the disk, one of its partitions or a device built on them.
fn dm_depends_on(deps_output: &str, disk: &InstallDisk) -> bool {
    let mut inside = deps_output
        .split('(')
        .skip(1)
        .filter_map(|s| s.split_once(')'));
    inside.any(|(name, _)| disk.has_kernel_name(name.trim()))
}

/// The removal order for device-mapper devices: for a thin pool's `<pool>_tdata` the pool
/// `<pool>` is added, and the `_tdata` / `_tmeta` parts go last, after the devices built on
/// them.
fn order_dm_devices_for_removal(devices: &[String]) -> Vec<String> {
    let pools = devices.iter().filter_map(|d| d.strip_suffix("_tdata"));
    let mut all: Vec<String> = Vec::new();
    for d in devices.iter().map(String::as_str).chain(pools) {
        if !all.iter().any(|x| x == d) {
            all.push(d.to_string());
        }
    }
    let dependent = |d: &String| d.ends_with("_tdata") || d.ends_with("_tmeta");
    let (parts, roots): (Vec<String>, Vec<String>) = all.into_iter().partition(dependent);
    roots.into_iter().chain(parts).collect()
}

/// One RAID array from `mdadm -v --query --detail --scan`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RaidArray {
    device: String,
    members: Vec<String>,
}

impl RaidArray {
    /// The members that are the disk, one of its partitions or built on them.
    fn members_on(&self, disk: &InstallDisk) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| disk.has_path(m))
            .cloned()
            .collect()
    }
}

/// Parses `mdadm -v --query --detail --scan`:
///
/// ```text
/// ARRAY /dev/md0 level=raid1 num-devices=2 metadata=1.2 name=0 UUID=77e1b6f2:…
///    devices=/dev/vda2,/dev/vda3
/// ```
///
/// An `ARRAY` line not followed by a `devices=` line is skipped.
fn parse_mdadm_scan(output: &str) -> Vec<RaidArray> {
    let mut lines = output.lines().peekable();
    let mut arrays = Vec::new();
    while let Some(line) = lines.next() {
        let mut fields = line.split_whitespace();
        let (Some("ARRAY"), Some(device)) = (fields.next(), fields.next()) else {
            continue;
        };
        let next = lines.peek().copied().unwrap_or_default();
        let Some(members) = next.trim().strip_prefix("devices=") else {
            continue;
        };
        lines.next();
        arrays.push(RaidArray {
            device: device.to_string(),
            members: members
                .split(',')
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map(str::to_string)
                .collect(),
        });
    }
    arrays
}

/// The errors of an install-device cleanup, in the order they happened.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub(crate) struct CleanupError {
    pub errors: Vec<ExecError>,
}

/// Removes what uses `device` so the image can be written (its LVM and device-mapper devices;
/// the arrays it or a partition is a member of, after their own LVM), then wipes its signatures.
/// Every step runs even when an earlier one failed.
pub(crate) fn cleanup_install_device(
    runner: &dyn CommandRunner,
    device: &str,
) -> Result<(), CleanupError> {
    cleanup_install_device_on(runner, &LiveBlockDevices, device)
}

/// [`cleanup_install_device`] with what sysfs shows read through `blocks`.
fn cleanup_install_device_on(
    runner: &dyn CommandRunner,
    blocks: &dyn BlockDevices,
    device: &str,
) -> Result<(), CleanupError> {
    tracing::info!("Start cleaning up device {device}");
    let mut errors = Vec::new();
    cleanup_lvm_and_dm(runner, blocks, device, &mut errors);

    match runner.run("mdadm", &["-v", "--query", "--detail", "--scan"]) {
        Err(e) => tracing::error!(
            "Error occurred while trying to get list of raid devices - continue without \
             cleaning: {e}"
        ),
        Ok(out) => {
            let disk = InstallDisk::read(blocks, device);
            let arrays: Vec<RaidArray> = parse_mdadm_scan(&out)
                .into_iter()
                .map(|mut a| {
                    if let Ok(p) = std::fs::canonicalize(&a.device) {
                        a.device = p.to_string_lossy().into_owned();
                    }
                    a
                })
                .filter(|a| !a.members_on(&disk).is_empty())
                .collect();
            if !arrays.is_empty() {
                tracing::info!("A raid was detected on the device ({device}) - cleaning");
                for array in &arrays {
                    // The array itself may carry LVM; clean it before breaking it up.
                    cleanup_lvm_and_dm(runner, blocks, &array.device, &mut errors);
                }
                for array in &arrays {
                    tracing::info!("Stopping raid device: {}", array.device);
                    if let Err(e) = runner.run("mdadm", &["--stop", &array.device]) {
                        errors.push(e);
                        continue;
                    }
                    for member in array.members_on(&disk) {
                        tracing::info!("Cleaning raid member {member} superblock");
                        if let Err(e) = runner.run("mdadm", &["--zero-superblock", &member]) {
                            errors.push(e);
                        }
                    }
                }
                // The device-mapper devices under a stopped array can go now.
                let left = InstallDisk::read(blocks, device).dm_removal_order(&[]);
                remove_dm_devices(runner, &left, &mut errors);
                tracing::info!("Finished cleaning up device {device}");
            }
        }
    }

    if let Err(e) = wipefs(runner, device) {
        errors.push(e);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(CleanupError { errors })
    }
}

/// `wipefs --all --force <device>`, then `wipefs --all <device>` if that failed (older
/// util-linux has no `--force`).
pub(crate) fn wipefs(runner: &dyn CommandRunner, device: &str) -> Result<(), ExecError> {
    match runner.run("wipefs", &["--all", "--force", device]) {
        Ok(_) => Ok(()),
        Err(_) => runner.run("wipefs", &["--all", device]).map(|_| ()),
    }
}

/// The output of a listing command; its failure is logged and collected.
fn list(
    runner: &dyn CommandRunner,
    errors: &mut Vec<ExecError>,
    what: &str,
    program: &str,
    args: &[&str],
) -> Option<String> {
    runner
        .run(program, args)
        .inspect_err(|_| tracing::error!("Failed to list {what} in the system"))
        .map_err(|e| errors.push(e))
        .ok()
}

fn cleanup_lvm_and_dm(
    runner: &dyn CommandRunner,
    blocks: &dyn BlockDevices,
    device: &str,
    errors: &mut Vec<ExecError>,
) {
    let disk = InstallDisk::read(blocks, device);
    let vgs = list(
        runner,
        errors,
        "VGs",
        "vgs",
        &["--noheadings", "-o", "vg_name,pv_name"],
    );
    for vg in volume_groups_on_device(&vgs.unwrap_or_default(), &disk) {
        tracing::info!(
            "A volume group ({vg}) was detected on the installation device ({device}) - cleaning"
        );
        if let Err(e) = runner.run("vgremove", &[&vg, "-y"]) {
            tracing::error!("Could not delete volume group ({vg}) due to error: {e}");
            errors.push(e);
        }
    }

    let pvs = list(
        runner,
        errors,
        "PVs",
        "pvs",
        &["--noheadings", "-o", "pv_name"],
    );
    for pv in physical_volumes_on_device(&pvs.unwrap_or_default(), &disk) {
        tracing::info!("Removing pv {pv} from disk {device}");
        if let Err(e) = runner.run("pvremove", &[&pv, "-y", "-ff"]) {
            tracing::error!("Failed remove pv {pv} from disk {device}");
            errors.push(e);
        }
    }

    let Some(dms) = list(runner, errors, "DM devices", "dmsetup", &["ls"]) else {
        return;
    };
    let mut on_device = Vec::new();
    for dm in parse_dmsetup_ls(&dms) {
        match runner.run("dmsetup", &["deps", "-o", "devname", &dm]) {
            Ok(deps) if dm_depends_on(&deps, &disk) => on_device.push(dm),
            Ok(_) => {}
            Err(e) => {
                tracing::error!("Failed to get parent device for DM device {dm}");
                errors.push(e);
            }
        }
    }
    // vgremove took its volumes' maps down: what is built on the disk now.
    let order = InstallDisk::read(blocks, device).dm_removal_order(&on_device);
    remove_dm_devices(runner, &order, errors);
}

fn remove_dm_devices(runner: &dyn CommandRunner, names: &[String], errors: &mut Vec<ExecError>) {
    for dm in names {
        tracing::info!("Removing DM device {dm}");
        if let Err(e) = runner.run("dmsetup", &["remove", "--retry", dm]) {
            tracing::error!("Failed to remove DM device {dm}: {e}");
            errors.push(e);
        }
    }
}

/// `--format-disk`: zero the first sector of each disk (`dd if=/dev/zero of=<disk> bs=512
/// count=1`) so it no longer boots. Failures are logged as warnings and the loop goes on.
/// Returns how many failed.
pub(crate) fn format_disks(runner: &dyn CommandRunner, disks: &[PathBuf]) -> usize {
    let mut failed = 0;
    for disk in disks {
        let disk = disk.display();
        tracing::info!("Formatting disk {disk}");
        let of = format!("of={disk}");
        if let Err(e) = runner.run("dd", &["if=/dev/zero", &of, "bs=512", "count=1"]) {
            tracing::warn!("Failed to format disk {disk}, err: {e}");
            failed += 1;
        }
    }
    failed
}

/// Resolves symlinks such as `/dev/disk/by-id/wwn-…` to the real `/dev/…` node. On failure
/// logs a warning and keeps the path as given.
pub(crate) fn resolve_disk_symlink(path: impl AsRef<Path>) -> PathBuf {
    let path = path.as_ref();
    match std::fs::canonicalize(path) {
        Ok(target) => {
            tracing::info!(
                "Resolving installation device {} symlink to {}",
                path.display(),
                target.display()
            );
            target
        }
        Err(e) => {
            tracing::warn!(
                "Failed to resolve symlinks of {}: {e}. Continuing with {} anyway.",
                path.display(),
                path.display()
            );
            path.to_path_buf()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use super::super::commands::RecordingRunner;
    use super::*;
    use crate::disk::holders::{BlockNode, Holder};

    /// sysfs as a test sets it: per device, the stacks each read returns in turn (the last one
    /// stays); the device numbers of paths. A device it does not know has nothing built on it.
    struct FakeBlocks {
        stacks: RefCell<HashMap<String, Vec<DiskStack>>>,
        devnos: HashMap<String, (u64, u64)>,
    }

    impl BlockDevices for FakeBlocks {
        fn stack(&self, device: &str) -> DiskStack {
            let mut stacks = self.stacks.borrow_mut();
            match stacks.get_mut(device) {
                Some(s) if s.len() > 1 => s.remove(0),
                Some(s) => s[0].clone(),
                None => DiskStack::default(),
            }
        }

        fn devno(&self, path: &str) -> Option<(u64, u64)> {
            self.devnos.get(path).copied()
        }
    }

    /// Nothing in sysfs: Go's matching by name alone.
    struct NoSysfs;

    impl BlockDevices for NoSysfs {
        fn stack(&self, _: &str) -> DiskStack {
            DiskStack::default()
        }

        fn devno(&self, _: &str) -> Option<(u64, u64)> {
            None
        }
    }

    const NO_SYSFS: &NoSysfs = &NoSysfs;

    #[test]
    fn partition_matching() {
        let cases = [
            ("/dev/sda", "/dev/sda", true),
            ("/dev/sda1", "/dev/sda", true),
            ("/dev/sda12", "/dev/sda", true),
            ("/dev/sdab", "/dev/sda", false),
            ("/dev/sdb1", "/dev/sda", false),
            ("/dev/sdap1", "/dev/sda", false),
            ("/dev/nvme0n1p1", "/dev/nvme0n1", true),
            ("/dev/nvme0n11", "/dev/nvme0n1", false),
            ("/dev/nvme0n1p", "/dev/nvme0n1", false),
            ("/dev/mmcblk0p2", "/dev/mmcblk0", true),
            ("/dev/md127p1", "/dev/md127", true),
            ("/dev/mapper/mpatha-part2", "/dev/mapper/mpatha", true),
            ("sda2", "sda", true),
            ("/dev/sda", "", false),
        ];
        for (candidate, device, expected) in cases {
            let got = is_device_or_partition(candidate, device);
            assert_eq!(got, expected, "{candidate} on {device}");
        }
    }

    fn by_name(path: &str) -> InstallDisk<'_> {
        InstallDisk::read(NO_SYSFS, path)
    }

    #[test]
    fn vgs_and_pvs_parsing() {
        let vgs = "  vg0   /dev/sda2\n  vg0   /dev/sda3\n  data  /dev/sdb1\n  other /dev/sdab1\n\n";
        assert_eq!(
            volume_groups_on_device(vgs, &by_name("/dev/sda")),
            vec!["vg0"]
        );
        assert_eq!(
            volume_groups_on_device(vgs, &by_name("/dev/sdb")),
            vec!["data"]
        );
        assert!(volume_groups_on_device("", &by_name("/dev/sda")).is_empty());
        let pvs = "  /dev/sda2 \n  /dev/sda3\n  /dev/sdb1\n";
        assert_eq!(
            physical_volumes_on_device(pvs, &by_name("/dev/sda")),
            vec!["/dev/sda2", "/dev/sda3"]
        );
        assert!(physical_volumes_on_device(pvs, &by_name("/dev/sdc")).is_empty());
    }

    #[test]
    fn dmsetup_parsing() {
        assert!(parse_dmsetup_ls("No devices found").is_empty());
        assert!(parse_dmsetup_ls("No devices found\n").is_empty());
        assert_eq!(
            parse_dmsetup_ls("vg0-root\t(253:0)\nvg0-pool_tdata\t(253:1)\n"),
            vec!["vg0-root", "vg0-pool_tdata"]
        );
        assert_eq!(parse_dmsetup_ls("vg0-swap (253, 2)"), vec!["vg0-swap"]);
        for (deps, device, expected) in [
            (" 2 dependencies\t: (sdb1) (sda3)", "/dev/sdb", true),
            (" 2 dependencies\t: (sdb1) (sda3)", "/dev/sda", true),
            (" 2 dependencies\t: (sdb1) (sda3)", "/dev/sdc", false),
            (" 1 dependencies\t: (sda2)", "/dev/sda", true),
            (" 1 dependencies\t: (sdab2)", "/dev/sda", false),
            (" 1 dependencies : (nvme0n1p3)", "/dev/nvme0n1", true),
            (" 0 dependencies : ", "/dev/sda", false),
        ] {
            let got = dm_depends_on(deps, &by_name(device));
            assert_eq!(got, expected, "{deps:?} {device}");
        }
    }

    #[test]
    fn thin_pool_ordering() {
        let order = |found: &[&str]| {
            let found: Vec<String> = found.iter().map(|s| s.to_string()).collect();
            order_dm_devices_for_removal(&found)
        };
        assert_eq!(
            order(&["vg-pool_tmeta", "vg-pool_tdata", "vg-lv1"]),
            ["vg-lv1", "vg-pool", "vg-pool_tmeta", "vg-pool_tdata"]
        );
        assert_eq!(order(&["a", "a_tdata", "a"]), ["a", "a_tdata"]);
    }

    const MDADM: &str = "ARRAY /dev/md0 level=raid1 num-devices=2 metadata=1.2 name=0 \
                         UUID=77e1b6f2:56530ebd:38bd6808:17fd01c4\n   \
                         devices=/dev/vda2,/dev/vdb2\n\
                         ARRAY /dev/md1 level=raid1 num-devices=1 metadata=1.2 name=1 \
                         UUID=aad7aca9:81db82f3:2f1fedb1:f89ddb43\n   devices=/dev/vdc1\n";

    #[test]
    fn mdadm_parsing() {
        let arrays = parse_mdadm_scan(MDADM);
        assert_eq!(
            arrays,
            vec![
                RaidArray {
                    device: "/dev/md0".into(),
                    members: vec!["/dev/vda2".into(), "/dev/vdb2".into()]
                },
                RaidArray {
                    device: "/dev/md1".into(),
                    members: vec!["/dev/vdc1".into()]
                },
            ]
        );
        assert_eq!(
            arrays[0].members_on(&by_name("/dev/vda")),
            vec!["/dev/vda2"]
        );
        assert!(arrays[1].members_on(&by_name("/dev/vda")).is_empty());
        // An ARRAY line without devices= is skipped, and a truncated one too.
        assert!(parse_mdadm_scan("ARRAY /dev/md0 level=raid1\nsomething else\n").is_empty());
        assert!(parse_mdadm_scan("ARRAY /dev/md0 level=raid1").is_empty());
        assert!(parse_mdadm_scan("").is_empty());
    }

    const VGS: &str = "vgs --noheadings -o vg_name,pv_name";
    const PVS: &str = "pvs --noheadings -o pv_name";
    const SCAN: &str = "mdadm -v --query --detail --scan";
    const NO_DM: Answer = ("dmsetup ls", 0, "No devices found");

    /// `(command line, exit code, output)`, exit code 0 being a success.
    type Answer<'a> = (&'a str, i32, &'a str);

    fn runner(replies: &[Answer]) -> RecordingRunner {
        let r = RecordingRunner::new();
        for &(line, code, output) in replies {
            match code {
                0 => r.ok(line, output),
                _ => r.fail(line, code, output),
            };
        }
        r
    }

    #[test]
    fn cleanup_runs_the_go_sequence() {
        let deps = |dm: &str, on: &str| {
            let line = format!("dmsetup deps -o devname {dm}");
            (line, format!(" 1 dependencies\t: ({on})"))
        };
        let thin = [
            deps("vg0-pool_tmeta", "sda3"),
            deps("vg0-pool_tdata", "sda4"),
            deps("vg0-lv", "sda3"),
            deps("keep-lv", "sdb1"),
        ];
        let mut lvm = vec![
            (VGS, 0, "  vg0 /dev/sda3\n  vg0 /dev/sda4\n  keep /dev/sdb1"),
            (PVS, 0, "  /dev/sda3\n  /dev/sda4\n  /dev/sdb1"),
            (
                "dmsetup ls",
                0,
                "vg0-pool_tmeta\t(253:0)\nvg0-pool_tdata\t(253:1)\nvg0-lv\t(253:2)\nkeep-lv\t(253:3)",
            ),
        ];
        lvm.extend(thin.iter().map(|(l, o)| (l.as_str(), 0, o.as_str())));
        let raid = [
            NO_DM,
            (SCAN, 0, MDADM),
            (VGS, 0, "  raidvg /dev/md0\n  other /dev/sdz"),
            (PVS, 0, "  /dev/md0\n  /dev/sdz"),
        ];
        let listing = [VGS, PVS, "dmsetup ls", SCAN];
        let no_force = (
            "wipefs --all --force /dev/sda",
            1,
            "unrecognized option '--force'",
        );
        let cases: [(&str, &[Answer], Vec<&str>); 5] = [
            // A clean disk: the listings and wipefs only.
            (
                "/dev/sda",
                &[NO_DM],
                [&listing[..], &["wipefs --all --force /dev/sda"]].concat(),
            ),
            // A wipefs without --force: tried again without it.
            (
                "/dev/sda",
                &[NO_DM, no_force],
                [&listing[..], &[no_force.0, "wipefs --all /dev/sda"]].concat(),
            ),
            // A failing RAID scan is only logged.
            (
                "/dev/sda",
                &[NO_DM, (SCAN, 1, "mdadm: not found")],
                [&listing[..], &["wipefs --all --force /dev/sda"]].concat(),
            ),
            // LVM and a thin pool: the pool before its parts.
            (
                "/dev/sda",
                &lvm,
                vec![
                    VGS,
                    "vgremove vg0 -y",
                    PVS,
                    "pvremove /dev/sda3 -y -ff",
                    "pvremove /dev/sda4 -y -ff",
                    "dmsetup ls",
                    &thin[0].0,
                    &thin[1].0,
                    &thin[2].0,
                    &thin[3].0,
                    "dmsetup remove --retry vg0-lv",
                    "dmsetup remove --retry vg0-pool",
                    "dmsetup remove --retry vg0-pool_tmeta",
                    "dmsetup remove --retry vg0-pool_tdata",
                    SCAN,
                    "wipefs --all --force /dev/sda",
                ],
            ),
            // A RAID member: the array's LVM, then the array stopped and the member zeroed.
            (
                "/dev/vda",
                &raid,
                [
                    &listing[..],
                    &[
                        VGS,
                        "vgremove raidvg -y",
                        PVS,
                        "pvremove /dev/md0 -y -ff",
                        "dmsetup ls",
                    ],
                    &["mdadm --stop /dev/md0", "mdadm --zero-superblock /dev/vda2"],
                    &["wipefs --all --force /dev/vda"],
                ]
                .concat(),
            ),
        ];
        for (device, replies, expected) in cases {
            let r = runner(replies);
            cleanup_install_device_on(&r, NO_SYSFS, device).unwrap();
            assert_eq!(r.lines(), expected, "{replies:?}");
        }
    }

    #[test]
    fn cleanup_raid_nvme_partitions_and_whole_disk_members() {
        let r = RecordingRunner::new();
        r.ok("dmsetup ls", "No devices found").ok(
            "mdadm -v --query --detail --scan",
            "ARRAY /dev/md127 metadata=1.2 name=any:root\n   \
             devices=/dev/nvme0n1p3,/dev/nvme0n1p4,/dev/nvme1n1p3\n\
             ARRAY /dev/md126 metadata=1.2 name=any:boot\n   devices=/dev/nvme0n1,/dev/nvme2n1",
        );
        cleanup_install_device_on(&r, NO_SYSFS, "/dev/nvme0n1").unwrap();
        let lines = r.lines();
        let raid: Vec<&String> = lines.iter().filter(|l| l.starts_with("mdadm --")).collect();
        assert_eq!(
            raid,
            vec![
                "mdadm --stop /dev/md127",
                "mdadm --zero-superblock /dev/nvme0n1p3",
                "mdadm --zero-superblock /dev/nvme0n1p4",
                "mdadm --stop /dev/md126",
                "mdadm --zero-superblock /dev/nvme0n1",
            ]
        );
    }

    /// Each failing step is collected and the others still run: vgremove, pvs, one device-mapper
    /// device's deps, one array's stop (its member is left alone, the next array is handled),
    /// then wipefs with and without --force. Each fails once: the LVM and device-mapper steps
    /// run again for each array on the disk.
    #[test]
    fn cleanup_errors_are_combined_and_all_steps_run() {
        let r = RecordingRunner::new();
        r.ok(VGS, "vg0 /dev/sda2")
            .fail("vgremove vg0 -y", 5, "Error: Can't remove vg0")
            .fail(PVS, 5, "pvs broke")
            .ok(PVS, "")
            .ok("dmsetup ls", "a\t(253:0)\nb\t(253:1)")
            .fail("dmsetup deps -o devname a", 1, "no such device")
            .ok("dmsetup deps -o devname a", "")
            .ok("dmsetup deps -o devname b", " 1 dependencies : (sda1)")
            .ok(
                SCAN,
                "ARRAY /dev/md0 x\n devices=/dev/sda1\nARRAY /dev/md1 y\n devices=/dev/sda2",
            )
            .fail(
                "mdadm --stop /dev/md0",
                1,
                "mdadm: Cannot get exclusive access",
            )
            .fail("wipefs --all --force /dev/sda", 1, "busy")
            .fail("wipefs --all /dev/sda", 1, "still busy");
        let err = cleanup_install_device_on(&r, NO_SYSFS, "/dev/sda").unwrap_err();
        assert_eq!(err.errors.len(), 5, "{err}");
        let text = err.to_string();
        assert!(text.contains("vgremove [vg0 -y]"), "{text}");
        assert!(
            text.contains("LastOutput \"Error: Can't remove vg0\""),
            "{text}"
        );
        assert!(text.contains("pvs [--noheadings -o pv_name]"), "{text}");
        assert!(text.ends_with("LastOutput \"still busy\""), "{text}");
        assert_eq!(text.matches("; ").count(), 4);
        let lines = r.lines();
        let ran = |line: &str| lines.iter().any(|l| l == line);
        assert!(ran("dmsetup remove --retry b"));
        assert!(!ran("mdadm --zero-superblock /dev/sda1"));
        assert!(ran("mdadm --stop /dev/md1") && ran("mdadm --zero-superblock /dev/sda2"));
        assert_eq!(
            lines.last().unwrap(),
            "wipefs --all /dev/sda",
            "fallback without --force"
        );
    }

    fn holder(name: &str, devno: (u64, u64), dm_name: Option<&str>, under_other: bool) -> Holder {
        let node = BlockNode {
            name: name.into(),
            devno,
            dm_name: dm_name.map(String::from),
        };
        Holder { node, under_other }
    }

    /// Partition map `n` of `mpatha`: `dm-<n>`, `mpatha<n>`.
    fn map(n: u64) -> Holder {
        let dm_name = format!("mpatha{n}");
        holder(&format!("dm-{n}"), (253, n), Some(&dm_name), false)
    }

    /// `/dev/dm-0` (`mpatha`) and what is built on it, in take-down order.
    fn mpatha(holders: Vec<Holder>) -> DiskStack {
        let disk = holder("dm-0", (253, 0), Some("mpatha"), false);
        DiskStack {
            base: vec![disk.node],
            holders,
        }
    }

    fn answers(r: &RecordingRunner, maps: &[(&str, &str)]) {
        let ls: Vec<String> = maps
            .iter()
            .enumerate()
            .map(|(i, (name, _))| format!("{name}\t(253:{i})"))
            .collect();
        r.ok("dmsetup ls", &ls.join("\n"));
        for (name, deps) in maps {
            let n = deps.split(' ').count();
            let text = format!(" {n} dependencies\t: {deps}");
            r.ok(&format!("dmsetup deps -o devname {name}"), &text);
        }
    }

    /// The install disk resolved to /dev/dm-0, a volume group on its partition map
    /// `/dev/mapper/mpatha4`: found by device number, removed, then the maps. When vgremove
    /// fails, the volume's map goes before the partition map it sits on.
    #[test]
    fn cleanup_of_lvm_on_a_multipath_partition_map() {
        let maps = [
            ("mpatha", "(sdb) (sdc)"),
            ("mpatha1", "(dm-0)"),
            ("mpatha2", "(dm-0)"),
            ("mpatha3", "(dm-0)"),
            ("mpatha4", "(dm-0)"),
            ("keep-lv", "(sdz1)"),
        ];
        let deps: Vec<String> = maps
            .iter()
            .map(|(m, _)| format!("dmsetup deps -o devname {m}"))
            .collect();
        let lv = holder("dm-5", (253, 5), Some("vgsan-data"), false);
        let with_lv = mpatha(vec![map(1), map(2), map(3), lv, map(4)]);
        for vgremove_works in [true, false] {
            let after = if vgremove_works {
                mpatha(vec![map(1), map(2), map(3), map(4)])
            } else {
                with_lv.clone()
            };
            let blocks = FakeBlocks {
                stacks: RefCell::new(HashMap::from([(
                    "/dev/dm-0".to_string(),
                    vec![with_lv.clone(), after],
                )])),
                devnos: HashMap::from([
                    ("/dev/mapper/mpatha4".to_string(), (253, 4)),
                    ("/dev/sdz1".to_string(), (65, 145)),
                ]),
            };
            let r = RecordingRunner::new();
            r.ok(VGS, "  vgsan /dev/mapper/mpatha4\n  keep /dev/sdz1")
                .ok(PVS, "  /dev/mapper/mpatha4\n  /dev/sdz1")
                .ok(SCAN, "");
            if !vgremove_works {
                r.fail("vgremove vgsan -y", 5, "Logical volume vgsan/data in use.");
            }
            answers(&r, &maps);
            let result = cleanup_install_device_on(&r, &blocks, "/dev/dm-0");
            assert_eq!(result.is_ok(), vgremove_works, "{result:?}");
            let mut want = vec![
                VGS,
                "vgremove vgsan -y",
                PVS,
                "pvremove /dev/mapper/mpatha4 -y -ff",
                "dmsetup ls",
            ];
            want.extend(deps.iter().map(String::as_str));
            want.extend([
                "dmsetup remove --retry mpatha1",
                "dmsetup remove --retry mpatha2",
                "dmsetup remove --retry mpatha3",
            ]);
            if !vgremove_works {
                want.push("dmsetup remove --retry vgsan-data");
            }
            want.extend([
                "dmsetup remove --retry mpatha4",
                SCAN,
                "wipefs --all --force /dev/dm-0",
            ]);
            assert_eq!(r.lines(), want, "vgremove works: {vgremove_works}");
        }
    }

    /// An md array over partition maps of two multipath disks: the member's map stays while
    /// the array runs, and goes once the array is stopped and the member zeroed.
    #[test]
    fn cleanup_of_an_array_on_a_multipath_partition_map() {
        let md = holder("md127", (9, 127), None, false);
        let member = holder("dm-2", (253, 2), Some("mpatha2"), true);
        let running = mpatha(vec![map(1), md, member, map(3), map(4)]);
        let stopped = mpatha(vec![map(2)]);
        let blocks = FakeBlocks {
            stacks: RefCell::new(HashMap::from([(
                "/dev/dm-0".to_string(),
                vec![running.clone(), running.clone(), running, stopped],
            )])),
            devnos: HashMap::from([("/dev/mapper/mpatha2".to_string(), (253, 2))]),
        };
        let r = RecordingRunner::new();
        r.ok(
            SCAN,
            "ARRAY /dev/md127 metadata=1.2 name=any:data\n   \
             devices=/dev/mapper/mpatha2,/dev/mapper/mpathb2",
        )
        .ok("dmsetup ls", "No devices found");
        cleanup_install_device_on(&r, &blocks, "/dev/dm-0").unwrap();
        let lines = r.lines();
        let acted: Vec<&str> = lines
            .iter()
            .map(String::as_str)
            .filter(|l| l.starts_with("dmsetup remove") || l.starts_with("mdadm --"))
            .collect();
        assert_eq!(
            acted,
            [
                "dmsetup remove --retry mpatha1",
                "dmsetup remove --retry mpatha3",
                "dmsetup remove --retry mpatha4",
                "mdadm --stop /dev/md127",
                "mdadm --zero-superblock /dev/mapper/mpatha2",
                "dmsetup remove --retry mpatha2",
            ]
        );
    }

    #[test]
    fn format_disks_continue_after_failure() {
        let r = RecordingRunner::new();
        r.fail(
            "dd if=/dev/zero of=/dev/sdb bs=512 count=1",
            1,
            "Permission denied",
        );
        let disks = ["/dev/sdb", "/dev/sdc"].map(PathBuf::from);
        assert_eq!(format_disks(&r, &disks), 1);
        assert_eq!(
            r.lines(),
            [
                "dd if=/dev/zero of=/dev/sdb bs=512 count=1",
                "dd if=/dev/zero of=/dev/sdc bs=512 count=1"
            ]
        );
    }

    #[test]
    fn resolve_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sda");
        std::fs::write(&target, b"").unwrap();
        let link = dir.path().join("wwn-0x5000");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(
            resolve_disk_symlink(&link),
            std::fs::canonicalize(&target).unwrap()
        );
        let missing = dir.path().join("missing");
        assert_eq!(resolve_disk_symlink(&missing), missing);
    }
}
