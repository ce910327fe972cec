//! Offline installs from the live image on loop devices (root), with osmet files written by the
//! real `coreos-installer pack osmet` 0.27.0 (see `testdata/live_fixture.rs`): the live layout
//! mounted as a live system has it (a private mount namespace with /sysroot and
//! /run/coreos-installer/osmet). At 512-byte sectors /sysroot is the fixture's root as the live
//! ISO ships it, a zstd squashfs, whose image the installer decodes itself (and, once more,
//! through the kernel's squashfs driver with `--read-through-mount`); at 4096 the root's tree
//! bound there (the other layout the tests use). The written disk must be the raw image byte for byte outside the
//! GPT areas, which also vouches for the fixture (its osmet file, raw image and objects agree).
//! The same files through --osmet-dir/--ostree-repo are in `postinstall_loop.rs`; the failures
//! (a changed or missing object, the wrong sector size, unusable files) in `offline_file.rs`.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "../testdata/live_fixture.rs"]
mod live_fixture;

use common::images::{assert_image_on_disk, sha256_hex, zeros_summary};
use common::live_ns::{loop_devices_of, LiveLayout};
use common::root::{have_root, sgdisk_verify, text, LoopDev};
use live_fixture::{cached_live_fixture, cached_live_squashfs, read_osmet_header, LiveFixture};
use std::os::unix::fs::MetadataExt;

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const MIB: u64 = 1 << 20;

/// Onto a target larger than the image (the backup GPT must move), at both sector sizes; at 512
/// from the squashfs root.
#[test]
fn offline_write_512_and_4096_on_a_live_system() {
    if !have_root("offline_write_512_and_4096_on_a_live_system") {
        return;
    }
    for ss in [512, 4096] {
        let fx = cached_live_fixture(ss, false).unwrap();
        let dev = LoopDev::new(fx.raw_size + 64 * MIB, fx.sector_size);
        dev.fill(fx.raw_size, 0x5a);
        let osmets = std::slice::from_ref(&fx.osmet);
        let squashfs = (ss == 512).then(|| cached_live_squashfs(&fx, 3).unwrap());
        // The loop devices already on the image: another process may mount it meanwhile (and
        // `mount -o loop` shares a read-only loop device of the same file), ours must be gone.
        let loops_before = squashfs.as_deref().map(loop_devices_of);
        let live = match &squashfs {
            Some(image) => {
                assert_eq!(
                    sysroot_fs_type(&LiveLayout::squashfs(image, osmets)),
                    "squashfs"
                );
                LiveLayout::squashfs(image, osmets)
            }
            None => LiveLayout::new(&fx.sysroot, osmets),
        };
        // --offline is accepted (coreos-installer's flag); nothing is ever downloaded.
        let mut cmd = live.command(BIN);
        let out = cmd
            .args(["write-image", "--offline"])
            .arg(&dev.path)
            .output();
        let out = out.unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let osmet = format!(
            "/run/coreos-installer/osmet/{}",
            fx.osmet.file_name().unwrap().to_str().unwrap()
        );
        assert!(
            stderr.contains(&format!(
                "installing {} x86_64 ({ss}-byte sectors) from {osmet}",
                fx.description
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains(
                "live image: osmet files in /run/coreos-installer/osmet, OSTree objects in /sysroot/ostree/repo"
            ),
            "{stderr}"
        );
        // On the squashfs, the objects come from its image, decoded here, without a warning.
        let decoded = "live image: decoding the objects from the squashfs image on /dev/loop";
        assert_eq!(stderr.contains(decoded), squashfs.is_some(), "{stderr}");
        assert!(!stderr.contains("WARN"), "{stderr}");
        assert!(
            stdout.contains(&format!(
                "sha256 of the image: {} (verified against the osmet checksum)",
                fx.raw_sha256
            )) && stdout.contains(&format!("rebuilt from {osmet}")),
            "{stdout}"
        );
        let (zeros, how) = zeros_summary(&stdout);
        assert!(
            zeros > 1.0 && how == "zeroed by the kernel (BLKZEROOUT)",
            "{stdout}"
        );
        // Byte for byte the raw image, outside the GPT structures the fix-up rewrites by design.
        sgdisk_verify(&dev.path);
        let disk = std::fs::read(&dev.path).unwrap();
        let raw = std::fs::read(&fx.raw).unwrap();
        assert_image_on_disk(&disk, &raw, fx.sector_size);
        assert_fixture_is_the_real_packers(&fx);
        if squashfs.is_some() {
            // The same through the kernel's squashfs driver, as asked.
            dev.fill(fx.raw_size, 0x5a);
            let out = live
                .command(BIN)
                .args(["write-image", "--read-through-mount"])
                .arg(&dev.path)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("reading the objects through the mounted filesystem, as asked"),
                "{stderr}"
            );
            assert!(!stderr.contains(decoded), "{stderr}");
            assert_image_on_disk(&std::fs::read(&dev.path).unwrap(), &raw, fx.sector_size);
        }
        // Each command's namespace took its mount, hence its loop device, with it.
        if let (Some(image), Some(before)) = (&squashfs, loops_before) {
            assert_eq!(loop_devices_of(image), before);
        }
    }
}

/// The filesystem type of /sysroot inside the layout (`stat -f`).
fn sysroot_fs_type(live: &LiveLayout) -> String {
    let out = live
        .command("stat")
        .args(["-f", "-c", "%T", "/sysroot"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What the rebuild does not show about the fixture: the real packer made it, from a sysroot
/// of many objects, whose /boot kernel and initramfs are hard-linked from the deployment and
/// named by the SHA-256 of their bytes.
fn assert_fixture_is_the_real_packers(fx: &LiveFixture) {
    assert_eq!(read_osmet_header(&fx.osmet).unwrap().app_version, "0.27.0");
    let objects = std::fs::read_dir(fx.sysroot.join("ostree/repo/objects")).unwrap();
    let count: usize = objects
        .map(|d| std::fs::read_dir(d.unwrap().path()).unwrap().count())
        .sum();
    assert!(count > 1000, "only {count} objects");
    let (kernel, initramfs) = fx.boot_objects();
    let spec = fx.spec();
    for (object, deployed) in [
        (&kernel, spec.deployment_kernel_path()),
        (&initramfs, spec.deployment_initramfs_path()),
    ] {
        let path = fx.object_path(object);
        let meta = std::fs::metadata(&path).unwrap();
        assert!(
            meta.len() > 1024,
            "{} is too small to be mapped",
            path.display()
        );
        let other = std::fs::metadata(fx.deployment().join(&deployed)).unwrap();
        assert_eq!((meta.dev(), meta.ino()), (other.dev(), other.ino()));
        assert_eq!(&sha256_hex(&std::fs::read(&path).unwrap()), object);
    }
}
