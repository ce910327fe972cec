//! `write-image` from the live image (osmet) onto disk-image files, without root: a damaged or
//! missing object failing with its name and leaving an empty GPT, a file of the other sector size
//! refused, unusable files skipped beside a good one that is rebuilt byte for byte (the choice by
//! name, architecture and sector size is `image::osmet::choose`'s tests). The install from the
//! real packer's files, its messages and `--offline`, on loop devices, is in `offline_loop.rs`.

mod common;

use common::images::{assert_image_on_disk, gpt_image};
use osmet_pack::{pack, Packed};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

// A small osmet packer for tests that need no root. The real packer's files are covered by the
// loop-device tests (`offline_loop.rs`); odd extents (an object in several extents, slack past
// its end, reads longer than one) by `image::osmet::rebuild`'s tests.
mod osmet_pack {
    use assisted_installer::image::osmet::format::{
        encode, Body, Header, Mapping, ObjectId, Partition,
    };
    use sha2::Digest;
    use std::io::Write;
    use std::path::{Path, PathBuf};

    pub(crate) struct Packed {
        pub osmet: PathBuf,
        pub repo: PathBuf,
        /// Image offset and path of every object extent, in image order.
        pub extents: Vec<(u64, PathBuf)>,
    }

    /// Pack `image` as an osmet file `<dir>/osmet/rhcos-<ss>.osmet` for this architecture and
    /// `ss`-byte sectors: one partition whose extents (4 KiB to 448 KiB, 4 KiB apart) are objects
    /// under `<dir>/repo/objects`.
    pub(crate) fn pack(image: &[u8], ss: u32, dir: &Path) -> Packed {
        let (osmet_dir, repo) = (dir.join("osmet"), dir.join("repo"));
        let size = image.len() as u64;
        let (start, end) = (2u64 << 20, size - (1 << 20));
        let bytes = |from: u64, len: u64| &image[from as usize..(from + len) as usize];
        // The packed stream: the image with every extent cut out.
        let mut packed = bytes(0, start).to_vec();
        let (mut mappings, mut extents, mut at) = (Vec::new(), Vec::new(), start);
        for k in 0u64.. {
            let len = 4096 * (1 + k * 37 % 112);
            if at + 4096 + len > end {
                break;
            }
            packed.extend_from_slice(bytes(at, 4096));
            at += 4096;
            let object = ObjectId(sha2::Sha256::digest(bytes(at, len)).into());
            let path = repo.join(object.relative_path());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, bytes(at, len)).unwrap();
            mappings.push(Mapping {
                logical: 0,
                physical: at - start,
                length: len,
                object,
            });
            extents.push((at, path));
            at += len;
        }
        packed.extend_from_slice(bytes(at, size - at));
        let body = Body {
            partitions: vec![Partition {
                start_offset: start,
                end_offset: end,
                mappings,
            }],
            checksum: sha2::Sha256::digest(image).into(),
            size,
        };
        let header = Header {
            app_version: "0.27.0".into(),
            sector_size: ss,
            os_description: format!("Test CoreOS {ss}"),
            os_architecture: std::env::consts::ARCH.into(),
        };
        let mut file = encode(&header, &body);
        let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 0);
        xz.write_all(&packed).unwrap();
        file.extend_from_slice(&xz.finish().unwrap());
        std::fs::create_dir_all(&osmet_dir).unwrap();
        let osmet = osmet_dir.join(format!("rhcos-{ss}.osmet"));
        std::fs::write(&osmet, file).unwrap();
        Packed {
            osmet,
            repo,
            extents,
        }
    }
}

const SIZE: u64 = 24 << 20;

struct Live {
    dir: tempfile::TempDir,
    image: Vec<u8>,
    packed: Packed,
}

impl Live {
    fn new(ss: u32, seed: u64) -> Live {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let image = gpt_image(SIZE, u64::from(ss), seed);
        let packed = pack(&image, ss, dir.path());
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

    /// `write-image` from the live image onto `disk`: its exit status, stdout and stderr.
    fn write(&self, disk: &Path, extra: &[&str]) -> (ExitStatus, String, String) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_assisted-installer"));
        cmd.arg("write-image")
            .arg("--osmet-dir")
            .arg(self.osmet_dir());
        cmd.arg("--ostree-repo").arg(&self.packed.repo);
        let out = cmd
            .args(extra)
            .arg(disk)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status, text(&out.stdout), text(&out.stderr))
    }
}

/// One live image at 512-byte sectors, installed from in turn (each time onto a fresh disk):
/// unusable files beside the good one are skipped and it is rebuilt byte for byte; the live-image
/// flags conflict with a given image; a changed object byte fails the checksum and a missing
/// object is named with its offset, both leaving an empty GPT.
#[test]
fn unusable_files_are_skipped_and_damaged_objects_leave_an_empty_gpt() {
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
    let (status, stdout, stderr) = live.write(&disk, &[]);
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("0-garbage.osmet: not an osmet file"),
        "{stderr}"
    );
    assert!(stderr.contains("1-truncated.osmet: truncated"), "{stderr}");
    assert_image_on_disk(&std::fs::read(&disk).unwrap(), &live.image, 512);

    let conflicting = ["--image-file", "/nonexistent.raw.gz", "--insecure"];
    let (status, _, stderr) = live.write(&disk, &conflicting);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_assisted-installer"))
        .args(["write-image", "--osmet-dir"])
        .arg(live.dir.path().join("missing"))
        .arg(&disk)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--osmet-dir"), "{stderr}");
    assert!(stderr.contains("no such directory"), "{stderr}");

    let (_, obj) = &live.packed.extents[live.packed.extents.len() / 2];
    let good = std::fs::read(obj).unwrap();
    let mut bytes = good.clone();
    bytes[0] ^= 1;
    std::fs::write(obj, bytes).unwrap();
    let disk = live.disk(SIZE);
    let (status, _, stderr) = live.write(&disk, &[]);
    assert!(!status.success(), "a changed object byte: {stderr}");
    assert!(
        stderr.contains("the image does not match the checksum recorded in"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sha256 of the rebuilt image is"),
        "{stderr}"
    );
    common::root::assert_empty_gpt(&disk, 512);
    std::fs::write(obj, good).unwrap();

    let (at, obj) = live.packed.extents[live.packed.extents.len() / 3].clone();
    std::fs::remove_file(&obj).unwrap();
    let disk = live.disk(SIZE);
    let (status, _, stderr) = live.write(&disk, &[]);
    assert!(!status.success(), "a missing object: {stderr}");
    assert!(
        stderr.contains(&format!(
            "OSTree object {} (needed at image offset {at}) cannot be opened",
            obj.display()
        )),
        "{stderr}"
    );
    common::root::assert_empty_gpt(&disk, 512);
}

#[test]
fn only_a_file_of_the_other_sector_size_is_refused_untouched() {
    let live = Live::new(4096, 4);
    // Only a 4096-byte osmet for a 512-byte target (a disk-image file): refused, untouched.
    let disk = live.disk(SIZE);
    std::fs::write(&disk, vec![0xa5u8; SIZE as usize]).unwrap();
    let (status, _, stderr) = live.write(&disk, &[]);
    assert!(!status.success());
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
}
