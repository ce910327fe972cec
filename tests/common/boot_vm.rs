//! Boot a written disk under UEFI in QEMU and read what the test initramfs reports, plus the
//! host-side GPT checks firmware would otherwise hide (OVMF silently repairs a bad backup).
//!
//! The disk is attached with `snapshot=on`: firmware's repairs and anything the boot writes go
//! to a temporary overlay, never to the device under test. KVM is used when it can run the
//! firmware (some hosts expose a `/dev/kvm` that fails on OVMF's first instructions); else
//! QEMU emulates the CPU, about 13 s a boot on two cores.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const QEMU: &str = "qemu-system-x86_64";
/// Debian's `ovmf` package: the 4 MiB firmware (no Secure Boot) and its variable store.
const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";
/// What `/init` prefixes its report lines with.
const REPORT_PREFIX: &str = "AI-BOOT ";

/// Whether QEMU and OVMF are here; prints why not, or panics under AI_REQUIRE_ROOT_TESTS=1.
pub(crate) fn have_qemu(test: &str) -> bool {
    let qemu = Command::new(QEMU).arg("--version").output().is_ok();
    let ovmf = Path::new(OVMF_CODE).is_file() && Path::new(OVMF_VARS).is_file();
    if qemu && ovmf {
        return true;
    }
    let why = if qemu {
        format!("{OVMF_CODE} is missing (Debian package ovmf)")
    } else {
        format!("{QEMU} is missing (Debian package qemu-system-x86)")
    };
    super::root::skip(test, &why)
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

/// One boot: the console (serial) output and how it ended.
pub(crate) struct Boot {
    pub console: String,
    pub report: BootReport,
    pub accel: &'static str,
    pub elapsed: Duration,
    pub timed_out: bool,
    pub stderr: String,
}

impl Boot {
    /// The console and QEMU's messages, for failure messages.
    pub(crate) fn transcript(&self) -> String {
        // Firmware paints the screen with escape sequences; keep the text.
        let console: String = self
            .console
            .chars()
            .filter(|c| *c == '\n' || !c.is_control())
            .collect();
        format!(
            "--- QEMU ({}, {:.1?}{}) stderr:\n{}\n--- console:\n{console}",
            self.accel,
            self.elapsed,
            if self.timed_out { ", timed out" } else { "" },
            self.stderr
        )
    }
}

/// KVM when it runs OVMF here, else software emulation; decided once per test binary.
fn accel() -> &'static str {
    static ACCEL: OnceLock<&'static str> = OnceLock::new();
    ACCEL.get_or_init(|| {
        let usable = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok();
        if usable && kvm_runs_firmware() {
            "kvm"
        } else {
            eprintln!("boot_vm: KVM cannot run OVMF here; using software emulation (tcg)");
            "tcg"
        }
    })
}

/// Start OVMF without a disk under KVM: it works if the firmware reaches its boot manager
/// ("BdsDxe" on the console), and not if KVM reports an internal error on its first steps.
fn kvm_runs_firmware() -> bool {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let run = start(dir.path(), "kvm", None, None);
    let Ok(mut child) = run else {
        return false;
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let console = dir.path().join("console.log");
    let stderr = dir.path().join("stderr.log");
    let ok = loop {
        let text = fs::read_to_string(&console).unwrap_or_default();
        if text.contains("BdsDxe") {
            break true;
        }
        let err = fs::read_to_string(&stderr).unwrap_or_default();
        if err.contains("KVM internal error") || Instant::now() > deadline {
            break false;
        }
        if child.try_wait().ok().flatten().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    ok
}

/// QEMU with OVMF, its console in `dir/console.log` and its messages in `dir/stderr.log`;
/// the disk, if any, on virtio with `ss`-byte logical blocks, in snapshot mode.
fn start(
    dir: &Path,
    accel: &str,
    disk: Option<(&Path, u64)>,
    direct: Option<&DirectKernel>,
) -> std::io::Result<std::process::Child> {
    let vars = dir.join("OVMF_VARS.fd");
    fs::copy(OVMF_VARS, &vars)?;
    let mut cmd = Command::new(QEMU);
    cmd.args(["-machine", &format!("q35,accel={accel}")])
        .args(["-m", "512", "-nodefaults", "-display", "none", "-no-reboot"])
        .arg("-drive")
        .arg(format!(
            "if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}"
        ))
        .arg("-drive")
        .arg(format!(
            "if=pflash,format=raw,unit=1,file={}",
            vars.display()
        ))
        .arg("-serial")
        .arg(format!("file:{}", dir.join("console.log").display()));
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
    if let Some(k) = direct {
        cmd.arg("-kernel")
            .arg(&k.kernel)
            .arg("-initrd")
            .arg(&k.initrd)
            .args(["-append", &k.append]);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(dir.join("stderr.log"))?)
        // The snapshot overlay goes to TMPDIR; keep it beside the test's other files.
        .env("TMPDIR", dir)
        .spawn()
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
    let accel = accel();
    let limit = Duration::from_secs(if accel == "kvm" { 60 } else { 240 });
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let started = Instant::now();
    let mut child = start(dir.path(), accel, Some((disk, ss)), direct)
        .unwrap_or_else(|e| panic!("starting {QEMU}: {e}"));
    let timed_out = loop {
        if child.try_wait().unwrap().is_some() {
            break false;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break true;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let read = |name: &str| {
        let mut s = Vec::new();
        let _ = fs::File::open(dir.path().join(name)).and_then(|mut f| f.read_to_end(&mut s));
        String::from_utf8_lossy(&s).into_owned()
    };
    let console = read("console.log");
    Boot {
        report: BootReport::parse(&console),
        console,
        accel,
        elapsed: started.elapsed(),
        timed_out,
        stderr: read("stderr.log"),
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
