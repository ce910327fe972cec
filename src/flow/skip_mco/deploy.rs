//! Deploying the release OS image onto the freshly written disk (Go `OverwriteOsImage`): the
//! root partition grown by its own size (what a second deployment needs, the rest left
//! unallocated as Go does), `ostree container image deploy` into the disk's sysroot, and both
//! filesystems frozen before they are unmounted, so nothing of the live system writes to them
//! before the reboot.
//!
//! Go's commands, each tried 3 times 5 s apart, after one of ours: `partx --update <disk>`. Our
//! writer leaves the kernel's view of the partitions as it found it (without partition-table
//! parsers or udev a reread adds no nodes, and the writer's BLKPG ones are removed after the
//! write); partx adds the missing ones, as coreos-installer's udev would have. Its failure (a
//! multipath disk, whose partitions are device-mapper's) is only logged. Unlike Go, a failure
//! after the mounts unmounts what was mounted.

use anyhow::{Context, Result};
use std::time::Duration;

use crate::clock::{Clock, Failure, Schedule, Stop, WaitError};
use crate::host::commands::CommandRunner;
use crate::host::free_space::{calculate_free_percent, ROOT_PARTITION};
use crate::host::lsblk::partition_path;

/// The disk's `boot` partition (the root is [`ROOT_PARTITION`]).
const BOOT_PARTITION: u32 = 3;
/// Each command's tries and the wait between them (Go: `utils.Retry(3, 5s)`).
const COMMAND_TRIES: u32 = 3;
const COMMAND_RETRY_DELAY: Duration = Duration::from_secs(5);
/// The live system's karg that names the platform; kept for the deployment.
const PLATFORM_ID: &str = "ignition.platform.id=";
const DEFAULT_PLATFORM_KARG: &str = "ignition.platform.id=metal";
const ROOT_MOUNT: &str = "/mnt";
const BOOT_MOUNT: &str = "/mnt/boot";

/// What the deploy acts through, and on which disk.
pub(crate) struct Target<'a> {
    pub runner: &'a dyn CommandRunner,
    pub clock: &'a dyn Clock,
    pub stop: &'a dyn Stop,
    pub device: &'a str,
}

/// The live kernel command line's `ignition.platform.id=…`, or the metal one.
pub(crate) fn platform_karg(cmdline: &str) -> String {
    cmdline
        .split_whitespace()
        .find(|a| a.starts_with(PLATFORM_ID))
        .unwrap_or(DEFAULT_PLATFORM_KARG)
        .to_string()
}

/// The ostree deploy arguments: the image (unverified: the release payload pins it by digest),
/// the platform karg, Ignition's first-boot karg (a variable the boot loader expands), then
/// `extra_kargs` (`--karg v` pairs).
fn ostree_args(os_image_url: &str, platform_karg: &str, extra_kargs: &[String]) -> Vec<String> {
    let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    let head = format!(
        "container image deploy --sysroot {ROOT_MOUNT} --authfile /root/.docker/config.json --imgref"
    );
    let image = format!("ostree-unverified-registry:{os_image_url}");
    let kargs = vec![image, "--karg".into(), platform_karg.into()];
    let tail = words("--karg $ignition_firstboot --stateroot rhcos");
    [words(&head), kargs, tail, extra_kargs.to_vec()].concat()
}

/// Deploys `os_image_url` onto `t.device`; `extra_kargs` are `--karg v` pairs. An error says
/// which command failed.
pub(crate) fn overwrite_os_image(
    t: &Target<'_>,
    os_image_url: &str,
    platform_karg: &str,
    extra_kargs: &[String],
) -> Result<()> {
    let device = t.device;
    if let Err(e) = t.runner.run("partx", &["--update", device]) {
        tracing::warn!("partx --update {device}: {e}; going on with the partitions the kernel has");
    }
    let free_percent = calculate_free_percent(t.runner, device, None)
        .with_context(|| format!("computing the free space to leave on {device}"))?;
    let root = partition_path(t.runner, device, ROOT_PARTITION)?;
    let boot = partition_path(t.runner, device, BOOT_PARTITION)?;
    // No option when nothing is to stay free.
    let free = (free_percent > 0).then(|| format!("--free-percent={free_percent}"));
    let growpart = free
        .into_iter()
        .chain([device.into(), ROOT_PARTITION.to_string()]);
    let steps: Vec<(&str, Vec<String>)> = vec![
        ("mount", vec![root, ROOT_MOUNT.into()]),
        ("mount", vec![boot, BOOT_MOUNT.into()]),
        ("growpart", growpart.collect()),
        ("xfs_growfs", vec![ROOT_MOUNT.into()]),
        // ostree fails with SELinux enforcing on the live system (Go's comment: OCP 4.14).
        ("setenforce", vec!["0".into()]),
        (
            "ostree",
            ostree_args(os_image_url, platform_karg, extra_kargs),
        ),
        ("fsfreeze", vec!["--freeze".into(), BOOT_MOUNT.into()]),
        ("umount", vec![BOOT_MOUNT.into()]),
        ("fsfreeze", vec!["--freeze".into(), ROOT_MOUNT.into()]),
        ("umount", vec![ROOT_MOUNT.into()]),
    ];
    let mut mounted: Vec<&str> = Vec::new();
    for (program, args) in &steps {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Err(e) = run_with_retries(t, program, &args) {
            // Unmounted innermost first; failures are only logged.
            for at in mounted.iter().rev() {
                if let Err(e) = t.runner.run("umount", &[at]) {
                    tracing::warn!("unmounting {at} after the failed deploy: {e}");
                }
            }
            return Err(e);
        }
        match (*program, args.as_slice()) {
            ("mount", &[_, at]) => mounted.push(at),
            ("umount", &[at]) => mounted.retain(|m| *m != at),
            _ => {}
        }
    }
    Ok(())
}

/// One command, up to three tries 5 s apart on the flow's clock.
fn run_with_retries(t: &Target<'_>, program: &str, args: &[&str]) -> Result<()> {
    let line = std::iter::once(program)
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    tracing::info!("running {line}");
    let result = t.clock.retry(
        t.stop,
        &Schedule::tries(COMMAND_TRIES, COMMAND_RETRY_DELAY),
        |_| t.runner.run(program, args).map_err(Failure::Retry),
        |e, retrying| tracing::warn!("{line} ({retrying} after {:?}): {e}", retrying.delay),
    );
    match result {
        Ok(_) => Ok(()),
        Err(e @ WaitError::Stopped { .. }) => Err(e.into_anyhow()),
        Err(e) => Err(e.into_anyhow())
            .with_context(|| format!("failed after {COMMAND_TRIES} attempts to run {line}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{FakeClock, NeverStop};
    use crate::host::lsblk::{lsblk_json, sda_json};
    use crate::host::{RecordingRunner, Reply};

    const IMAGE: &str = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:0123";

    fn runner_for(device: &str, json: &str) -> RecordingRunner {
        let r = RecordingRunner::new();
        r.ok(&format!("lsblk --bytes --json {device}"), json);
        r
    }

    fn deploy(r: &RecordingRunner, clock: &FakeClock, device: &str) -> Result<()> {
        let t = Target {
            runner: r,
            clock,
            stop: &NeverStop,
            device,
        };
        overwrite_os_image(
            &t,
            IMAGE,
            "ignition.platform.id=metal",
            &["--karg".into(), "abc".into()],
        )
    }

    /// The Go sequence for `device` with partitions `p3`/`p4`, after our `partx` and lsblk runs.
    fn expected(device: &str, p3: &str, p4: &str, free: &str) -> Vec<String> {
        let growpart = if free.is_empty() {
            format!("growpart {device} 4")
        } else {
            format!("growpart --free-percent={free} {device} 4")
        };
        vec![
            format!("partx --update {device}"),
            format!("lsblk --bytes --json {device}"),
            format!("lsblk --bytes --json {device}"),
            format!("lsblk --bytes --json {device}"),
            format!("mount {p4} /mnt"),
            format!("mount {p3} /mnt/boot"),
            growpart,
            "xfs_growfs /mnt".into(),
            "setenforce 0".into(),
            format!(
                "ostree container image deploy --sysroot /mnt --authfile /root/.docker/config.json \
                 --imgref ostree-unverified-registry:{IMAGE} --karg ignition.platform.id=metal \
                 --karg $ignition_firstboot --stateroot rhcos --karg abc"
            ),
            "fsfreeze --freeze /mnt/boot".into(),
            "umount /mnt/boot".into(),
            "fsfreeze --freeze /mnt".into(),
            "umount /mnt".into(),
        ]
    }

    #[test]
    fn the_go_sequence_on_each_kind_of_disk() {
        // Go's fixture: 3.8 GB used and 3.3 GB more for the root, of 100 GB: 92 % stays free,
        // as in Go's test.
        // (disk, its partitions' path before the number, lsblk type)
        let disks = [
            ("/dev/sda", "/dev/sda", "disk"),
            ("/dev/nvme0n1", "/dev/nvme0n1p", "disk"),
            ("/dev/mmcblk1", "/dev/mmcblk1P", "disk"),
            ("/dev/dm-0", "/dev/mapper/dm-", "mpath"),
        ];
        for (device, part, kind) in disks {
            let name = part.rsplit('/').next().unwrap();
            let parts = [1, 2, 3, 4].map(|i| format!("{name}{i}"));
            let parts = parts.each_ref().map(String::as_str);
            let (p3, p4) = (&format!("{part}3"), &format!("{part}4"));
            let disk = device.trim_start_matches("/dev/");
            let r = runner_for(device, &lsblk_json(disk, kind, &parts));
            let clock = FakeClock::new();
            deploy(&r, &clock, device).unwrap();
            assert_eq!(r.lines(), expected(device, p3, p4, "92"), "{device}");
            assert!(clock.sleeps().is_empty());
        }
    }

    #[test]
    fn no_free_percent_option_when_nothing_stays_free() {
        // 7.08 GB taken (used and the root's size again): 7.5 GB leave 5 %, 7 GB none.
        for (size, free) in [(7_500_000_000u64, "5"), (7_000_000_000, "")] {
            let json = sda_json().replace("100000000000", &size.to_string());
            let r = runner_for("/dev/sda", &json);
            deploy(&r, &FakeClock::new(), "/dev/sda").unwrap();
            assert_eq!(
                r.lines()[6],
                expected("/dev/sda", "", "", free)[6],
                "{size}"
            );
        }
    }

    #[test]
    fn a_failing_partx_is_only_logged() {
        let r = runner_for("/dev/sda", &sda_json());
        r.fail(
            "partx --update /dev/sda",
            1,
            "partx: /dev/sda: failed to read partition table",
        );
        deploy(&r, &FakeClock::new(), "/dev/sda").unwrap();
        assert_eq!(
            r.lines(),
            expected("/dev/sda", "/dev/sda3", "/dev/sda4", "92")
        );
    }

    #[test]
    fn a_command_is_tried_three_times_five_seconds_apart() {
        let r = runner_for("/dev/sda", &sda_json());
        r.reply("xfs_growfs /mnt", Reply::fail(1, "busy"));
        r.reply("xfs_growfs /mnt", Reply::fail(1, "busy"));
        r.reply("xfs_growfs /mnt", Reply::ok(""));
        let clock = FakeClock::new();
        deploy(&r, &clock, "/dev/sda").unwrap();
        let lines = r.lines();
        assert_eq!(lines.iter().filter(|l| *l == "xfs_growfs /mnt").count(), 3);
        assert_eq!(clock.sleeps(), vec![COMMAND_RETRY_DELAY; 2]);
        assert_eq!(lines.last().unwrap(), "umount /mnt");
    }

    #[test]
    fn a_failing_ostree_deploy_stops_there_and_unmounts() {
        let r = runner_for("/dev/sda", &sda_json());
        let ostree = expected("/dev/sda", "/dev/sda3", "/dev/sda4", "92")[9].clone();
        r.fail(&ostree, 1, "error: Creating importer: manifest unknown");
        let clock = FakeClock::new();
        let e = deploy(&r, &clock, "/dev/sda").unwrap_err();
        let text = format!("{e:#}");
        assert!(
            text.starts_with("failed after 3 attempts to run ostree container image deploy "),
            "{text}"
        );
        assert!(text.contains("manifest unknown"), "{text}");
        let lines = r.lines();
        let ostree = lines.iter().filter(|l| l.starts_with("ostree ")).count();
        assert_eq!(ostree, 3);
        assert_eq!(clock.sleeps(), vec![COMMAND_RETRY_DELAY; 2]);
        // No freeze; what was mounted is unmounted, innermost first.
        assert_eq!(
            &lines[lines.len() - 2..],
            ["umount /mnt/boot", "umount /mnt"]
        );
        assert!(!lines.iter().any(|l| l.starts_with("fsfreeze")));
    }

    /// A failing mount, a disk that is not CoreOS, and a stop: nothing is mounted after.
    #[test]
    fn what_stops_the_deploy_before_or_at_its_first_mount() {
        let not_coreos = r#"{"blockdevices":[{"name":"sda","size":1000,"type":"disk","children":[{"name":"sda1","size":10}]}]}"#;
        let stopped = crate::image::Cancel::new();
        stopped.cancel();
        let cases: [(&str, bool, &str); 3] = [
            (&sda_json(), false, "mount /dev/sda4 /mnt"),
            (not_coreos, false, "expected at least 4"),
            (&sda_json(), true, "stop requested"),
        ];
        for (json, stop, want) in cases {
            let r = runner_for("/dev/sda", json);
            r.fail("mount /dev/sda4 /mnt", 32, "mount: /mnt: wrong fs type");
            let t = Target {
                runner: &r,
                clock: &FakeClock::new(),
                stop: if stop { &stopped } else { &NeverStop },
                device: "/dev/sda",
            };
            let e = overwrite_os_image(&t, IMAGE, DEFAULT_PLATFORM_KARG, &[]).unwrap_err();
            assert!(format!("{e:#}").contains(want), "{e:#}");
            assert_eq!(e.downcast_ref::<crate::clock::Stopped>().is_some(), stop);
            // Nothing after the failed mount; no mount at all otherwise.
            let lines = r.lines();
            match want.starts_with("mount") {
                true => assert_eq!(lines.last().map(String::as_str), Some(want)),
                false => assert!(lines.iter().all(|l| !l.starts_with("mount")), "{lines:?}"),
            }
        }
    }

    #[test]
    fn the_platform_karg_of_the_live_system() {
        let openstack = "BOOT_IMAGE=/images/pxeboot/vmlinuz coreos.liveiso=rhcos ignition.platform.id=openstack rd.neednet=1\n";
        assert_eq!(platform_karg(openstack), "ignition.platform.id=openstack");
        for cmdline in ["ignition.platform.id=metal", "quiet ignition.firstboot", ""] {
            assert_eq!(platform_karg(cmdline), DEFAULT_PLATFORM_KARG, "{cmdline}");
        }
    }
}
