//! `write-image` from the live image (osmet) onto disk-image files, without root: the image
//! rebuilt byte for byte and verified, a damaged or missing object failing with its name and
//! leaving an empty GPT, the choice by sector size and architecture, unusable files skipped.
//! The same against the real packer's files, on loop devices, is in `offline_loop.rs`.

mod common;

use common::images::{assert_image_on_disk, gpt_image};
use common::osmet_pack::{pack, Packed};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SIZE: u64 = 24 << 20;

struct Live {
    dir: tempfile::TempDir,
    image: Vec<u8>,
    packed: Packed,
}

impl Live {
    fn new(ss: u32, seed: u64) -> Live {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let mut image = gpt_image(SIZE, u64::from(ss), seed);
        let packed = pack(
            &mut image,
            ss,
            std::env::consts::ARCH,
            &dir.path().join("osmet"),
            &format!("rhcos-{ss}.osmet"),
            &dir.path().join("repo"),
        );
        Live { dir, image, packed }
    }

    fn osmet_dir(&self) -> PathBuf {
        self.dir.path().join("osmet")
    }

    fn disk(&self, size: u64) -> PathBuf {
        let p = self.dir.path().join("disk.img");
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(size).unwrap();
        p
    }

    fn write(&self, disk: &Path, extra: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_assisted-installer"))
            .arg("write-image")
            .arg("--osmet-dir")
            .arg(self.osmet_dir())
            .arg("--ostree-repo")
            .arg(&self.packed.repo)
            .args(extra)
            .arg(disk)
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    }
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn assert_empty_gpt(disk: &Path) {
    let mut f = std::fs::File::open(disk).unwrap();
    let gpt = gptman::GPT::read_from(&mut f, 512).expect("a valid GPT");
    assert_eq!(
        gpt.iter().filter(|(_, p)| p.is_used()).count(),
        0,
        "no partition: nothing can boot"
    );
}

#[test]
fn rebuilds_and_verifies_the_live_image() {
    let live = Live::new(512, 1);
    assert!(live.packed.extents.len() > 20, "enough extents to matter");
    let disk = live.disk(SIZE + (8 << 20));
    let out = live.write(&disk, &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let on_disk = std::fs::read(&disk).unwrap();
    assert_image_on_disk(&on_disk, &live.image, 512);
    assert!(
        stdout.contains("sha256 of the image: ")
            && stdout.contains("(verified against the osmet checksum)"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("rebuilt from {}", live.packed.osmet.display())),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!(
            "installing Test CoreOS 512 {} (512-byte sectors) from {}",
            std::env::consts::ARCH,
            live.packed.osmet.display()
        )),
        "{stderr}"
    );
    // --offline is accepted (coreos-installer's flag); nothing is ever downloaded.
    let out = live.write(&disk, &["--offline"]);
    assert!(out.status.success(), "{:?}", text(&out));
}

#[test]
fn a_changed_object_byte_fails_the_checksum_and_leaves_an_empty_gpt() {
    let live = Live::new(512, 2);
    let (_, obj) = &live.packed.extents[live.packed.extents.len() / 2];
    let mut bytes = std::fs::read(obj).unwrap();
    bytes[0] ^= 1;
    std::fs::write(obj, bytes).unwrap();
    let disk = live.disk(SIZE);
    let out = live.write(&disk, &[]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("the image does not match the checksum recorded in"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sha256 of the rebuilt image is"),
        "{stderr}"
    );
    assert_empty_gpt(&disk);
}

#[test]
fn a_missing_object_is_named_with_its_offset_and_leaves_an_empty_gpt() {
    let live = Live::new(512, 3);
    let (at, obj) = live.packed.extents[live.packed.extents.len() / 3].clone();
    std::fs::remove_file(&obj).unwrap();
    let disk = live.disk(SIZE);
    let out = live.write(&disk, &[]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    // The first extent of that object may come before this one: name the object, and an offset.
    let first = live
        .packed
        .extents
        .iter()
        .find(|(_, p)| *p == obj)
        .unwrap()
        .0;
    assert!(first <= at);
    assert!(
        stderr.contains(&format!(
            "OSTree object {} (needed at image offset {first}) cannot be opened",
            obj.display()
        )),
        "{stderr}"
    );
    assert_empty_gpt(&disk);
}

#[test]
fn the_sector_size_and_architecture_choose_the_file() {
    let live = Live::new(4096, 4);
    // Only a 4096-byte osmet for a 512-byte target (a disk-image file): refused, untouched.
    let disk = live.disk(SIZE);
    std::fs::write(&disk, vec![0xa5u8; SIZE as usize]).unwrap();
    let out = live.write(&disk, &[]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!(
            "is for {} with 512-byte sectors; found: {} (Test CoreOS 4096 {}, 4096-byte sectors)",
            std::env::consts::ARCH,
            live.packed.osmet.display(),
            std::env::consts::ARCH
        )),
        "{stderr}"
    );
    assert!(
        std::fs::read(&disk).unwrap().iter().all(|&b| b == 0xa5),
        "the disk must be untouched"
    );
    // Another architecture's 512-byte file is not taken either.
    let mut other = gpt_image(SIZE, 512, 5);
    pack(
        &mut other,
        512,
        "s390x",
        &live.osmet_dir(),
        "a-s390x.osmet",
        &live.dir.path().join("repo2"),
    );
    let out = live.write(&disk, &[]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("s390x, 512-byte sectors"), "{stderr}");
}

#[test]
fn unusable_files_beside_a_good_one_are_skipped() {
    let live = Live::new(512, 6);
    std::fs::write(
        live.osmet_dir().join("0-garbage.osmet"),
        b"<html>oops</html>",
    )
    .unwrap();
    let mut truncated = std::fs::read(&live.packed.osmet).unwrap();
    truncated.truncate(40);
    std::fs::write(live.osmet_dir().join("1-truncated.osmet"), truncated).unwrap();
    let disk = live.disk(SIZE);
    let out = live.write(&disk, &[]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("0-garbage.osmet: not an osmet file"),
        "{stderr}"
    );
    assert!(stderr.contains("1-truncated.osmet: truncated"), "{stderr}");
    assert_image_on_disk(&std::fs::read(&disk).unwrap(), &live.image, 512);
}

#[test]
fn live_image_flags_conflict_with_a_given_image() {
    let live = Live::new(512, 7);
    let disk = live.disk(SIZE);
    let out = live.write(
        &disk,
        &["--image-file", "/nonexistent.raw.gz", "--insecure"],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_assisted-installer"))
        .args(["write-image", "--osmet-dir"])
        .arg(live.dir.path().join("missing"))
        .arg(&disk)
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("--osmet-dir"), "{stderr}");
    assert!(stderr.contains("no such directory"), "{stderr}");
}
