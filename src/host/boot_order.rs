//! Making the installed disk the next boot target (Go `Ops.SetBootOrder`).
//!
//! PowerVM uses `bootlist`; BIOS needs nothing; on UEFI a "Red Hat Enterprise Linux" entry for
//! the shim on the disk's EFI partition (partition 2) is created with `efibootmgr`, and older
//! entries with the same label are deleted. Dry-run mode skips the whole step.
//!
//! The firmware does not see an md array or a multipath map, and `efibootmgr -d` cannot name
//! one: there the entry is made on each disk under it that the firmware boots (the members of
//! a RAID1 array, the paths of a multipath map; `disk::firmware_disks` says which). An error
//! means the host may lack its entry: the caller logs it and tells the service, and carries on.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};

use super::commands::CommandRunner;
use super::lsblk::partition_path;
use crate::clock::{Clock, Failure, NeverStop, Schedule, WaitError};
use crate::disk::FirmwareDisks;

/// The boot entry label.
pub(crate) const BOOT_LABEL: &str = "Red Hat Enterprise Linux";
/// The EFI system partition of a CoreOS disk.
const EFI_PARTITION: u32 = 2;

const MOUNT_POINT: &str = "/mnt";
const FIND_EFI_TIMEOUT: Duration = Duration::from_secs(20);
const POLL_INTERVAL: Duration = Duration::from_secs(5);
const MOUNT_ATTEMPTS: u32 = 3;

/// `\EFI\<dir>\shimx64.efi`, or `shimaa64.efi` on aarch64 (`arch` as in
/// `std::env::consts::ARCH`).
fn efi_loader_path(efi_dir: &str, arch: &str) -> String {
    let file = match arch {
        "aarch64" | "arm64" => "shimaa64.efi",
        _ => "shimx64.efi",
    };
    format!("\\EFI\\{efi_dir}\\{file}")
}

/// The boot numbers named by `Boot#### has same label Red Hat Enterprise Linux` lines of
/// `efibootmgr` output.
fn duplicate_boot_entries(efibootmgr_output: &str) -> Vec<String> {
    let suffix = format!(" has same label {BOOT_LABEL}");
    efibootmgr_output
        .lines()
        .filter_map(|line| {
            let end = line.rfind(&suffix)?;
            let start = line[..end].find("Boot")? + "Boot".len();
            Some(line[start..end].to_string())
        })
        .collect()
}

/// Sets the boot order for `device` (see the module documentation). `arch` selects the shim
/// (`std::env::consts::ARCH` of the running binary, as Go uses `GOARCH`). On UEFI,
/// `firmware_disks(esp)` says where the entry goes, the EFI system partition of `device` being
/// number `esp` (`disk::firmware_disks` on the host; fixed in tests).
pub(crate) fn set_boot_order(
    runner: &dyn CommandRunner,
    clock: &dyn Clock,
    device: &str,
    firmware_disks: &dyn Fn(u32) -> FirmwareDisks,
    arch: &str,
) -> anyhow::Result<()> {
    tracing::info!("SetBootOrder, arch: {arch}, device: {device}");
    if runner.run("test", &["-f", "/usr/sbin/bootlist"]).is_ok() {
        if let Err(e) = runner.run("bootlist", &["-m", "normal", "-o", device]) {
            tracing::error!("Failed to set boot disk with bootlist. Skipping...: {e}");
        }
        return Ok(());
    }

    if runner.run("test", &["-d", "/sys/firmware/efi"]).is_err() {
        tracing::info!("setting the boot order on BIOS systems is not supported. Skipping...");
        return Ok(());
    }

    tracing::info!("Setting efibootmgr to boot from disk");
    // Where each entry goes: the disk and the number of the EFI system partition on it.
    let targets: Vec<(String, String)> = match firmware_disks(EFI_PARTITION) {
        FirmwareDisks::Itself => vec![(device.to_string(), EFI_PARTITION.to_string())],
        FirmwareDisks::Under { what, disks } => {
            let targets: Vec<(String, String)> = disks
                .iter()
                .map(|d| (d.node.display().to_string(), d.partition.to_string()))
                .collect();
            let names: Vec<&str> = targets.iter().map(|(d, _)| d.as_str()).collect();
            tracing::info!(
                "{device} is {what}, which the firmware does not see: one boot entry on each disk under it ({})",
                names.join(", ")
            );
            targets
        }
        FirmwareDisks::Hidden(why) => bail!(
            "no boot entry can name {device}, as no disk the firmware reads holds its EFI system partition: {why}"
        ),
    };
    // No stop token reaches this step; the whole wait is bounded (20 s).
    let efi_dir = clock
        .retry(
            &NeverStop,
            &Schedule::within(FIND_EFI_TIMEOUT, POLL_INTERVAL),
            |_| {
                find_efi_directory(runner, clock, device).map_err(|e| {
                    tracing::warn!("failed to find EFI directory on {device}: {e:#}");
                    Failure::Retry(e)
                })
            },
            |_, _| {},
        )
        .map_err(WaitError::into_anyhow)
        .context("failed to find EFI directory")?;
    let loader = efi_loader_path(&efi_dir, arch);
    tracing::info!("Using EFI file '{loader}'");

    // Each `-c` warns about every entry already labelled as ours; those the first successful
    // one names are the stale entries of earlier installs. The later ones also name the
    // entries just made for the other disks, which must stay.
    let mut stale: Option<Vec<String>> = None;
    let mut failed = Vec::new();
    for (disk, part) in &targets {
        let created = runner
            .run(
                "efibootmgr",
                &[
                    "-v", "-d", disk, "-p", part, "-c", "-L", BOOT_LABEL, "-l", &loader,
                ],
            )
            .with_context(|| format!("Failed to set efibootmgr to boot from disk {disk}"));
        match created {
            Ok(out) => {
                stale.get_or_insert_with(|| duplicate_boot_entries(&out));
            }
            // One disk: Go's sequence, which stops here.
            Err(e) if targets.len() == 1 => return Err(e),
            Err(e) => {
                tracing::warn!("{e:#}");
                failed.push((disk.as_str(), e));
            }
        }
    }
    let Some(stale) = stale else {
        let errors: Vec<String> = failed.iter().map(|(_, e)| format!("{e:#}")).collect();
        bail!(
            "no boot entry could be made on any disk under {device}: {}",
            errors.join("; ")
        );
    };

    for num in stale {
        tracing::info!("Removing duplicate boot entry number {num}");
        if let Err(e) = runner.run(
            "efibootmgr",
            &["-v", "--delete-bootnum", "--bootnum", &num, "-l", &loader],
        ) {
            tracing::error!("Failed to delete duplicate {BOOT_LABEL} label {num}, err: {e}");
        }
    }

    if let Err(e) = runner.run("efibootmgr", &["-l", &loader]) {
        tracing::error!("Failed to show current boot order with efibootmgr: {e}");
    }
    if failed.is_empty() {
        return Ok(());
    }
    // The host boots, but not from the disks left without an entry should the others fail.
    let made: Vec<&str> = targets
        .iter()
        .map(|(d, _)| d.as_str())
        .filter(|d| !failed.iter().any(|(f, _)| f == d))
        .collect();
    let errors: Vec<String> = failed.iter().map(|(_, e)| format!("{e:#}")).collect();
    Err(anyhow!(
        "boot entries were made on {} but not on the other disks under {device}: {}",
        made.join(", "),
        errors.join("; ")
    ))
}

/// Mounts the EFI partition on /mnt, lists /mnt/EFI and picks `redhat`, else `centos`;
/// always unmounts after a successful mount.
fn find_efi_directory(
    runner: &dyn CommandRunner,
    clock: &dyn Clock,
    device: &str,
) -> anyhow::Result<String> {
    let part = partition_path(runner, device, EFI_PARTITION)?;
    clock
        .retry(
            &NeverStop,
            &Schedule::tries(MOUNT_ATTEMPTS, POLL_INTERVAL),
            |_| {
                runner
                    .run("mount", &[&part, MOUNT_POINT])
                    .map_err(Failure::Retry)
            },
            |_, _| {},
        )
        .map_err(WaitError::into_anyhow)
        .context("failed to mount efi device")?;
    let listing = runner.run("ls", &["-1", "/mnt/EFI"]);
    if let Err(e) = runner.run("umount", &[MOUNT_POINT]) {
        tracing::warn!("failed to unmount {MOUNT_POINT}: {e}");
    }
    let listing = listing.context("failed to read efi top directory")?;
    let names: Vec<&str> = listing.lines().map(str::trim).collect();
    ["redhat", "centos"]
        .into_iter()
        .find(|d| names.contains(d))
        .map(str::to_string)
        .context("failed to find efi boot entry directory")
}

#[cfg(test)]
mod tests {
    use super::super::commands::RecordingRunner;
    use super::*;
    use crate::clock::FakeClock;

    use crate::disk::firmware_disks::EntryDisk;
    use crate::host::lsblk::lsblk_json as lsblk;

    /// A disk the firmware sees: Go's entry on the device itself.
    fn plain(_: u32) -> FirmwareDisks {
        FirmwareDisks::Itself
    }

    #[test]
    fn lsblk_failure_loader_paths_and_duplicate_lines() {
        let r = RecordingRunner::new();
        r.fail("lsblk --bytes --json /dev/sda", 1, "lsblk: failed");
        let e = partition_path(&r, "/dev/sda", 3).unwrap_err();
        assert!(e.to_string().contains("failed to run lsblk command"));
        for (dir, arch, path) in [
            ("redhat", "x86_64", "\\EFI\\redhat\\shimx64.efi"),
            ("centos", "aarch64", "\\EFI\\centos\\shimaa64.efi"),
            ("redhat", "powerpc64", "\\EFI\\redhat\\shimx64.efi"),
        ] {
            assert_eq!(efi_loader_path(dir, arch), path, "{dir} {arch}");
        }
        let out = "BootCurrent: 0001\n\
                   efibootmgr: ** Warning ** : Boot0004 has same label Red Hat Enterprise Linux\n\
                   Boot0005 has same label Red Hat Enterprise Linux\n\
                   Boot0006* Red Hat Enterprise Linux\tHD(2,GPT,…)/File(\\EFI\\redhat\\shimx64.efi)\n\
                   Boot0007 has same label Something Else";
        assert_eq!(duplicate_boot_entries(out), vec!["0004", "0005"]);
        assert!(duplicate_boot_entries("").is_empty());
    }

    fn uefi_runner(efi_listing: &str, create: Result<&str, &str>) -> RecordingRunner {
        let r = RecordingRunner::new();
        r.fail("test -f /usr/sbin/bootlist", 1, "")
            .ok(
                "lsblk --bytes --json /dev/sda",
                &lsblk("sda", "disk", &["sda1", "sda2", "sda3", "sda4"]),
            )
            .ok("ls -1 /mnt/EFI", efi_listing);
        for dir in ["redhat", "centos"] {
            for shim in ["shimx64", "shimaa64"] {
                let line = format!(
                    "efibootmgr -v -d /dev/sda -p 2 -c -L Red Hat Enterprise Linux -l \
                     \\EFI\\{dir}\\{shim}.efi"
                );
                match create {
                    Ok(output) => r.ok(&line, output),
                    Err(output) => r.fail(&line, 5, output),
                };
            }
        }
        r
    }

    fn expected_uefi(dir: &str, shim: &str) -> Vec<String> {
        vec![
            "test -f /usr/sbin/bootlist".to_string(),
            "test -d /sys/firmware/efi".to_string(),
            "lsblk --bytes --json /dev/sda".to_string(),
            "mount /dev/sda2 /mnt".to_string(),
            "ls -1 /mnt/EFI".to_string(),
            "umount /mnt".to_string(),
            format!(
                "efibootmgr -v -d /dev/sda -p 2 -c -L Red Hat Enterprise Linux -l \
                 \\EFI\\{dir}\\{shim}.efi"
            ),
            format!("efibootmgr -l \\EFI\\{dir}\\{shim}.efi"),
        ]
    }

    #[test]
    fn uefi_redhat_or_centos_and_the_shim_of_the_arch() {
        for (listing, dir, arch, shim) in [
            ("BOOT\nredhat\n", "redhat", "x86_64", "shimx64"),
            ("BOOT\ncentos", "centos", "x86_64", "shimx64"),
            ("BOOT\nredhat", "redhat", "aarch64", "shimaa64"),
        ] {
            let r = uefi_runner(listing, Ok("BootCurrent: 0001"));
            let clock = FakeClock::new();
            set_boot_order(&r, &clock, "/dev/sda", &plain, arch).unwrap();
            assert_eq!(r.lines(), expected_uefi(dir, shim));
            // The label is one argument.
            let create = &r.calls()[6];
            assert_eq!(create.args[7], "Red Hat Enterprise Linux");
            assert!(clock.sleeps().is_empty());
        }
    }

    #[test]
    fn uefi_deletes_duplicates() {
        let r = uefi_runner(
            "redhat",
            Ok(
                "efibootmgr: ** Warning ** : Boot0003 has same label Red Hat Enterprise Linux\n\
             Boot0000* Red Hat Enterprise Linux",
            ),
        );
        r.fail(
            "efibootmgr -v --delete-bootnum --bootnum 0003 -l \\EFI\\redhat\\shimx64.efi",
            1,
            "ignored",
        );
        set_boot_order(&r, &FakeClock::new(), "/dev/sda", &plain, "x86_64").unwrap();
        let mut expected = expected_uefi("redhat", "shimx64");
        expected.insert(
            7,
            "efibootmgr -v --delete-bootnum --bootnum 0003 -l \\EFI\\redhat\\shimx64.efi"
                .to_string(),
        );
        assert_eq!(r.lines(), expected);
    }

    #[test]
    fn uefi_mount_retries_and_efi_dir_polling() {
        let r = uefi_runner("BOOT", Ok(""));
        // The first mount fails twice, then the EFI listing has no known directory: the search
        // is retried every 5 s until 20 s have passed, then the step fails without running
        // efibootmgr.
        r.fail("mount /dev/sda2 /mnt", 32, "busy")
            .fail("mount /dev/sda2 /mnt", 32, "busy")
            .ok("mount /dev/sda2 /mnt", "");
        let clock = FakeClock::new();
        let err = set_boot_order(&r, &clock, "/dev/sda", &plain, "x86_64").unwrap_err();
        assert!(format!("{err:#}").contains("failed to find efi boot entry directory"));
        let lines = r.lines();
        // Attempt 1 at 0 s (two mount retries take 10 s), attempt 2 at 15 s, attempt 3 at 20 s.
        assert_eq!(lines.iter().filter(|l| *l == "ls -1 /mnt/EFI").count(), 3);
        assert_eq!(lines.iter().filter(|l| *l == "umount /mnt").count(), 3);
        assert_eq!(
            lines
                .iter()
                .filter(|l| *l == "mount /dev/sda2 /mnt")
                .count(),
            5
        );
        assert_eq!(clock.elapsed(), Duration::from_secs(20));
        assert!(!lines.iter().any(|l| l.starts_with("efibootmgr")));
        assert!(clock.sleeps().iter().all(|d| *d == Duration::from_secs(5)));
    }

    #[test]
    fn uefi_efibootmgr_failure_is_returned() {
        let r = uefi_runner("redhat", Err("Could not prepare Boot variable"));
        let err = set_boot_order(&r, &FakeClock::new(), "/dev/sda", &plain, "x86_64").unwrap_err();
        assert!(err
            .to_string()
            .contains("Failed to set efibootmgr to boot from disk /dev/sda"));
    }

    const MADE: &str = "BootCurrent: 0001\nBootOrder: 0007,0001";

    /// `what` over `disks`, each with the EFI system partition the caller asked for.
    fn under(what: &str, disks: &[&str]) -> impl Fn(u32) -> FirmwareDisks {
        let what = what.to_string();
        let disks: Vec<String> = disks.iter().map(|d| d.to_string()).collect();
        move |esp| FirmwareDisks::Under {
            what: what.clone(),
            disks: disks
                .iter()
                .map(|d| EntryDisk {
                    node: d.into(),
                    partition: esp,
                })
                .collect(),
        }
    }

    fn create(disk: &str) -> String {
        format!(
            "efibootmgr -v -d {disk} -p 2 -c -L Red Hat Enterprise Linux -l \\EFI\\redhat\\shimx64.efi"
        )
    }

    /// The commands before the entries for a target whose partition 2 is `esp_node`.
    fn before_entries(device: &str, esp_node: &str) -> Vec<String> {
        [
            "test -f /usr/sbin/bootlist".to_string(),
            "test -d /sys/firmware/efi".to_string(),
            format!("lsblk --bytes --json {device}"),
            format!("mount {esp_node} /mnt"),
            "ls -1 /mnt/EFI".to_string(),
            "umount /mnt".to_string(),
        ]
        .into()
    }

    /// An md RAID1 array: the EFI directory is found on the array's own partition, then one
    /// entry on each member, partition 2 of each. The stale entry of an earlier install
    /// (0003, named by the first creation) goes; the one just made on sda (0007, which the
    /// second creation also names) stays.
    #[test]
    fn md_raid1_gets_one_entry_on_each_member() {
        let r = RecordingRunner::new();
        r.fail("test -f /usr/sbin/bootlist", 1, "")
            .ok(
                "lsblk --bytes --json /dev/md127",
                &lsblk(
                    "md127",
                    "raid1",
                    &["md127p1", "md127p2", "md127p3", "md127p4"],
                ),
            )
            .ok("ls -1 /mnt/EFI", "BOOT\nredhat")
            .ok(
                &create("/dev/sda"),
                "efibootmgr: ** Warning ** : Boot0003 has same label Red Hat Enterprise Linux\n\
                 BootOrder: 0007,0003",
            )
            .ok(
                &create("/dev/sdb"),
                "Boot0003 has same label Red Hat Enterprise Linux\n\
                 Boot0007 has same label Red Hat Enterprise Linux\nBootOrder: 0008,0007,0003",
            );
        let md = under("md RAID1 array md127", &["/dev/sda", "/dev/sdb"]);
        set_boot_order(&r, &FakeClock::new(), "/dev/md127", &md, "x86_64").unwrap();
        let mut want = before_entries("/dev/md127", "/dev/md127p2");
        want.extend([
            create("/dev/sda"),
            create("/dev/sdb"),
            "efibootmgr -v --delete-bootnum --bootnum 0003 -l \\EFI\\redhat\\shimx64.efi".into(),
            "efibootmgr -l \\EFI\\redhat\\shimx64.efi".into(),
        ]);
        assert_eq!(r.lines(), want);
        assert!(!r.lines().iter().any(|l| l.contains("-d /dev/md127")));
    }

    /// A multipath map: the EFI directory on its partition map, one entry on each path. A path
    /// whose entry fails leaves the others made and is returned as the error; when none can be
    /// made, nothing is deleted.
    #[test]
    fn multipath_gets_one_entry_on_each_path_and_names_those_that_failed() {
        let runner = || {
            let r = RecordingRunner::new();
            r.fail("test -f /usr/sbin/bootlist", 1, "")
                .ok(
                    "lsblk --bytes --json /dev/dm-0",
                    &lsblk(
                        "mpatha",
                        "mpath",
                        &["mpatha1", "mpatha2", "mpatha3", "mpatha4"],
                    ),
                )
                .ok("ls -1 /mnt/EFI", "redhat");
            r
        };
        let paths = under("multipath map mpatha (dm-0)", &["/dev/sdc", "/dev/sdd"]);
        let r = runner();
        r.ok(&create("/dev/sdc"), MADE)
            .ok(&create("/dev/sdd"), MADE);
        set_boot_order(&r, &FakeClock::new(), "/dev/dm-0", &paths, "x86_64").unwrap();
        let mut want = before_entries("/dev/dm-0", "/dev/mapper/mpatha2");
        want.extend([
            create("/dev/sdc"),
            create("/dev/sdd"),
            "efibootmgr -l \\EFI\\redhat\\shimx64.efi".into(),
        ]);
        assert_eq!(r.lines(), want);

        let r = runner();
        r.fail(
            &create("/dev/sdc"),
            5,
            "efibootmgr: Could not prepare Boot variable: No such file or directory",
        )
        .ok(&create("/dev/sdd"), MADE);
        let err = set_boot_order(&r, &FakeClock::new(), "/dev/dm-0", &paths, "x86_64").unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.starts_with(
                "boot entries were made on /dev/sdd but not on the other disks under /dev/dm-0: \
                 Failed to set efibootmgr to boot from disk /dev/sdc: "
            ) && err.contains("Could not prepare Boot variable"),
            "{err}"
        );
        assert_eq!(r.lines(), want, "every path is tried, the boot order shown");

        let r = runner();
        r.fail(&create("/dev/sdc"), 5, "EIO")
            .fail(&create("/dev/sdd"), 5, "EIO");
        let err = set_boot_order(&r, &FakeClock::new(), "/dev/dm-0", &paths, "x86_64").unwrap_err();
        assert!(
            format!("{err:#}")
                .starts_with("no boot entry could be made on any disk under /dev/dm-0: "),
            "{err:#}"
        );
        assert_eq!(r.lines(), want[..want.len() - 1]);
    }

    /// No disk the firmware reads holds the EFI system partition (here: an array whose members
    /// start with its superblock): the error says why, and nothing is mounted or created.
    #[test]
    fn a_target_the_firmware_cannot_read_is_an_error_before_any_command() {
        let r = RecordingRunner::new();
        r.fail("test -f /usr/sbin/bootlist", 1, "");
        let hidden =
            |_| FirmwareDisks::Hidden("md RAID1 array md0: its data starts at sector 2048".into());
        let err = set_boot_order(&r, &FakeClock::new(), "/dev/md0", &hidden, "x86_64").unwrap_err();
        assert_eq!(
            err.to_string(),
            "no boot entry can name /dev/md0, as no disk the firmware reads holds its EFI system \
             partition: md RAID1 array md0: its data starts at sector 2048"
        );
        assert_eq!(
            r.lines(),
            ["test -f /usr/sbin/bootlist", "test -d /sys/firmware/efi"]
        );
    }

    /// BIOS: nothing to do; PowerVM: bootlist, whose failure is ignored.
    #[test]
    fn bios_is_a_noop_and_powervm_uses_bootlist() {
        let bios = RecordingRunner::new();
        bios.fail("test -f /usr/sbin/bootlist", 1, "")
            .fail("test -d /sys/firmware/efi", 1, "");
        let failing_bootlist = RecordingRunner::new();
        failing_bootlist.fail("bootlist -m normal -o /dev/sda", 1, "bootlist failed");
        let bootlist = [
            "test -f /usr/sbin/bootlist",
            "bootlist -m normal -o /dev/sda",
        ];
        for (r, arch, expected) in [
            (
                bios,
                "x86_64",
                ["test -f /usr/sbin/bootlist", "test -d /sys/firmware/efi"],
            ),
            (RecordingRunner::new(), "powerpc64", bootlist),
            (failing_bootlist, "powerpc64", bootlist),
        ] {
            set_boot_order(&r, &FakeClock::new(), "/dev/sda", &plain, arch).unwrap();
            assert_eq!(r.lines(), expected, "{arch}");
        }
    }
}
