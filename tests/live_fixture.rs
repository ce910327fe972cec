//! The live-system fixture (testdata/live_fixture.rs) is what the osmet tests trust: check that
//! it is what it claims — an osmet file from the real packer for the raw image at hand, and a
//! sysroot holding the objects it refers to — at both sector sizes. Root only (loop devices).

#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "../testdata/live_fixture.rs"]
mod live_fixture;
#[allow(dead_code)]
#[path = "common/root.rs"]
mod root;

use live_fixture::{
    cached_live_fixture, coreos_installer, read_osmet_header, LiveFixture, OSMET_MAGIC,
};
use root::{have_root, skip};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Root, and the packer: without it, skip like a non-root run (fail under
/// AI_REQUIRE_ROOT_TESTS=1, where `make deps` must have installed it).
fn can_run(test: &str) -> bool {
    have_root(test)
        && coreos_installer()
            .map_err(|e| skip(test, &format!("{e:#}")))
            .is_ok()
}

fn sha256_hex(path: &Path) -> String {
    let mut h = Sha256::new();
    std::io::copy(&mut std::fs::File::open(path).unwrap(), &mut h).unwrap();
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn check(fx: &LiveFixture, ss: u64) {
    assert_eq!(fx.sector_size, ss);

    // The osmet file: the real packer's, for this sector size and description.
    let mut magic = [0u8; 8];
    std::fs::File::open(&fx.osmet)
        .unwrap()
        .read_exact(&mut magic)
        .unwrap();
    assert_eq!(magic, OSMET_MAGIC);
    let header = read_osmet_header(&fx.osmet).unwrap();
    assert_eq!(header.app_version, "0.27.0");
    assert_eq!(u64::from(header.sector_size), ss);
    assert_eq!(header.os_description, fx.description);
    assert_eq!(
        header.os_architecture,
        nix::sys::utsname::uname()
            .unwrap()
            .machine()
            .to_str()
            .unwrap()
    );

    // The raw image it was packed from (the packer checked its rebuild against this hash).
    assert_eq!(std::fs::metadata(&fx.raw).unwrap().len(), fx.raw_size);
    assert_eq!(sha256_hex(&fx.raw), fx.raw_sha256);

    // The sysroot: objects named <2 hex>/<62 hex>.file.
    let objects = fx.sysroot.join("ostree/repo/objects");
    let mut count = 0;
    for dir in std::fs::read_dir(&objects).unwrap() {
        let dir = dir.unwrap();
        let prefix = dir.file_name().into_string().unwrap();
        assert!(prefix.len() == 2 && prefix.chars().all(|c| c.is_ascii_hexdigit()));
        for obj in std::fs::read_dir(dir.path()).unwrap() {
            let name = obj.unwrap().file_name().into_string().unwrap();
            let stem = name.strip_suffix(".file").unwrap();
            assert!(stem.len() == 62 && stem.chars().all(|c| c.is_ascii_hexdigit()));
            count += 1;
        }
    }
    assert!(
        count > 1000,
        "only {count} objects in {}",
        objects.display()
    );

    // /boot's kernel and initramfs are objects too, hard-linked from the deployment; our
    // objects are named by the SHA-256 of their bytes.
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
        assert_eq!(&sha256_hex(&path), object);
    }
    assert!(fx.kernel_boot_path().contains("/vmlinuz-"));
}

#[test]
fn live_fixtures_are_packed_by_the_real_packer() {
    if !can_run("live_fixtures_are_packed_by_the_real_packer") {
        return;
    }
    for ss in [512, 4096] {
        let fx = cached_live_fixture(ss, false).unwrap_or_else(|e| panic!("{ss}: {e:#}"));
        check(&fx, ss);
    }
}
