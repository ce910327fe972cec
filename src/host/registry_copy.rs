//! Copying the appliance's registry data onto the installed disk (Go `Ops.CopyRegistryData`):
//! on an appliance / agent-based disconnected install the release images travel with the ISO
//! (`/mnt/agentdata`), and the new node serves them from `/var/lib/iri-registry` on its first
//! boot, before any registry is reachable.
//!
//! The freshly written root partition is far too small for them, so it is grown first, to
//! leave only a given percentage of the disk free: with the initramfs' own `transposefs`
//! script the root filesystem is saved to memory and restored into a fresh XFS made for the
//! grown partition (an XFS grown this much would have far too many allocation groups; the
//! script's size threshold is set to 0 so that it always does this), then the data is copied
//! with rsync, whose progress is reported. Every step is a host command, tried three
//! times five seconds apart; any failure is fatal (the node would come up without the images
//! it needs).

use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::commands::CommandRunner;
use super::free_space::{calculate_free_percent, ROOT_PARTITION};
use super::lsblk::{disk_sizes, partition_path, DiskSizes};
use super::rsync_progress::RsyncProgress;
use crate::clock::{Clock, Failure, Schedule, Stop, Stopped, WaitError};

/// Where the live system mounts the registry data (not the ISO path the marker is under).
const REGISTRY_DATA: &str = "/mnt/agentdata";
/// Where the installed root partition is mounted while the data is copied.
const ROOT_MOUNT: &str = "/mnt/root";
/// The registry's directory in the installed system's /var, as mounted here.
const REGISTRY_DIR: &str = "/mnt/root/ostree/deploy/rhcos/var/lib/iri-registry";
/// The initramfs script that moves the root filesystem aside and back (`autosave-xfs`,
/// `restore`, `cleanup`).
const TRANSPOSEFS: &str =
    "/usr/lib/dracut/modules.d/40ignition-ostree/ignition-ostree-transposefs.sh";

const ATTEMPTS: u32 = 3;
const RETRY_DELAY: Duration = Duration::from_secs(5);

/// One host command of the copy.
struct Step {
    pub program: &'static str,
    pub args: Vec<String>,
    /// Its output goes to the rsync progress parser.
    pub streamed: bool,
    /// It changed the partition table: the disk's partition maps must follow (device-mapper
    /// disks only, see [`copy_registry_data`]).
    pub resized: bool,
}

impl Step {
    fn new(program: &'static str, args: &[&str]) -> Step {
        Step {
            program,
            args: args.iter().map(|a| a.to_string()).collect(),
            streamed: false,
            resized: false,
        }
    }

    /// `program arg…`, for messages.
    fn line(&self) -> String {
        format!("{} {}", self.program, self.args.join(" "))
    }
}

/// What the data needs on the root partition: 2.5 times its size (Go's margin: the registry
/// also unpacks and grows after the install).
fn requested_bytes(data: u64) -> u64 {
    u64::try_from(u128::from(data) * 5 / 2).unwrap_or(u64::MAX)
}

/// The size in bytes from `du -sb` output (`<bytes>\t<path>`).
fn parse_du(output: &str) -> Result<u64> {
    output
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("unexpected output of du -sb {REGISTRY_DATA}: {output:?}"))
}

/// The host commands after the checks, in order: the root partition (`root`) is grown with
/// `growpart` to leave `free_percent` of `device` free, its filesystem saved and restored
/// around that and grown, and the data copied into it. `maps`: whether `device` has
/// device-mapper partition maps (see [`copy_registry_data`]).
fn copy_steps(device: &str, root: &str, free_percent: u64, maps: bool) -> Vec<Step> {
    let free = format!("--free-percent={free_percent}");
    let part = ROOT_PARTITION.to_string();
    let growpart = if maps {
        Step::new("growpart", &[&free, "-u", "off", device, &part])
    } else {
        Step::new("growpart", &[&free, device, &part])
    };
    let transposefs = |action: &str| format!("{TRANSPOSEFS} {action}");
    let rsync = format!("rsync -ah --info=progress2 {REGISTRY_DATA}/ {REGISTRY_DIR}/");
    vec![
        Step::new("mkdir", &["-p", ROOT_MOUNT]),
        // An earlier step may have left the filesystem frozen (skip-MCO freezes it before
        // unmounting it, and a frozen superblock stays frozen when mounted again).
        Step::new("mount", &[root, ROOT_MOUNT]),
        Step::new(
            "sh",
            &["-c", &format!("fsfreeze --unfreeze {ROOT_MOUNT} || true")],
        ),
        Step::new("umount", &[ROOT_MOUNT]),
        Step {
            resized: true,
            ..growpart
        },
        // The threshold would make the script skip the save on a small root; it must save.
        Step::new(
            "bash",
            &[
                "-c",
                &format!(
                    "sed 's/threshold=[0-9]*/threshold=0/' {TRANSPOSEFS} | bash -s autosave-xfs"
                ),
            ],
        ),
        Step::new("bash", &["-c", &transposefs("restore")]),
        Step::new("bash", &["-c", &transposefs("cleanup")]),
        Step::new("mount", &[root, ROOT_MOUNT]),
        Step::new("xfs_growfs", &[ROOT_MOUNT]),
        Step::new("mkdir", &["-p", REGISTRY_DIR]),
        Step {
            streamed: true,
            ..Step::new("sh", &["-c", &rsync])
        },
        // Freezing flushes everything to the disk before the unmount; the reboot follows.
        Step::new("fsfreeze", &["--freeze", ROOT_MOUNT]),
        Step::new("umount", &[ROOT_MOUNT]),
    ]
}

/// Why `device` cannot take `data` bytes of registry data, and what to do: with its sizes
/// (`None`: unknown), the smallest disk that would do.
fn not_large_enough(device: &str, data: u64, requested: u64, sizes: Option<&DiskSizes>) -> String {
    let mut text = format!(
        "device {device} is not large enough for the registry data: {REGISTRY_DATA} holds {} \
         and needs {} (2.5 times as much) on the root partition, with at least 1% of the disk \
         left free",
        gib(u128::from(data)),
        gib(u128::from(requested)),
    );
    match sizes {
        Some(sizes) => {
            let used: u64 = sizes.partitions.iter().sum();
            // The smallest disk leaving 1 % free: disk × 99 ≥ (used + requested) × 100.
            let needed = (u128::from(used) + u128::from(requested)) * 100;
            text.push_str(&format!(
                "; the disk has {} of which its partitions use {}. Install on a disk of at \
                 least {}, or ship less registry data",
                gib(u128::from(sizes.disk)),
                gib(u128::from(used)),
                gib(needed.div_ceil(99)),
            ));
        }
        None => text.push_str(". Install on a larger disk, or ship less registry data"),
    }
    text
}

fn gib(bytes: u128) -> String {
    format!(
        "{:.1} GiB ({bytes} bytes)",
        bytes as f64 / f64::from(1u32 << 30)
    )
}

/// Copies the registry data onto `device` (see the module documentation); `report` gets the
/// copy's percentages as they become due (as the Go installer reports them: every 5 points and
/// 100).
///
/// `reload_maps`: how the kernel learns of the grown root partition. `None` on an ordinary disk,
/// where `growpart` tells it itself (`partx --update`, as Go relies on). A device-mapper disk
/// (multipath, the appliance's linear `agent` disk) has partition maps instead, which `partx`
/// cannot change (the kernel refuses BLKPG there): the table on the disk grows, the map of the
/// root keeps its old length, and `xfs_growfs` then finds no room to grow into (as in Go).
/// There `growpart` runs with `-u off`, and `reload_maps` gives the maps the grown table.
pub(crate) fn copy_registry_data(
    runner: &dyn CommandRunner,
    clock: &dyn Clock,
    stop: &dyn Stop,
    device: &str,
    reload_maps: Option<&dyn Fn() -> Result<()>>,
    report: &mut dyn FnMut(u32),
) -> Result<()> {
    let du = runner
        .run("du", &["-sb", REGISTRY_DATA])
        .with_context(|| format!("measuring the registry data in {REGISTRY_DATA}"))?;
    let data = parse_du(&du)?;
    let requested = requested_bytes(data);
    let free = calculate_free_percent(runner, device, Some(requested))?;
    if free < 1 {
        // Read again only to say which disk would do (the common path reads it once, as Go).
        let sizes = disk_sizes(runner, device).ok();
        bail!(not_large_enough(device, data, requested, sizes.as_ref()));
    }
    tracing::info!("copying {data} bytes of registry data to {device}, leaving {free}% of it free");
    let root = partition_path(runner, device, ROOT_PARTITION)?;
    let mut progress = RsyncProgress::default();
    for step in copy_steps(device, &root, free, reload_maps.is_some()) {
        run_step(runner, clock, stop, &step, &mut progress, report)?;
        if let Some(reload) = reload_maps.filter(|_| step.resized) {
            reload().with_context(|| {
                format!("giving the partition maps of {device} the grown root partition")
            })?;
        }
    }
    Ok(())
}

/// Runs `step` up to [`ATTEMPTS`] times, [`RETRY_DELAY`] apart.
fn run_step(
    runner: &dyn CommandRunner,
    clock: &dyn Clock,
    stop: &dyn Stop,
    step: &Step,
    progress: &mut RsyncProgress,
    report: &mut dyn FnMut(u32),
) -> Result<()> {
    let args: Vec<&str> = step.args.iter().map(String::as_str).collect();
    let result = clock.retry(
        stop,
        &Schedule::tries(ATTEMPTS, RETRY_DELAY),
        |failures| {
            let ran = if step.streamed {
                runner.run_streaming(step.program, &args, &mut |chunk| {
                    progress.feed(chunk, &mut |entry| report(entry.percent))
                })
            } else {
                runner.run(step.program, &args)
            };
            ran.map(drop).map_err(|e| {
                tracing::warn!(
                    "{} (attempt {} of {ATTEMPTS}): {e}",
                    step.line(),
                    failures + 1
                );
                Failure::Retry(e)
            })
        },
        |_, _| {},
    );
    match result {
        Ok(()) => Ok(()),
        // Go's utils.Retry text; the ExecError names the command.
        Err(WaitError::GaveUp { last, .. }) | Err(WaitError::Fatal { error: last, .. }) => {
            Err(anyhow::Error::new(last)
                .context(format!("failed after {ATTEMPTS} attempts, last error")))
        }
        Err(WaitError::Stopped { last, .. }) => {
            let stopped = match last {
                Some(last) => anyhow::Error::new(last).context(Stopped),
                None => Stopped.into(),
            };
            Err(stopped.context(format!("running {}", step.line())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{FakeClock, NeverStop};
    use crate::host::lsblk::{lsblk_json, sda_json};
    use crate::host::{ExecError, RecordingRunner};

    const GIB: u64 = 1 << 30;

    /// The Go test's expected sequence (`CopyRegistryData` in ops_test.go) after the du and
    /// the two lsblk calls.
    fn go_sequence(device: &str, part4: &str) -> Vec<String> {
        let script = "/usr/lib/dracut/modules.d/40ignition-ostree/ignition-ostree-transposefs.sh";
        vec![
            "mkdir -p /mnt/root".to_string(),
            format!("mount {part4} /mnt/root"),
            "sh -c fsfreeze --unfreeze /mnt/root || true".to_string(),
            "umount /mnt/root".to_string(),
            format!("growpart --free-percent=42 {device} 4"),
            format!("bash -c sed 's/threshold=[0-9]*/threshold=0/' {script} | bash -s autosave-xfs"),
            format!("bash -c {script} restore"),
            format!("bash -c {script} cleanup"),
            format!("mount {part4} /mnt/root"),
            "xfs_growfs /mnt/root".to_string(),
            "mkdir -p /mnt/root/ostree/deploy/rhcos/var/lib/iri-registry".to_string(),
            "sh -c rsync -ah --info=progress2 /mnt/agentdata/ /mnt/root/ostree/deploy/rhcos/var/lib/iri-registry/".to_string(),
            "fsfreeze --freeze /mnt/root".to_string(),
            "umount /mnt/root".to_string(),
        ]
    }

    fn runner_for(device: &str, lsblk_out: &str, du: &str) -> RecordingRunner {
        let r = RecordingRunner::new();
        r.ok("du -sb /mnt/agentdata", du);
        r.ok(&format!("lsblk --bytes --json {device}"), lsblk_out);
        r
    }

    fn copy(r: &RecordingRunner, clock: &FakeClock, device: &str) -> (Result<()>, Vec<u32>) {
        let mut reported = Vec::new();
        let result = copy_registry_data(r, clock, &NeverStop, device, None, &mut |p| {
            reported.push(p)
        });
        (result, reported)
    }

    /// The error of a copy onto /dev/sda, with its causes.
    fn copy_err(r: &RecordingRunner) -> String {
        format!(
            "{:#}",
            copy(r, &FakeClock::new(), "/dev/sda").0.unwrap_err()
        )
    }

    #[test]
    fn the_go_command_sequence_on_each_kind_of_disk() {
        // (disk, its partitions' path before the number, lsblk type)
        let cases = [
            ("/dev/sda", "/dev/sda", "disk"),
            ("/dev/nvme0n1", "/dev/nvme0n1p", "disk"),
            ("/dev/mmcblk1", "/dev/mmcblk1P", "disk"),
            ("/dev/dm-0", "/dev/dm-", "disk"),
            ("/dev/dm-0", "/dev/mapper/dm-", "mpath"),
        ];
        for (device, part, kind) in cases {
            let name = part.rsplit('/').next().unwrap();
            let parts = [1, 2, 3, 4].map(|i| format!("{name}{i}"));
            let parts = parts.each_ref().map(String::as_str);
            let part4 = &format!("{part}4");
            let name = device.trim_start_matches("/dev/");
            // 20 GiB of data, as Go's test: 42 % of the disk stays free.
            let r = runner_for(
                device,
                &lsblk_json(name, kind, &parts),
                &format!("{}\t/mnt/agentdata", 20 * GIB),
            );
            let clock = FakeClock::new();
            let (result, _) = copy(&r, &clock, device);
            result.unwrap();
            let mut expected = vec![
                "du -sb /mnt/agentdata".to_string(),
                format!("lsblk --bytes --json {device}"),
                format!("lsblk --bytes --json {device}"),
            ];
            expected.extend(go_sequence(device, part4));
            assert_eq!(r.lines(), expected, "{device} ({kind})");
            assert!(clock.sleeps().is_empty());
        }
    }

    /// On a device-mapper disk `growpart` cannot update the partition maps (`partx --update`
    /// cannot change them): it runs with `-u off`, and the maps are reloaded right after it,
    /// before the root file system is saved and remade.
    #[test]
    fn on_a_device_mapper_disk_the_partition_maps_follow_growpart() {
        let agent = || {
            runner_for(
                "/dev/dm-0",
                &lsblk_json("agent", "dm", &["agent1", "agent2", "agent3", "agent4"]),
                &format!("{}\t/mnt/agentdata", 20 * GIB),
            )
        };
        // The copy onto the appliance's linear disk, with `reload` for its maps.
        let copy_with = |r: &RecordingRunner, reload: &dyn Fn() -> Result<()>| {
            copy_registry_data(
                r,
                &FakeClock::new(),
                &NeverStop,
                "/dev/dm-0",
                Some(reload),
                &mut |_| {},
            )
        };
        let r = agent();
        let at = std::sync::Mutex::new(Vec::new());
        copy_with(&r, &|| {
            at.lock().unwrap().push(r.lines().len());
            Ok(())
        })
        .unwrap();
        let lines = r.lines();
        let growpart = lines
            .iter()
            .position(|l| l.starts_with("growpart"))
            .unwrap();
        assert_eq!(
            lines[growpart],
            "growpart --free-percent=42 -u off /dev/dm-0 4"
        );
        assert_eq!(
            *at.lock().unwrap(),
            [growpart + 1],
            "reloaded once, right after growpart"
        );
        assert_eq!(lines[4], "mount /dev/mapper/agent4 /mnt/root");

        // A failed reload is fatal, naming the disk, before any further command.
        let r = agent();
        let e = copy_with(&r, &|| anyhow::bail!("no maps")).unwrap_err();
        assert!(
            format!("{e:#}").contains("partition maps of /dev/dm-0"),
            "{e:#}"
        );
        assert!(r.lines().last().unwrap().starts_with("growpart"));
    }

    #[test]
    fn the_rsync_progress_is_reported() {
        let r = runner_for("/dev/sda", &sda_json(), "1000");
        let entries: String = [0, 3, 5, 7, 10, 12, 40, 44, 45, 99, 100, 100]
            .iter()
            .map(|p| format!("  {p}M  {p}%  80.00MB/s  0:00:{p:02} (xfr#1, to-chk=0/1)\r"))
            .collect();
        r.ok(
            &format!("sh -c rsync -ah --info=progress2 {REGISTRY_DATA}/ {REGISTRY_DIR}/"),
            &format!("sending incremental file list\n{entries}\n"),
        );
        let (result, reported) = copy(&r, &FakeClock::new(), "/dev/sda");
        result.unwrap();
        assert_eq!(reported, vec![5, 10, 40, 45, 99, 100]);
    }

    #[test]
    fn a_disk_too_small_fails_before_any_change() {
        // 40 GiB of data needs 100 GiB: nothing left free on a 100 GB disk.
        let r = runner_for("/dev/sda", &sda_json(), &(40 * GIB).to_string());
        let (result, reported) = copy(&r, &FakeClock::new(), "/dev/sda");
        let e = format!("{:#}", result.unwrap_err());
        assert!(
            e.starts_with("device /dev/sda is not large enough for the registry data: /mnt/agentdata holds 40.0 GiB"),
            "{e}"
        );
        assert!(
            e.contains("needs 100.0 GiB (107374182400 bytes) (2.5 times as much)"),
            "{e}"
        );
        // (3809459712 + 107374182400) × 100 / 99, rounded up.
        assert!(
            e.contains("Install on a disk of at least 104.6 GiB (112306709205 bytes)"),
            "{e}"
        );
        assert!(reported.is_empty());
        assert_eq!(
            r.lines(),
            vec![
                "du -sb /mnt/agentdata",
                "lsblk --bytes --json /dev/sda",
                "lsblk --bytes --json /dev/sda"
            ],
            "nothing touched"
        );
        // Without the sizes the advice is shorter.
        let e = not_large_enough("/dev/sda", GIB, requested_bytes(GIB), None);
        assert!(
            e.ends_with("left free. Install on a larger disk, or ship less registry data"),
            "{e}"
        );
    }

    #[test]
    fn one_percent_free_is_enough() {
        // The most data that leaves 1 % of the 100 GB disk free: requested ≤ 99e9 − used.
        let limit = 99_000_000_000 - 3_809_459_712u64;
        let data = limit * 2 / 5;
        assert!(requested_bytes(data) <= limit && requested_bytes(data + 1) > limit);
        let lsblk_out = sda_json();
        let r = runner_for("/dev/sda", &lsblk_out, &data.to_string());
        copy(&r, &FakeClock::new(), "/dev/sda").0.unwrap();
        assert!(r
            .lines()
            .contains(&"growpart --free-percent=1 /dev/sda 4".to_string()));
        // One byte more leaves less than 1 %.
        let r = runner_for("/dev/sda", &lsblk_out, &(data + 1).to_string());
        let e = copy_err(&r);
        assert!(e.contains("is not large enough"), "{e}");
    }

    #[test]
    fn each_step_is_tried_three_times_five_seconds_apart() {
        let r = runner_for("/dev/sda", &sda_json(), "1000");
        r.fail("xfs_growfs /mnt/root", 1, "xfs_growfs: busy")
            .ok("xfs_growfs /mnt/root", "");
        let clock = FakeClock::new();
        copy(&r, &clock, "/dev/sda").0.unwrap();
        assert_eq!(clock.sleeps(), vec![RETRY_DELAY]);
        let lines = r.lines();
        assert_eq!(
            lines
                .iter()
                .filter(|l| *l == "xfs_growfs /mnt/root")
                .count(),
            2
        );
        assert_eq!(
            lines.last().unwrap(),
            "umount /mnt/root",
            "the copy went on"
        );

        // Three failures end the copy, with Go's retry text over the command's error.
        let r = runner_for("/dev/sda", &sda_json(), "1000");
        r.fail(
            "growpart --free-percent=96 /dev/sda 4",
            2,
            "NOCHANGE: partition 4 could only be grown by 0",
        );
        let clock = FakeClock::new();
        let e = copy(&r, &clock, "/dev/sda").0.unwrap_err();
        assert_eq!(clock.sleeps(), vec![RETRY_DELAY, RETRY_DELAY]);
        assert_eq!(
            format!("{e:#}"),
            "failed after 3 attempts, last error: failed executing growpart \
             [--free-percent=96 /dev/sda 4], Error exit status 2, LastOutput \"NOCHANGE: \
             partition 4 could only be grown by 0\""
        );
        assert!(e.downcast_ref::<ExecError>().is_some());
        assert_eq!(
            r.lines().last().unwrap(),
            "growpart --free-percent=96 /dev/sda 4"
        );
    }

    #[test]
    fn a_failed_measure_or_lsblk_is_fatal_at_once() {
        let r = RecordingRunner::new();
        r.fail(
            "du -sb /mnt/agentdata",
            1,
            "du: cannot access '/mnt/agentdata'",
        );
        let e = copy_err(&r);
        assert!(
            e.starts_with("measuring the registry data in /mnt/agentdata: failed executing du"),
            "{e}"
        );
        let r = runner_for("/dev/sda", "not json", "1000");
        let e = copy_err(&r);
        assert!(e.contains("failed to unmarshal lsblk output"), "{e}");
        let r = runner_for("/dev/sda", &sda_json(), "");
        let e = copy_err(&r);
        assert_eq!(e, "unexpected output of du -sb /mnt/agentdata: \"\"");
    }

    #[test]
    fn a_stop_during_a_wait_ends_the_copy() {
        let stop = crate::image::Cancel::new();
        let fired = stop.clone();
        // SIGTERM arrives while mkdir fails: no second attempt.
        let r = RecordingRunner::with_script(move |program, _| {
            (program == "mkdir").then(|| {
                fired.cancel();
                crate::host::Reply::fail(1, "read-only file system")
            })
        });
        r.ok("du -sb /mnt/agentdata", "1000");
        r.ok("lsblk --bytes --json /dev/sda", &sda_json());
        let e = copy_registry_data(&r, &FakeClock::new(), &stop, "/dev/sda", None, &mut |_| {})
            .unwrap_err();
        assert!(e.downcast_ref::<Stopped>().is_some(), "{e:#}");
        assert!(
            format!("{e:#}")
                .starts_with("running mkdir -p /mnt/root: stop requested: failed executing mkdir"),
            "{e:#}"
        );
        assert_eq!(r.lines().last().unwrap(), "mkdir -p /mnt/root");
        assert_eq!(
            r.lines().iter().filter(|l| l.starts_with("mkdir")).count(),
            1
        );
    }

    #[test]
    fn the_margin_rounds_up_and_saturates() {
        // Both du shapes and 2.5 times the data: the_go_command_sequence_on_each_kind_of_disk
        // and one_percent_free_is_enough; here the rounding and the saturation.
        assert_eq!(requested_bytes(3), 7);
        assert_eq!(requested_bytes(u64::MAX), u64::MAX);
    }
}
