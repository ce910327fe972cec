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

use common::http_server::TestServer;
use common::images::sha256_hex;
use common::live_ns::LiveLayout;
use common::root::{have_root, run, LoopDev};
use common::vm::{
    as_kernel_sees, boot, boot_kernel, check_gpt, have_qemu, read_ext4_file, Boot, DirectKernel,
    Entries, Expected, GptCheck,
};
use common::vm::{
    have_guest, lsblk_children, run_guest, sparse_disk, Bus, GuestBoot, GuestDisk, GuestSpec,
};
use coreos_image::{cached_image_set, BootParts, ImageSet, ImageSpec, BLS_ENTRY_PATH, BOOT_LABEL};
use live_fixture::{cached_live_fixture_of, LiveFixture};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::OnceLock;

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const MIB: u64 = 1 << 20;
/// The target is this much larger than the image: the backup GPT must move to its end.
const EXTRA: u64 = 64 * MIB;

fn runnable(test: &str) -> bool {
    have_root(test) && have_qemu(test)
}

fn parts() -> BootParts {
    static PARTS: OnceLock<BootParts> = OnceLock::new();
    PARTS
        .get_or_init(|| boot_parts::cached_boot_parts().expect("boot parts"))
        .clone()
}

fn images(ss: u64) -> &'static ImageSet {
    static SETS: [OnceLock<ImageSet>; 2] = [OnceLock::new(), OnceLock::new()];
    SETS[(ss == 4096) as usize].get_or_init(|| {
        cached_image_set(&ImageSpec::test(ss).with_boot(parts())).expect("bootable test images")
    })
}

fn live(ss: u64) -> LiveFixture {
    cached_live_fixture_of(ImageSpec::live(ss, false).with_boot(parts()))
        .expect("bootable live fixture")
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
}

impl Inputs {
    fn new() -> Inputs {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let ignition = br#"{"ignition":{"version":"3.2.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBoot boot-test"]}]}}"#.to_vec();
        std::fs::write(dir.path().join("config.ign"), &ignition).unwrap();
        let net = dir.path().join("net");
        std::fs::create_dir(&net).unwrap();
        for (name, iface) in [("eno1", "eno1"), ("bond0", "bond0")] {
            std::fs::write(
                net.join(format!("{name}.nmconnection")),
                format!("[connection]\nid={name}\ntype=ethernet\ninterface-name={iface}\n\n[ipv4]\nmethod=auto\n"),
            )
            .unwrap();
        }
        Inputs {
            dir,
            ignition,
            extra_kargs: Vec::new(),
        }
    }

    fn args(&self) -> Vec<String> {
        let p = |n: &str| self.dir.path().join(n).display().to_string();
        let mut args = vec!["-i".to_string(), p("config.ign")];
        for karg in APPEND_KARGS.iter().chain(&self.extra_kargs) {
            args.extend(["--append-karg".to_string(), karg.to_string()]);
        }
        args.extend(["--delete-karg".to_string(), DELETE_KARG.to_string()]);
        args.extend([
            "--copy-network".to_string(),
            "--network-dir".to_string(),
            p("net"),
        ]);
        args
    }

    /// What the booted system must show for an image of `spec` installed with [`Inputs::args`]
    /// onto a disk whose table `gpt` read, started by `loader`.
    fn expected(&self, spec: &ImageSpec, gpt: &GptCheck, loader: Loader) -> Expected {
        let mut args = Vec::new();
        if loader == Loader::SystemdBoot {
            // systemd-boot puts the entry's initrd first, as a UEFI path.
            args.push(format!(
                "initrd=\\{}",
                spec.initramfs_path().replace('/', "\\")
            ));
        }
        args.extend(
            spec.bls_options()
                .split_whitespace()
                .filter(|a| *a != DELETE_KARG)
                .chain(APPEND_KARGS)
                .chain(self.extra_kargs.iter().copied())
                .map(str::to_string),
        );
        if loader == Loader::Direct {
            // OVMF names a QEMU-given initramfs to the kernel's EFI stub this way.
            args.push("initrd=initrd".into());
        }
        let mut network: Vec<(String, String)> = std::fs::read_dir(self.dir.path().join("net"))
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                let name = p.file_name().unwrap().to_str().unwrap().to_string();
                (name, sha256_hex(&std::fs::read(&p).unwrap()))
            })
            .collect();
        network.sort();
        Expected {
            cmdline: args.join(" "),
            disk_bytes: gpt.disk_bytes,
            ss: spec.sector_size,
            partitions: as_kernel_sees(&gpt.entries, spec.sector_size),
            ignition_sha256: sha256_hex(&self.ignition),
            network,
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn write_image(mut cmd: Command, args: &[String], dev: &Path) {
    let out = cmd.arg("write-image").args(args).arg(dev).output().unwrap();
    assert!(out.status.success(), "write-image: {}", text(&out));
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
}

impl Loader {
    /// systemd-boot cannot find an XBOOTLDR partition on a 4096-byte-sector disk: it reads the
    /// GPT through the firmware's block I/O with a 512-byte buffer, which block I/O with 4096-byte
    /// blocks refuses (EFI_BAD_BUFFER_SIZE), so it never sees the BLS entries there. CoreOS
    /// boots with GRUB, which reads such disks; Debian's GRUB has no BLS support to stand in.
    fn for_sector_size(ss: u64) -> Loader {
        if ss == 512 {
            Loader::SystemdBoot
        } else {
            Loader::Direct
        }
    }
}

/// The host-side table checks, then a boot whose report must match `expected` exactly.
fn assert_boots(dev: &Path, spec: &ImageSpec, inputs: &Inputs, partitions: usize) -> Boot {
    let ss = spec.sector_size;
    let gpt = check_gpt(dev, ss);
    assert!(
        gpt.problems.is_empty(),
        "GPT of {}: {:#?}",
        dev.display(),
        gpt.problems
    );
    assert_eq!(
        gpt.entries.len(),
        partitions,
        "partitions in the table: {:?}",
        gpt.entries
    );
    let loader = Loader::for_sector_size(ss);
    let expected = inputs.expected(spec, &gpt, loader);
    let booted = match loader {
        Loader::SystemdBoot => boot(dev, ss),
        Loader::Direct => {
            assert_firmware_starts_the_boot_loader(dev, ss);
            let files = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
            boot_kernel(
                dev,
                ss,
                &written_boot_entry(dev, ss, &gpt.entries, files.path()),
            )
        }
    };
    let problems = expected.problems(&booted);
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{}",
        booted.transcript()
    );
    eprintln!(
        "booted {} ({ss}-byte sectors, {loader:?}) in {:.1?} ({})",
        dev.display(),
        booted.elapsed,
        booted.accel
    );
    booted
}

/// The firmware finds the ESP in the written GPT, reads its FAT and starts the boot loader
/// from it (systemd-boot then shows its menu, without the entries it cannot find).
fn assert_firmware_starts_the_boot_loader(dev: &Path, ss: u64) {
    let booted = boot(dev, ss);
    let console = booted.transcript();
    for wanted in ["BdsDxe: starting Boot", "Reboot Into Firmware Interface"] {
        assert!(
            console.contains(wanted),
            "no {wanted:?} on the console: the firmware did not start systemd-boot from {}\n{console}",
            dev.display()
        );
    }
}

/// The kernel, initramfs and options of the BLS entry written on the boot partition, with the
/// two files copied into `dir`: what a BLS boot loader would start.
fn written_boot_entry(dev: &Path, ss: u64, entries: &Entries, dir: &Path) -> DirectKernel {
    let read = |path: &str| read_ext4_file(dev, ss, entries, BOOT_LABEL, path);
    let entry = String::from_utf8(read(&format!("/{BLS_ENTRY_PATH}"))).unwrap();
    let key = |k: &str| {
        entry
            .lines()
            .find_map(|l| l.strip_prefix(k).and_then(|v| v.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("no {k} line in the written BLS entry:\n{entry}"))
            .trim()
            .to_string()
    };
    let copy = |k: &str| {
        let to = dir.join(k);
        std::fs::write(&to, read(&key(k))).unwrap();
        to
    };
    DirectKernel {
        kernel: copy("linux"),
        initrd: copy("initrd"),
        append: key("options"),
    }
}

fn boots_after_writing_gz_over_http(ss: u64) {
    let set = images(ss);
    let srv = TestServer::start();
    let url = srv.serve_file("/rhcos.raw.gz", &set.gz.path);
    let dev = LoopDev::new(set.raw.size + EXTRA, ss);
    let inputs = Inputs::new();
    let mut args = vec![
        "--image-url".into(),
        url,
        "--sha256".into(),
        set.gz.sha256.clone(),
    ];
    args.extend(inputs.args());
    write_image(Command::new(BIN), &args, &dev.path);
    assert_boots(&dev.path, &set.spec, &inputs, 4);
}

#[test]
fn boots_after_writing_gz_over_http_512() {
    if runnable("boots_after_writing_gz_over_http_512") {
        boots_after_writing_gz_over_http(512);
    }
}

#[test]
fn boots_after_writing_gz_over_http_4096() {
    if runnable("boots_after_writing_gz_over_http_4096") {
        boots_after_writing_gz_over_http(4096);
    }
}

/// The normal source on a real host: the live image's osmet file and OSTree objects.
#[test]
fn boots_after_writing_from_the_live_image() {
    if !runnable("boots_after_writing_from_the_live_image") {
        return;
    }
    let fx = live(512);
    let dev = LoopDev::new(fx.raw_size + EXTRA, fx.sector_size);
    let inputs = Inputs::new();
    let layout = LiveLayout::new(&fx.sysroot, std::slice::from_ref(&fx.osmet));
    write_image(layout.command(BIN), &inputs.args(), &dev.path);
    assert_boots(&dev.path, &fx.spec, &inputs, 4);
}

/// An install over an earlier one, keeping a data partition the user made past the image:
/// the saved partition keeps its number, place and bytes, and the kernel sees it.
#[test]
fn boots_after_reinstalling_over_an_earlier_install_with_a_saved_partition() {
    if !runnable("boots_after_reinstalling_over_an_earlier_install_with_a_saved_partition") {
        return;
    }
    let ss = 4096;
    let set = images(ss);
    let dev = LoopDev::new(set.raw.size + EXTRA, ss);
    let source = vec![
        "--image-file".to_string(),
        set.gz.path.display().to_string(),
        "--sha256".into(),
        set.gz.sha256.clone(),
    ];
    write_image(Command::new(BIN), &source, &dev.path);
    // The earlier system's user added a data partition in the free space after the image.
    let start_mib = set.raw.size / MIB + 8;
    let lba = |mib: u64| mib * MIB / ss;
    run(Command::new("sgdisk")
        .arg("-n")
        .arg(format!("5:{}:{}", lba(start_mib), lba(start_mib + 16) - 1))
        .args(["-c", "5:data"])
        .arg(&dev.path));
    let data = common::images::pattern((16 * MIB) as usize, 11);
    dev.write(start_mib * MIB, &data);

    let inputs = Inputs::new();
    let mut args = source.clone();
    args.extend(["--save-partlabel".into(), "data".into()]);
    args.extend(inputs.args());
    write_image(Command::new(BIN), &args, &dev.path);
    assert_eq!(
        dev.read(start_mib * MIB, data.len()),
        data,
        "saved data changed"
    );
    let booted = assert_boots(&dev.path, &set.spec, &inputs, 5);
    assert_eq!(booted.report.partitions[4].name, "data");
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
    let gpt = check_gpt(&dev.path, ss);
    assert!(
        gpt.problems
            .iter()
            .any(|p| p.contains("primary points at a backup")),
        "{:#?}",
        gpt.problems
    );
    let inputs = Inputs::new();
    let booted = boot(&dev.path, ss);
    assert!(booted.report.ended, "{}", booted.transcript());
    let problems = inputs
        .expected(&set.spec, &gpt, Loader::SystemdBoot)
        .problems(&booted);
    eprintln!("the raw copy's problems, as expected: {problems:#?}");
    for wanted in [
        "kernel: GPT",
        "kernel command line",
        "/boot/ignition/config.ign",
        "first-boot network",
    ] {
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
    std::fs::hard_link(&set.zst.path, share.join("image.raw.zst"))
        .or_else(|_| std::fs::copy(&set.zst.path, share.join("image.raw.zst")).map(|_| ()))
        .unwrap();
    let disk = share.join("mpath-disk.img");
    sparse_disk(&disk, set.raw.size + EXTRA);
    // The user's data partition: 8 MiB, 8 MiB past the image.
    let data_mib = set.raw.size / MIB + 8;
    let data = common::images::pattern((8 * MIB) as usize, 7);
    std::fs::write(share.join("data.bin"), &data).unwrap();

    let guest_args = |extra: &[&str]| -> String {
        let mut args = vec![
            "--image-file".to_string(),
            "/share/image.raw.zst".into(),
            "--sha256".into(),
            set.zst.sha256.clone(),
        ];
        args.extend(
            inputs
                .args()
                .into_iter()
                .map(|a| a.replace(share.to_str().unwrap(), "/share")),
        );
        args.extend(extra.iter().map(|a| a.to_string()));
        format!(
            "assisted-installer write-image {} /dev/dm-0\n",
            args.join(" ")
        )
    };
    std::fs::write(share.join("install.sh"), guest_args(&[])).unwrap();
    std::fs::write(
        share.join("reinstall.sh"),
        guest_args(&["--save-partlabel", "data"]),
    )
    .unwrap();

    let parts = guest_parts::cached_guest_parts().expect("guest parts");
    let mut spec = GuestSpec::new(
        GuestBoot {
            kernel: parts.kernel,
            initramfs: parts.initramfs,
        },
        &share,
    );
    let wwn = 0x6001_405a_a000_0001;
    spec.disks = vec![
        GuestDisk::new(&disk, Bus::VirtioScsi, ss, "ai-mpath").with_wwn(wwn),
        GuestDisk::new(&disk, Bus::VirtioScsi, ss, "ai-mpath").with_wwn(wwn),
    ];
    spec.expect_disks = vec!["sda".into(), "sdb".into()];
    let lba = |mib: u64| mib * MIB / ss;
    spec.script = format!(
        "DATA_FIRST={} DATA_LAST={} DATA_MIB={data_mib}\n{MULTIPATH_CASE}",
        lba(data_mib),
        lba(data_mib + 8) - 1
    );
    let run = run_guest(&spec);
    let shared = |name: &str| std::fs::read_to_string(share.join(name)).unwrap_or_default();
    assert_eq!(
        run.exit_code,
        Some(0),
        "{}\n--- case log:\n{}\n--- install:\n{}\n--- reinstall:\n{}",
        run.transcript(),
        run.case_log,
        shared("install.out"),
        shared("reinstall.out")
    );
    eprintln!(
        "multipath guest: {:.1?} in all, boot {:?}, case {:?} ({})",
        run.elapsed,
        run.ready_after,
        run.case_time(),
        run.accel
    );

    // The partitions, as lsblk (and so the Go-ported steps after the write) sees them: the
    // first install's four, then five with the saved one, each a kpartx-style map.
    let uuid = "mpath-36001405aa0000000000000000000001";
    for (step, count) in [("install", 4), ("reinstall", 5)] {
        let lsblk = shared(&format!("{step}.lsblk.json"));
        let maps = shared(&format!("{step}.maps"));
        let children = lsblk_children(&lsblk);
        let want: Vec<(String, String)> = (1..=count)
            .map(|n| (format!("mpatha{n}"), "part".to_string()))
            .collect();
        assert_eq!(children, want, "{step}: lsblk of /dev/dm-0:\n{lsblk}");
        for n in 1..=count {
            assert!(
                maps.contains(&format!("mpatha{n}:part{n}-{uuid}")),
                "{step}: no map mpatha{n} with kpartx's uuid:\n{maps}"
            );
        }
        assert!(
            shared(&format!("{step}.mapper")).contains(&format!("mpatha{count} -> ../dm-")),
            "{step}: no /dev/mapper link: {}",
            shared(&format!("{step}.mapper"))
        );
    }
    // The refusals name what holds the disk, and leave its maps as they were.
    let other = shared("held_by_other.out");
    assert!(
        other.contains("in use") && other.contains("(other)"),
        "held by another map: {other}"
    );
    let mounted = shared("mounted.out");
    assert!(
        mounted.contains("in use") && mounted.contains("mpatha3"),
        "a mounted partition map: {mounted}"
    );
    assert!(
        (1..=4).all(|n| shared("mounted.maps").contains(&format!("mpatha{n}:"))),
        "a refused install removed maps: {}",
        shared("mounted.maps")
    );

    let on_disk = std::fs::read(&disk).unwrap();
    let at = (data_mib * MIB) as usize;
    assert!(
        on_disk[at..at + data.len()] == data[..],
        "the saved partition's bytes changed"
    );
    drop(on_disk);
    let booted = assert_boots(&disk, &set.spec, &inputs, 5);
    assert_eq!(booted.report.partitions[4].name, "data");
}
