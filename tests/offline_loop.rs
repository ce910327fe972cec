//! Offline installs from the live image on loop devices (root), with osmet files written by the
//! real `coreos-installer pack osmet` 0.27.0 (see `testdata/live_fixture.rs`): the live layout
//! mounted as a live system has it (a private mount namespace with /sysroot and
//! /run/coreos-installer/osmet), and once through --osmet-dir/--ostree-repo. The written disk
//! must be the raw image byte for byte outside the GPT areas; a changed or missing object must
//! fail with its name and leave an empty GPT; a file for the wrong sector size must be refused
//! with the disk untouched; an unusable file beside a good one must be skipped.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "../testdata/live_fixture.rs"]
mod live_fixture;

use common::images::assert_image_on_disk;
use common::live_ns::LiveLayout;
use common::root::{have_root, sgdisk_verify, LoopDev};
use coreos_image::{BOOT_OFFSET, BOOT_SIZE};
use live_fixture::{cached_live_fixture, LiveFixture};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const MIB: u64 = 1 << 20;

fn fixture(ss: u64) -> LiveFixture {
    cached_live_fixture(ss, false).unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn write_image(mut cmd: Command, args: &[&str], dev: &Path) -> Output {
    cmd.arg("write-image").args(args).arg(dev).output().unwrap()
}

/// A target larger than the image, so the backup GPT must move.
fn target(fx: &LiveFixture) -> LoopDev {
    LoopDev::new(fx.raw_size + 64 * MIB, fx.sector_size)
}

fn device_size(path: &Path) -> u64 {
    use std::io::{Seek, SeekFrom};
    std::fs::File::open(path)
        .unwrap()
        .seek(SeekFrom::End(0))
        .unwrap()
}

/// Byte for byte the raw image, outside the GPT structures the fix-up rewrites by design.
fn assert_is_the_raw_image(dev: &LoopDev, fx: &LiveFixture) {
    sgdisk_verify(&dev.path);
    let disk = dev.read(0, device_size(&dev.path) as usize);
    let raw = std::fs::read(&fx.raw).unwrap();
    assert_image_on_disk(&disk, &raw, fx.sector_size);
}

/// A repo whose objects are symlinks to the fixture's, so one can be changed or removed
/// without touching the shared fixture.
fn repo_copy(fx: &LiveFixture, dir: &Path) -> PathBuf {
    let src = fx.sysroot.join("ostree/repo/objects");
    let repo = dir.join("repo");
    for sub in std::fs::read_dir(&src).unwrap() {
        let sub = sub.unwrap().path();
        let to = repo.join("objects").join(sub.file_name().unwrap());
        std::fs::create_dir_all(&to).unwrap();
        for f in std::fs::read_dir(&sub).unwrap() {
            let f = f.unwrap().path();
            std::os::unix::fs::symlink(&f, to.join(f.file_name().unwrap())).unwrap();
        }
    }
    repo
}

fn osmet_dir(dir: &Path, files: &[&Path]) -> PathBuf {
    let d = dir.join("osmet");
    std::fs::create_dir_all(&d).unwrap();
    for f in files {
        std::fs::copy(f, d.join(f.file_name().unwrap())).unwrap();
    }
    d
}

fn offline_write_on_a_live_system(ss: u64) {
    let fx = fixture(ss);
    let dev = target(&fx);
    let live = LiveLayout::new(&fx.sysroot, std::slice::from_ref(&fx.osmet));
    let out = write_image(live.command(BIN), &[], &dev.path);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "installing {} x86_64 ({ss}-byte sectors) from /run/coreos-installer/osmet/{}",
            fx.description,
            fx.osmet.file_name().unwrap().to_str().unwrap()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "live image: osmet files in /run/coreos-installer/osmet, OSTree objects in /sysroot/ostree/repo"
        ),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!(
            "sha256 of the image: {} (verified against the osmet checksum)",
            fx.raw_sha256
        )),
        "{stdout}"
    );
    assert_is_the_raw_image(&dev, &fx);
}

#[test]
fn offline_write_512_on_a_live_system() {
    if have_root("offline_write_512_on_a_live_system") {
        offline_write_on_a_live_system(512);
    }
}

#[test]
fn offline_write_4096_on_a_live_system() {
    if have_root("offline_write_4096_on_a_live_system") {
        offline_write_on_a_live_system(4096);
    }
}

#[test]
fn offline_write_through_osmet_dir_and_ostree_repo() {
    if !have_root("offline_write_through_osmet_dir_and_ostree_repo") {
        return;
    }
    let fx = fixture(512);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let osmets = osmet_dir(dir.path(), &[&fx.osmet]);
    let dev = target(&fx);
    let out = write_image(
        Command::new(BIN),
        &[
            "--offline",
            "--osmet-dir",
            osmets.to_str().unwrap(),
            "--ostree-repo",
            fx.sysroot.join("ostree/repo").to_str().unwrap(),
        ],
        &dev.path,
    );
    assert!(out.status.success(), "{:?}", text(&out));
    assert_is_the_raw_image(&dev, &fx);
}

/// The kernel: an object the packer mapped into /boot (and into the root's deployment).
fn kernel_object(fx: &LiveFixture, repo: &Path) -> PathBuf {
    let (kernel, _) = fx.boot_objects();
    repo.join(format!("objects/{}/{}.file", &kernel[..2], &kernel[2..]))
}

/// Write the live image with the kernel object changed by `damage` (in a copy of the repo):
/// the device and write-image's stderr.
fn write_with_damaged_kernel(
    fx: &LiveFixture,
    damage: impl FnOnce(&Path),
) -> (LoopDev, PathBuf, PathBuf, String) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let repo = repo_copy(fx, dir.path());
    let obj = kernel_object(fx, &repo);
    damage(&obj);
    let osmets = osmet_dir(dir.path(), &[&fx.osmet]);
    let dev = target(fx);
    let out = write_image(
        Command::new(BIN),
        &[
            "--osmet-dir",
            osmets.to_str().unwrap(),
            "--ostree-repo",
            repo.to_str().unwrap(),
        ],
        &dev.path,
    );
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    (dev, repo, obj, stderr)
}

#[test]
fn a_changed_object_byte_fails_the_checksum_and_leaves_an_empty_gpt() {
    if !have_root("a_changed_object_byte_fails_the_checksum_and_leaves_an_empty_gpt") {
        return;
    }
    let fx = fixture(512);
    let (dev, repo, _, stderr) = write_with_damaged_kernel(&fx, |obj| {
        let mut bytes = std::fs::read(obj).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        std::fs::remove_file(obj).unwrap();
        std::fs::write(obj, bytes).unwrap();
    });
    assert!(
        stderr.contains("the image does not match the checksum recorded in")
            && stderr.contains(&format!("an object in {} differs", repo.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("expected {}", fx.raw_sha256)),
        "{stderr}"
    );
    common::root::assert_empty_gpt(&dev.path, 512);
}

#[test]
fn a_missing_object_is_named_and_leaves_an_empty_gpt() {
    if !have_root("a_missing_object_is_named_and_leaves_an_empty_gpt") {
        return;
    }
    let fx = fixture(4096);
    let (dev, _, obj, stderr) =
        write_with_damaged_kernel(&fx, |obj| std::fs::remove_file(obj).unwrap());
    let prefix = format!("OSTree object {} (needed at image offset ", obj.display());
    let at = stderr
        .find(&prefix)
        .unwrap_or_else(|| panic!("the object is not named: {stderr}"));
    let offset: u64 = stderr[at + prefix.len()..]
        .split(')')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // First needed for /boot's copy of the kernel.
    assert!(
        (BOOT_OFFSET..BOOT_OFFSET + BOOT_SIZE).contains(&offset),
        "offset {offset} is not in /boot: {stderr}"
    );
    assert!(stderr.contains("cannot be opened"), "{stderr}");
    common::root::assert_empty_gpt(&dev.path, 4096);
}

#[test]
fn only_a_4096_osmet_for_a_512_disk_is_refused_untouched() {
    if !have_root("only_a_4096_osmet_for_a_512_disk_is_refused_untouched") {
        return;
    }
    let fx4k = fixture(4096);
    let dev = LoopDev::new(fx4k.raw_size + 64 * MIB, 512);
    let pattern: Vec<u8> = (0..2 * MIB).map(|i| (i % 253) as u8).collect();
    dev.write(0, &pattern);
    let live = LiveLayout::new(&fx4k.sysroot, std::slice::from_ref(&fx4k.osmet));
    let out = write_image(live.command(BIN), &[], &dev.path);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    let name = fx4k.osmet.file_name().unwrap().to_str().unwrap();
    assert!(
        stderr.contains(&format!(
            "no osmet file in /run/coreos-installer/osmet is for x86_64 with 512-byte sectors; found: /run/coreos-installer/osmet/{name} ({} x86_64, 4096-byte sectors)",
            fx4k.description
        )),
        "{stderr}"
    );
    assert_eq!(dev.read(0, pattern.len()), pattern, "the disk was touched");
}

#[test]
fn a_garbage_file_beside_a_good_one_is_skipped() {
    if !have_root("a_garbage_file_beside_a_good_one_is_skipped") {
        return;
    }
    let fx = fixture(512);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // Sorted first, so it is met before the good file.
    let garbage = dir.path().join("0-broken.osmet");
    std::fs::write(&garbage, b"OSMET\0\0\0\x01\xff\xff").unwrap();
    let live = LiveLayout::new(&fx.sysroot, &[garbage, fx.osmet.clone()]);
    let dev = target(&fx);
    let out = write_image(live.command(BIN), &[], &dev.path);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "skipping /run/coreos-installer/osmet/0-broken.osmet: invalid integer tag 255"
        ),
        "{stderr}"
    );
    assert_is_the_raw_image(&dev, &fx);
}
