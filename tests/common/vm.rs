//! QEMU for the tests, two ways, on one runner:
//! * [`boot`]: a written disk booted under UEFI (OVMF) through the firmware's boot manager,
//!   and what the test initramfs reports, plus the host-side GPT checks firmware would
//!   otherwise hide (OVMF silently repairs a bad backup). The disk is attached with
//!   `snapshot=on`: firmware's repairs and anything the boot writes go to a temporary overlay,
//!   never to the device under test.
//! * [`run_guest`]: a guest on Debian's distribution kernel with real disks attached
//!   (virtio-blk, virtio-scsi, NVMe, AHCI), for what this host's kernel cannot do:
//!   device-mapper, md and partition-table parsing. Each guest runs one case script against our
//!   binary and powers off.
//!
//! The guest's kernel and base initramfs (busybox, the disk, dm, md, 9p, ext4 and XFS modules,
//! and `dmsetup`, `mdadm`, `lsblk`, `rsync`, `partx`, `sgdisk` and `blkid` with their
//! libraries) come from testdata/guest_parts.rs, which the test passes in as [`GuestBoot`]. Per
//! run the rig appends a second archive to that initramfs (the kernel unpacks concatenated
//! archives in turn) holding our binary at [`GUEST_BIN`] with its libraries, the `ai-disk`
//! helper and the spec's extra files, so a rebuilt binary needs no new parts.
//!
//! The guest's `/init` mounts the host directory [`GuestSpec::share`] at `/share` (virtio-9p,
//! read-write), waits for the disks named in [`GuestSpec::expect_disks`], prints
//! `AI-GUEST ready`, runs [`GuestSpec::script`] with busybox `sh` (output to the console and to
//! `/share/case.log`), syncs, prints `AI-GUEST exit <status>` and powers off. In the script,
//! `PATH` has the host tools first and busybox's applets last, `/tmp` and `/run` are tmpfs, `lo`
//! is up (no other network), there is no udev (so `lsblk` shows no PARTLABEL, and
//! `dmsetup mknodes` makes `/dev/mapper` nodes) and no modprobe, and `ai-disk SERIAL` prints the
//! `/dev` path of each whole disk with that serial (SCSI and ATA disks' kernel names depend on
//! probe order; the serials do not).
//!
//! KVM is used when it can run the firmware or boot the guest kernel here (probed once per test
//! binary; some hosts expose a `/dev/kvm` that fails on OVMF's first instructions, or cannot
//! set `-cpu host`'s MSRs), else QEMU emulates the CPU; `AI_GUEST_ACCEL=tcg` or `kvm` forces
//! the choice for guests.

use std::fs;
use std::io::{Seek, SeekFrom};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// The test data modules load this file too (testdata/boot_parts.rs); tests/common cannot use
// theirs, as most test binaries do not have them.
#[allow(clippy::duplicate_mod)]
#[path = "../../testdata/cpio.rs"]
mod cpio;

const QEMU: &str = "qemu-system-x86_64";
/// Debian's `ovmf` package: the 4 MiB firmware (no Secure Boot) and its variable store.
const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";
/// What the boot initramfs's `/init` prefixes its report lines with.
const REPORT_PREFIX: &str = "AI-BOOT ";
const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
/// Where the guest has our binary.
pub(crate) const GUEST_BIN: &str = "/usr/bin/assisted-installer";
/// What the guest's `/init` prefixes its own lines with.
const MARKER: &str = "AI-GUEST ";

fn have(test: &str, missing: Option<String>) -> bool {
    match missing {
        None => true,
        Some(why) => super::root::skip(test, &why),
    }
}

fn qemu_missing() -> Option<String> {
    let ok = Command::new(QEMU)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (!ok).then(|| format!("{QEMU} is missing (Debian package qemu-system-x86)"))
}

/// Whether QEMU and OVMF are here; prints why not, or panics under AI_REQUIRE_ROOT_TESTS=1.
pub(crate) fn have_qemu(test: &str) -> bool {
    let ovmf = Path::new(OVMF_CODE).is_file() && Path::new(OVMF_VARS).is_file();
    let missing = qemu_missing()
        .or_else(|| (!ovmf).then(|| format!("{OVMF_CODE} is missing (Debian package ovmf)")));
    have(test, missing)
}

/// Whether a guest can run here: root and QEMU. Prints why not and returns false, or panics
/// under AI_REQUIRE_ROOT_TESTS=1.
pub(crate) fn have_guest(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    let missing = (!root)
        .then(|| {
            "it needs root (the guest's disks and share are root's files, written as root)"
                .to_string()
        })
        .or_else(qemu_missing);
    have(test, missing)
}

/// How one QEMU run went.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    /// The serial console.
    pub console: String,
    /// QEMU's own messages.
    pub stderr: String,
    /// `kvm` or `tcg`.
    pub accel: &'static str,
    /// From QEMU's start to its end.
    pub elapsed: Duration,
    /// From QEMU's start to the console's first `ready` text, if it got there.
    pub ready_after: Option<Duration>,
    /// Killed at the run's limit.
    pub timed_out: bool,
    /// Killed once the console showed the `kill_when` text.
    pub killed: bool,
}

impl Run {
    /// The console and QEMU's messages, for failure messages.
    pub(crate) fn transcript(&self) -> String {
        // Firmware paints the screen with escape sequences; keep the text.
        let console: String = self
            .console
            .chars()
            .filter(|c| *c == '\n' || *c == '\t' || !c.is_control())
            .collect();
        format!(
            "--- QEMU ({}, {:.1?}, ready {:?}{}{}) stderr:\n{}\n--- console:\n{console}",
            self.accel,
            self.elapsed,
            self.ready_after,
            if self.timed_out { ", timed out" } else { "" },
            if self.killed { ", killed" } else { "" },
            self.stderr
        )
    }
}

/// QEMU on q35 without devices, its console in `dir/console.log` and its messages in
/// `dir/stderr.log`; the snapshot overlays, if any, go to `dir` too.
fn qemu(dir: &Path, accel: &str, memory_mib: u64) -> Command {
    let mut cmd = Command::new(QEMU);
    cmd.args(["-machine", &format!("q35,accel={accel}")])
        .args(["-m", &memory_mib.to_string()])
        .args(["-nodefaults", "-display", "none", "-no-reboot"])
        .arg("-serial")
        .arg(format!("file:{}", dir.join("console.log").display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(dir.join("stderr.log")).unwrap())
        .env("TMPDIR", dir);
    cmd
}

/// Runs `cmd` (made by [`qemu`] for `dir`) until QEMU exits, `limit` passes, or `kill_when`'s
/// delay after the console first shows its text (SIGKILL, as a power cut). `ready` is the
/// console text [`Run::ready_after`] times.
fn run_qemu(
    mut cmd: Command,
    dir: &Path,
    accel: &'static str,
    limit: Duration,
    ready: &str,
    kill_when: Option<(&str, Duration)>,
) -> Run {
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {QEMU}: {e}"));
    let console_path = dir.join("console.log");
    let read_console =
        || String::from_utf8_lossy(&fs::read(&console_path).unwrap_or_default()).into_owned();
    let (mut ready_after, mut kill_at) = (None, None::<Instant>);
    let (mut killed, mut timed_out) = (false, false);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        let now = Instant::now();
        if ready_after.is_none() || (kill_when.is_some() && kill_at.is_none()) {
            let console = read_console();
            if ready_after.is_none() && console.contains(ready) {
                ready_after = Some(started.elapsed());
            }
            if let Some((text, delay)) = kill_when {
                if kill_at.is_none() && console.contains(text) {
                    kill_at = Some(now + delay);
                }
            }
        }
        killed = kill_at.is_some_and(|t| now >= t);
        timed_out = !killed && started.elapsed() > limit;
        if killed || timed_out {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = started.elapsed();
    let console = read_console();
    if ready_after.is_none() && console.contains(ready) {
        ready_after = Some(elapsed);
    }
    Run {
        console,
        stderr: fs::read_to_string(dir.join("stderr.log")).unwrap_or_default(),
        accel,
        elapsed,
        ready_after,
        timed_out,
        killed,
    }
}

fn run_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// Whether KVM is usable and a probe run (made by `probe` for a directory, under KVM) shows
/// `ok` on its console within `limit`.
fn kvm_passes(limit: Duration, ok: &str, probe: impl FnOnce(&Path) -> Command) -> bool {
    let usable = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    if !usable {
        return false;
    }
    let dir = run_dir("kvm-probe");
    let run = run_qemu(
        probe(dir.path()),
        dir.path(),
        "kvm",
        limit,
        ok,
        Some((ok, Duration::ZERO)),
    );
    run.ready_after.is_some()
}

/// A partition as the booted kernel sees it (sysfs counts 512-byte units whatever the disk's
/// logical block size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KernelPartition {
    pub number: u32,
    pub start_512: u64,
    pub size_512: u64,
    pub name: String,
}

/// What the test initramfs printed (see `INIT_SCRIPT` in testdata/boot_parts.rs).
#[derive(Clone, Debug, Default)]
pub(crate) struct BootReport {
    pub cmdline: String,
    /// The disk's size in 512-byte units and its logical block size.
    pub disk: Option<(u64, u64)>,
    pub partitions: Vec<KernelPartition>,
    /// Kernel messages about GPT, the disk or partitions.
    pub kmsg: Vec<String>,
    /// sha256, mode and owner of /boot/ignition/config.ign; None when missing.
    pub ignition: Option<(String, String)>,
    /// (name, sha256, mode) of each file in /boot/coreos-firstboot-network.
    pub network: Vec<(String, String, String)>,
    pub firstboot: bool,
    pub errors: Vec<String>,
    /// `/init` got to its end.
    pub ended: bool,
}

impl BootReport {
    pub(crate) fn parse(console: &str) -> BootReport {
        let mut r = BootReport::default();
        for line in console.lines() {
            let Some(at) = line.find(REPORT_PREFIX) else {
                continue;
            };
            let line = line[at + REPORT_PREFIX.len()..].trim_end_matches('\r');
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            let words: Vec<&str> = value.split_whitespace().collect();
            match key {
                "cmdline" => r.cmdline = value.trim().to_string(),
                "disk" if words.len() == 2 => {
                    r.disk = Some((words[0].parse().unwrap_or(0), words[1].parse().unwrap_or(0)))
                }
                "partition" if words.len() >= 3 => r.partitions.push(KernelPartition {
                    number: words[0].parse().unwrap_or(0),
                    start_512: words[1].parse().unwrap_or(0),
                    size_512: words[2].parse().unwrap_or(0),
                    name: words.get(3).unwrap_or(&"").to_string(),
                }),
                "kmsg" => r.kmsg.push(without_timestamp(value).to_string()),
                "ignition" if words.len() == 3 => {
                    r.ignition = Some((words[0].to_string(), format!("{} {}", words[1], words[2])))
                }
                "network" if words.len() == 3 => r.network.push((
                    words[0].to_string(),
                    words[1].to_string(),
                    words[2].to_string(),
                )),
                "firstboot" => r.firstboot = true,
                "error" => r.errors.push(value.to_string()),
                "end" => r.ended = true,
                _ => {}
            }
        }
        r
    }

    /// Kernel messages complaining about the GPT ("GPT:Primary header thinks Alt. header is
    /// not at the end of the disk.", "Alternate GPT is invalid, using primary GPT.", ...).
    pub(crate) fn gpt_complaints(&self) -> Vec<&str> {
        self.kmsg
            .iter()
            .map(String::as_str)
            .filter(|l| l.contains("GPT"))
            .collect()
    }
}

/// A kernel message without dmesg's "[    2.231234] " prefix.
fn without_timestamp(line: &str) -> &str {
    match line.strip_prefix('[').and_then(|l| l.split_once("] ")) {
        Some((stamp, rest)) if stamp.trim().parse::<f64>().is_ok() => rest,
        _ => line,
    }
}

/// A kernel, initramfs and command line QEMU hands to the firmware (`-kernel`, `-initrd`,
/// `-append`), which starts them instead of the disk's boot loader; the disk stays attached.
pub(crate) struct DirectKernel {
    pub kernel: std::path::PathBuf,
    pub initrd: std::path::PathBuf,
    pub append: String,
}

/// One boot: how QEMU ran and what the test initramfs reported.
pub(crate) struct Boot {
    pub run: Run,
    pub report: BootReport,
}

impl Deref for Boot {
    type Target = Run;
    fn deref(&self) -> &Run {
        &self.run
    }
}

/// QEMU with OVMF; the disk, if any, on virtio with `ss`-byte logical blocks, in snapshot mode.
fn firmware(dir: &Path, accel: &str, disk: Option<(&Path, u64)>) -> Command {
    let vars = dir.join("OVMF_VARS.fd");
    fs::copy(OVMF_VARS, &vars).unwrap();
    let mut cmd = qemu(dir, accel, 512);
    cmd.arg("-drive")
        .arg(format!(
            "if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}"
        ))
        .arg("-drive")
        .arg(format!(
            "if=pflash,format=raw,unit=1,file={}",
            vars.display()
        ));
    if let Some((path, ss)) = disk {
        cmd.arg("-drive")
            .arg(format!(
                "file={},format=raw,if=none,id=disk0,snapshot=on",
                path.display()
            ))
            .arg("-device")
            .arg(format!(
                "virtio-blk-pci,drive=disk0,logical_block_size={ss},physical_block_size={ss}"
            ));
    }
    cmd
}

/// KVM when it runs OVMF here (the firmware reaches its boot manager, "BdsDxe" on the
/// console), else software emulation (about 13 s a boot on two cores); decided once.
fn firmware_accel() -> &'static str {
    static ACCEL: OnceLock<&'static str> = OnceLock::new();
    ACCEL.get_or_init(|| {
        if kvm_passes(Duration::from_secs(20), "BdsDxe", |d| {
            firmware(d, "kvm", None)
        }) {
            "kvm"
        } else {
            eprintln!("vm: KVM cannot run OVMF here; using software emulation (tcg)");
            "tcg"
        }
    })
}

/// Boot `disk` (a block device or image file) with `ss`-byte logical blocks through the
/// firmware's boot manager, and wait for the machine to power off (the test initramfs's last
/// step) or reset, at most a few minutes (then QEMU is killed).
pub(crate) fn boot(disk: &Path, ss: u64) -> Boot {
    run_vm(disk, ss, None)
}

/// Like [`boot`], but the firmware starts `direct` instead of the disk's boot loader.
pub(crate) fn boot_kernel(disk: &Path, ss: u64, direct: &DirectKernel) -> Boot {
    run_vm(disk, ss, Some(direct))
}

fn run_vm(disk: &Path, ss: u64, direct: Option<&DirectKernel>) -> Boot {
    let accel = firmware_accel();
    let limit = Duration::from_secs(if accel == "kvm" { 60 } else { 240 });
    let dir = run_dir("boot");
    let mut cmd = firmware(dir.path(), accel, Some((disk, ss)));
    if let Some(k) = direct {
        cmd.arg("-kernel")
            .arg(&k.kernel)
            .arg("-initrd")
            .arg(&k.initrd);
        cmd.args(["-append", &k.append]);
    }
    let run = run_qemu(cmd, dir.path(), accel, limit, REPORT_PREFIX, None);
    Boot {
        report: BootReport::parse(&run.console),
        run,
    }
}

/// The used entries of a GPT, by number.
pub(crate) type Entries = Vec<(u32, gptman::GPTPartitionEntry)>;

/// What [`check_gpt`] found on a disk.
pub(crate) struct GptCheck {
    /// Empty when the table is sound.
    pub problems: Vec<String>,
    /// The primary table's used entries.
    pub entries: Entries,
    pub disk_bytes: u64,
}

/// Check both GPT headers and entry arrays of `disk` the way firmware does, and say what is
/// wrong: CRCs, the primary at LBA 1 with its entries at 2,
/// the backup header at the last LBA with its entries just before it, each pointing at the
/// other, and both describing the same disk and partitions.
pub(crate) fn check_gpt(disk: &Path, ss: u64) -> GptCheck {
    let mut f = fs::File::open(disk).unwrap_or_else(|e| panic!("{}: {e}", disk.display()));
    let size = f.seek(SeekFrom::End(0)).unwrap();
    let last = size / ss - 1;
    let mut problems = Vec::new();
    let mut read = |lba: u64, which: &str, problems: &mut Vec<String>| {
        f.seek(SeekFrom::Start(lba * ss)).unwrap();
        let header = match gptman::GPTHeader::read_from(&mut f) {
            Ok(h) => h,
            Err(e) => {
                problems.push(format!("{which} header at LBA {lba}: {e}"));
                return None;
            }
        };
        match header.read_partitions(&mut f, ss) {
            Ok(entries) => Some((header, entries)),
            Err(e) => {
                problems.push(format!("{which} entry array: {e}"));
                None
            }
        }
    };
    let primary = read(1, "primary", &mut problems);
    let backup = read(last, "backup", &mut problems);
    let array_sectors = |h: &gptman::GPTHeader| {
        (u64::from(h.number_of_partition_entries) * u64::from(h.size_of_partition_entry))
            .div_ceil(ss)
    };
    let mut check = |ok: bool, what: String| {
        if !ok {
            problems.push(what);
        }
    };
    if let Some((p, _)) = &primary {
        check(
            p.primary_lba == 1,
            format!("primary says it is at LBA {}", p.primary_lba),
        );
        check(
            p.backup_lba == last,
            format!(
                "primary points at a backup at LBA {}, the last LBA is {last}",
                p.backup_lba
            ),
        );
        check(
            p.partition_entry_lba == 2,
            format!("primary entries at LBA {}", p.partition_entry_lba),
        );
    }
    if let Some((b, _)) = &backup {
        check(
            b.primary_lba == last,
            format!("backup says it is at LBA {}", b.primary_lba),
        );
        check(
            b.backup_lba == 1,
            format!("backup points at a primary at LBA {}", b.backup_lba),
        );
        check(
            b.partition_entry_lba + array_sectors(b) == last,
            format!(
                "backup entries at LBA {}, not just before the header",
                b.partition_entry_lba
            ),
        );
    }
    if let (Some((p, pe)), Some((b, be))) = (&primary, &backup) {
        check(
            p.disk_guid == b.disk_guid,
            "the headers name different disk GUIDs".into(),
        );
        check(
            (p.first_usable_lba, p.last_usable_lba) == (b.first_usable_lba, b.last_usable_lba),
            format!(
                "usable LBAs differ: primary {}..{}, backup {}..{}",
                p.first_usable_lba, p.last_usable_lba, b.first_usable_lba, b.last_usable_lba
            ),
        );
        check(
            p.last_usable_lba < b.partition_entry_lba,
            format!(
                "usable space runs to LBA {}, into the backup entries",
                p.last_usable_lba
            ),
        );
        check(pe == be, "the entry arrays differ".into());
    }
    let entries = primary
        .map(|(_, e)| {
            e.into_iter()
                .enumerate()
                .filter(|(_, p)| p.is_used())
                .map(|(i, p)| (i as u32 + 1, p))
                .collect()
        })
        .unwrap_or_default();
    GptCheck {
        problems,
        entries,
        disk_bytes: size,
    }
}

/// The file at `path` in the ext4 file system of the partition named `label` in `entries`,
/// read with debugfs without mounting (`disk?offset=` is e2fsprogs' own syntax).
pub(crate) fn read_ext4_file(
    disk: &Path,
    ss: u64,
    entries: &Entries,
    label: &str,
    path: &str,
) -> Vec<u8> {
    let (_, part) = entries
        .iter()
        .find(|(_, p)| p.partition_name.as_str() == label)
        .unwrap_or_else(|| panic!("no partition named {label} in {entries:?}"));
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(format!("cat {path}"))
        .arg(format!(
            "{}?offset={}",
            disk.display(),
            part.starting_lba * ss
        ))
        .output()
        .expect("debugfs (e2fsprogs)");
    assert!(
        out.status.success() && !out.stdout.is_empty(),
        "debugfs cat {path} on {label} of {}: {}",
        disk.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The kernel's view of `entries` at `ss`-byte sectors.
pub(crate) fn as_kernel_sees(entries: &Entries, ss: u64) -> Vec<KernelPartition> {
    entries
        .iter()
        .map(|(n, p)| KernelPartition {
            number: *n,
            start_512: p.starting_lba * ss / 512,
            size_512: (p.ending_lba - p.starting_lba + 1) * ss / 512,
            name: p.partition_name.as_str().to_string(),
        })
        .collect()
}

/// What a boot must show; `problems` lists every difference (empty when all is as expected).
pub(crate) struct Expected {
    pub cmdline: String,
    pub disk_bytes: u64,
    pub ss: u64,
    pub partitions: Vec<KernelPartition>,
    /// sha256 of the Ignition config given to the install.
    pub ignition_sha256: String,
    /// (name, sha256) of each keyfile given to --copy-network, sorted by name.
    pub network: Vec<(String, String)>,
}

impl Expected {
    pub(crate) fn problems(&self, boot: &Boot) -> Vec<String> {
        let r = &boot.report;
        let mut out = Vec::new();
        if boot.timed_out || !r.ended {
            out.push("the test initramfs did not finish (no boot, or it hung)".to_string());
        }
        out.extend(r.errors.iter().map(|e| format!("/init: {e}")));
        if r.cmdline != self.cmdline {
            out.push(format!(
                "kernel command line\n  is:       {}\n  expected: {}",
                r.cmdline, self.cmdline
            ));
        }
        if r.disk != Some((self.disk_bytes / 512, self.ss)) {
            out.push(format!(
                "disk (512-byte units, logical block size) {:?}, expected {:?}",
                r.disk,
                (self.disk_bytes / 512, self.ss)
            ));
        }
        for c in r.gpt_complaints() {
            out.push(format!("kernel: {c}"));
        }
        if r.partitions != self.partitions {
            out.push(format!(
                "kernel partitions {:?}, expected {:?}",
                r.partitions, self.partitions
            ));
        }
        let ignition = Some((self.ignition_sha256.clone(), "600 0:0".to_string()));
        if r.ignition != ignition {
            out.push(format!(
                "/boot/ignition/config.ign (sha256, mode, owner) {:?}, expected {ignition:?}",
                r.ignition
            ));
        }
        // Keyfiles hold secrets (Wi-Fi keys, 802.1X passwords): 0600, as coreos-installer
        // copies them.
        let network: Vec<(String, String, String)> = self
            .network
            .iter()
            .map(|(n, sha)| (n.clone(), sha.clone(), "600".to_string()))
            .collect();
        if r.network != network {
            out.push(format!(
                "first-boot network files (name, sha256, mode) {:?}, expected {network:?}",
                r.network
            ));
        }
        if !r.firstboot {
            out.push("/boot/ignition.firstboot is missing: Ignition would not run".to_string());
        }
        out
    }
}

/// `ai-disk SERIAL`: the whole disks whose serial is SERIAL, one `/dev` path a line. Serials
/// are read where each driver puts them: virtio-blk's `serial`, NVMe's controller or
/// subsystem `device/serial`, SCSI and ATA (through libata) VPD page 0x80.
const AI_DISK: &str = r#"#!/bin/sh
for b in /sys/block/*; do
  if [ -r "$b/serial" ]; then
    s=$(cat "$b/serial")
  elif [ -r "$b/device/serial" ]; then
    s=$(cat "$b/device/serial")
  elif [ -r "$b/device/vpd_pg80" ]; then
    s=$(tail -c +5 "$b/device/vpd_pg80" | tr -d '\000')
  else
    continue
  fi
  s=$(echo $s)
  [ "$s" = "$1" ] && echo "/dev/${b##*/}"
done
exit 0
"#;

/// How a disk is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bus {
    /// virtio-blk-pci: `/dev/vda`, `vdb`, ... in the order given.
    VirtioBlk,
    /// scsi-hd on a virtio-scsi-pci controller: `/dev/sdX`. A file's second attachment goes to
    /// a second controller (two paths to one disk, for dm-multipath).
    VirtioScsi,
    /// An NVMe controller of its own with the disk as namespace 1: `/dev/nvmeXn1`. Only one
    /// attachment per file (two controllers sharing a namespace need an NVMe subsystem).
    Nvme,
    /// ide-hd on q35's built-in AHCI controller (six ports): `/dev/sdX`. 512-byte sectors only.
    Ahci,
}

/// A disk: a host file (a sparse file the test made) on a bus. Attaching the same file twice
/// makes a multipath pair: both paths see the same bytes (no host locking, shared writes,
/// write-through); give both the same serial and WWN.
#[derive(Clone, Debug)]
pub(crate) struct GuestDisk {
    pub file: PathBuf,
    pub bus: Bus,
    /// Logical and physical block size: 512 or 4096.
    pub sector_size: u64,
    /// Up to 20 characters of `[A-Za-z0-9_.-]`; what `ai-disk` finds the disk by.
    pub serial: String,
    /// SCSI and ATA WWN, or NVMe EUI-64; ignored on virtio-blk.
    pub wwn: Option<u64>,
}

impl GuestDisk {
    pub(crate) fn new(file: impl Into<PathBuf>, bus: Bus, sector_size: u64, serial: &str) -> Self {
        GuestDisk {
            file: file.into(),
            bus,
            sector_size,
            serial: serial.to_string(),
            wwn: None,
        }
    }

    pub(crate) fn with_wwn(mut self, wwn: u64) -> Self {
        self.wwn = Some(wwn);
        self
    }
}

/// Create (or truncate) `path` as a sparse file of `size` bytes, for a [`GuestDisk`].
pub(crate) fn sparse_disk(path: &Path, size: u64) {
    let f = fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.set_len(size).unwrap();
}

/// The kernel and base initramfs (testdata/guest_parts.rs builds and caches them).
#[derive(Clone, Debug)]
pub(crate) struct GuestBoot {
    /// An uncompressed ELF kernel (QEMU starts it at its PVH entry) or a bzImage.
    pub kernel: PathBuf,
    /// gzip'd newc cpio with the guest's `/init`.
    pub initramfs: PathBuf,
}

/// One guest run.
#[derive(Clone, Debug)]
pub(crate) struct GuestSpec {
    pub boot: GuestBoot,
    pub disks: Vec<GuestDisk>,
    /// A host directory, `/share` in the guest (9p, read-write, files created as the guest's
    /// user: root). The rig writes `case.sh` and `disks` into it; the guest writes `case.log`.
    pub share: PathBuf,
    /// The case script (busybox sh), written to `share/case.sh`; its exit status is
    /// [`GuestRun::exit_code`].
    pub script: String,
    /// Kernel names of the disks (`vda`, `sda`, `nvme0n1`) to wait for before the case runs,
    /// written to `share/disks`.
    pub expect_disks: Vec<String>,
    pub memory_mib: u64,
    /// QEMU is killed after this long (then [`GuestRun::timed_out`]).
    pub limit: Duration,
    /// Kill QEMU (SIGKILL, as a power cut) this long after the console first shows this text.
    pub kill_when: Option<(String, Duration)>,
    /// More files for the guest: (guest path, host path, mode); executables get their shared
    /// libraries too.
    pub extra_files: Vec<(String, PathBuf, u32)>,
}

impl GuestSpec {
    /// No disks, an empty script, 768 MiB and a 5-minute limit.
    pub(crate) fn new(boot: GuestBoot, share: impl Into<PathBuf>) -> Self {
        GuestSpec {
            boot,
            disks: Vec::new(),
            share: share.into(),
            script: String::new(),
            expect_disks: Vec::new(),
            memory_mib: 768,
            limit: Duration::from_secs(300),
            kill_when: None,
            extra_files: Vec::new(),
        }
    }
}

/// How a guest run went.
#[derive(Clone, Debug)]
pub(crate) struct GuestRun {
    pub run: Run,
    /// `share/case.log`: the case's output.
    pub case_log: String,
    /// The case script's status, from `AI-GUEST exit <status>`.
    pub exit_code: Option<i32>,
}

impl Deref for GuestRun {
    type Target = Run;
    fn deref(&self) -> &Run {
        &self.run
    }
}

impl GuestRun {
    /// The time the case took (from `AI-GUEST ready` to QEMU's end).
    pub(crate) fn case_time(&self) -> Option<Duration> {
        self.ready_after.map(|r| self.elapsed.saturating_sub(r))
    }

    /// `/init`'s `AI-GUEST error ...` lines.
    pub(crate) fn errors(&self) -> Vec<&str> {
        self.console
            .lines()
            .filter_map(|l| l.split_once(MARKER).map(|(_, rest)| rest.trim_end()))
            .filter_map(|rest| rest.strip_prefix("error "))
            .collect()
    }
}

/// QEMU for a direct boot of the guest kernel with `initrd`.
fn guest_qemu(
    dir: &Path,
    accel: &str,
    boot: &GuestBoot,
    initrd: &Path,
    memory_mib: u64,
    append: &str,
) -> Command {
    let mut cmd = qemu(dir, accel, memory_mib);
    cmd.args(["-cpu", if accel == "kvm" { "host" } else { "max" }])
        .args(["-smp", "2", "-nic", "none"])
        .arg("-kernel")
        .arg(&boot.kernel)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(format!("console=ttyS0 panic=-1 quiet {append}").trim_end());
    cmd
}

/// `kvm` when KVM boots the guest kernel here, else `tcg`; decided once per test binary (the
/// probe boots `boot` with `ai.probe`, which powers off at once; a working KVM gets there in a
/// second or two). `AI_GUEST_ACCEL` overrides.
pub(crate) fn accel(boot: &GuestBoot) -> &'static str {
    static ACCEL: OnceLock<&'static str> = OnceLock::new();
    ACCEL.get_or_init(|| match std::env::var("AI_GUEST_ACCEL").as_deref() {
        Ok("kvm") => "kvm",
        Ok("tcg") => "tcg",
        _ => {
            let probe = |d: &Path| guest_qemu(d, "kvm", boot, &boot.initramfs, 256, "ai.probe");
            if kvm_passes(Duration::from_secs(15), "AI-GUEST probe ok", probe) {
                "kvm"
            } else {
                eprintln!("vm: KVM cannot boot the guest here; using software emulation (tcg)");
                "tcg"
            }
        }
    })
}

/// QEMU's option values are comma-separated: a comma in a path or serial would split it.
fn option_value(what: &str, value: &str) -> String {
    assert!(
        !value.contains(','),
        "{what} {value:?} has a comma, which QEMU's options cannot carry"
    );
    value.to_string()
}

/// The `-drive` and `-device` arguments of `disks`.
fn disk_args(disks: &[GuestDisk]) -> Vec<String> {
    let mut args = Vec::new();
    let mut scsi_controllers = 0;
    let mut ahci_ports = 0;
    for (i, d) in disks.iter().enumerate() {
        assert!(
            d.sector_size == 512 || d.sector_size == 4096,
            "sector size {} of {}",
            d.sector_size,
            d.file.display()
        );
        assert!(
            !d.serial.is_empty()
                && d.serial.len() <= 20
                && d.serial
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)),
            "serial {:?}: 1 to 20 characters of [A-Za-z0-9_.-]",
            d.serial
        );
        let file = option_value("disk file", &d.file.display().to_string());
        let shared = disks.iter().filter(|o| o.file == d.file).count() > 1;
        let nth = disks[..i].iter().filter(|o| o.file == d.file).count();
        let mut drive = format!("if=none,id=disk{i},format=raw,file={file}");
        if shared {
            drive.push_str(",file.locking=off,cache=writethrough");
        }
        args.extend(["-drive".to_string(), drive]);
        let ss = d.sector_size;
        let sizes = format!("logical_block_size={ss},physical_block_size={ss}");
        let rw = if shared { ",share-rw=on" } else { "" };
        let serial = &d.serial;
        let wwn = |key: &str| {
            d.wwn
                .map(|w| format!(",{key}=0x{w:016x}"))
                .unwrap_or_default()
        };
        let device = match d.bus {
            Bus::VirtioBlk => {
                format!("virtio-blk-pci,drive=disk{i},serial={serial},{sizes}{rw}")
            }
            Bus::VirtioScsi => {
                while scsi_controllers <= nth {
                    args.extend([
                        "-device".to_string(),
                        format!("virtio-scsi-pci,id=scsi{scsi_controllers}"),
                    ]);
                    scsi_controllers += 1;
                }
                format!(
                    "scsi-hd,bus=scsi{nth}.0,drive=disk{i},serial={serial},{sizes}{}{rw}",
                    wwn("wwn")
                )
            }
            Bus::Nvme => {
                assert!(
                    !shared,
                    "{}: an NVMe disk cannot be attached twice",
                    d.file.display()
                );
                args.extend([
                    "-device".to_string(),
                    format!("nvme,id=nvme{i},serial={serial}"),
                ]);
                format!(
                    "nvme-ns,bus=nvme{i},drive=disk{i},nsid=1,{sizes}{}",
                    wwn("eui64")
                )
            }
            Bus::Ahci => {
                assert_eq!(
                    ss,
                    512,
                    "{}: AHCI disks have 512-byte sectors",
                    d.file.display()
                );
                assert!(ahci_ports < 6, "q35's AHCI controller has six ports");
                ahci_ports += 1;
                format!(
                    "ide-hd,bus=ide.{},drive=disk{i},serial={serial}{}{rw}",
                    ahci_ports - 1,
                    wwn("wwn")
                )
            }
        };
        args.extend(["-device".to_string(), device]);
    }
    args
}

/// Our binary for the guest: without its debug information when `objcopy` can drop it (a
/// quarter of the size, so less to pack and for the guest to unpack), else as built.
fn guest_binary(dir: &Path) -> PathBuf {
    let out = dir.join("assisted-installer");
    let stripped = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(BIN)
        .arg(&out)
        .status()
        .is_ok_and(|s| s.success());
    if stripped {
        out
    } else {
        PathBuf::from(BIN)
    }
}

/// The per-run archive: our binary, `ai-disk` and the extra files, with their libraries.
fn overlay(spec: &GuestSpec, dir: &Path) -> Vec<u8> {
    let mut c = cpio::Cpio::new();
    let add = |c: &mut cpio::Cpio, guest: &str, host: &Path, mode: u32| {
        let data = fs::read(host).unwrap_or_else(|e| panic!("{}: {e}", host.display()));
        c.file_at(guest, mode, &data);
        if mode & 0o111 != 0 {
            let libs = cpio::libraries(host).unwrap_or_else(|e| panic!("{e:#}"));
            for lib in libs {
                c.host_file(&lib).unwrap_or_else(|e| panic!("{e:#}"));
            }
        }
    };
    add(&mut c, GUEST_BIN, &guest_binary(dir), 0o755);
    c.file_at("usr/bin/ai-disk", 0o755, AI_DISK.as_bytes());
    for (guest, host, mode) in &spec.extra_files {
        add(&mut c, guest, host, *mode);
    }
    c.finish()
}

/// Boot a guest for `spec` and wait for it to power off (or for `limit`, or `kill_when`).
/// Panics when the guest cannot be started; how the case went is for the caller to judge.
pub(crate) fn run_guest(spec: &GuestSpec) -> GuestRun {
    let accel = accel(&spec.boot);
    let dir = run_dir("guest");
    let share = &spec.share;
    option_value("share", &share.display().to_string());
    fs::create_dir_all(share).unwrap();
    fs::write(share.join("case.sh"), &spec.script).unwrap();
    fs::write(share.join("disks"), spec.expect_disks.join("\n") + "\n").unwrap();
    let _ = fs::remove_file(share.join("case.log"));

    let mut initrd = fs::read(&spec.boot.initramfs)
        .unwrap_or_else(|e| panic!("{}: {e}", spec.boot.initramfs.display()));
    // The kernel takes an uncompressed archive after a compressed one at a 4-byte boundary.
    initrd.resize(initrd.len().next_multiple_of(4), 0);
    initrd.extend(overlay(spec, dir.path()));
    let initrd_path = dir.path().join("initrd.img");
    fs::write(&initrd_path, &initrd).unwrap();

    let mut cmd = guest_qemu(
        dir.path(),
        accel,
        &spec.boot,
        &initrd_path,
        spec.memory_mib,
        "",
    );
    cmd.arg("-fsdev")
        .arg(format!(
            "local,id=share,path={},security_model=none",
            share.display()
        ))
        .args(["-device", "virtio-9p-pci,fsdev=share,mount_tag=share"])
        .args(disk_args(&spec.disks));
    let kill_when = spec.kill_when.as_ref().map(|(t, d)| (t.as_str(), *d));
    let run = run_qemu(
        cmd,
        dir.path(),
        accel,
        spec.limit,
        "AI-GUEST ready",
        kill_when,
    );
    let exit_code = run.console.lines().find_map(|l| {
        let (_, rest) = l.split_once(MARKER)?;
        rest.trim_end().strip_prefix("exit ")?.trim().parse().ok()
    });
    let run = GuestRun {
        case_log: fs::read_to_string(share.join("case.log")).unwrap_or_default(),
        exit_code,
        run,
    };
    eprintln!(
        "vm: {accel} ({} MiB initrd): boot {:.1?}, case {:.1?}, total {:.1?}{}{}",
        initrd.len() >> 20,
        run.ready_after.unwrap_or_default(),
        run.case_time().unwrap_or_default(),
        run.elapsed,
        if run.killed { ", killed" } else { "" },
        if run.timed_out { ", timed out" } else { "" },
    );
    run
}

/// (name, type) of the children of the first device in `lsblk --json` output, as a case
/// script in the guest recorded it.
pub(crate) fn lsblk_children(json: &str) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(json)
        .unwrap_or_else(|e| panic!("lsblk output is not JSON ({e}):\n{json}"));
    v["blockdevices"][0]["children"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                    (text("name"), text("type"))
                })
                .collect()
        })
        .unwrap_or_default()
}
