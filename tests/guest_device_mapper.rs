//! Device-mapper installation disks, in a QEMU guest on Debian's kernel (this host's kernel has
//! no device-mapper): the entrypoint as the service starts it for a multipath host, the
//! appliance's linear `agent` disk with the registry marker, and a disk that fails writes part
//! of the way through. All in one guest boot; the fake assisted-service runs in the guest, on
//! its loopback (the guest has no network device). The image is the live ISO's (osmet file and
//! OSTree objects), as the service never passes an image: the live fixture's files reach the
//! guest through the share as a host root (`ASSISTED_INSTALLER_HOST_ROOT`).
//!
//! The multipath install (`write-image` onto a multipath map, a reinstall over its partition
//! maps, and the written disk booted under OVMF) is in tests/boot_qemu.rs; md, NVMe, SCSI and
//! AHCI disks in tests/guest_disks.rs.
//!
//! Root and QEMU are needed; without them the test skips with a message, and fails instead
//! under AI_REQUIRE_ROOT_TESTS=1. `cargo test --test guest_device_mapper -- --nocapture` prints
//! the guest's times.

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
use coreos_image::{BLS_ENTRY_PATH, BOOT_LABEL};
use live_fixture::cached_live_fixture;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;
const EXTRA: u64 = 64 * MIB;
/// Exactly what the service passes for a multipath installation disk.
const MULTIPATH_INSTALLER_ARGS: &str =
    r#"["--append-karg","rw","--append-karg","rd.multipath=default","--copy-network"]"#;
const MPATH_UUID: &str = "mpath-36001405aa0000000000000000000002";
/// Where the faulty disk refuses writes: 8 MiB from 64 MiB on, inside the image.
const ERROR_FROM: u64 = 64 * MIB;
const ERROR_LEN: u64 = 8 * MIB;
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
  --ignition-file /share/pointer.ign --token-file /tmp/{label}.token --report-file /share/{label}.report.json &
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

/// The appliance: a linear map named `agent` over its disk, the registry marker and the
/// registry data, and what the live ISO has that the guest lacks: the initramfs script the
/// registry copy runs around growpart (here a stand-in that records its calls: XFS grows in
/// place with `xfs_growfs` all the same), and `systemctl` and `shutdown` for the end of a real
/// install (recording too).
const APPLIANCE_SETUP: &str = r#"
a=$(ai-disk ai-agent)
dmsetup create agent --table "0 $(sectors $a) linear $(devno $a) 0" || exit 96
dmsetup mknodes agent
mkdir -p /share/hostroot/run/media/iso/registry /mnt/agentdata/blobs /usr/local/sbin
for n in 1 2 3 4 5 6 7 8; do dd if=/dev/urandom of=/mnt/agentdata/blobs/layer$n bs=1M count=1 2>/dev/null; done
(cd /mnt/agentdata && find . -type f | sort | xargs sha256sum) >/share/agent.registry.want
t=/usr/lib/dracut/modules.d/40ignition-ostree/ignition-ostree-transposefs.sh
mkdir -p ${t%/*}
printf '#!/bin/sh
threshold=90
echo "transposefs $*" >>/share/agent.transposefs
' >$t
printf '#!/bin/sh
exit 0
' >/usr/local/sbin/systemctl
printf '#!/bin/sh
echo "shutdown $*" >>/share/agent.shutdown
' >/usr/local/sbin/shutdown
chmod 755 $t /usr/local/sbin/systemctl /usr/local/sbin/shutdown
export PATH=/usr/local/sbin:$PATH
"#;

/// After the appliance install: the partition sizes the kernel has for the disk's maps (the
/// installed root is read from the host: its file system stays frozen until the reboot).
const APPLIANCE_CHECK: &str = r#"
lsblk --bytes --json -o NAME,SIZE /dev/mapper/agent >/share/agent.sizes.json 2>&1
"#;

/// The case script.
fn script(hosts: &[String; 4], image_sha256: &str) -> String {
    let mut s = String::from(
        r#"export ASSISTED_INSTALLER_HOST_ROOT=/share/hostroot
mkdir -p /opt/install-dir /var/log
sectors() { cat /sys/block/${1#/dev/}/size; }
devno() { cat /sys/block/${1#/dev/}/dev; }

# A multipath host: the map multipathd makes over the two paths (dm-0), with its node.
set -- $(ai-disk ai-mpath)
[ $# -eq 2 ] || { echo "expected two paths, got: $*"; exit 99; }
dmsetup create mpatha --uuid MPATH_UUID --table \
  "0 $(sectors $1) multipath 0 0 1 1 round-robin 0 2 1 $(devno $1) 1 $(devno $2) 1" || exit 98
[ "$(cat /sys/block/dm-0/dm/name)" = mpatha ] || exit 97
dmsetup mknodes mpatha
"#,
    )
    .replace("MPATH_UUID", MPATH_UUID);
    let none: (&[&str], &[&str]) = (&[], &[]);
    s.push_str(&master_install(
        "mpath",
        &hosts[0],
        "/dev/dm-0",
        MULTIPATH_INSTALLER_ARGS,
        none,
    ));
    s.push_str(APPLIANCE_SETUP);
    // Not a dry run: the registry copy's host commands run (the install-disk cleanup is
    // skipped: LVM's and mdadm's tools are not in the guest).
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
    let from = ERROR_FROM / 512;
    let len = ERROR_LEN / 512;
    let _ = write!(
        s,
        r#"
rmdir /share/hostroot/run/media/iso/registry
# A disk that fails writes part of the way in: an error target between two linear ones.
f=$(ai-disk ai-faulty)
rest=$(( $(sectors $f) - {from} - {len} ))
printf '0 {from} linear %s 0\n{from} {len} error\n{end} %s linear %s {end}\n' \
  "$(devno $f)" "$rest" "$(devno $f)" | dmsetup create faulty || exit 95
dmsetup mknodes faulty
assisted-installer write-image --image-file /share/image.raw.zst --sha256 {image_sha256} \
  /dev/mapper/faulty >/share/faulty.out 2>&1
echo $? >/share/faulty.rc
echo "faulty: write-image exited $(cat /share/faulty.rc)"
"#,
        end = from + len
    );
    s.push_str(&master_install(
        "faulty-entrypoint",
        &hosts[2],
        "/dev/mapper/faulty",
        r#"[]"#,
        none,
    ));
    s.push_str("exit 0\n");
    s
}

/// A guest sharing `share`, with the kernel and base initramfs of testdata/guest_parts.rs.
fn guest(share: &Path) -> GuestSpec {
    let parts = guest_parts::cached_guest_parts().expect("guest parts");
    GuestSpec::new(parts.kernel, parts.initramfs, share)
}

/// The size in bytes of the partition `label` of the disk file `disk` and its offset.
fn partition(disk: &Path, label: &str) -> (u64, u64) {
    let gpt = read_gpt(disk, 512);
    let (_, p) = gpt
        .iter()
        .find(|(_, p)| p.is_used() && p.partition_name.as_str() == label)
        .unwrap_or_else(|| panic!("no partition {label} on {}", disk.display()));
    (
        (p.ending_lba + 1 - p.starting_lba) * 512,
        p.starting_lba * 512,
    )
}

/// `sha256sum` lines (`<digest>  ./<path>`, sorted) of the registry directory in the XFS root
/// partition of the disk file, mounted read-only here through a loop device; and the file
/// system's size in bytes.
fn registry_in_installed_root(disk: &Path) -> (String, u64) {
    let (size, offset) = partition(disk, "root");
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

/// A written disk file, from the host: the live image's bytes outside the GPT areas (and
/// outside /boot, which the post-install steps write into, and the partitions labelled
/// `changed`), a clean GPT, the served Ignition config, the kernel arguments and the network
/// keyfile on /boot.
fn check_installed(disk: &Path, raw: &Path, kargs: &str, changed: &[&str]) {
    let (mut on_disk, mut image) = (std::fs::read(disk).unwrap(), std::fs::read(raw).unwrap());
    for label in changed.iter().chain(&[BOOT_LABEL]) {
        let (size, offset) = partition(disk, label);
        let (start, end) = (offset as usize, (offset + size) as usize);
        let (d, i) = (on_disk.len(), image.len());
        on_disk[start..end.min(d)].fill(0);
        image[start.min(i)..end.min(i)].fill(0);
    }
    if changed.is_empty() {
        assert_image_on_disk(&on_disk, &image, 512);
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
    sgdisk_verify(disk);
    let fs = Ext4::on(disk, 512, BOOT_LABEL);
    assert_eq!(fs.text("/ignition/config.ign"), IGNITION, "{}", fs.0);
    let options = fs.bls_options(&format!("/{BLS_ENTRY_PATH}"));
    assert!(options.ends_with(kargs), "{}: options {options:?}", fs.0);
    assert_eq!(
        fs.text("/coreos-firstboot-network/eno1.nmconnection"),
        KEYFILE
    );
}

#[test]
fn multipath_linear_and_faulty_device_mapper_disks_in_one_guest() {
    if !have_guest("multipath_linear_and_faulty_device_mapper_disks_in_one_guest") {
        return;
    }
    let fx = cached_live_fixture(512, false).expect("live fixture");
    let set = coreos_image::cached_image_set(&coreos_image::ImageSpec::test(512)).unwrap();
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let share = work.path();

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
    std::fs::write(share.join("pointer.ign"), IGNITION).unwrap();
    std::fs::copy(&set.zst.path, share.join("image.raw.zst")).unwrap();
    let svc = example_binary("fake-assisted-service");
    let svc_in_share = share.join("fake-assisted-service");
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(svc)
        .arg(svc_in_share));

    let disk = |name: &str| {
        let p = share.join(name);
        sparse_disk(&p, fx.raw_size + EXTRA);
        p
    };
    let (mpath, agent, faulty) = (disk("mpath.img"), disk("agent.img"), disk("faulty.img"));
    let loop_file = disk("loop.img");
    let hosts = [(); 4].map(|_| uuid::Uuid::new_v4().to_string());
    let mut spec = guest(share);
    let path =
        GuestDisk::new(&mpath, Bus::VirtioScsi, 512, "ai-mpath").with_wwn(0x6001_405a_a000_0002);
    spec.disks = vec![
        path.clone(),
        path,
        GuestDisk::new(&agent, Bus::VirtioBlk, 512, "ai-agent"),
        GuestDisk::new(&faulty, Bus::VirtioBlk, 512, "ai-faulty"),
    ];
    spec.expect_disks = ["sda", "sdb", "vda", "vdb"].map(String::from).to_vec();
    // About a minute alone here under TCG; four times that while a build shares the cores.
    spec.limit = std::time::Duration::from_secs(900);
    // The service client loads the system's trusted roots (the installer container has the
    // host's /etc/pki); the guest's busybox root has none.
    spec.extra_files = vec![(
        "/etc/ssl/certs/ca-certificates.crt".into(),
        "/etc/ssl/certs/ca-certificates.crt".into(),
        0o644,
    )];
    // What a real (not dry-run) install runs on the live ISO that the guest's base lacks.
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
        spec.extra_files.push((tool.into(), tool.into(), 0o755));
    }
    spec.script = script(&hosts, &set.zst.sha256);
    let run = run_guest(&spec);
    let report = |label: &str| {
        ServiceReport::read(&share.join(format!("{label}.report.json"))).unwrap_or_else(|e| {
            panic!(
                "{label}: no service report ({e:#})\n{}\n--- {label}.out:\n{}",
                run.transcript(),
                run.shared(&format!("{label}.out"))
            )
        })
    };
    assert_eq!(run.exit_code(), Some(0), "{}", run.transcript());
    let shared = |name: &str| run.shared(name);

    // One install that must have succeeded, as the guest left it: the service's report, and
    // the names and types lsblk gave the disk's partitions.
    let installed = |label: &str| -> (ServiceReport, Vec<(String, String)>) {
        let out = shared(&format!("{label}.out"));
        assert_eq!(shared(&format!("{label}.rc")).trim(), "0", "{out}");
        let r = report(label);
        assert!(r.refused.is_empty(), "{label}: {:?}", r.refused);
        let lsblk = shared(&format!("{label}.lsblk.json"));
        (r, lsblk_children(&lsblk))
    };
    let partitions = |names: &str, kind: &str| -> Vec<(String, String)> {
        (1..=4)
            .map(|n| (format!("{names}{n}"), kind.to_string()))
            .collect()
    };

    // The multipath host, as the service starts it: the Go stage sequence, the disk as the
    // live image with the multipath kernel arguments, and kpartx's partition maps left.
    let (r, children) = installed("mpath");
    assert_master_stages(&r.progress, false);
    check_installed(&mpath, &fx.raw, "rw rd.multipath=default", &[]);
    assert_eq!(children, partitions("mpatha", "part"));

    // The appliance: the registry copy's stage (the dry run runs none of its commands) and
    // the partitions under /dev/mapper, where the steps after the write look for them (maps
    // of a disk without a uuid have none either: lsblk's type is `dm`).
    let (r, children) = installed("agent");
    assert_master_stages(&r.progress, true);
    assert!(
        r.progress
            .contains(&("Copying registry data to disk".into(), "100%".into())),
        "{:?}",
        r.progress
    );
    check_installed(&agent, &fx.raw, "", &["root"]);
    assert_eq!(children, partitions("agent", "dm"));
    // The copy as Go runs it: the stand-in initramfs script around growpart, the data in
    // the installed root, then the reboot.
    assert_eq!(
        shared("agent.transposefs"),
        "transposefs autosave-xfs\ntransposefs restore\ntransposefs cleanup\n"
    );
    let want = shared("agent.registry.want");
    assert!(want.lines().count() == 8, "{want}");
    let (registry, fs_bytes) = registry_in_installed_root(&agent);
    assert_eq!(
        registry,
        want,
        "the registry data in the installed root; the install:\n{}",
        shared("agent.out")
    );
    assert!(
        shared("agent.shutdown").starts_with("shutdown -r +1"),
        "{}",
        shared("agent.shutdown")
    );
    // growpart grew the root partition to the disk's end (less the free share), and the
    // kernel's map of it, and the file system, grew with it.
    let (root, _) = partition(&agent, "root");
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
    assert!(
        shared("agent.mapper").contains("agent4 -> ../dm-"),
        "{}",
        shared("agent.mapper")
    );

    // The loop device: the registry copy's stage, and the partitions the writer added with
    // BLKPG still there for lsblk (the copy looks for them there).
    let (r, children) = installed("loop");
    assert_master_stages(&r.progress, true);
    check_installed(&loop_file, &fx.raw, "", &[]);
    assert_eq!(children, partitions("loop0p", "part"));

    // The faulty disk: the error names the device and the byte offset; the service is told
    // the install failed; the disk is left with an empty valid table.
    let out = shared("faulty.out");
    assert_eq!(shared("faulty.rc").trim(), "1", "{out}");
    assert!(
        out.contains("/dev/mapper/faulty") && out.contains(&format!("at offset {ERROR_FROM}")),
        "the write error must name the device and the offset:\n{out}"
    );
    let r = report("faulty-entrypoint");
    let last = r.progress.last().cloned().unwrap_or_default();
    assert_eq!(last.0, "Failed", "{:?}", r.progress);
    assert!(
        last.1.contains("/dev/mapper/faulty") && last.1.contains("offset"),
        "{last:?}"
    );
    assert_empty_gpt(&faulty, 512);
}

/// A power cut in the middle of a write (the guest killed once 40 MiB of the 91 MiB image are
/// on the disk) leaves a disk no firmware boots: the table written before the stream is empty,
/// since the first MiB, with the image's own table, is written last.
#[test]
fn a_power_cut_mid_write_leaves_a_disk_that_does_not_boot() {
    if !have_guest("a_power_cut_mid_write_leaves_a_disk_that_does_not_boot") {
        return;
    }
    let set = coreos_image::cached_image_set(&coreos_image::ImageSpec::test(512)).unwrap();
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let share = work.path();
    std::fs::copy(&set.zst.path, share.join("image.raw.zst")).unwrap();
    let disk = share.join("disk.img");
    sparse_disk(&disk, set.raw.size + EXTRA);
    // An earlier install, bootable, that the new one is writing over.
    std::fs::write(&disk, std::fs::read(&set.raw.path).unwrap()).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&disk)
        .unwrap()
        .set_len(set.raw.size + EXTRA)
        .unwrap();
    let mut spec = guest(share);
    spec.disks = vec![GuestDisk::new(&disk, Bus::VirtioBlk, 512, "ai-cut")];
    spec.expect_disks = vec!["vda".into()];
    spec.kill_when = Some("AI-CUT".into());
    spec.script = format!(
        r#"d=$(ai-disk ai-cut)
written() {{ set -- $(cat /sys/block/${{d#/dev/}}/stat); echo $7; }}
before=$(written)
assisted-installer write-image --image-file /share/image.raw.zst --sha256 {} $d >/share/out 2>&1 &
while [ $(( $(written) - before )) -lt 81920 ]; do
  kill -0 $! 2>/dev/null || {{ echo "write-image ended before the cut"; exit 1; }}
  sleep 0.01
done
echo AI-CUT
sleep 60
"#,
        set.zst.sha256
    );
    let run = run_guest(&spec);
    assert!(run.killed, "the guest was not cut:\n{}", run.transcript());
    assert_eq!(run.exit_code(), None);
    let on_disk = std::fs::read(&disk).unwrap();
    let image = std::fs::read(&set.raw.path).unwrap();
    // Mid-write: the image's bytes from the stream are there (the ESP, right after the
    // first MiB), but not the image's table.
    let esp = (2 * MIB) as usize..(10 * MIB) as usize;
    assert!(
        on_disk[esp.clone()] == image[esp],
        "the stream had not begun when the power was cut"
    );
    assert_ne!(
        on_disk[512..1024],
        image[512..1024],
        "the image's GPT header is on the disk"
    );
    drop((on_disk, image));
    assert_empty_gpt(&disk, 512);
}
