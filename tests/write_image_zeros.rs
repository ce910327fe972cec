//! The image's zeros by the kernel: on a loop device (BLKZEROOUT, which the loop driver turns
//! into zeroed extents of its backing file), on an image file (holes punched), and on an image
//! file whose filesystem cannot punch holes (ramfs: the zeros are written as data, said once).
//! Every target is first filled with old data, so a zero left out would show.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;

use common::images::{assert_image_on_disk, zeros_summary};
use common::root::{fill, have_root, run, run_dir, sgdisk_verify, text, LoopDev};
use coreos_image::{cached_image_set, ImageSet, ImageSpec};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const MIB: u64 = 1 << 20;

fn images(ss: u64) -> ImageSet {
    cached_image_set(&ImageSpec::test(ss)).expect("test images")
}

/// `write-image` of the gzip image of `set` onto `target`, with `extra` arguments; it must
/// succeed, and the target hold the image byte for byte.
fn write_gz(set: &ImageSet, target: &Path, extra: &[&str]) -> Output {
    let out = Command::new(BIN)
        .arg("write-image")
        .args(["--image-file", set.gz.path.to_str().unwrap()])
        .args(["--sha256", &set.gz.sha256])
        .args(extra)
        .arg(target)
        .output()
        .expect("running assisted-installer");
    assert!(out.status.success(), "{}", text(&out));
    let disk = std::fs::read(target).unwrap();
    let raw = std::fs::read(&set.raw.path).unwrap();
    assert_image_on_disk(&disk, &raw, set.spec.sector_size);
    sgdisk_verify(target);
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Whether the loop device's zeroing reached `file`, its backing file, which had `blocks`
/// allocated before: the loop driver zeroes with fallocate, ZERO_RANGE (extents left allocated
/// but unwritten) for BLKZEROOUT on recent kernels, PUNCH_HOLE (fewer blocks) on older ones.
/// `None` where the filesystem cannot tell (only ext4 and XFS are asked for unwritten extents).
fn zeroed_in_backing(file: &Path, blocks: u64) -> Option<bool> {
    let fs = nix::sys::statfs::statfs(file).unwrap().filesystem_type();
    if ![
        nix::sys::statfs::EXT4_SUPER_MAGIC,
        nix::sys::statfs::XFS_SUPER_MAGIC,
    ]
    .contains(&fs)
    {
        eprintln!("the loop device's backing file is on {fs:?}: not looking at its extents");
        return None;
    }
    let out = run(Command::new("filefrag").arg("-v").arg(file));
    let unwritten = out.lines().any(|l| l.contains("unwritten"));
    Some(unwritten || std::fs::metadata(file).unwrap().blocks() < blocks)
}

#[test]
fn a_loop_device_gets_its_zeros_from_the_kernel_or_as_data_with_write_zeros() {
    if !have_root("a_loop_device_gets_its_zeros_from_the_kernel_or_as_data_with_write_zeros") {
        return;
    }
    let set = images(4096);
    let mut seen = Vec::new();
    for (extra, how, by_kernel) in [
        (&[][..], "zeroed by the kernel (BLKZEROOUT)", true),
        (
            &["--write-zeros"][..],
            "written as data (--write-zeros)",
            false,
        ),
    ] {
        let dev = LoopDev::new(set.raw.size + 16 * MIB, 4096);
        dev.fill(set.raw.size, 0xa5);
        let blocks = std::fs::metadata(dev.backing()).unwrap().blocks();
        let out = write_gz(&set, &dev.path, extra);
        let (zeros, said) = zeros_summary(&stdout(&out));
        assert_eq!(said, how, "{}", text(&out));
        assert!(zeros > 8.0, "{}", text(&out));
        seen.push(zeros);
        if let Some(zeroed) = zeroed_in_backing(&dev.backing(), blocks) {
            assert_eq!(
                zeroed, by_kernel,
                "zeroing reached the backing file {extra:?}"
            );
        }
    }
    assert_eq!(seen[0], seen[1], "the same zeros counted either way");
}

/// An image file of `size` bytes full of old data; its size.
fn old_data_file(path: &Path, size: u64) -> u64 {
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
    fill(path, size, 0xa5);
    size
}

#[test]
fn an_image_file_gets_holes_where_the_image_has_zeros() {
    let set = images(512);
    let dir = run_dir("zeros-file");
    let target = dir.path().join("disk.img");
    let size = old_data_file(&target, set.raw.size + 16 * MIB);
    let out = write_gz(&set, &target, &[]);
    let (zeros, how) = zeros_summary(&stdout(&out));
    assert_eq!(
        how,
        "zeroed by the kernel (holes punched)",
        "{}",
        text(&out)
    );
    let allocated = std::fs::metadata(&target).unwrap().blocks() * 512;
    // Everything but the zeros (and the wiped ends, written as data) stays allocated.
    assert!(
        allocated < size - (zeros as u64 - 1) * MIB,
        "{allocated} bytes allocated of {size}, {zeros} MiB of zeros: {}",
        text(&out)
    );
}

/// A mount, unmounted on drop (also when the test fails).
struct Mounted(tempfile::TempDir);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).output();
    }
}

/// ramfs has no fallocate (this kernel's ext2 is ext4's driver, which punches holes): the write
/// goes on with the zeros as data and says so once.
#[test]
fn a_target_that_refuses_zeroing_gets_the_zeros_as_data_with_one_warning() {
    if !have_root("a_target_that_refuses_zeroing_gets_the_zeros_as_data_with_one_warning") {
        return;
    }
    let set = images(512);
    let mnt = Mounted(tempfile::tempdir().unwrap());
    run(Command::new("mount")
        .args(["-t", "ramfs", "ramfs"])
        .arg(mnt.0.path()));
    let target = mnt.0.path().join("disk.img");
    old_data_file(&target, set.raw.size + 16 * MIB);
    let out = write_gz(&set, &target, &[]);
    let refusal = format!("{} refused zeroing (EOPNOTSUPP)", target.display());
    let (zeros, how) = zeros_summary(&stdout(&out));
    assert_eq!(how, format!("written as data: {refusal}"), "{}", text(&out));
    assert!(zeros > 8.0, "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<_> = stderr.lines().filter(|l| l.contains(&refusal)).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains("WARN"), "{stderr}");
}
