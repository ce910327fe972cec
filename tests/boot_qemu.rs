//! Boot what `write-image` wrote: a CoreOS-like image with a real boot chain (systemd-boot, an
//! ext4 UEFI driver, a Debian kernel and a busybox initramfs; testdata/boot_parts.rs) is written
//! onto a loop device larger than the image, with an Ignition config, kernel arguments added and
//! removed, and first-boot network keyfiles; the device's bytes are then booted under OVMF in
//! QEMU (snapshot mode: firmware repairs never reach the disk), and the initramfs reports the
//! kernel command line, the partitions the kernel sees and its GPT complaints, and the files
//! on /boot. Before booting, both GPT headers and entry arrays are checked host-side.
//!
//! Root (loop devices) and QEMU + OVMF are needed; without them the tests skip with a message,
//! and fail instead under AI_REQUIRE_ROOT_TESTS=1. `cargo test --test boot_qemu` runs them alone.

#[path = "../testdata/boot_parts.rs"]
mod boot_parts;
mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "../testdata/guest_parts.rs"]
mod guest_parts;
#[path = "../testdata/live_fixture.rs"]
mod live_fixture;

use common::firmware::{boot, have_qemu};
use common::images::{pattern, sha256_hex};
use common::kexec_guest::{kexec_spec, report_after_kexec, REBOOT_LINE};
use common::live_ns::LiveLayout;
use common::root::{have_root, run, text, Ext4, LoopDev};
use common::vm::{have_guest, lsblk_children};
use common::vm::{run_guest, sparse_disk, Bus, GuestDisk, GuestSpec, Run};
use coreos_image::{cached_image_set, ImageSet, ImageSpec, BLS_ENTRY_PATH, BOOT_LABEL};
use live_fixture::cached_live_fixture_of;
use std::fs;
use std::io::{Seek, SeekFrom};
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const MIB: u64 = 1 << 20;
/// The target is this much larger than the image: the backup GPT must move to its end.
const EXTRA: u64 = 64 * MIB;

fn runnable(test: &str) -> bool {
    have_root(test) && have_qemu(test)
}

fn images(ss: u64) -> ImageSet {
    let parts = boot_parts::cached_boot_parts().expect("boot parts");
    cached_image_set(&ImageSpec::test(ss).with_boot(parts)).expect("bootable test images")
}

/// The kernel arguments the installs add (`console=` also makes the kernel and /init talk on
/// the serial console the tests read).
const APPEND_KARGS: [&str; 2] = ["console=ttyS0,115200n8", "ai.boot.test=written"];
/// A default argument of the image's BLS entry the installs remove.
const DELETE_KARG: &str = "rootflags=prjquota";

/// The post-install inputs: an Ignition config and two NetworkManager keyfiles.
struct Inputs {
    dir: tempfile::TempDir,
    ignition: Vec<u8>,
    /// More `--append-karg`s, after [`APPEND_KARGS`] (what the service adds for a disk kind).
    extra_kargs: Vec<&'static str>,
    /// `--firstboot-args`: the first boot's network arguments (the live ISO's, on a host).
    firstboot_args: Option<&'static str>,
}

impl Inputs {
    fn new() -> Inputs {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let ignition = br#"{"ignition":{"version":"3.2.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBoot boot-test"]}]}}"#.to_vec();
        std::fs::write(dir.path().join("config.ign"), &ignition).unwrap();
        let net = dir.path().join("net");
        std::fs::create_dir(&net).unwrap();
        for name in ["eno1", "bond0"] {
            std::fs::write(
                net.join(format!("{name}.nmconnection")),
                format!("[connection]\nid={name}\ntype=ethernet\ninterface-name={name}\n\n[ipv4]\nmethod=auto\n"),
            )
            .unwrap();
        }
        Inputs {
            dir,
            ignition,
            extra_kargs: Vec::new(),
            firstboot_args: None,
        }
    }

    /// The post-install arguments, the files under `dir` (the guest sees them elsewhere).
    fn args_in(&self, dir: &str) -> Vec<String> {
        let mut args = vec!["-i".to_string(), format!("{dir}/config.ign")];
        for karg in APPEND_KARGS.iter().chain(&self.extra_kargs) {
            args.extend(["--append-karg".to_string(), karg.to_string()]);
        }
        let net = format!("{dir}/net");
        args.extend(
            [
                "--delete-karg",
                DELETE_KARG,
                "--copy-network",
                "--network-dir",
                &net,
            ]
            .map(String::from),
        );
        if let Some(a) = self.firstboot_args {
            args.extend(["--firstboot-args".to_string(), a.to_string()]);
        }
        args
    }

    fn args(&self) -> Vec<String> {
        self.args_in(self.dir.path().to_str().unwrap())
    }

    /// The report lines the booted system must show for an image of `spec` installed with
    /// [`Inputs::args`] onto a disk of `disk_bytes` with the table `entries`, started by `loader`.
    fn expected(
        &self,
        spec: &ImageSpec,
        entries: &Entries,
        disk_bytes: u64,
        loader: Loader,
    ) -> Vec<String> {
        let mut args = Vec::new();
        if loader == Loader::SystemdBoot {
            // systemd-boot puts the entry's initrd first, as a UEFI path.
            args.push(format!(
                "initrd=\\{}",
                spec.initramfs_path().replace('/', "\\")
            ));
        }
        let options = spec.bls_options();
        let options = options.split_whitespace().filter(|a| *a != DELETE_KARG);
        // A kexec load expands GRUB's first-boot variable as GRUB would: `ignition.firstboot`
        // and the network arguments of /boot/ignition.firstboot; the boot loaders here pass it
        // as it is.
        let firstboot = format!("ignition.firstboot {}", self.firstboot_args.unwrap_or(""));
        let options = options.flat_map(|a| match a {
            "$ignition_firstboot" if loader == Loader::Kexec => {
                firstboot.split_whitespace().collect()
            }
            a => vec![a],
        });
        args.extend(
            options
                .chain(APPEND_KARGS)
                .chain(self.extra_kargs.clone())
                .map(String::from),
        );
        if loader == Loader::Direct {
            // OVMF names a QEMU-given initramfs to the kernel's EFI stub this way.
            args.push("initrd=initrd".into());
        }
        let ss = spec.sector_size;
        let mut lines = vec![
            format!("cmdline {}", args.join(" ")),
            format!("disk {} {ss}", disk_bytes / 512),
        ];
        // sysfs counts 512-byte units whatever the disk's logical block size.
        for (n, p) in entries {
            let (start, size) = (
                p.starting_lba * ss / 512,
                (p.ending_lba + 1 - p.starting_lba) * ss / 512,
            );
            let name = p.partition_name.as_str();
            lines.push(
                format!("partition {n} {start} {size} {name}")
                    .trim_end()
                    .to_string(),
            );
        }
        lines.push(format!("ignition {} 600 0:0", sha256_hex(&self.ignition)));
        // Keyfiles hold secrets (Wi-Fi keys, 802.1X passwords): 0600, as coreos-installer
        // copies them.
        let mut network: Vec<String> = std::fs::read_dir(self.dir.path().join("net"))
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                let sha = sha256_hex(&std::fs::read(&p).unwrap());
                format!(
                    "network {} {sha} 600",
                    p.file_name().unwrap().to_str().unwrap()
                )
            })
            .collect();
        network.sort();
        lines.extend(network);
        lines.extend(["firstboot present".to_string(), "end".to_string()]);
        lines
    }
}

/// Every difference between `boot`'s report and the `expected` lines, key by key (each problem
/// starts with its key), `/init`'s errors, and the kernel's complaints about the GPT.
fn problems(boot: &Run, expected: &[String]) -> Vec<String> {
    let key = |l: &String| l.split(' ').next().unwrap_or_default().to_string();
    let mut out: Vec<String> = boot
        .lines
        .iter()
        .filter_map(|l| match l.split_once(' ') {
            Some(("error", e)) => Some(format!("/init: {e}")),
            Some(("kmsg", m)) if m.contains("GPT") => Some(format!("kernel: {m}")),
            _ => None,
        })
        .collect();
    if boot.timed_out {
        out.push("timed out: no boot, or it hung".to_string());
    }
    let mut keys: Vec<String> = expected.iter().map(key).collect();
    keys.dedup();
    for k in keys {
        let of = |ls: &[String]| {
            ls.iter()
                .filter(|l| key(l) == k)
                .cloned()
                .collect::<Vec<_>>()
        };
        let (is, want) = (of(&boot.lines), of(expected));
        if is != want {
            out.push(format!("{k}: {is:#?}, expected {want:#?}"));
        }
    }
    out
}

fn write_image(mut cmd: Command, args: &[String], dev: &Path) {
    let out = cmd.arg("write-image").args(args).arg(dev).output().unwrap();
    assert!(out.status.success(), "write-image: {}", text(&out));
}

/// The used entries of a GPT, by number.
type Entries = Vec<(u32, gptman::GPTPartitionEntry)>;

/// Check both GPT headers and entry arrays of `disk` the way firmware does: their CRCs
/// (gptman checks them as it reads), the primary at LBA 1 with its entries at 2, the backup at
/// the last LBA with its entries just before it, each pointing at the other, both describing
/// the same disk and partitions. Returns what is wrong (empty when the table is sound), the
/// primary's used entries and the disk's size in bytes.
fn check_gpt(disk: &Path, ss: u64) -> (Vec<String>, Entries, u64) {
    let mut f = std::fs::File::open(disk).unwrap_or_else(|e| panic!("{}: {e}", disk.display()));
    let size = f.seek(SeekFrom::End(0)).unwrap();
    let last = size / ss - 1;
    let mut read = |lba: u64| -> Result<(Vec<gptman::GPTPartitionEntry>, _), String> {
        f.seek(SeekFrom::Start(lba * ss)).unwrap();
        let h = gptman::GPTHeader::read_from(&mut f);
        let h = h.map_err(|e| format!("header at LBA {lba}: {e}"))?;
        let entries = h.read_partitions(&mut f, ss);
        Ok((
            entries.map_err(|e| format!("entries at LBA {lba}: {e}"))?,
            h,
        ))
    };
    let (primary, backup) = (read(1), read(last));
    let mut problems: Vec<String> = [&primary, &backup]
        .into_iter()
        .filter_map(|r| r.as_ref().err().cloned())
        .collect();
    let mut checks = Vec::new();
    if let Ok((_, p)) = &primary {
        checks.extend([
            (p.primary_lba == 1, "primary: not at LBA 1"),
            (p.backup_lba == last, "primary: backup not at the end"),
            (p.partition_entry_lba == 2, "primary: entries not at 2"),
        ]);
    }
    if let Ok((_, b)) = &backup {
        let entries = u64::from(b.number_of_partition_entries);
        let array = (entries * u64::from(b.size_of_partition_entry)).div_ceil(ss);
        let before = b.partition_entry_lba + array == last;
        checks.extend([
            (b.primary_lba == last, "backup: not at the end"),
            (b.backup_lba == 1, "backup: primary not at 1"),
            (before, "backup: entries not just before it"),
        ]);
    }
    if let (Ok((pe, p)), Ok((be, b))) = (&primary, &backup) {
        let usable = |h: &gptman::GPTHeader| (h.first_usable_lba, h.last_usable_lba);
        let apart = p.last_usable_lba < b.partition_entry_lba;
        checks.extend([
            (p.disk_guid == b.disk_guid, "different disk GUIDs"),
            (usable(p) == usable(b), "different usable LBAs"),
            (apart, "usable space runs into the backup entries"),
            (pe == be, "different entry arrays"),
        ]);
    }
    for (_, what) in checks.iter().filter(|(ok, _)| !ok) {
        problems.push(format!("{what} (last LBA {last})"));
    }
    let entries = primary.map(|(e, _)| e).unwrap_or_default().into_iter();
    let used = entries.enumerate().filter(|(_, p)| p.is_used());
    (
        problems,
        used.map(|(i, p)| (i as u32 + 1, p)).collect(),
        size,
    )
}

/// Who starts the kernel of a written disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loader {
    /// The firmware starts systemd-boot from the ESP, which reads the BLS entry on the boot
    /// partition through the ext4 driver and starts the kernel and initramfs it names.
    SystemdBoot,
    /// The firmware starts the kernel and initramfs the written BLS entry names, with its
    /// options, handed over by QEMU; the firmware's own boot of the disk is checked apart.
    Direct,
    /// `write-image --kexec` loaded the written entry in a guest, which then kexec-rebooted.
    Kexec,
}

/// The host-side table checks, then a boot whose report must match exactly, with `partitions`
/// partitions, the last named `last`.
fn assert_boots(dev: &Path, spec: &ImageSpec, inputs: &Inputs, (partitions, last): (usize, &str)) {
    let ss = spec.sector_size;
    let (gpt_problems, entries, disk_bytes) = check_gpt(dev, ss);
    assert!(
        gpt_problems.is_empty(),
        "GPT of {}: {gpt_problems:#?}",
        dev.display()
    );
    assert_eq!(
        entries.len(),
        partitions,
        "partitions in the table: {entries:?}"
    );
    assert_eq!(entries[partitions - 1].1.partition_name.as_str(), last);
    // systemd-boot cannot find an XBOOTLDR partition on a 4096-byte-sector disk: it reads the
    // GPT through the firmware's block I/O with a 512-byte buffer, which block I/O with
    // 4096-byte blocks refuses (EFI_BAD_BUFFER_SIZE), so it never sees the BLS entries there.
    // CoreOS boots with GRUB, which reads such disks; Debian's GRUB has no BLS support.
    let loader = if ss == 512 {
        Loader::SystemdBoot
    } else {
        Loader::Direct
    };
    let expected = inputs.expected(spec, &entries, disk_bytes, loader);
    let booted = match loader {
        Loader::SystemdBoot => boot(dev, ss, None),
        Loader::Kexec => unreachable!("the written disk is booted by firmware here"),
        Loader::Direct => {
            // The firmware finds the ESP in the written GPT, reads its FAT and starts the boot
            // loader (systemd-boot then shows its menu, without the entries it cannot find).
            let console = boot(dev, ss, None).transcript();
            for wanted in ["BdsDxe: starting Boot", "Reboot Into Firmware Interface"] {
                assert!(
                    console.contains(wanted),
                    "no {wanted:?}: no systemd-boot\n{console}"
                );
            }
            // What a BLS boot loader would start: the written entry's kernel, initramfs and
            // options.
            let files = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
            let fs = Ext4::on(dev, ss, BOOT_LABEL);
            let entry = fs.text(&format!("/{BLS_ENTRY_PATH}"));
            let key = |k: &str| {
                let line = entry
                    .lines()
                    .find_map(|l| l.strip_prefix(k)?.strip_prefix(' '));
                line.unwrap_or_else(|| panic!("no {k} in the BLS entry:\n{entry}"))
                    .trim()
                    .to_string()
            };
            let copy = |k: &str| {
                let to = files.path().join(k);
                std::fs::write(&to, fs.debugfs(&format!("cat {}", key(k)))).unwrap();
                to
            };
            let (kernel, initrd) = (copy("linux"), copy("initrd"));
            boot(dev, ss, Some((&kernel, &initrd, &key("options"))))
        }
    };
    let problems = problems(&booted, &expected);
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{}",
        booted.transcript()
    );
}

/// The normal source on a real host: the live image's osmet file and OSTree objects.
#[test]
fn boots_after_writing_from_the_live_image() {
    if !runnable("boots_after_writing_from_the_live_image") {
        return;
    }
    let parts = boot_parts::cached_boot_parts().expect("boot parts");
    let fx =
        cached_live_fixture_of(ImageSpec::live(512, false).with_boot(parts)).expect("live fixture");
    let dev = LoopDev::new(fx.raw_size + EXTRA, fx.sector_size);
    let inputs = Inputs::new();
    let layout = LiveLayout::new(&fx.sysroot, std::slice::from_ref(&fx.osmet));
    write_image(layout.command(BIN), &inputs.args(), &dev.path);
    assert_boots(&dev.path, &fx.spec, &inputs, (4, "root"));
}

/// An install over an earlier one, keeping a data partition the user made past the image:
/// the saved partition keeps its number, place and bytes, and the kernel sees it. At 4096-byte
/// sectors, where the boot of a fresh install would check nothing more.
#[test]
fn boots_after_reinstalling_over_an_earlier_install_with_a_saved_partition() {
    if !runnable("boots_after_reinstalling_over_an_earlier_install_with_a_saved_partition") {
        return;
    }
    let ss = 4096;
    let set = images(ss);
    let dev = LoopDev::new(set.raw.size + EXTRA, ss);
    let source = [
        "--image-file",
        set.gz.path.to_str().unwrap(),
        "--sha256",
        &set.gz.sha256,
    ];
    let source = source.map(String::from).to_vec();
    write_image(Command::new(BIN), &source, &dev.path);
    // The earlier system's user added a data partition in the free space after the image.
    let start_mib = set.raw.size / MIB + 8;
    let lba = |mib: u64| mib * MIB / ss;
    let new = format!("5:{}:{}", lba(start_mib), lba(start_mib + 16) - 1);
    run(Command::new("sgdisk")
        .args(["-n", &new, "-c", "5:data"])
        .arg(&dev.path));
    let data = pattern((16 * MIB) as usize, 11);
    dev.write(start_mib * MIB, &data);

    let inputs = Inputs::new();
    let mut args = source.clone();
    args.extend(["--save-partlabel".into(), "data".into()]);
    args.extend(inputs.args());
    write_image(Command::new(BIN), &args, &dev.path);
    assert!(
        dev.read(start_mib * MIB, data.len()) == data,
        "saved data changed"
    );
    assert_boots(&dev.path, &set.spec, &inputs, (5, "data"));
}

/// The checks above catch what firmware would hide: the raw image copied as is onto the
/// bigger disk (backup GPT left inside the disk, no post-install step) fails host-side, and its
/// boot shows the kernel's GPT complaint and the unmodified command line.
#[test]
fn a_raw_copy_without_the_install_steps_fails_the_boot_checks() {
    if !runnable("a_raw_copy_without_the_install_steps_fails_the_boot_checks") {
        return;
    }
    let ss = 512;
    let set = images(ss);
    let dev = LoopDev::new(set.raw.size + EXTRA, ss);
    dev.write(0, &std::fs::read(&set.raw.path).unwrap());
    let (gpt_problems, entries, disk_bytes) = check_gpt(&dev.path, ss);
    let backup = gpt_problems
        .iter()
        .any(|p| p.starts_with("primary: backup not at the end"));
    assert!(backup, "{gpt_problems:#?}");
    let booted = boot(&dev.path, ss, None);
    assert!(
        booted.lines.iter().any(|l| l == "end"),
        "{}",
        booted.transcript()
    );
    let expected = Inputs::new().expected(&set.spec, &entries, disk_bytes, Loader::SystemdBoot);
    let problems = problems(&booted, &expected);
    eprintln!("the raw copy's problems, as expected: {problems:#?}");
    for wanted in ["kernel:", "cmdline", "ignition", "network"] {
        assert!(
            problems.iter().any(|p| p.starts_with(wanted)),
            "no {wanted:?} problem in {problems:#?}\n{}",
            booted.transcript()
        );
    }
}

/// The case script of the multipath test: a dm-multipath map over the two paths to one disk,
/// as multipathd makes it (`dm-0`, uuid `mpath-<wwid>`), then the installs and refusals. Each
/// step leaves `<step>.rc` and `<step>.out` in the share, and what the guest sees after it.
const MULTIPATH_CASE: &str = r#"failed=0
# run STEP COMMAND...: its status and output into the share
run() {
  step=$1; shift
  "$@" >/share/$step.out 2>&1
  rc=$?
  echo $rc >/share/$step.rc
  echo "$step exited $rc"
  return $rc
}
seen() {
  lsblk --json -o NAME,TYPE,PARTLABEL /dev/dm-0 >/share/$1.lsblk.json 2>&1
  dmsetup info -c --noheadings -o name,uuid >/share/$1.maps 2>&1
  ls -l /dev/mapper >/share/$1.mapper 2>&1
}
set -- $(ai-disk ai-mpath)
[ $# -eq 2 ] || { echo "expected two paths, got: $*"; exit 99; }
a=${1#/dev/}; b=${2#/dev/}
dmsetup create mpatha --uuid mpath-36001405aa0000000000000000000001 --table \
  "0 $(cat /sys/block/$a/size) multipath 0 0 1 1 round-robin 0 2 1 $(cat /sys/block/$a/dev) 1 $(cat /sys/block/$b/dev) 1" \
  || exit 98
[ "$(cat /sys/block/dm-0/dm/name)" = mpatha ] || exit 97
# The /dev/mapper node udev makes on a real host (lsblk looks dm devices up there).
dmsetup mknodes mpatha
dmsetup table >/share/multipath.table

run install sh /share/install.sh || failed=$((failed + 1))
seen install

# The earlier system's user made a data partition after the image (a multipath host has no
# partition rescan: kpartx's maps stay as they were).
run data sh -c "sgdisk -n 5:$DATA_FIRST:$DATA_LAST -c 5:data /dev/dm-0; dd if=/share/data.bin of=/dev/dm-0 bs=1M seek=$DATA_MIB conv=fsync" \
  || failed=$((failed + 1))

# Anything but the disk's own partition maps holding it refuses the install.
dmsetup create other --table "0 2048 linear $(cat /sys/block/dm-0/dev) 0" || failed=$((failed + 1))
run held_by_other sh /share/reinstall.sh && failed=$((failed + 1))
dmsetup remove other || failed=$((failed + 1))
# So does one of its partition maps in use, and then no map is removed.
mkdir -p /mnt/boot
mount -t ext4 /dev/mapper/mpatha3 /mnt/boot || failed=$((failed + 1))
run mounted sh /share/reinstall.sh && failed=$((failed + 1))
seen mounted
umount /mnt/boot || failed=$((failed + 1))

# Over the earlier install, its kpartx maps still there, keeping the user's partition.
run reinstall sh /share/reinstall.sh || failed=$((failed + 1))
seen reinstall
exit $failed
"#;

/// A multipath host (all paths to one SAN disk): two SCSI paths to one disk file, a
/// dm-multipath map over them in a guest on Debian's kernel, `write-image` onto `/dev/dm-0`
/// with the kernel arguments the service adds for multipath; then, over that install and
/// its partition maps, a reinstall keeping a user's partition (`--save-partlabel`), after two
/// refusals (another map on the disk; a partition map mounted). The maps are named and
/// identified as kpartx makes them, so lsblk shows them as the disk's partitions. Then the
/// disk file boots under OVMF like the loop-device installs above.
#[test]
fn boots_after_writing_onto_a_multipath_map_in_a_guest() {
    let test = "boots_after_writing_onto_a_multipath_map_in_a_guest";
    if !(runnable(test) && have_guest(test)) {
        return;
    }
    let ss = 512;
    let set = images(ss);
    let mut inputs = Inputs::new();
    inputs.extra_kargs = vec!["rw", "rd.multipath=default"];
    let share = inputs.dir.path().to_path_buf();
    std::fs::copy(&set.zst.path, share.join("image.raw.zst")).unwrap();
    let disk = share.join("mpath-disk.img");
    sparse_disk(&disk, set.raw.size + EXTRA);
    // The user's data partition: 8 MiB, 8 MiB past the image.
    let data_mib = set.raw.size / MIB + 8;
    let data = pattern((8 * MIB) as usize, 7);
    std::fs::write(share.join("data.bin"), &data).unwrap();
    for (script, extra) in [
        ("install.sh", ""),
        ("reinstall.sh", " --save-partlabel data"),
    ] {
        let args = inputs.args_in("/share").join(" ");
        let sha = &set.zst.sha256;
        let cmd = "assisted-installer write-image --image-file /share/image.raw.zst";
        let line = format!("{cmd} --sha256 {sha} {args}{extra} /dev/dm-0\n");
        std::fs::write(share.join(script), line).unwrap();
    }

    let parts = guest_parts::cached_guest_parts().expect("guest parts");
    let mut spec = GuestSpec::new(parts.kernel, parts.initramfs, &share);
    let path =
        || GuestDisk::new(&disk, Bus::VirtioScsi, ss, "ai-mpath").with_wwn(0x6001_405a_a000_0001);
    spec.disks = vec![path(), path()];
    spec.expect_disks = vec!["sda".into(), "sdb".into()];
    let lba = |mib: u64| mib * MIB / ss;
    let (first, last) = (lba(data_mib), lba(data_mib + 8) - 1);
    spec.script =
        format!("DATA_FIRST={first} DATA_LAST={last} DATA_MIB={data_mib}\n{MULTIPATH_CASE}");
    let run = run_guest(&spec);
    assert_eq!(
        run.exit_code(),
        Some(0),
        "{}\n--- case log:\n{}\n--- install:\n{}\n--- reinstall:\n{}",
        run.transcript(),
        run.shared("case.log"),
        run.shared("install.out"),
        run.shared("reinstall.out")
    );

    // The partitions, as lsblk (and so the Go-ported steps after the write) sees them: the
    // first install's four, then five with the saved one, each a kpartx-style map.
    let uuid = "mpath-36001405aa0000000000000000000001";
    for (step, count) in [("install", 4), ("reinstall", 5)] {
        let lsblk = run.shared(&format!("{step}.lsblk.json"));
        let maps = run.shared(&format!("{step}.maps"));
        let want: Vec<_> = (1..=count)
            .map(|n| (format!("mpatha{n}"), "part".to_string()))
            .collect();
        assert_eq!(
            lsblk_children(&lsblk),
            want,
            "{step}: lsblk of /dev/dm-0:\n{lsblk}"
        );
        for n in 1..=count {
            let map = format!("mpatha{n}:part{n}-{uuid}");
            assert!(
                maps.contains(&map),
                "{step}: no map mpatha{n} with kpartx's uuid:\n{maps}"
            );
        }
        let mapper = run.shared(&format!("{step}.mapper"));
        let link = format!("mpatha{count} -> ../dm-");
        assert!(
            mapper.contains(&link),
            "{step}: no /dev/mapper link: {mapper}"
        );
    }
    // The refusals name what holds the disk, and leave its maps as they were.
    let other = run.shared("held_by_other.out");
    assert!(
        other.contains("in use") && other.contains("(other)"),
        "held by another map: {other}"
    );
    let mounted = run.shared("mounted.out");
    assert!(
        mounted.contains("in use") && mounted.contains("mpatha3"),
        "mounted: {mounted}"
    );
    let maps = run.shared("mounted.maps");
    let kept = (1..=4).all(|n| maps.contains(&format!("mpatha{n}:")));
    assert!(kept, "a refused install removed maps: {maps}");

    let on_disk = std::fs::read(&disk).unwrap();
    let at = (data_mib * MIB) as usize;
    assert!(
        on_disk[at..at + data.len()] == data[..],
        "the saved partition's bytes changed"
    );
    drop(on_disk);
    assert_boots(&disk, &set.spec, &inputs, (5, "data"));
}

/// The first boot's network arguments the kexec test installs with.
const FIRSTBOOT_ARGS: &str = "rd.neednet=1 ip=dhcp";

/// A kexec reboot into what `write-image --kexec` wrote and loaded, in a guest on Debian's
/// kernel (`CONFIG_KEXEC_FILE`; no Secure Boot, so no lockdown refuses an unsigned kernel):
/// the written kernel's report shows the entry's options after the kargs edits with GRUB's
/// first-boot variable expanded (`ignition.firstboot` and the network arguments), the Ignition
/// config and the network keyfiles on /boot, and the partitions of the written table.
#[test]
fn kexec_starts_the_written_system_in_a_guest() {
    let test = "kexec_starts_the_written_system_in_a_guest";
    if !(runnable(test) && have_guest(test)) {
        return;
    }
    let ss = 512;
    let set = images(ss);
    let mut inputs = Inputs::new();
    inputs.firstboot_args = Some(FIRSTBOOT_ARGS);
    let share = inputs.dir.path().to_path_buf();
    fs::copy(&set.zst.path, share.join("image.raw.zst")).unwrap();
    let args: Vec<String> = inputs
        .args_in("/share")
        .iter()
        .map(|a| format!("'{a}'"))
        .collect();
    let write = format!(
        "assisted-installer write-image --image-file /share/image.raw.zst --sha256 {} {} \\
         --kexec \"$1\"\n",
        set.zst.sha256,
        args.join(" ")
    );
    let disk = share.join("disk.img");
    let parts = guest_parts::cached_guest_parts().expect("guest parts");
    let target = (disk.as_path(), set.raw.size + EXTRA, ss);
    let spec = kexec_spec((&parts.kernel, &parts.initramfs), &share, &write, target);
    let mut run = run_guest(&spec);
    let why = |run: &Run| {
        let out = (run.shared("write.out"), run.shared("write.err"));
        format!(
            "{}\n--- write-image:\n{}\n{}",
            run.transcript(),
            out.0,
            out.1
        )
    };
    let loaded = run.shared("write.out");
    let kernel = format!("/{} (", set.spec.kernel_path());
    let line = loaded.lines().find(|l| l.starts_with("kexec: loaded "));
    assert!(
        line.is_some_and(|l| l.contains(&kernel)
            && l.ends_with(" MiB initramfs); start it with: systemctl kexec")),
        "no kexec line for {kernel}: {line:?}\n{}",
        why(&run)
    );
    assert!(
        run.console.contains(REBOOT_LINE),
        "no kexec reboot\n{}",
        why(&run)
    );
    // The guest's case never ended: the written kernel took over (and powered off).
    assert_eq!(run.exit_code(), None, "{}", why(&run));
    let (gpt_problems, entries, disk_bytes) = check_gpt(&disk, ss);
    assert!(gpt_problems.is_empty(), "GPT: {gpt_problems:#?}");
    let expected = inputs.expected(&set.spec, &entries, disk_bytes, Loader::Kexec);
    run.lines = report_after_kexec(&run.console);
    let problems = problems(&run, &expected);
    assert!(problems.is_empty(), "{problems:#?}\n{}", why(&run));
}
