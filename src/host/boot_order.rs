//! Making the installed disk the next boot target (Go `Ops.SetBootOrder`).
//!
//! PowerVM uses `bootlist`; BIOS needs nothing; on UEFI a "Red Hat Enterprise Linux" entry for
//! the shim on the disk's EFI partition (partition 2) is created with `efibootmgr`, and older
//! entries with the same label are deleted. The caller logs an error as a warning and carries
//! on; dry-run mode skips the whole step.

use std::time::Duration;

use anyhow::Context;

use super::commands::CommandRunner;
use super::lsblk::partition_path;
use crate::clock::{Clock, Failure, NeverStop, Schedule, WaitError};

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
/// (`std::env::consts::ARCH` of the running binary, as Go uses `GOARCH`).
pub(crate) fn set_boot_order(
    runner: &dyn CommandRunner,
    clock: &dyn Clock,
    device: &str,
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

    let part = EFI_PARTITION.to_string();
    let out = runner
        .run(
            "efibootmgr",
            &[
                "-v", "-d", device, "-p", &part, "-c", "-L", BOOT_LABEL, "-l", &loader,
            ],
        )
        .with_context(|| format!("Failed to set efibootmgr to boot from disk {device}"))?;

    for num in duplicate_boot_entries(&out) {
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
    Ok(())
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

    use crate::host::lsblk::lsblk_json as lsblk;

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
            set_boot_order(&r, &clock, "/dev/sda", arch).unwrap();
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
        set_boot_order(&r, &FakeClock::new(), "/dev/sda", "x86_64").unwrap();
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
        let err = set_boot_order(&r, &clock, "/dev/sda", "x86_64").unwrap_err();
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
        let err = set_boot_order(&r, &FakeClock::new(), "/dev/sda", "x86_64").unwrap_err();
        assert!(err
            .to_string()
            .contains("Failed to set efibootmgr to boot from disk /dev/sda"));
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
            set_boot_order(&r, &FakeClock::new(), "/dev/sda", arch).unwrap();
            assert_eq!(r.lines(), expected, "{arch}");
        }
    }
}
