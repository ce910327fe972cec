//! `write-image` in a QEMU guest on Debian's kernel (tests/common/vm.rs) onto real disks
//! of several kinds, in one boot: an NVMe disk (512-byte sectors), virtio-scsi disks at 512 and
//! 4096, an AHCI disk (512) and an md RAID1 of two virtio disks (metadata 1.0, so each member holds
//! the array's bytes from offset 0). Each disk is a sparse file 64 MiB larger than the image.
//!
//! In the guest, after each install the case records `lsblk --json` and /proc/partitions into
//! the share; the guest kernel parses partition tables, so its partitions must be there under
//! the kernel's names. From the host afterwards: the disk files hold the image's bytes outside
//! the GPT areas, `sgdisk -v` is clean (for the array, inside the guest, as the members'
//! tables sit before md's superblock), and the boot partition has the Ignition config with
//! the given bytes and mode 0600, and the added kernel argument in its BLS entry.
//!
//! Root and QEMU are needed; without them the test skips with a message, and fails instead
//! under AI_REQUIRE_ROOT_TESTS=1. `cargo test --test guest_disks -- --nocapture` prints the
//! boot and install times: here, under software emulation, the guest boots in about 7.5 s and
//! each install takes 3 to 3.5 s (23 s in all).

#[path = "../testdata/boot_parts.rs"]
mod boot_parts;
mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "../testdata/guest_parts.rs"]
mod guest_parts;

use common::images::assert_image_on_disk;
use common::root::{run, sgdisk_verify, Ext4};
use common::vm::{have_guest, lsblk_children, run_guest, sparse_disk, Bus, GuestDisk, GuestSpec};
use coreos_image::{cached_image_set, ImageSet, ImageSpec, BLS_ENTRY_PATH, BOOT_LABEL};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;
/// The disks are this much larger than the image: the backup GPT must move to their end.
const EXTRA: u64 = 64 * MIB;
/// The kernel argument the installs add.
const KARG: &str = "rd.md=1";
const IGNITION: &str = r#"{"ignition":{"version":"3.2.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGuest guest-test"]}]}}"#;

/// The installs onto single disks: (label, bus, sector size). The label names the share's
/// files of the install (`<label>.rc`, `.out`, `.lsblk.json`, ...) and, as `ai-<label>`, the
/// disk's serial.
const TARGETS: [(&str, Bus, u64); 4] = [
    ("nvme", Bus::Nvme, 512),
    ("scsi", Bus::VirtioScsi, 512),
    ("scsi4k", Bus::VirtioScsi, 4096),
    ("ahci", Bus::Ahci, 512),
];
/// The RAID1 members (virtio-blk, 512-byte sectors), by serial.
const MD_MEMBERS: [&str; 2] = ["ai-md-a", "ai-md-b"];

/// The case: each install, then what the guest sees, into the share; exits with the number of
/// failed steps.
fn script() -> String {
    let mut s = String::from(
        r#"failed=0
now() { cut -d' ' -f1 /proc/uptime; }
# install LABEL DEVICE IMAGE
install() {
  echo "${2#/dev/}" >/share/$1.dev
  start=$(now)
  assisted-installer write-image --image-file /share/$3 --insecure -i /share/config.ign \
    --append-karg rd.md=1 "$2" >/share/$1.out 2>&1
  rc=$?
  echo "$1: write-image $3 onto $2 exited $rc in $start..$(now) s (uptime)"
  echo $rc >/share/$1.rc
  [ $rc -eq 0 ] || { failed=$((failed + 1)); tail -n 20 /share/$1.out; }
  lsblk --json -o NAME,TYPE,SIZE,PARTLABEL "$2" >/share/$1.lsblk.json 2>&1
  cat /proc/partitions >/share/$1.partitions
}
# disk SERIAL: the disk's /dev path
disk() {
  d=$(ai-disk "$1")
  [ -n "$d" ] || echo "no disk with serial $1" >&2
  echo "$d"
}
"#,
    );
    for (label, _, ss) in TARGETS {
        let _ = writeln!(s, "install {label} \"$(disk ai-{label})\" img{ss}.raw.zst");
    }
    let [a, b] = MD_MEMBERS;
    let _ = writeln!(
        s,
        r#"if mdadm --create /dev/md0 --run --assume-clean --level=1 --raid-devices=2 \
    --metadata=1.0 "$(disk {a})" "$(disk {b})"; then
  install md /dev/md0 img512.raw.zst
  cat /sys/block/md0/size >/share/md.size
  sgdisk -v /dev/md0 >/share/md.sgdisk 2>&1
  mdadm --stop /dev/md0 || failed=$((failed + 1))
else
  echo "mdadm --create failed"
  failed=$((failed + 1))
fi
exit $failed"#
    );
    s
}

/// What the guest recorded for the install `label` (files of `share`): write-image's status,
/// and the partitions `lsblk` and /proc/partitions show under the kernel's names.
fn guest_problems(shared: impl Fn(&str) -> String, label: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let file = |ext: &str| shared(&format!("{label}.{ext}"));
    if file("rc").trim() != "0" {
        let (rc, out) = (file("rc"), file("out"));
        problems.push(format!(
            "{label}: write-image exited {:?}:\n{out}",
            rc.trim()
        ));
    }
    let disk = file("dev").trim().to_string();
    let sep = if disk.ends_with(|c: char| c.is_ascii_digit()) {
        "p"
    } else {
        ""
    };
    let want: Vec<(String, String)> = (1..=4)
        .map(|n| (format!("{disk}{sep}{n}"), "part".to_string()))
        .collect();
    // Without udev lsblk has no PARTLABEL (it reads udev's database); the labels are checked
    // host-side, in the table.
    let lsblk = file("lsblk.json");
    if lsblk_children(&lsblk) != want {
        problems.push(format!(
            "{label}: lsblk in the guest, expected {want:?}:\n{lsblk}"
        ));
    }
    let partitions = file("partitions");
    let listed: Vec<&str> = partitions
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .collect();
    for (name, _) in &want {
        if !listed.contains(&name.as_str()) {
            problems.push(format!(
                "{label}: /proc/partitions has no {name}:\n{partitions}"
            ));
        }
    }
    problems
}

/// The host-side checks of a disk file holding `set`'s image (`len` bytes of it are the disk:
/// the whole file, or an md array's size): the image's bytes outside the GPT areas and the
/// boot partition; on the boot partition, a clean file system with the Ignition config (mode
/// 0600) and the kernel argument.
fn check_written(file: &Path, len: usize, set: &ImageSet) {
    let ss = set.spec.sector_size;
    let mut disk = std::fs::read(file).unwrap();
    let raw = std::fs::read(&set.raw.path).unwrap();
    // The install writes into the boot file system (the Ignition config, the BLS entry's
    // options); that is checked below, file by file.
    let boot = &set.spec.partitions()[2];
    assert_eq!(boot.name, BOOT_LABEL);
    let span = boot.offset as usize..(boot.offset + boot.size) as usize;
    disk[span.clone()].copy_from_slice(&raw[span]);
    assert_image_on_disk(&disk[..len], &raw, ss);
    drop(disk);
    let fs = Ext4::on(file, ss, BOOT_LABEL);
    run(Command::new("e2fsck").arg("-fn").arg(&fs.0));
    assert_eq!(fs.text("/ignition/config.ign"), IGNITION);
    assert_eq!(fs.mode("/ignition/config.ign"), 0o600);
    let options = fs.bls_options(&format!("/{BLS_ENTRY_PATH}"));
    assert!(
        options.split_whitespace().any(|a| a == KARG),
        "{KARG} is not in the BLS entry's options: {options}"
    );
}

/// Run `check`, turning a panic into a problem named `what`.
fn problem_of(what: &str, check: impl FnOnce()) -> Option<String> {
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)).err()?;
    let msg = e.downcast_ref::<String>().cloned();
    let msg = msg.or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
    Some(format!("{what}: {}", msg.unwrap_or_default()))
}

#[test]
fn write_image_onto_nvme_scsi_512_and_4k_ahci_and_md_raid1_in_one_guest() {
    if !have_guest("write_image_onto_nvme_scsi_512_and_4k_ahci_and_md_raid1_in_one_guest") {
        return;
    }
    let sets = [512, 4096].map(|ss| cached_image_set(&ImageSpec::test(ss)).expect("test images"));
    let set = |ss: u64| &sets[(ss == 4096) as usize];
    let dir = tempfile::Builder::new()
        .prefix("guest-disks")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let share = dir.path().join("share");
    std::fs::create_dir(&share).unwrap();
    for s in &sets {
        let to = share.join(format!("img{}.raw.zst", s.spec.sector_size));
        if std::fs::hard_link(&s.zst.path, &to).is_err() {
            std::fs::copy(&s.zst.path, &to).unwrap();
        }
    }
    std::fs::write(share.join("config.ign"), IGNITION).unwrap();

    let parts = guest_parts::cached_guest_parts().expect("guest parts");
    let mut spec = GuestSpec::new(parts.kernel, parts.initramfs, &share);
    let file = |serial: &str| dir.path().join(format!("{serial}.img"));
    for (i, (label, bus, ss)) in TARGETS.into_iter().enumerate() {
        let serial = format!("ai-{label}");
        sparse_disk(&file(&serial), set(ss).raw.size + EXTRA);
        let disk = GuestDisk::new(file(&serial), bus, ss, &serial);
        spec.disks
            .push(disk.with_wwn(0x5000_c500_a1b2_c300 + i as u64));
    }
    for serial in MD_MEMBERS {
        sparse_disk(&file(serial), set(512).raw.size + EXTRA);
        let disk = GuestDisk::new(file(serial), Bus::VirtioBlk, 512, serial);
        spec.disks.push(disk);
    }
    spec.expect_disks = ["nvme0n1", "sda", "sdb", "sdc", "vda", "vdb"]
        .map(String::from)
        .to_vec();
    spec.script = script();

    let run = run_guest(&spec);
    eprintln!("--- console:\n{}", run.console);
    assert!(
        !run.timed_out
            && run.ready_after.is_some()
            && !run.lines.iter().any(|l| l.starts_with("error ")),
        "the guest did not run the case:\n{}",
        run.transcript()
    );

    let mut problems = Vec::new();
    let shared = |name: &str| run.shared(name);
    for (label, _, ss) in TARGETS {
        problems.extend(guest_problems(shared, label));
        let file = file(&format!("ai-{label}"));
        problems.extend(problem_of(&format!("{label}: the disk file"), || {
            check_written(&file, (set(ss).raw.size + EXTRA) as usize, set(ss));
            sgdisk_verify(&file);
        }));
    }
    problems.extend(guest_problems(shared, "md"));
    let sgdisk = run.shared("md.sgdisk");
    if !sgdisk.contains("No problems found") {
        problems.push(format!("md: sgdisk -v /dev/md0 in the guest:\n{sgdisk}"));
    }
    match run.shared("md.size").trim().parse::<usize>() {
        Ok(sectors) => {
            for serial in MD_MEMBERS {
                problems.extend(problem_of(&format!("md: member {serial}"), || {
                    check_written(&file(serial), sectors * 512, set(512))
                }));
            }
        }
        Err(e) => problems.push(format!("md: the array's size: {e}")),
    }
    assert!(
        problems.is_empty() && run.exit_code() == Some(0),
        "exit {:?}; {problems:#?}\n{}",
        run.exit_code(),
        run.transcript()
    );
}
