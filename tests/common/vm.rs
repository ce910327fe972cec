//! QEMU for the tests, two ways, on one runner:
//! * tests/boot_qemu.rs's `boot`: a written disk booted under UEFI (OVMF) through the firmware's
//!   boot manager; the test initramfs (testdata/boot_parts.rs) reports what it sees in `AI-BOOT
//!   <key> <value>` lines. The disk is attached with `snapshot=on`: firmware's repairs (OVMF
//!   silently fixes a bad backup GPT) and what the boot writes go to an overlay, never to the
//!   device under test.
//! * [`run_guest`]: a guest on Debian's kernel with real disks, for what this host's kernel
//!   cannot do (device-mapper, md, partition-table parsing). Its kernel and base initramfs come
//!   from testdata/guest_parts.rs; per run the rig appends a second archive (the kernel unpacks
//!   concatenated archives in turn) with our binary at [`GUEST_BIN`] and its libraries, the
//!   `ai-disk` helper and the spec's extra files, so a rebuilt binary needs no new parts.
//!
//! The guest's `/init` mounts [`GuestSpec::share`] at `/share` (9p), waits for the disks of
//! [`GuestSpec::expect_disks`], prints `AI-GUEST ready`, runs [`GuestSpec::script`] with busybox
//! `sh` (output to the console and `/share/case.log`), syncs, prints `AI-GUEST exit <status>`
//! and powers off. In the script `PATH` has the host tools first, `/tmp` and `/run` are tmpfs,
//! only `lo` is up, there is no modprobe and no udev (so `lsblk` shows no PARTLABEL and `dmsetup
//! mknodes` makes `/dev/mapper` nodes); `ai-disk SERIAL` prints the `/dev` paths of the disks
//! with that serial (SCSI and ATA kernel names depend on probe order).
//!
//! With [`GuestSpec::uefi_vars`] the guest starts under OVMF instead, with that file as its
//! NVRAM: the kernel is then the package's bzImage, which the firmware starts through its EFI
//! stub, and `/init` mounts efivarfs.
//!
//! KVM is used when it can run the firmware or the guest kernel here (probed once per test
//! binary: some hosts expose a `/dev/kvm` that fails on OVMF's first instructions, or cannot set
//! `-cpu host`'s MSRs), else QEMU emulates the CPU; `AI_GUEST_ACCEL=tcg` or `kvm` forces the
//! choice for guests.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub(crate) use super::root::run_dir;

// The test data modules load this file too (testdata/boot_parts.rs); tests/common cannot use
// theirs, as most test binaries do not have them.
#[allow(clippy::duplicate_mod)]
#[path = "../../testdata/cpio.rs"]
mod cpio;

const QEMU: &str = "qemu-system-x86_64";
const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
/// Where the guest has our binary.
pub(crate) const GUEST_BIN: &str = "/usr/bin/assisted-installer";

pub(crate) fn have(test: &str, missing: Option<String>) -> bool {
    missing.is_none_or(|why| super::root::skip(test, &why))
}

pub(crate) fn qemu_missing() -> Option<String> {
    let ok = Command::new(QEMU)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (!ok).then(|| format!("{QEMU} is missing (Debian package qemu-system-x86)"))
}

/// Whether a guest can run here: root (the guest's disks and share are root's files, written
/// as root) and QEMU; prints why not, or panics under AI_REQUIRE_ROOT_TESTS=1.
pub(crate) fn have_guest(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    let why = "it needs root (the guest's disks and share are root's files)";
    have(test, (!root).then(|| why.to_string()).or_else(qemu_missing))
}

/// How one QEMU run went: the serial console, QEMU's stderr, `kvm` or `tcg`.
#[derive(Debug)]
pub(crate) struct Run {
    pub console: String,
    pub stderr: String,
    pub accel: &'static str,
    pub elapsed: Duration,
    /// From QEMU's start to the console's first `ready` text, if it got there.
    pub ready_after: Option<Duration>,
    /// Killed at the run's limit, or once the console showed the `kill_when` text.
    pub timed_out: bool,
    pub killed: bool,
    /// The console lines of the initramfs (`AI-BOOT ` or `AI-GUEST `), without that prefix:
    /// the boot's report, or the guest's `error` and `exit` lines.
    pub lines: Vec<String>,
    /// The guest's share (empty for a boot).
    pub share: PathBuf,
    /// When each console line was first seen complete, from QEMU's start (index = line number
    /// in [`Run::console`]); the console is polled every 20 ms, so each is up to that late.
    pub line_seen: Vec<Duration>,
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

    /// The guest's case script's status, from `AI-GUEST exit <status>`.
    pub(crate) fn exit_code(&self) -> Option<i32> {
        let exit = |l: &String| l.strip_prefix("exit ")?.trim().parse().ok();
        self.lines.iter().find_map(exit)
    }

    /// The first console line from line `from` on that contains `text`: its number and when it
    /// was seen (see [`Run::line_seen`]).
    pub(crate) fn seen(&self, text: &str, from: usize) -> Option<(usize, Duration)> {
        let mut lines = self.console.lines().enumerate().skip(from);
        let (n, _) = lines.find(|(_, l)| l.contains(text))?;
        Some((n, *self.line_seen.get(n)?))
    }

    /// A file of the guest's share as text ("" when missing).
    pub(crate) fn shared(&self, name: &str) -> String {
        fs::read_to_string(self.share.join(name)).unwrap_or_default()
    }
}

/// QEMU on q35 without devices, its console in `dir/console.log` and its messages in
/// `dir/stderr.log`; the snapshot overlays, if any, go to `dir` too.
pub(crate) fn qemu(dir: &Path, accel: &str, memory_mib: u64) -> Command {
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

/// Runs `cmd` (made by [`qemu`] for `dir`) until QEMU exits, `limit` passes, or the console
/// shows the `kill_when` text (then SIGKILL, as a power cut). `marker` prefixes
/// the initramfs's lines; `marker` + `ready` is the text [`Run::ready_after`] times.
pub(crate) fn run_qemu(
    mut cmd: Command,
    dir: &Path,
    accel: &'static str,
    limit: Duration,
    (marker, ready): (&str, &str),
    kill_when: Option<&str>,
) -> Run {
    let ready = format!("{marker}{ready}");
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {QEMU}: {e}"));
    let read = || fs::read(dir.join("console.log")).unwrap_or_default();
    let (mut ready_after, mut killed, mut timed_out) = (None, false, false);
    let mut line_seen = Vec::new();
    while child.try_wait().unwrap().is_none() {
        let bytes = read();
        let lines = bytes.iter().filter(|b| **b == b'\n').count();
        line_seen.resize(lines.max(line_seen.len()), started.elapsed());
        if ready_after.is_none() || kill_when.is_some() {
            let console = String::from_utf8_lossy(&bytes);
            if ready_after.is_none() && console.contains(&ready) {
                ready_after = Some(started.elapsed());
            }
            killed = kill_when.is_some_and(|t| console.contains(t));
        }
        timed_out = !killed && started.elapsed() > limit;
        if killed || timed_out {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = started.elapsed();
    let console = String::from_utf8_lossy(&read()).into_owned();
    line_seen.resize(console.lines().count().max(line_seen.len()), elapsed);
    let lines = console
        .lines()
        .filter_map(|l| Some(l.split_once(marker)?.1.trim_end().to_string()))
        .collect();
    Run {
        ready_after: ready_after.or(console.contains(&ready).then_some(elapsed)),
        console,
        stderr: fs::read_to_string(dir.join("stderr.log")).unwrap_or_default(),
        accel,
        elapsed,
        timed_out,
        killed,
        lines,
        share: PathBuf::new(),
        line_seen,
    }
}

/// `kvm` when KVM is usable and a probe run (made by `probe` for a directory, under KVM) shows
/// `ok` on its console within `limit`, else `tcg`.
pub(crate) fn kvm_or_tcg(
    what: &str,
    limit: Duration,
    ok: &str,
    probe: impl FnOnce(&Path) -> Command,
) -> &'static str {
    let kvm = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm");
    if kvm.is_ok() {
        let dir = run_dir("kvm-probe");
        let cmd = probe(dir.path());
        let run = run_qemu(cmd, dir.path(), "kvm", limit, (ok, ""), Some(ok));
        if run.ready_after.is_some() {
            return "kvm";
        }
    }
    eprintln!("vm: KVM cannot {what} here; using software emulation (tcg)");
    "tcg"
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
    /// `/dev/vda`, `vdb`, ... in the order given.
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

/// A disk: a host file on a bus, with 512 or 4096-byte sectors and a serial (up to 20
/// characters of `[A-Za-z0-9_.-]`, what `ai-disk` finds it by). Attaching the same file twice
/// makes a multipath pair: both paths see the same bytes (no host locking, shared writes,
/// write-through); give both the same serial and WWN.
#[derive(Clone, Debug)]
pub(crate) struct GuestDisk {
    pub file: PathBuf,
    pub bus: Bus,
    pub sector_size: u64,
    pub serial: String,
    /// SCSI and ATA WWN, or NVMe EUI-64; ignored on virtio-blk.
    pub wwn: Option<u64>,
    /// QEMU's `readonly=on`: a cached file can be given as is.
    pub read_only: bool,
}

impl GuestDisk {
    pub(crate) fn new(file: impl Into<PathBuf>, bus: Bus, sector_size: u64, serial: &str) -> Self {
        let (file, serial) = (file.into(), serial.to_string());
        GuestDisk {
            file,
            bus,
            sector_size,
            serial,
            wwn: None,
            read_only: false,
        }
    }

    pub(crate) fn with_wwn(mut self, wwn: u64) -> Self {
        self.wwn = Some(wwn);
        self
    }

    pub(crate) fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }
}

/// Create (or truncate) `path` as a sparse file of `size` bytes, for a [`GuestDisk`].
pub(crate) fn sparse_disk(path: &Path, size: u64) {
    let f = fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.set_len(size).unwrap();
}

/// One guest run, with 1 GiB of memory: the kernel (an uncompressed ELF, started at its PVH
/// entry, or a bzImage) and gzip'd newc initramfs of testdata/guest_parts.rs, the disks, the
/// host directory that is `/share` (the rig writes `case.sh` and `disks` there, the guest
/// `case.log`), the case script, the kernel names of the disks to wait for (`vda`, `sda`,
/// `nvme0n1`), the time QEMU gets, and the console text that kills it (SIGKILL, as a power cut).
#[derive(Clone, Debug, Default)]
pub(crate) struct GuestSpec {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub disks: Vec<GuestDisk>,
    pub share: PathBuf,
    pub script: String,
    pub expect_disks: Vec<String>,
    pub limit: Duration,
    pub kill_when: Option<String>,
    /// More files for the guest: (guest path, host path, mode); executables get their shared
    /// libraries too.
    pub extra_files: Vec<(String, PathBuf, u32)>,
    /// UEFI firmware (OVMF) with this file as its variable store, made from the empty one when
    /// missing: the guest then has /sys/firmware/efi and efivarfs, and what it writes to NVRAM
    /// (`efibootmgr`) stays in the file. `kernel` must then be the bzImage, which the firmware
    /// starts through its EFI stub (10 to 30 s more under software emulation). None: no
    /// firmware, the kernel started at its PVH entry.
    pub uefi_vars: Option<PathBuf>,
}

impl GuestSpec {
    /// No disks, an empty script and a 5-minute limit.
    pub(crate) fn new(kernel: PathBuf, initramfs: PathBuf, share: impl Into<PathBuf>) -> Self {
        let (share, limit) = (share.into(), Duration::from_secs(300));
        GuestSpec {
            kernel,
            initramfs,
            share,
            limit,
            ..Default::default()
        }
    }

    /// QEMU for a direct boot of the guest kernel with `initrd` (handed to the firmware, under
    /// [`GuestSpec::uefi_vars`]).
    fn qemu(&self, dir: &Path, accel: &str, initrd: &Path, append: &str) -> Command {
        let mut cmd = qemu(dir, accel, 1024);
        if let Some(vars) = &self.uefi_vars {
            cmd.args(super::firmware::pflash_args(vars));
        }
        cmd.args(["-cpu", if accel == "kvm" { "host" } else { "max" }])
            .args(["-smp", "2", "-nic", "none"])
            .arg("-kernel")
            .arg(&self.kernel)
            .arg("-initrd")
            .arg(initrd)
            .arg("-append")
            .arg(format!("console=ttyS0 panic=-1 quiet {append}").trim_end());
        cmd
    }

    /// `kvm` or `tcg` (see the module's doc); the probe boots with `ai.probe`, which powers off
    /// at once. Under firmware, whether KVM runs OVMF ([`super::firmware::firmware_accel`]).
    fn accel(&self) -> &'static str {
        static ACCEL: OnceLock<&'static str> = OnceLock::new();
        match std::env::var("AI_GUEST_ACCEL").as_deref() {
            Ok("kvm") => return "kvm",
            Ok("tcg") => return "tcg",
            _ if self.uefi_vars.is_some() => return super::firmware::firmware_accel(),
            _ => {}
        }
        ACCEL.get_or_init(|| {
            let probe = |d: &Path| self.qemu(d, "kvm", &self.initramfs, "ai.probe");
            kvm_or_tcg(
                "boot the guest",
                Duration::from_secs(15),
                "AI-GUEST probe ok",
                probe,
            )
        })
    }
}

/// QEMU's option values are comma-separated: a comma in a path or serial would split it.
fn option_value(what: &str, value: &Path) -> String {
    let value = value.display().to_string();
    assert!(
        !value.contains(','),
        "{what} {value:?} has a comma, which QEMU's options cannot carry"
    );
    value
}

/// The `-drive` and `-device` arguments of `disks`.
fn disk_args(disks: &[GuestDisk]) -> Vec<String> {
    let mut args = Vec::new();
    let (mut scsi_controllers, mut ahci_ports) = (0, 0);
    for (i, d) in disks.iter().enumerate() {
        let (ss, serial, name) = (d.sector_size, &d.serial, d.file.display());
        assert!(ss == 512 || ss == 4096, "sector size {ss} of {name}");
        let serial_chars = serial
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
        assert!(
            (1..=20).contains(&serial.len()) && serial_chars,
            "serial {serial:?}: 1 to 20 characters of [A-Za-z0-9_.-]"
        );
        let file = option_value("disk file", &d.file);
        let shared = disks.iter().filter(|o| o.file == d.file).count() > 1;
        let nth = disks[..i].iter().filter(|o| o.file == d.file).count();
        let mut drive = format!("if=none,id=disk{i},format=raw,file={file}");
        if shared {
            drive.push_str(",file.locking=off,cache=writethrough");
        }
        if d.read_only {
            drive.push_str(",readonly=on");
        }
        args.extend(["-drive".to_string(), drive]);
        let sizes = format!("logical_block_size={ss},physical_block_size={ss}");
        let rw = if shared { ",share-rw=on" } else { "" };
        let wwn = |key: &str| {
            d.wwn
                .map(|w| format!(",{key}=0x{w:016x}"))
                .unwrap_or_default()
        };
        let device = match d.bus {
            Bus::VirtioBlk => format!("virtio-blk-pci,drive=disk{i},serial={serial},{sizes}{rw}"),
            Bus::VirtioScsi => {
                for c in scsi_controllers..=nth {
                    args.extend(["-device".into(), format!("virtio-scsi-pci,id=scsi{c}")]);
                }
                scsi_controllers = scsi_controllers.max(nth + 1);
                let wwn = wwn("wwn");
                format!("scsi-hd,bus=scsi{nth}.0,drive=disk{i},serial={serial},{sizes}{wwn}{rw}")
            }
            Bus::Nvme => {
                assert!(!shared, "{name}: an NVMe disk cannot be attached twice");
                args.extend(["-device".into(), format!("nvme,id=nvme{i},serial={serial}")]);
                format!(
                    "nvme-ns,bus=nvme{i},drive=disk{i},nsid=1,{sizes}{}",
                    wwn("eui64")
                )
            }
            Bus::Ahci => {
                assert_eq!(ss, 512, "{name}: AHCI disks have 512-byte sectors");
                assert!(ahci_ports < 6, "q35's AHCI controller has six ports");
                ahci_ports += 1;
                let port = ahci_ports - 1;
                format!(
                    "ide-hd,bus=ide.{port},drive=disk{i},serial={serial}{}{rw}",
                    wwn("wwn")
                )
            }
        };
        args.extend(["-device".to_string(), device]);
    }
    args
}

/// The per-run archive: our binary (without its debug information when `objcopy` can drop it:
/// a quarter of the size to pack and unpack), `ai-disk` and the extra files, with their
/// libraries.
fn overlay(spec: &GuestSpec, dir: &Path) -> Vec<u8> {
    let stripped = dir.join("assisted-installer");
    let objcopy = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(BIN)
        .arg(&stripped)
        .status();
    let bin = if objcopy.is_ok_and(|s| s.success()) {
        stripped
    } else {
        PathBuf::from(BIN)
    };
    let mut c = cpio::Cpio::new();
    c.file_at("usr/bin/ai-disk", 0o755, AI_DISK.as_bytes());
    let ours = (GUEST_BIN.to_string(), bin, 0o755);
    for (guest, host, mode) in std::iter::once(&ours).chain(&spec.extra_files) {
        let data = fs::read(host).unwrap_or_else(|e| panic!("{}: {e}", host.display()));
        c.file_at(guest, *mode, &data);
        if mode & 0o111 != 0 {
            for lib in cpio::libraries(host).unwrap_or_else(|e| panic!("{e:#}")) {
                c.host_file(&lib).unwrap_or_else(|e| panic!("{e:#}"));
            }
        }
    }
    c.finish()
}

/// Boot a guest for `spec` and wait for it to power off (or for `limit`, or `kill_when`).
/// Panics when the guest cannot be started; how the case went is for the caller to judge.
pub(crate) fn run_guest(spec: &GuestSpec) -> Run {
    let accel = spec.accel();
    let dir = run_dir("guest");
    let share = &spec.share;
    fs::create_dir_all(share).unwrap();
    fs::write(share.join("case.sh"), &spec.script).unwrap();
    fs::write(share.join("disks"), spec.expect_disks.join("\n") + "\n").unwrap();
    let _ = fs::remove_file(share.join("case.log"));

    let mut initrd =
        fs::read(&spec.initramfs).unwrap_or_else(|e| panic!("{}: {e}", spec.initramfs.display()));
    // The kernel takes an uncompressed archive after a compressed one at a 4-byte boundary.
    initrd.resize(initrd.len().next_multiple_of(4), 0);
    initrd.extend(overlay(spec, dir.path()));
    let initrd_path = dir.path().join("initrd.img");
    fs::write(&initrd_path, &initrd).unwrap();

    let mut cmd = spec.qemu(dir.path(), accel, &initrd_path, "");
    let share_arg = option_value("share", share);
    cmd.arg("-fsdev")
        .arg(format!(
            "local,id=share,path={share_arg},security_model=none"
        ))
        .args(["-device", "virtio-9p-pci,fsdev=share,mount_tag=share"])
        .args(disk_args(&spec.disks));
    let kill_when = spec.kill_when.as_deref();
    let marker = ("AI-GUEST ", "ready");
    let mut run = run_qemu(cmd, dir.path(), accel, spec.limit, marker, kill_when);
    run.share = share.clone();
    eprintln!(
        "vm: {accel} ({} MiB initrd): boot {:.1?}, case {:.1?}, total {:.1?}{}{}",
        initrd.len() >> 20,
        run.ready_after.unwrap_or_default(),
        run.elapsed - run.ready_after.unwrap_or(run.elapsed),
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
    let children = v["blockdevices"][0]["children"].as_array().into_iter();
    let text = |c: &serde_json::Value, k: &str| c[k].as_str().unwrap_or_default().to_string();
    children
        .flatten()
        .map(|c| (text(c, "name"), text(c, "type")))
        .collect()
}
