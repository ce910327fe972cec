//! `write-image` from the live image (osmet) onto disk-image files, without root: the image
//! rebuilt byte for byte and verified, a damaged or missing object failing with its name and
//! leaving an empty GPT, a file of the other sector size refused, unusable files skipped (the
//! choice by name, architecture and sector size is `image::osmet::choose`'s tests).
//! The same against the real packer's files, on loop devices, is in `offline_loop.rs`.

mod common;

use common::images::{assert_image_on_disk, gpt_image};
use osmet_pack::{pack, Packed};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

// A small osmet packer for tests that need no root: it cuts object extents out of an image in
// memory and writes the objects, the osmet file (our encoder, the real format) and the packed
// xz stream. The real packer's files are covered by the loop-device tests (`offline_loop.rs`);
// this one exists to build the odd cases (extents past an object's end, objects in several
// extents, bad tables) quickly.
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

    /// Pack `image` as an osmet file `<osmet_dir>/<name>` for `arch` and `ss`-byte sectors, with
    /// the objects under `<repo>/objects`. The image is changed where an object's last extent runs
    /// past its end: those bytes become zeros, as a filesystem block's slack is.
    pub(crate) fn pack(
        image: &mut [u8],
        ss: u32,
        arch: &str,
        osmet_dir: &Path,
        name: &str,
        repo: &Path,
    ) -> Packed {
        let size = image.len() as u64;
        // Two "partitions", as the packer maps boot and root; objects in the second half of each.
        let parts = [(2u64 << 20, size / 2), (size / 2, size - (1 << 20))];
        let mut partitions = Vec::new();
        let mut extents = Vec::new();
        let mut rng = 0x9e37_79b9_u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for (start, end) in parts {
            let mut mappings = Vec::new();
            let mut at = start + 65536;
            let mut first = true;
            while at + (1 << 20) < end {
                // One or two extents per object, 4 KiB-aligned, 4 KiB to 384 KiB long; the first
                // object of a partition is one 1.5 MiB extent (longer than one read).
                let pieces = if first { 1 } else { 1 + next(2) };
                let lens: Vec<u64> = (0..pieces)
                    .map(|_| {
                        if first {
                            384 * 4096
                        } else {
                            4096 * (1 + next(96))
                        }
                    })
                    .collect();
                first = false;
                let gaps: Vec<u64> = (0..pieces).map(|_| 4096 * next(4)).collect();
                let total: u64 = lens.iter().sum::<u64>() + gaps.iter().sum::<u64>();
                if at + total + (1 << 20) > end {
                    break;
                }
                // The object's bytes: its extents in order, the last one cut short (slack).
                let slack = next(4096);
                let mut content = Vec::new();
                let mut places = Vec::new();
                let mut cursor = at;
                for (len, gap) in lens.iter().zip(&gaps) {
                    cursor += gap;
                    places.push((cursor, *len));
                    cursor += len;
                }
                let (last_at, last_len) = *places.last().unwrap();
                let cut = (last_at + last_len - slack) as usize;
                image[cut..(last_at + last_len) as usize].fill(0);
                for (p, len) in &places {
                    let end = (p + len).min(cut as u64);
                    content.extend_from_slice(&image[*p as usize..end as usize]);
                }
                let id = ObjectId(sha2::Sha256::digest(&content).into());
                let path = repo.join(id.relative_path());
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &content).unwrap();
                let mut logical = 0;
                for (p, len) in places {
                    mappings.push(Mapping {
                        logical,
                        physical: p - start,
                        length: len,
                        object: id,
                    });
                    extents.push((p, path.clone()));
                    logical += len;
                }
                at = cursor;
            }
            partitions.push(Partition {
                start_offset: start,
                end_offset: end,
                mappings,
            });
        }
        let body = Body {
            partitions,
            checksum: sha2::Sha256::digest(&*image).into(),
            size,
        };
        // The packed stream: the image with every extent cut out.
        let mut packed = Vec::new();
        let mut cursor = 0u64;
        for p in &body.partitions {
            for m in &p.mappings {
                let s = p.start_offset + m.physical;
                packed.extend_from_slice(&image[cursor as usize..s as usize]);
                cursor = s + m.length;
            }
        }
        packed.extend_from_slice(&image[cursor as usize..]);
        let header = Header {
            app_version: "0.27.0".into(),
            sector_size: ss,
            os_description: format!("Test CoreOS {ss}"),
            os_architecture: arch.into(),
        };
        let mut file = encode(&header, &body);
        let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 0);
        xz.write_all(&packed).unwrap();
        file.extend_from_slice(&xz.finish().unwrap());
        std::fs::create_dir_all(osmet_dir).unwrap();
        let osmet = osmet_dir.join(name);
        std::fs::write(&osmet, file).unwrap();
        Packed {
            osmet,
            repo: repo.to_path_buf(),
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

#[test]
fn rebuilds_and_verifies_the_live_image() {
    let live = Live::new(512, 1);
    assert!(live.packed.extents.len() > 20, "enough extents to matter");
    let disk = live.disk(SIZE + (8 << 20));
    let (status, stdout, stderr) = live.write(&disk, &[]);
    assert!(status.success(), "{stdout}\n{stderr}");
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
    let (status, _, stderr) = live.write(&disk, &["--offline"]);
    assert!(status.success(), "{stderr}");
}

#[test]
fn a_changed_object_byte_fails_the_checksum_and_leaves_an_empty_gpt() {
    let live = Live::new(512, 2);
    let (_, obj) = &live.packed.extents[live.packed.extents.len() / 2];
    let mut bytes = std::fs::read(obj).unwrap();
    bytes[0] ^= 1;
    std::fs::write(obj, bytes).unwrap();
    let disk = live.disk(SIZE);
    let (status, _, stderr) = live.write(&disk, &[]);
    assert!(!status.success());
    assert!(
        stderr.contains("the image does not match the checksum recorded in"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sha256 of the rebuilt image is"),
        "{stderr}"
    );
    common::root::assert_empty_gpt(&disk, 512);
}

#[test]
fn a_missing_object_is_named_with_its_offset_and_leaves_an_empty_gpt() {
    let live = Live::new(512, 3);
    let (at, obj) = live.packed.extents[live.packed.extents.len() / 3].clone();
    std::fs::remove_file(&obj).unwrap();
    let disk = live.disk(SIZE);
    let (status, _, stderr) = live.write(&disk, &[]);
    assert!(!status.success());
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
    let (status, stdout, stderr) = live.write(&disk, &[]);
    assert!(status.success(), "{stdout}\n{stderr}");
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
}
