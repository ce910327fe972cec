//! QEMU guests on Debian's distribution kernel with real disks attached (virtio-blk,
//! virtio-scsi, NVMe, AHCI), for what this host's kernel cannot do: device-mapper, md and
//! partition-table parsing. Each guest runs one case script against our binary and powers off.
//!
//! The kernel and the base initramfs (busybox, the disk, dm, md, 9p, ext4 and XFS modules, and
//! `dmsetup`, `mdadm`, `lsblk`, `rsync`, `partx`, `sgdisk` and `blkid` with their libraries)
//! come from testdata/guest_parts.rs, which the test passes in as [`GuestBoot`]. Per run the rig
//! appends a second archive to that initramfs (the kernel unpacks concatenated archives in
//! turn) holding our binary at [`GUEST_BIN`] with its libraries, the `ai-disk` helper and the
//! spec's extra files, so a rebuilt binary needs no new parts.
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
//! KVM is used when it can boot this kernel here (probed once), else QEMU emulates the CPU
//! (`-cpu max`); `AI_GUEST_ACCEL=tcg` or `kvm` forces the choice.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// The test data modules load this file too (testdata/boot_parts.rs); tests/common cannot use
// theirs, as most test binaries do not have them.
#[allow(clippy::duplicate_mod)]
#[path = "../../testdata/cpio.rs"]
mod cpio;

const QEMU: &str = "qemu-system-x86_64";
const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
/// Where the guest has our binary.
pub(crate) const GUEST_BIN: &str = "/usr/bin/assisted-installer";
/// What the guest's `/init` prefixes its own lines with.
const MARKER: &str = "AI-GUEST ";

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

/// Whether a guest can run here: root and QEMU. Prints why not and returns false, or panics
/// under AI_REQUIRE_ROOT_TESTS=1.
pub(crate) fn have_guest(test: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    let qemu = Command::new(QEMU)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if root && qemu {
        return true;
    }
    let why = if !root {
        "it needs root (the guest's disks and share are root's files, written as root)".to_string()
    } else {
        format!("{QEMU} is missing (Debian package qemu-system-x86)")
    };
    super::root::skip(test, &why)
}

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

/// How a run went.
#[derive(Clone, Debug)]
pub(crate) struct GuestRun {
    /// The serial console: `/init`'s lines, the case's output, kernel warnings.
    pub console: String,
    /// `share/case.log`: the case's output.
    pub case_log: String,
    /// The case script's status, from `AI-GUEST exit <status>`.
    pub exit_code: Option<i32>,
    /// Killed by [`GuestSpec::kill_when`].
    pub killed: bool,
    /// Killed at [`GuestSpec::limit`].
    pub timed_out: bool,
    /// From QEMU's start to its end.
    pub elapsed: Duration,
    /// From QEMU's start to `AI-GUEST ready`: the boot, if it got there.
    pub ready_after: Option<Duration>,
    /// `kvm` or `tcg`.
    pub accel: &'static str,
    /// QEMU's own messages.
    pub stderr: String,
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

    /// The console and QEMU's messages, for failure messages.
    pub(crate) fn transcript(&self) -> String {
        let console: String = self
            .console
            .chars()
            .filter(|c| *c == '\n' || *c == '\t' || !c.is_control())
            .collect();
        format!(
            "--- QEMU ({}, {:.1?}, boot {:?}{}{}) stderr:\n{}\n--- console:\n{console}",
            self.accel,
            self.elapsed,
            self.ready_after,
            if self.timed_out { ", timed out" } else { "" },
            if self.killed { ", killed" } else { "" },
            self.stderr
        )
    }
}

/// `kvm` when KVM boots the guest kernel here, else `tcg`; decided once per test binary (the
/// probe boots `boot` with `ai.probe`, which powers off at once). `AI_GUEST_ACCEL` overrides.
/// Some nested hosts' KVM cannot: QEMU aborts setting `-cpu host`'s MSRs, or the kernel stalls
/// in its first steps.
pub(crate) fn accel(boot: &GuestBoot) -> &'static str {
    static ACCEL: OnceLock<&'static str> = OnceLock::new();
    ACCEL.get_or_init(|| match std::env::var("AI_GUEST_ACCEL").as_deref() {
        Ok("kvm") => "kvm",
        Ok("tcg") => "tcg",
        _ => {
            let started = Instant::now();
            if kvm_boots(boot) {
                eprintln!(
                    "guest_vm: KVM boots the guest ({:.1?} probe)",
                    started.elapsed()
                );
                "kvm"
            } else {
                eprintln!(
                    "guest_vm: KVM cannot boot the guest here; using software emulation (tcg)"
                );
                "tcg"
            }
        }
    })
}

fn kvm_boots(boot: &GuestBoot) -> bool {
    if fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        return false;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut cmd = qemu(dir.path(), "kvm", boot, &boot.initramfs, 256, "ai.probe");
    let Ok(mut child) = cmd.spawn() else {
        return false;
    };
    // A working KVM gets there in a second or two.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if child.try_wait().ok().flatten().is_some() {
            break;
        }
        if Instant::now() > deadline {
            stop(&mut child);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let console = fs::read(dir.path().join("console.log")).unwrap_or_default();
    String::from_utf8_lossy(&console).contains("AI-GUEST probe ok")
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// QEMU for a direct kernel boot, console in `dir/console.log`, messages in `dir/stderr.log`.
fn qemu(
    dir: &Path,
    accel: &str,
    boot: &GuestBoot,
    initrd: &Path,
    memory_mib: u64,
    append: &str,
) -> Command {
    let mut cmd = Command::new(QEMU);
    cmd.args(["-machine", &format!("q35,accel={accel}")])
        .args(["-cpu", if accel == "kvm" { "host" } else { "max" }])
        .args(["-smp", "2", "-m", &memory_mib.to_string()])
        .args([
            "-nodefaults",
            "-display",
            "none",
            "-no-reboot",
            "-nic",
            "none",
        ])
        .arg("-serial")
        .arg(format!("file:{}", dir.join("console.log").display()))
        .arg("-kernel")
        .arg(&boot.kernel)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(format!("console=ttyS0 panic=-1 quiet {append}").trim_end())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(dir.join("stderr.log")).unwrap());
    cmd
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
    let dir = tempfile::Builder::new()
        .prefix("guest")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let share = &spec.share;
    option_value("share", &share.display().to_string());
    fs::create_dir_all(share).unwrap();
    fs::write(share.join("case.sh"), &spec.script).unwrap();
    let mut disks = spec.expect_disks.join("\n");
    disks.push('\n');
    fs::write(share.join("disks"), disks).unwrap();
    let _ = fs::remove_file(share.join("case.log"));

    let packed = Instant::now();
    let mut initrd = fs::read(&spec.boot.initramfs)
        .unwrap_or_else(|e| panic!("{}: {e}", spec.boot.initramfs.display()));
    // The kernel takes an uncompressed archive after a compressed one at a 4-byte boundary.
    initrd.resize(initrd.len().next_multiple_of(4), 0);
    initrd.extend(overlay(spec, dir.path()));
    let initrd_path = dir.path().join("initrd.img");
    fs::write(&initrd_path, &initrd).unwrap();
    let packed = packed.elapsed();

    let mut cmd = qemu(
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
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {QEMU}: {e}"));
    let console_path = dir.path().join("console.log");
    let read_console =
        || String::from_utf8_lossy(&fs::read(&console_path).unwrap_or_default()).into_owned();
    let mut ready_after = None;
    let mut kill_at: Option<Instant> = None;
    let (mut killed, mut timed_out) = (false, false);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        let now = Instant::now();
        if ready_after.is_none() || (spec.kill_when.is_some() && kill_at.is_none()) {
            let console = read_console();
            if ready_after.is_none() && console.contains("AI-GUEST ready") {
                ready_after = Some(started.elapsed());
            }
            if let Some((text, delay)) = &spec.kill_when {
                if kill_at.is_none() && console.contains(text.as_str()) {
                    kill_at = Some(now + *delay);
                }
            }
        }
        if kill_at.is_some_and(|t| now >= t) {
            stop(&mut child);
            killed = true;
            break;
        }
        if started.elapsed() > spec.limit {
            stop(&mut child);
            timed_out = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = started.elapsed();
    let console = read_console();
    if ready_after.is_none() && console.contains("AI-GUEST ready") {
        ready_after = Some(elapsed);
    }
    let exit_code = console.lines().find_map(|l| {
        let (_, rest) = l.split_once(MARKER)?;
        rest.trim_end().strip_prefix("exit ")?.trim().parse().ok()
    });
    let run = GuestRun {
        case_log: fs::read_to_string(share.join("case.log")).unwrap_or_default(),
        console,
        exit_code,
        killed,
        timed_out,
        elapsed,
        ready_after,
        accel,
        stderr: fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default(),
    };
    eprintln!(
        "guest_vm: {} ({} MiB initrd packed in {packed:.1?}): boot {:.1?}, case {:.1?}, total {elapsed:.1?}{}{}",
        accel,
        initrd.len() >> 20,
        run.ready_after.unwrap_or_default(),
        run.case_time().unwrap_or_default(),
        if killed { ", killed" } else { "" },
        if timed_out { ", timed out" } else { "" },
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
