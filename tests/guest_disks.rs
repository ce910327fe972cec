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
//! A second, short guest checks what the tests built on the rig rely on: a multipath pair (one
//! file attached twice) and dm-multipath over it, extra files, and the power cut.
//!
//! Root and QEMU are needed; without them the tests skip with a message, and fail instead
//! under AI_REQUIRE_ROOT_TESTS=1. `cargo test --test guest_disks -- --nocapture` prints the
//! boot and install times: here, under software emulation, the first guest boots in about
//! 7.5 s and each install takes 3 to 3.5 s (23 s in all); the second takes about 7 s.

#[path = "../testdata/boot_parts.rs"]
mod boot_parts;
mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "../testdata/guest_parts.rs"]
mod guest_parts;

use common::images::assert_image_on_disk;
use common::root::sgdisk_verify;
use common::vm::{
    have_guest, run_guest, sparse_disk, Bus, GuestBoot, GuestDisk, GuestRun, GuestSpec,
};
use common::vm::{read_ext4_file, Entries};
use coreos_image::{cached_image_set, ImageSet, ImageSpec, BLS_ENTRY_PATH, BOOT_LABEL};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;
/// The disks are this much larger than the image: the backup GPT must move to their end.
const EXTRA: u64 = 64 * MIB;
/// The kernel argument the installs add.
const KARG: &str = "rd.md=1";
const IGNITION: &[u8] = br#"{"ignition":{"version":"3.2.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGuest guest-test"]}]}}"#;

fn guest_boot() -> GuestBoot {
    let parts = guest_parts::cached_guest_parts().expect("guest parts");
    GuestBoot {
        kernel: parts.kernel,
        initramfs: parts.initramfs,
    }
}

/// One install: onto the disk with `serial`, or onto the md array built from `md_members`.
struct Target {
    /// Names the share's files of this install (`<label>.rc`, `.out`, `.lsblk.json`, ...).
    label: &'static str,
    bus: Bus,
    ss: u64,
    serial: &'static str,
}

const TARGETS: [Target; 4] = [
    Target {
        label: "nvme",
        bus: Bus::Nvme,
        ss: 512,
        serial: "ai-nvme",
    },
    Target {
        label: "scsi",
        bus: Bus::VirtioScsi,
        ss: 512,
        serial: "ai-scsi",
    },
    Target {
        label: "scsi4k",
        bus: Bus::VirtioScsi,
        ss: 4096,
        serial: "ai-scsi4k",
    },
    Target {
        label: "ahci",
        bus: Bus::Ahci,
        ss: 512,
        serial: "ai-ahci",
    },
];
/// The RAID1 members (virtio-blk, 512-byte sectors).
const MD_MEMBERS: [&str; 2] = ["ai-md-a", "ai-md-b"];

fn image_name(ss: u64) -> String {
    format!("img{ss}.raw.zst")
}

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
    for t in &TARGETS {
        let _ = writeln!(
            s,
            "install {} \"$(disk {})\" {}",
            t.label,
            t.serial,
            image_name(t.ss)
        );
    }
    let _ = writeln!(
        s,
        r#"if mdadm --create /dev/md0 --run --assume-clean --level=1 --raid-devices=2 \
    --metadata=1.0 "$(disk {})" "$(disk {})"; then
  install md /dev/md0 {}
  cat /sys/block/md0/size >/share/md.size
  sgdisk -v /dev/md0 >/share/md.sgdisk 2>&1
  mdadm --stop /dev/md0 || failed=$((failed + 1))
else
  echo "mdadm --create failed"
  failed=$((failed + 1))
fi
exit $failed"#,
        MD_MEMBERS[0],
        MD_MEMBERS[1],
        image_name(512)
    );
    s
}

/// A file of the share as text ("" when missing).
fn shared(share: &Path, name: &str) -> String {
    std::fs::read_to_string(share.join(name)).unwrap_or_default()
}

/// The kernel's names of `disk`'s partitions 1 to 4.
fn partition_names(disk: &str) -> Vec<String> {
    let sep = if disk.ends_with(|c: char| c.is_ascii_digit()) {
        "p"
    } else {
        ""
    };
    (1..=4).map(|n| format!("{disk}{sep}{n}")).collect()
}

/// What the guest recorded for the install `label`: write-image's status, and the partitions
/// `lsblk` and /proc/partitions show under the kernel's names.
fn guest_problems(share: &Path, label: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let rc = shared(share, &format!("{label}.rc"));
    if rc.trim() != "0" {
        problems.push(format!(
            "{label}: write-image exited {:?}:\n{}",
            rc.trim(),
            shared(share, &format!("{label}.out"))
        ));
    }
    let disk = shared(share, &format!("{label}.dev")).trim().to_string();
    let want_names = partition_names(&disk);
    let lsblk_text = shared(share, &format!("{label}.lsblk.json"));
    match serde_json::from_str::<serde_json::Value>(&lsblk_text) {
        Ok(v) => {
            let children = v["blockdevices"][0]["children"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let field = |k: &str| -> Vec<String> {
                children
                    .iter()
                    .map(|c| c[k].as_str().unwrap_or("").to_string())
                    .collect()
            };
            // Without udev lsblk has no PARTLABEL (it reads udev's database); the labels are
            // checked host-side, in the table.
            if field("name") != want_names || field("type") != ["part"; 4] {
                problems.push(format!(
                    "{label}: lsblk in the guest shows {:?} of types {:?}, expected the partitions \
                     {want_names:?}:\n{lsblk_text}",
                    field("name"),
                    field("type")
                ));
            }
        }
        Err(e) => problems.push(format!("{label}: lsblk output: {e}:\n{lsblk_text}")),
    }
    let partitions = shared(share, &format!("{label}.partitions"));
    let listed: Vec<&str> = partitions
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .collect();
    for name in &want_names {
        if !listed.contains(&name.as_str()) {
            problems.push(format!(
                "{label}: /proc/partitions has no {name}:\n{partitions}"
            ));
        }
    }
    problems
}

/// The used entries of the GPT at the start of `disk`.
fn entries(disk: &[u8], ss: u64) -> Entries {
    let gpt = gptman::GPT::read_from(&mut std::io::Cursor::new(disk), ss).expect("a GPT");
    gpt.iter()
        .filter(|(_, p)| p.is_used())
        .map(|(n, p)| (n, p.clone()))
        .collect()
}

/// The mode of `path` in the ext4 file system at byte `offset` of `file` (debugfs, unmounted).
fn ext4_mode(file: &Path, offset: u64, path: &str) -> String {
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(format!("stat {path}"))
        .arg(format!("{}?offset={offset}", file.display()))
        .output()
        .expect("debugfs (e2fsprogs)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_once("Mode:")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("debugfs stat {path}: {text}"))
        .to_string()
}

/// The host-side checks of a disk file holding `set`'s image (`len` bytes of it are the disk:
/// the whole file, or an md array's size): the image's bytes outside the GPT areas and the
/// boot partition; on the boot partition, a clean file system with the Ignition config and the
/// kernel argument.
fn check_written(file: &Path, len: usize, set: &ImageSet) {
    let ss = set.spec.sector_size;
    let mut disk = std::fs::read(file).unwrap();
    let raw = std::fs::read(&set.raw.path).unwrap();
    let entries = entries(&disk, ss);
    // The install writes into the boot file system (the Ignition config, the BLS entry's
    // options); that is checked below, file by file.
    let boot = &set.spec.partitions()[2];
    assert_eq!(boot.name, BOOT_LABEL);
    let span = boot.offset as usize..(boot.offset + boot.size) as usize;
    disk[span.clone()].copy_from_slice(&raw[span]);
    assert_image_on_disk(&disk[..len], &raw, ss);
    drop(disk);
    let fsck = Command::new("e2fsck")
        .arg("-fn")
        .arg(format!("{}?offset={}", file.display(), boot.offset))
        .output()
        .expect("e2fsck (e2fsprogs)");
    assert!(
        fsck.status.success(),
        "e2fsck -fn of the boot partition: {}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
    let ignition = read_ext4_file(file, ss, &entries, BOOT_LABEL, "/ignition/config.ign");
    assert!(
        ignition == IGNITION,
        "/ignition/config.ign has {:?}",
        String::from_utf8_lossy(&ignition)
    );
    let (_, boot) = entries
        .iter()
        .find(|(_, p)| p.partition_name.as_str() == BOOT_LABEL)
        .unwrap();
    let mode = ext4_mode(file, boot.starting_lba * ss, "/ignition/config.ign");
    assert_eq!(mode, "0600", "mode of /ignition/config.ign");
    let entry = String::from_utf8(read_ext4_file(
        file,
        ss,
        &entries,
        BOOT_LABEL,
        &format!("/{BLS_ENTRY_PATH}"),
    ))
    .unwrap();
    let options = entry
        .lines()
        .find_map(|l| l.strip_prefix("options "))
        .unwrap_or_else(|| panic!("no options in the BLS entry:\n{entry}"));
    assert!(
        options.split_whitespace().any(|a| a == KARG),
        "{KARG} is not in the BLS entry's options: {options}"
    );
}

/// Run `check`, turning a panic into a problem named `what`.
fn problem_of(what: &str, check: impl FnOnce()) -> Option<String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(check))
        .err()
        .map(|e| {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("{what}: {msg}")
        })
}

fn link_or_copy(from: &Path, to: &Path) {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
    }
}

#[test]
fn write_image_onto_nvme_scsi_512_and_4k_ahci_and_md_raid1_in_one_guest() {
    if !have_guest("write_image_onto_nvme_scsi_4k_ahci_and_md_raid1_in_one_guest") {
        return;
    }
    let prepared = std::time::Instant::now();
    let sets = [512, 4096].map(|ss| cached_image_set(&ImageSpec::test(ss)).expect("test images"));
    let set = |ss: u64| &sets[(ss == 4096) as usize];
    let boot = guest_boot();
    let dir = tempfile::Builder::new()
        .prefix("guest-disks")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let share = dir.path().join("share");
    std::fs::create_dir(&share).unwrap();
    for s in &sets {
        link_or_copy(&s.zst.path, &share.join(image_name(s.spec.sector_size)));
    }
    std::fs::write(share.join("config.ign"), IGNITION).unwrap();

    let mut spec = GuestSpec::new(boot, &share);
    for (i, t) in TARGETS.iter().enumerate() {
        let file = dir.path().join(format!("{}.img", t.label));
        sparse_disk(&file, set(t.ss).raw.size + EXTRA);
        spec.disks.push(
            GuestDisk::new(file, t.bus, t.ss, t.serial).with_wwn(0x5000_c500_a1b2_c300 + i as u64),
        );
    }
    for serial in MD_MEMBERS {
        let file = dir.path().join(format!("{serial}.img"));
        sparse_disk(&file, set(512).raw.size + EXTRA);
        spec.disks
            .push(GuestDisk::new(file, Bus::VirtioBlk, 512, serial));
    }
    spec.expect_disks = ["nvme0n1", "sda", "sdb", "sdc", "vda", "vdb"]
        .map(String::from)
        .to_vec();
    spec.script = script();
    eprintln!("prepared in {:.1?}", prepared.elapsed());

    let run: GuestRun = run_guest(&spec);
    eprintln!("--- console:\n{}", run.console);
    assert!(
        !run.timed_out && run.ready_after.is_some() && run.errors().is_empty(),
        "the guest did not run the case:\n{}",
        run.transcript()
    );

    let checked = std::time::Instant::now();
    let mut problems = Vec::new();
    for t in &TARGETS {
        let s = set(t.ss);
        problems.extend(guest_problems(&share, t.label));
        let file = dir.path().join(format!("{}.img", t.label));
        problems.extend(problem_of(&format!("{}: the disk file", t.label), || {
            check_written(&file, (s.raw.size + EXTRA) as usize, s);
            sgdisk_verify(&file);
        }));
    }
    let s = set(512);
    problems.extend(guest_problems(&share, "md"));
    let sgdisk = shared(&share, "md.sgdisk");
    if !sgdisk.contains("No problems found") {
        problems.push(format!("md: sgdisk -v /dev/md0 in the guest:\n{sgdisk}"));
    }
    match shared(&share, "md.size").trim().parse::<usize>() {
        Ok(sectors) => {
            let len = sectors * 512;
            for serial in MD_MEMBERS {
                let file = dir.path().join(format!("{serial}.img"));
                problems.extend(problem_of(&format!("md: member {serial}"), || {
                    check_written(&file, len, s)
                }));
            }
        }
        Err(e) => problems.push(format!("md: the array's size: {e}")),
    }
    eprintln!("host-side checks in {:.1?}", checked.elapsed());
    assert!(
        problems.is_empty() && run.exit_code == Some(0),
        "exit {:?}; {problems:#?}\n{}",
        run.exit_code,
        run.transcript()
    );
}
