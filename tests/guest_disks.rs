//! Installation disks of every kind, in one QEMU guest on Debian's kernel (tests/common/vm.rs;
//! this host's kernel has no device-mapper or md), each disk a sparse file 64 MiB larger than
//! the image. In the order the case runs them:
//! * `write-image` onto an NVMe disk (512-byte sectors), virtio-scsi disks at 512 and 4096, an
//!   AHCI disk (512) and an md RAID1 of two virtio disks (metadata 1.0, so each member holds
//!   the array's bytes from offset 0); the guest kernel parses the tables, so lsblk and
//!   /proc/partitions must show the partitions under the kernel's names;
//! * the entrypoint as the service starts it for a multipath host, for the appliance's linear
//!   `agent` disk with the registry marker, and for a loop device; then a real reinstall onto
//!   the multipath map over an LVM volume group left on one of its partition maps, which the
//!   install-disk cleanup must take down (it runs LVM's and mdadm's tools); the fake assisted-service
//!   runs in the guest, on its loopback (the guest has no network device); the image is the
//!   live ISO's (osmet file and OSTree objects), as the service never passes an image: the
//!   live fixture's files reach the guest through the share as a host root
//!   (`ASSISTED_INSTALLER_HOST_ROOT`);
//! * a disk that fails writes part of the way through;
//! * a disk that lies (dm-flakey dropping the writes to its middle and reporting them done),
//!   which `write-image --verify` must catch;
//! * last, a power cut in the middle of a write (the guest is killed).
//!
//! Then, from the host: the disk files hold the image's bytes outside the GPT areas and /boot,
//! `sgdisk -v` is clean (for the array, inside the guest, as the members' tables sit before
//! md's superblock), and /boot has the Ignition config with mode 0600 and the kernel arguments.
//!
//! The multipath install with `write-image` (over its partition maps too, and the written disk
//! booted under OVMF) is in tests/boot_qemu.rs.
//!
//! A guest of its own, started by OVMF with its NVRAM in a file: a real install onto an md
//! RAID1 array and the UEFI boot entries it leaves in NVRAM
//! (`uefi_boot_entries_on_each_md_raid1_member_in_nvram`).
//!
//! Root and QEMU are needed; without them the test skips with a message, and fails instead
//! under AI_REQUIRE_ROOT_TESTS=1. `cargo test --test guest_disks -- --nocapture` prints the
//! guest's times.

#[path = "../testdata/boot_parts.rs"]
mod boot_parts;
mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "../testdata/guest_parts.rs"]
mod guest_parts;
#[path = "../testdata/live_fixture.rs"]
mod live_fixture;

use common::examples::example_binary;
use common::images::assert_image_on_disk;
use common::master_run::{assert_master_stages, master_args, IGNITION};
use common::root::{assert_empty_gpt, read_gpt, run, sgdisk_verify, Ext4};
use common::service_report::ServiceReport;
use common::vm::{have_guest, lsblk_children, run_guest, sparse_disk, Bus, GuestDisk, GuestSpec};
use coreos_image::{cached_image_set, ImageSpec, BLS_ENTRY_PATH, BOOT_LABEL};
use live_fixture::cached_live_fixture;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;
/// The disks are this much larger than the image: the backup GPT must move to their end.
const EXTRA: u64 = 64 * MIB;
/// The kernel argument the `write-image` installs add.
const KARG: &str = "rd.md=1";
/// The `write-image` installs onto single disks: (label, bus, sector size). The label names
/// the share's files of the install (`<label>.rc`, `.out`, `.lsblk.json`, ...) and, as
/// `ai-<label>`, the disk's serial.
const TARGETS: [(&str, Bus, u64); 4] = [
    ("nvme", Bus::Nvme, 512),
    ("scsi", Bus::VirtioScsi, 512),
    ("scsi4k", Bus::VirtioScsi, 4096),
    ("ahci", Bus::Ahci, 512),
];
/// The RAID1 members (virtio-blk, 512-byte sectors), by serial.
const MD_MEMBERS: [&str; 2] = ["ai-md-a", "ai-md-b"];
/// Exactly what the service passes for a multipath installation disk.
const MULTIPATH_INSTALLER_ARGS: &str =
    r#"["--append-karg","rw","--append-karg","rd.multipath=default","--copy-network"]"#;
const MPATH_UUID: &str = "mpath-36001405aa0000000000000000000002";
/// Where the faulty disk refuses writes: 8 MiB from 64 MiB on, inside the image.
const ERROR_FROM: u64 = 64 * MIB;
const ERROR_LEN: u64 = 8 * MIB;
/// Where the lying disk drops writes: 8 MiB from 48 MiB on, inside the image.
const FLAKEY_FROM: u64 = 48 * MIB;
const FLAKEY_LEN: u64 = 8 * MIB;
/// The first-boot network keyfile of the guest's "host".
const KEYFILE: &str = "[connection]\nid=eno1\ntype=ethernet\ninterface-name=eno1\n";

/// `'…'` for busybox sh.
fn quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// One dry-run master install in the guest: the fake service started on the guest's loopback
/// for `host`, the entrypoint onto `device` with the agent's flags (less `removed`, plus
/// `added`), the service's report and what lsblk then shows left in the share as `<label>.*`.
fn master_install(
    label: &str,
    host: &str,
    device: &str,
    installer_args: &str,
    (removed, added): (&[&str], &[&str]),
) -> String {
    let mut args = master_args(
        host,
        Path::new(device),
        "http://127.0.0.1:8090",
        installer_args,
        &Path::new("/tmp").join(format!("{label}.rebooted")),
    );
    args.retain(|a| !removed.contains(&a.as_str()));
    args.extend(added.iter().map(|a| a.to_string()));
    let args: Vec<String> = args.iter().map(|a| quote(a)).collect();
    format!(
        r#"/share/fake-assisted-service --listen 127.0.0.1:8090 --host-id {host} --role master \
  --ignition-file /share/config.ign --token-file /tmp/{label}.token --report-file /share/{label}.report.json &
svc=$!
n=0; while [ ! -s /tmp/{label}.token ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done
PULL_SECRET_TOKEN=$(cat /tmp/{label}.token) ASSISTED_INSTALLER_LOG_FILE=/tmp/{label}.log \
  assisted-installer {} >/share/{label}.out 2>&1
echo $? >/share/{label}.rc
echo "{label}: the entrypoint exited $(cat /share/{label}.rc)"
kill $svc; wait $svc
lsblk --json -o NAME,TYPE {device} >/share/{label}.lsblk.json 2>&1
ls -l /dev/mapper >/share/{label}.mapper 2>&1
"#,
        args.join(" ")
    )
}

/// What a real (not dry-run) install runs at its end that the guest lacks: `systemctl`, and
/// `shutdown`, which records its arguments in the share's file `log`.
fn reboot_stubs(log: &str) -> String {
    format!(
        r#"mkdir -p /usr/local/sbin
printf '#!/bin/sh
exit 0
' >/usr/local/sbin/systemctl
printf '#!/bin/sh
echo "shutdown $*" >>/share/{log}
' >/usr/local/sbin/shutdown
chmod 755 /usr/local/sbin/systemctl /usr/local/sbin/shutdown
export PATH=/usr/local/sbin:$PATH
"#
    )
}

/// The files a real install needs in the guest: the system's trusted roots (the service client
/// loads them; the installer container has the host's /etc/pki, the guest's busybox root none)
/// and the programs the live ISO has that the guest's base lacks.
fn real_install_files() -> Vec<(String, std::path::PathBuf, u32)> {
    let certs = "/etc/ssl/certs/ca-certificates.crt";
    let mut files = vec![(certs.into(), certs.into(), 0o644)];
    for tool in [
        "/usr/bin/nsenter",
        "/usr/bin/bash",
        "/usr/bin/du",
        "/usr/sbin/xfs_growfs",
        "/usr/sbin/fsfreeze",
        "/usr/bin/growpart",
        "/usr/sbin/sfdisk",
        "/usr/bin/flock",
    ] {
        files.push((tool.into(), tool.into(), 0o755));
    }
    files
}

/// The appliance: a linear map named `agent` over its disk, the registry marker and the
/// registry data, and what the live ISO has that the guest lacks: the initramfs script the
/// registry copy runs around growpart (here a stand-in that records its calls: XFS grows in
/// place with `xfs_growfs` all the same); then [`reboot_stubs`].
const APPLIANCE_SETUP: &str = r#"
a=$(ai-disk ai-agent)
dmsetup create agent --table "0 $(sectors $a) linear $(devno $a) 0" || exit 96
dmsetup mknodes agent
mkdir -p /share/hostroot/run/media/iso/registry /mnt/agentdata/blobs
for n in 1 2 3 4 5 6 7 8; do dd if=/dev/urandom of=/mnt/agentdata/blobs/layer$n bs=1M count=1 2>/dev/null; done
(cd /mnt/agentdata && find . -type f | sort | xargs sha256sum) >/share/agent.registry.want
t=/usr/lib/dracut/modules.d/40ignition-ostree/ignition-ostree-transposefs.sh
mkdir -p ${t%/*}
printf '#!/bin/sh
threshold=90
echo "transposefs $*" >>/share/agent.transposefs
' >$t
chmod 755 $t
"#;

/// After the appliance install: the partition sizes the kernel has for the disk's maps (the
/// installed root is read from the host: its file system stays frozen until the reboot).
const APPLIANCE_CHECK: &str = r#"
lsblk --bytes --json -o NAME,SIZE /dev/mapper/agent >/share/agent.sizes.json 2>&1
"#;

/// The `write-image` installs: each records its status and output, and what the guest then
/// sees, into the share; `failed` counts the failed steps.
const WRITE_IMAGE_CASE: &str = r#"failed=0
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
"#;

/// A reinstall over an earlier LVM-on-SAN system: a volume group on the multipath map's
/// partition map of its root (from the install before), its volume active. Without udev, LVM
/// and libdevmapper make their nodes themselves (`DM_DISABLE_UDEV`, and the settings LVM's
/// commands read), and LVM's devices file is off, as on the live ISO. After the install: the
/// maps left, what holds each of the map's partition maps, and LVM's volume groups.
const LVM_SETUP: &str = r#"
export DM_DISABLE_UDEV=1
mkdir -p /etc/lvm
printf 'activation {\n udev_sync = 0\n udev_rules = 0\n}\ndevices {\n obtain_device_list_from_udev = 0\n use_devicesfile = 0\n}\n' >/etc/lvm/lvm.conf
{ pvcreate -ff -y /dev/mapper/mpatha4 && vgcreate vgsan /dev/mapper/mpatha4 &&
  lvcreate -y -n data -L 8m vgsan; } >/share/lvm.setup 2>&1 || { cat /share/lvm.setup; exit 92; }
ls /sys/block/dm-0/holders/*/holders/ >/share/lvm.before 2>&1
"#;
const LVM_CHECK: &str = r#"
dmsetup ls >/share/lvm.dmsetup 2>&1
for h in /sys/block/dm-0/holders/*; do
  echo "$(cat $h/dm/name):$(ls $h/holders | tr '\n' ' ')"
done | sort >/share/lvm.holders
vgs --noheadings -o vg_name >/share/lvm.vgs 2>&1
"#;

/// The case script: the `write-image` installs, the device-mapper installs, the faulty disk,
/// then `AI-GUEST cases <failed steps>` and the power cut.
fn script(hosts: &[String; 5], image_sha256: &str) -> String {
    let mut s = WRITE_IMAGE_CASE.to_string();
    s.push_str("d=$(disk ai-cut); echo \"${d#/dev/}\" >/share/cut.dev\n");
    for (label, _, ss) in TARGETS {
        let _ = writeln!(s, "install {label} \"$(disk ai-{label})\" img{ss}.raw.zst");
    }
    let [a, b] = MD_MEMBERS;
    let _ = write!(
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

export ASSISTED_INSTALLER_HOST_ROOT=/share/hostroot
mkdir -p /opt/install-dir /var/log
sectors() {{ cat /sys/block/${{1#/dev/}}/size; }}
devno() {{ cat /sys/block/${{1#/dev/}}/dev; }}

# A multipath host: the map multipathd makes over the two paths (dm-0), with its node.
set -- $(ai-disk ai-mpath)
[ $# -eq 2 ] || {{ echo "expected two paths, got: $*"; exit 99; }}
dmsetup create mpatha --uuid {MPATH_UUID} --table \
  "0 $(sectors $1) multipath 0 0 1 1 round-robin 0 2 1 $(devno $1) 1 $(devno $2) 1" || exit 98
[ "$(cat /sys/block/dm-0/dm/name)" = mpatha ] || exit 97
dmsetup mknodes mpatha
"#
    );
    let none: (&[&str], &[&str]) = (&[], &[]);
    s.push_str(&master_install(
        "mpath",
        &hosts[0],
        "/dev/dm-0",
        MULTIPATH_INSTALLER_ARGS,
        none,
    ));
    s.push_str(APPLIANCE_SETUP);
    s.push_str(&reboot_stubs("agent.shutdown"));
    // Not a dry run: the registry copy's host commands run (with the install-disk cleanup
    // skipped, as the flag asks; the reinstall over LVM below runs it).
    s.push_str(&master_install(
        "agent",
        &hosts[1],
        "/dev/mapper/agent",
        r#"["--copy-network"]"#,
        (&["--dry-run"], &["--skip-installation-disk-cleanup"]),
    ));
    s.push_str(APPLIANCE_CHECK);
    // A loop device (no partition scanning there either), with the marker still there.
    s.push_str("losetup /dev/loop0 /share/loop.img || exit 94\n");
    s.push_str(&master_install(
        "loop",
        &hosts[3],
        "/dev/loop0",
        r#"["--copy-network"]"#,
        none,
    ));
    // The registry marker goes first: this install is a plain master's.
    s.push_str("rmdir /share/hostroot/run/media/iso/registry\n");
    s.push_str(LVM_SETUP);
    // A real install (not a dry run), with the install-disk cleanup.
    s.push_str(&master_install(
        "lvm",
        &hosts[4],
        "/dev/dm-0",
        MULTIPATH_INSTALLER_ARGS,
        (&["--dry-run"], &[]),
    ));
    s.push_str(LVM_CHECK);
    let from = ERROR_FROM / 512;
    let len = ERROR_LEN / 512;
    let _ = write!(
        s,
        r#"
# A disk that fails writes part of the way in: an error target between two linear ones.
f=$(ai-disk ai-faulty)
rest=$(( $(sectors $f) - {from} - {len} ))
printf '0 {from} linear %s 0\n{from} {len} error\n{end} %s linear %s {end}\n' \
  "$(devno $f)" "$rest" "$(devno $f)" | dmsetup create faulty || exit 95
dmsetup mknodes faulty
assisted-installer write-image --image-file /share/img512.raw.zst --sha256 {image_sha256} \
  /dev/mapper/faulty >/share/faulty.out 2>&1
echo $? >/share/faulty.rc
echo "faulty: write-image exited $(cat /share/faulty.rc)"
# A disk that lies: writes to its middle are dropped yet reported done (flakey, always down:
# up 0 s, down 1 s), between two linear segments.
f=$(ai-disk ai-flakey)
rest=$(( $(sectors $f) - {ffrom} - {flen} ))
printf '0 {ffrom} linear %s 0\n{ffrom} {flen} flakey %s {ffrom} 0 1 1 drop_writes\n{fend} %s linear %s {fend}\n' \
  "$(devno $f)" "$(devno $f)" "$rest" "$(devno $f)" | dmsetup create flakey || exit 93
dmsetup mknodes flakey
assisted-installer write-image --image-file /share/img512.raw.zst --sha256 {image_sha256} \
  --verify /dev/mapper/flakey >/share/flakey.out 2>&1
echo $? >/share/flakey.rc
echo "flakey: write-image --verify exited $(cat /share/flakey.rc)"
"#,
        end = from + len,
        ffrom = FLAKEY_FROM / 512,
        flen = FLAKEY_LEN / 512,
        fend = (FLAKEY_FROM + FLAKEY_LEN) / 512,
    );
    s.push_str(&master_install(
        "faulty-entrypoint",
        &hosts[2],
        "/dev/mapper/faulty",
        r#"[]"#,
        none,
    ));
    // The power cut, last: the guest is killed once 40 MiB of the image are written.
    let _ = write!(
        s,
        r#"sync
echo "AI-GUEST cases $failed"
d=$(ai-disk ai-cut)
written() {{ set -- $(cat /sys/block/${{d#/dev/}}/stat); echo $7; }}
before=$(written)
assisted-installer write-image --image-file /share/img512.raw.zst --sha256 {image_sha256} $d >/share/cut.out 2>&1 &
while [ $(( $(written) - before )) -lt 81920 ]; do
  kill -0 $! 2>/dev/null || {{ echo "write-image ended before the cut"; exit 1; }}
  sleep 0.01
done
echo AI-CUT
sleep 60
"#
    );
    s
}

/// The size in bytes of the partition `label` of the disk file `disk` and its offset.
fn partition(disk: &Path, ss: u64, label: &str) -> (u64, u64) {
    let gpt = read_gpt(disk, ss);
    let (_, p) = gpt
        .iter()
        .find(|(_, p)| p.is_used() && p.partition_name.as_str() == label)
        .unwrap_or_else(|| panic!("no partition {label} on {}", disk.display()));
    (
        (p.ending_lba + 1 - p.starting_lba) * ss,
        p.starting_lba * ss,
    )
}

/// `sha256sum` lines (`<digest>  ./<path>`, sorted) of the registry directory in the XFS root
/// partition of the disk file, mounted read-only here through a loop device; and the file
/// system's size in bytes.
fn registry_in_installed_root(disk: &Path) -> (String, u64) {
    let (size, offset) = partition(disk, 512, "root");
    let mnt = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let options = format!("ro,norecovery,loop,offset={offset},sizelimit={size}");
    run(Command::new("mount")
        .args(["-t", "xfs", "-o", &options])
        .arg(disk)
        .arg(mnt.path()));
    let listed = Command::new("sh")
        .arg("-c")
        .arg("cd ostree/deploy/rhcos/var/lib/iri-registry && find . -type f | sort | xargs sha256sum")
        .current_dir(mnt.path())
        .output()
        .unwrap();
    let size = run(Command::new("df")
        .args(["-B1", "--output=size"])
        .arg(mnt.path()));
    run(Command::new("umount").arg(mnt.path()));
    let size = size.lines().last().and_then(|l| l.trim().parse().ok());
    (
        String::from_utf8_lossy(&listed.stdout).into_owned(),
        size.unwrap_or_default(),
    )
}

/// A written disk file (its first `len` bytes are the disk: the whole file, or an md array's
/// size): the image `raw`'s bytes outside the GPT areas, /boot (which the post-install steps
/// write into) and the partitions labelled `changed`; on /boot a clean file system with the
/// Ignition config (mode 0600) and the BLS entry's options ending in `kargs`.
fn check_written(disk: &Path, len: usize, raw: &Path, ss: u64, kargs: &str, changed: &[&str]) {
    let (mut on_disk, mut image) = (std::fs::read(disk).unwrap(), std::fs::read(raw).unwrap());
    on_disk.truncate(len);
    for label in changed.iter().chain(&[BOOT_LABEL]) {
        let (size, offset) = partition(disk, ss, label);
        let (start, end) = (offset as usize, (offset + size) as usize);
        let (d, i) = (on_disk.len(), image.len());
        on_disk[start..end.min(d)].fill(0);
        image[start.min(i)..end.min(i)].fill(0);
    }
    if changed.is_empty() {
        assert_image_on_disk(&on_disk, &image, ss);
    } else {
        // Resizing a partition rewrote the table too: compare what lies between the tables.
        let m = MIB as usize;
        let end = image.len() - m;
        assert!(
            on_disk[m..end] == image[m..end],
            "{}: the image's bytes outside the changed partitions differ",
            disk.display()
        );
    }
    drop((on_disk, image));
    let fs = Ext4::on(disk, ss, BOOT_LABEL);
    run(Command::new("e2fsck").arg("-fn").arg(&fs.0));
    assert_eq!(fs.text("/ignition/config.ign"), IGNITION, "{}", fs.0);
    assert_eq!(fs.mode("/ignition/config.ign"), 0o600, "{}", fs.0);
    let options = fs.bls_options(&format!("/{BLS_ENTRY_PATH}"));
    assert!(options.ends_with(kargs), "{}: options {options:?}", fs.0);
}

/// Run `check`, turning a panic into a problem named `what`.
/// The real installs of the big guest run on a machine whose other disks hold earlier
/// installs: the service is told, once, that their `boot` filesystems will stop the first
/// boot, and what clears them.
fn assert_first_boot_warnings(warnings: &[String]) {
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let w = &warnings[0];
    assert!(
        w.starts_with("other disks also have a filesystem labelled \"boot\": ")
            && w.contains("Before the host reboots, on the host")
            && w.contains("wipefs -a /dev/"),
        "{w}"
    );
}

fn problem_of(what: &str, check: impl FnOnce()) -> Option<String> {
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)).err()?;
    let msg = e.downcast_ref::<String>().cloned();
    let msg = msg.or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
    Some(format!("{what}: {}", msg.unwrap_or_default()))
}

#[test]
fn disks_of_every_kind_device_mapper_and_a_power_cut_in_one_guest() {
    if !have_guest("disks_of_every_kind_device_mapper_and_a_power_cut_in_one_guest") {
        return;
    }
    let fx = cached_live_fixture(512, false).expect("live fixture");
    let sets = [512, 4096].map(|ss| cached_image_set(&ImageSpec::test(ss)).expect("test images"));
    let set = |ss: u64| &sets[(ss == 4096) as usize];
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let share = work.path();
    for s in &sets {
        let to = share.join(format!("img{}.raw.zst", s.spec.sector_size));
        if std::fs::hard_link(&s.zst.path, &to).is_err() {
            std::fs::copy(&s.zst.path, &to).unwrap();
        }
    }
    std::fs::write(share.join("config.ign"), IGNITION).unwrap();

    // The host's files as the installer container reaches them: the live image (osmet file
    // and the running root's OSTree objects, hard links into the cached fixture) and the
    // NetworkManager keyfiles.
    let root = share.join("hostroot");
    let osmet_dir = root.join("run/coreos-installer/osmet");
    std::fs::create_dir_all(&osmet_dir).unwrap();
    std::fs::create_dir_all(root.join("sysroot")).unwrap();
    let ostree = fx.sysroot.join("ostree");
    run(Command::new("cp")
        .arg("-al")
        .arg(ostree)
        .arg(root.join("sysroot")));
    std::fs::copy(&fx.osmet, osmet_dir.join(fx.osmet.file_name().unwrap())).unwrap();
    let nm = root.join("etc/NetworkManager/system-connections");
    std::fs::create_dir_all(&nm).unwrap();
    std::fs::write(nm.join("eno1.nmconnection"), KEYFILE).unwrap();
    let svc = example_binary("fake-assisted-service");
    let svc_in_share = share.join("fake-assisted-service");
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(svc)
        .arg(svc_in_share));

    let disk = |name: &str, size: u64| {
        let p = share.join(format!("{name}.img"));
        sparse_disk(&p, size + EXTRA);
        p
    };
    let parts = guest_parts::cached_guest_parts().expect("guest parts");
    let mut spec = GuestSpec::new(parts.kernel, parts.initramfs, share);
    for (i, (label, bus, ss)) in TARGETS.into_iter().enumerate() {
        let serial = format!("ai-{label}");
        let file = disk(&serial, set(ss).raw.size);
        let disk = GuestDisk::new(file, bus, ss, &serial);
        spec.disks
            .push(disk.with_wwn(0x5000_c500_a1b2_c300 + i as u64));
    }
    for serial in MD_MEMBERS {
        let file = disk(serial, set(512).raw.size);
        spec.disks
            .push(GuestDisk::new(file, Bus::VirtioBlk, 512, serial));
    }
    let (mpath, agent) = (disk("mpath", fx.raw_size), disk("agent", fx.raw_size));
    let (faulty, loop_file) = (disk("faulty", fx.raw_size), disk("loop", fx.raw_size));
    let flakey = disk("flakey", set(512).raw.size);
    // An earlier install, bootable, that the cut install is writing over.
    let cut = share.join("cut.img");
    std::fs::copy(&set(512).raw.path, &cut).unwrap();
    let cut_file = std::fs::File::options().write(true).open(&cut).unwrap();
    cut_file.set_len(set(512).raw.size + EXTRA).unwrap();
    let path =
        GuestDisk::new(&mpath, Bus::VirtioScsi, 512, "ai-mpath").with_wwn(0x6001_405a_a000_0002);
    spec.disks.extend([
        path.clone(),
        path,
        GuestDisk::new(&agent, Bus::VirtioBlk, 512, "ai-agent"),
        GuestDisk::new(&faulty, Bus::VirtioBlk, 512, "ai-faulty"),
        GuestDisk::new(&cut, Bus::VirtioBlk, 512, "ai-cut"),
        GuestDisk::new(&flakey, Bus::VirtioBlk, 512, "ai-flakey"),
    ]);
    let names = [
        "nvme0n1", "sda", "sdb", "sdc", "sdd", "sde", "vda", "vdb", "vdc", "vdd", "vde", "vdf",
    ];
    spec.expect_disks = names.map(String::from).to_vec();
    // A few minutes alone here under TCG; much longer while a build shares the cores.
    spec.limit = std::time::Duration::from_secs(1200);
    spec.kill_when = Some("AI-CUT".into());
    spec.extra_files = real_install_files();
    let hosts = [(); 5].map(|_| uuid::Uuid::new_v4().to_string());
    spec.script = script(&hosts, &set(512).zst.sha256);
    let run = run_guest(&spec);
    let cases = run.lines.iter().find_map(|l| l.strip_prefix("cases "));
    assert_eq!(cases, Some("0"), "{}", run.transcript());
    let shared = |name: &str| run.shared(name);
    let mut problems = Vec::new();
    let mut check = |what: &str, f: &dyn Fn()| problems.extend(problem_of(what, f));

    // The write-image installs, in the guest: write-image's status, and the partitions lsblk
    // and /proc/partitions show under the kernel's names (without udev lsblk has no
    // PARTLABEL; the labels are checked host-side, in the table).
    let partitions = |label: &str| {
        let file = |ext: &str| shared(&format!("{label}.{ext}"));
        assert_eq!(file("rc").trim(), "0", "write-image:\n{}", file("out"));
        let disk = file("dev").trim().to_string();
        let sep = if disk.ends_with(|c: char| c.is_ascii_digit()) {
            "p"
        } else {
            ""
        };
        let want: Vec<(String, String)> = (1..=4)
            .map(|n| (format!("{disk}{sep}{n}"), "part".to_string()))
            .collect();
        let lsblk = file("lsblk.json");
        assert_eq!(lsblk_children(&lsblk), want, "lsblk in the guest:\n{lsblk}");
        let listed = file("partitions");
        for (name, _) in &want {
            let there = listed
                .lines()
                .any(|l| l.split_whitespace().nth(3) == Some(name));
            assert!(there, "/proc/partitions has no {name}:\n{listed}");
        }
    };
    for (label, _, ss) in TARGETS {
        check(label, &|| {
            partitions(label);
            let file = share.join(format!("ai-{label}.img"));
            let len = (set(ss).raw.size + EXTRA) as usize;
            check_written(&file, len, &set(ss).raw.path, ss, KARG, &[]);
            sgdisk_verify(&file);
        });
    }
    check("md", &|| {
        partitions("md");
        let sgdisk = shared("md.sgdisk");
        assert!(
            sgdisk.contains("No problems found"),
            "sgdisk -v /dev/md0:\n{sgdisk}"
        );
        let sectors: usize = shared("md.size").trim().parse().expect("the array's size");
        for serial in MD_MEMBERS {
            let file = share.join(format!("{serial}.img"));
            check_written(&file, sectors * 512, &set(512).raw.path, 512, KARG, &[]);
        }
    });

    // Each install warns about the other disks with a filesystem labelled `boot`, read from
    // their GPTs (at 512 and 4096-byte sectors): the earlier install on the cut disk, then the
    // disks installed before; never the array's own members.
    check("other boot filesystems", &|| {
        let warned = |label: &str| -> Vec<String> {
            let out = shared(&format!("{label}.out"));
            let list = out
                .split_once("labelled \"boot\": ")
                .and_then(|(_, rest)| rest.split_once(". GRUB"))
                .map_or("", |(list, _)| list);
            list.split(", ")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        };
        let node = |label: &str| format!("/dev/{}", shared(&format!("{label}.dev")).trim());
        let boot = |labels: &[&str]| -> Vec<String> {
            let mut nodes: Vec<String> = labels
                .iter()
                .map(|l| format!("{} partition 3", node(l)))
                .collect();
            nodes.sort();
            nodes
        };
        assert_eq!(warned("nvme"), boot(&["cut"]));
        assert_eq!(warned("scsi"), boot(&["nvme", "cut"]));
        assert_eq!(warned("ahci"), boot(&["nvme", "scsi", "scsi4k", "cut"]));
        assert_eq!(
            warned("md"),
            boot(&["nvme", "scsi", "scsi4k", "ahci", "cut"])
        );
    });

    let report = |label: &str| {
        ServiceReport::read(&share.join(format!("{label}.report.json"))).unwrap_or_else(|e| {
            let out = shared(&format!("{label}.out"));
            panic!("no service report ({e:#})\n--- {label}.out:\n{out}")
        })
    };
    // One entrypoint install that must have succeeded, as the guest left it: the service's
    // report, the disk as the live image with `kargs` (less the partitions `changed`) and the
    // keyfile, and the names and types lsblk gave the disk's partitions: `names<n>` of `kind`.
    let installed = |label: &str, disk: &Path, kargs: &str, changed: &[&str], names_kind| {
        let out = shared(&format!("{label}.out"));
        assert_eq!(shared(&format!("{label}.rc")).trim(), "0", "{out}");
        let r = report(label);
        assert!(r.refused.is_empty(), "{:?}", r.refused);
        check_written(
            disk,
            std::fs::metadata(disk).unwrap().len() as usize,
            &fx.raw,
            512,
            kargs,
            changed,
        );
        sgdisk_verify(disk);
        let keyfile =
            Ext4::on(disk, 512, BOOT_LABEL).text("/coreos-firstboot-network/eno1.nmconnection");
        assert_eq!(keyfile, KEYFILE);
        let (names, kind): (&str, &str) = names_kind;
        let want: Vec<_> = (1..=4)
            .map(|n| (format!("{names}{n}"), kind.to_string()))
            .collect();
        assert_eq!(
            lsblk_children(&shared(&format!("{label}.lsblk.json"))),
            want
        );
        r
    };

    // The multipath host, as the service starts it: the Go stage sequence, the disk as the
    // live image with the multipath kernel arguments, and kpartx's partition maps left.
    check("mpath", &|| {
        let r = installed(
            "mpath",
            &mpath,
            "rw rd.multipath=default",
            &[],
            ("mpatha", "part"),
        );
        assert_master_stages(&r.progress, false);
    });

    // The reinstall over the volume group on the multipath map's partition map: the cleanup
    // found it through the map (the volume held it before), took it down and removed the maps,
    // so the write went on with no report of a failed cleanup; the disk holds the new install
    // (checked with `mpath` above: it is the same disk); only the new partition maps are left,
    // held by nothing, and LVM knows no volume group.
    check("lvm over a multipath partition map", &|| {
        let before = shared("lvm.before");
        assert!(before.contains("dm-"), "no volume on a map: {before}");
        let out = shared("lvm.out");
        assert_eq!(shared("lvm.rc").trim(), "0", "{out}");
        let r = report("lvm");
        assert!(r.refused.is_empty(), "{:?}", r.refused);
        let warnings = assert_master_stages(&r.progress, false);
        assert_first_boot_warnings(&warnings);
        let found = "A volume group (vgsan) was detected on the installation device (/dev/dm-0)";
        assert!(out.contains(found), "{out}");
        let maps = shared("lvm.dmsetup");
        assert!(
            !maps.contains("vgsan"),
            "a stale map is left: {maps}\n{out}"
        );
        let holders = shared("lvm.holders");
        let want: String = (1..=4).map(|n| format!("mpatha{n}:\n")).collect();
        assert_eq!(holders, want, "{out}");
        let vgs = shared("lvm.vgs");
        assert!(!vgs.contains("vgsan"), "{vgs}");
    });

    // The appliance: the registry copy's stage (the dry run runs none of its commands) and
    // the partitions under /dev/mapper, where the steps after the write look for them (maps
    // of a disk without a uuid have none either: lsblk's type is `dm`).
    check("agent", &|| {
        let r = installed("agent", &agent, "", &["root"], ("agent", "dm"));
        let warnings = assert_master_stages(&r.progress, true);
        assert_first_boot_warnings(&warnings);
        let copied = ("Copying registry data to disk".into(), "100%".into());
        assert!(r.progress.contains(&copied), "{:?}", r.progress);
        // The copy as Go runs it: the stand-in initramfs script around growpart, the data in
        // the installed root, then the reboot.
        assert_eq!(
            shared("agent.transposefs"),
            "transposefs autosave-xfs\ntransposefs restore\ntransposefs cleanup\n"
        );
        let want = shared("agent.registry.want");
        assert!(want.lines().count() == 8, "{want}");
        let (registry, fs_bytes) = registry_in_installed_root(&agent);
        let out = shared("agent.out");
        assert_eq!(
            registry, want,
            "the registry data in the installed root:\n{out}"
        );
        let shutdown = shared("agent.shutdown");
        assert!(shutdown.starts_with("shutdown -r +1"), "{shutdown}");
        // growpart grew the root partition to the disk's end (less the free share), and the
        // kernel's map of it, and the file system, grew with it.
        let (root, _) = partition(&agent, 512, "root");
        let image_root = fx.spec.root_mib * MIB;
        assert!(root > image_root + 16 * MIB, "root partition {root} bytes");
        let sizes: serde_json::Value = serde_json::from_str(&shared("agent.sizes.json")).unwrap();
        assert_eq!(
            sizes["blockdevices"][0]["children"][3]["size"].as_u64(),
            Some(root),
            "the kernel's map of the grown partition: {sizes}"
        );
        let (_, image_fs_bytes) = registry_in_installed_root(&fx.raw);
        assert!(
            fs_bytes > image_fs_bytes + 16 * MIB,
            "the root file system was not grown: {fs_bytes} bytes, {image_fs_bytes} in the image"
        );
        let mapper = shared("agent.mapper");
        assert!(mapper.contains("agent4 -> ../dm-"), "{mapper}");
    });

    // The loop device: the registry copy's stage, and the partitions the writer added with
    // BLKPG still there for lsblk (the copy looks for them there).
    check("loop", &|| {
        let r = installed("loop", &loop_file, "", &[], ("loop0p", "part"));
        assert_master_stages(&r.progress, true);
    });

    // The faulty disk: the error names the device and the byte offset; the service is told
    // the install failed; the disk is left with an empty valid table.
    check("faulty", &|| {
        let out = shared("faulty.out");
        assert_eq!(shared("faulty.rc").trim(), "1", "{out}");
        // Several writes are in flight: the first to fail is named, which may be any MiB of
        // the failing range.
        let named = (ERROR_FROM..ERROR_FROM + ERROR_LEN)
            .step_by(MIB as usize)
            .any(|at| {
                out.contains(&format!(
                    "at offset {at} of /dev/mapper/faulty: Input/output error"
                ))
            });
        assert!(
            named,
            "the write error must name the device and an offset in its failing range:\n{out}"
        );
        let r = report("faulty-entrypoint");
        let last = r.progress.last().cloned().unwrap_or_default();
        assert_eq!(last.0, "Failed", "{:?}", r.progress);
        assert!(
            last.1.contains("/dev/mapper/faulty") && last.1.contains("offset"),
            "{last:?}"
        );
        assert_empty_gpt(&faulty, 512);
    });

    // The lying disk: `--verify` fails the write, naming the device and the first MiB of the
    // dropped segment whose image bytes differ from what the disk held before (zeros); the
    // reset lands (the table areas are on the linear segments).
    check("flakey", &|| {
        let out = shared("flakey.out");
        assert_eq!(shared("flakey.rc").trim(), "1", "{out}");
        let image = std::fs::read(&set(512).raw.path).unwrap();
        let first = (FLAKEY_FROM / MIB..(FLAKEY_FROM + FLAKEY_LEN) / MIB)
            .find(|&m| {
                image[(m * MIB) as usize..((m + 1) * MIB) as usize]
                    .iter()
                    .any(|&b| b != 0)
            })
            .expect("the image has data where the disk lies");
        let wanted = [
            "/dev/mapper/flakey did not return what was written".to_string(),
            format!(
                "the first differing MiB is MiB {first} (offset {})",
                first * MIB
            ),
        ];
        assert!(wanted.iter().all(|w| out.contains(w)), "{wanted:?}:\n{out}");
        assert_empty_gpt(&flakey, 512);
    });

    // The power cut: it leaves a disk no firmware boots. The table written before the stream
    // is empty, since the first MiB, with the image's own table, is written last; the image's
    // bytes from the stream are there (the ESP, right after the first MiB).
    check("power cut", &|| {
        assert!(run.killed, "the guest was not cut");
        assert_eq!(run.exit_code(), None);
        let on_disk = std::fs::read(&cut).unwrap();
        let image = std::fs::read(&set(512).raw.path).unwrap();
        let esp = (2 * MIB) as usize..(10 * MIB) as usize;
        let streamed = on_disk[esp.clone()] == image[esp];
        assert!(streamed, "the stream had not begun when the power was cut");
        assert_ne!(
            on_disk[512..1024],
            image[512..1024],
            "the image's GPT header is on the disk"
        );
        drop((on_disk, image));
        assert_empty_gpt(&cut, 512);
    });
    assert!(problems.is_empty(), "{problems:#?}\n{}", run.transcript());
}

/// The boot entries' label, as the installer writes it.
const BOOT_ENTRY_LABEL: &str = "Red Hat Enterprise Linux";

/// A copy of the 512-byte test image at `to` whose EFI system partition holds what the boot
/// entry step looks for: a FAT file system with `EFI/redhat` and the shim (any bytes: the
/// firmware is not asked to start it), made here (dosfstools, mtools) and written over the
/// partition, whatever the cached image has there (zeros without dosfstools).
fn image_with_redhat_esp(raw: &Path, to: &Path) {
    use std::os::unix::fs::FileExt;
    std::fs::copy(raw, to).unwrap();
    let (size, offset) = partition(to, 512, coreos_image::ESP_LABEL);
    let esp = to.with_extension("esp");
    sparse_disk(&esp, size);
    run(Command::new("mkfs.fat")
        .args(["-n", coreos_image::ESP_LABEL])
        .arg(&esp));
    let shim = to.with_extension("shim");
    std::fs::write(&shim, b"a stand-in for shimx64.efi").unwrap();
    let mtools = |tool: &str, args: &[&std::ffi::OsStr]| {
        run(Command::new(tool)
            .env("MTOOLS_SKIP_CHECK", "1")
            .arg("-i")
            .arg(&esp)
            .args(args))
    };
    mtools("mmd", &["::/EFI".as_ref(), "::/EFI/redhat".as_ref()]);
    mtools(
        "mcopy",
        &[shim.as_os_str(), "::/EFI/redhat/shimx64.efi".as_ref()],
    );
    let image = std::fs::File::options().write(true).open(to).unwrap();
    image
        .write_all_at(&std::fs::read(&esp).unwrap(), offset)
        .unwrap();
}

/// A real install onto an md RAID1 array (metadata 1.0: each member's first sectors are the
/// array's, GPT and EFI system partition included) in a guest started by OVMF, with the
/// firmware's NVRAM in a file: the firmware cannot see the array, so the installer makes one
/// UEFI boot entry on each member, and `efibootmgr -v` in the guest, after the install, lists
/// both, for the ESP (partition 2 of the array's GPT) and the shim. The image is the test
/// image with `EFI/redhat` on its ESP, given as `--image-file` in the installer arguments.
#[test]
fn uefi_boot_entries_on_each_md_raid1_member_in_nvram() {
    let test = "uefi_boot_entries_on_each_md_raid1_member_in_nvram";
    if !have_guest(test) || !common::firmware::have_qemu(test) {
        return;
    }
    let set = cached_image_set(&ImageSpec::test(512)).expect("test images");
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let share = work.path();
    let image = share.join("esp.raw");
    image_with_redhat_esp(&set.raw.path, &image);
    let image_sha256 = coreos_image::hex_sha256(&std::fs::read(&image).unwrap());
    std::fs::write(share.join("config.ign"), IGNITION).unwrap();
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(example_binary("fake-assisted-service"))
        .arg(share.join("fake-assisted-service")));

    let parts = guest_parts::cached_guest_parts().expect("guest parts");
    let mut spec = GuestSpec::new(parts.bzimage, parts.initramfs, share);
    for serial in MD_MEMBERS {
        let file = share.join(format!("{serial}.img"));
        sparse_disk(&file, set.raw.size + EXTRA);
        spec.disks
            .push(GuestDisk::new(file, Bus::VirtioBlk, 512, serial));
    }
    spec.expect_disks = vec!["vda".into(), "vdb".into()];
    let vars = share.join("OVMF_VARS.fd");
    spec.uefi_vars = Some(vars.clone());
    spec.limit = std::time::Duration::from_secs(900);
    spec.extra_files = real_install_files();
    let installer_args =
        serde_json::json!(["--image-file", "/share/esp.raw", "--sha256", image_sha256]);
    let [a, b] = MD_MEMBERS;
    let mut script = format!(
        r#"a=$(ai-disk {a}); b=$(ai-disk {b})
echo "$a $b" >/share/nvram.members
[ -d /sys/firmware/efi/efivars ] || {{ echo "no /sys/firmware/efi/efivars: not started by UEFI"; exit 91; }}
efibootmgr -v >/share/nvram.before 2>&1
mdadm --create /dev/md0 --run --assume-clean --level=1 --raid-devices=2 --metadata=1.0 \
  "$a" "$b" || exit 90
mkdir -p /opt/install-dir /var/log
"#
    );
    script.push_str(&reboot_stubs("nvram.shutdown"));
    let host = uuid::Uuid::new_v4().to_string();
    script.push_str(&master_install(
        "nvram",
        &host,
        "/dev/md0",
        &installer_args.to_string(),
        (&["--dry-run"], &[]),
    ));
    script.push_str("efibootmgr -v >/share/nvram.after 2>&1\nmdadm --stop /dev/md0\n");
    spec.script = script;
    let run = run_guest(&spec);
    let shared = |name: &str| run.shared(name);
    assert_eq!(run.exit_code(), Some(0), "{}", run.transcript());
    let out = shared("nvram.out");
    assert_eq!(shared("nvram.rc").trim(), "0", "{out}");

    // NVRAM as the guest's efibootmgr reads it: none of ours before, then one entry per member,
    // each for partition 2 of the GPT the members share (the array's, same partition GUID)
    // and the shim.
    let before = shared("nvram.before");
    assert!(!before.contains(BOOT_ENTRY_LABEL), "{before}");
    let after = shared("nvram.after");
    eprintln!("{test}: efibootmgr -v after the install:\n{after}");
    let entries: Vec<&str> = after
        .lines()
        .filter(|l| l.starts_with("Boot") && l.contains(BOOT_ENTRY_LABEL))
        .collect();
    assert_eq!(
        entries.len(),
        2,
        "efibootmgr -v after the install:\n{after}\n{out}"
    );
    let esp = format!("HD(2,GPT,{}", coreos_image::ESP_PARTITION_GUID);
    for e in &entries {
        assert!(e.contains(&esp), "{e:?} is not {esp}…)\n{after}");
        assert!(
            e.contains(r"File(\EFI\redhat\shimx64.efi)"),
            "{e:?}\n{after}"
        );
    }
    // The installer found the members and made an entry on each; the service heard of no
    // failure.
    let members = shared("nvram.members");
    let members: Vec<&str> = members.split_whitespace().collect();
    let each = format!(
        "one boot entry on each disk under it ({})",
        members.join(", ")
    );
    assert!(
        out.contains(&each),
        "{each:?} not in the install's output:\n{out}"
    );
    let r = ServiceReport::read(&share.join("nvram.report.json")).expect("the service's report");
    let failure = r
        .progress
        .iter()
        .find(|(_, info)| info.contains("UEFI boot entry"));
    assert!(failure.is_none(), "{failure:?}\n{out}");

    // And the firmware keeps them: the variable store holds both entries' labels.
    let store = std::fs::read(&vars).unwrap();
    let label: Vec<u8> = BOOT_ENTRY_LABEL
        .encode_utf16()
        .flat_map(u16::to_le_bytes)
        .collect();
    let stored = store.windows(label.len()).filter(|w| *w == label).count();
    assert!(
        stored >= 2,
        "{stored} entries labelled {BOOT_ENTRY_LABEL:?} in {}",
        vars.display()
    );
}
