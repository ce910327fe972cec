//! Tests that need root (loop devices, mounts) skip with a message when not root, and fail
//! instead when AI_REQUIRE_ROOT_TESTS=1 (CI sets it: CI runs as root and must not skip them).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Whether a root-only test can run here; prints why not, or panics under AI_REQUIRE_ROOT_TESTS.
pub(crate) fn have_root(test: &str) -> bool {
    let why = if !nix::unistd::geteuid().is_root() {
        "it needs root for loop devices"
    } else if Command::new("losetup").arg("--version").output().is_err() {
        "losetup is not installed"
    } else {
        return true;
    };
    skip(test, why)
}

/// A test that cannot run here: says why and returns false, or panics under
/// AI_REQUIRE_ROOT_TESTS=1 (CI), where nothing may be skipped.
pub(crate) fn skip(test: &str, why: &str) -> bool {
    if std::env::var("AI_REQUIRE_ROOT_TESTS").as_deref() == Ok("1") {
        panic!("{test}: {why}, but AI_REQUIRE_ROOT_TESTS=1 forbids skipping");
    }
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// A temporary directory under the target's.
pub(crate) fn run_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

pub(crate) fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A finished program's status and output, for failure messages.
pub(crate) fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A loop device over a sparse backing file, detached (and the file removed) on drop.
pub(crate) struct LoopDev {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl LoopDev {
    pub(crate) fn new(size: u64, sector_size: u64) -> LoopDev {
        Self::with_flags(size, sector_size, &[])
    }

    /// With extra losetup flags, e.g. `--partscan` (then BLKRRPART succeeds, and on a kernel
    /// without partition parsers still creates nothing).
    pub(crate) fn with_flags(size: u64, sector_size: u64, flags: &[&str]) -> LoopDev {
        let dir = run_dir("loopdev");
        let backing = dir.path().join("disk.img");
        std::fs::File::create(&backing)
            .unwrap()
            .set_len(size)
            .unwrap();
        let out = run(Command::new("losetup")
            .args(["--find", "--show", "--sector-size"])
            .arg(sector_size.to_string())
            .args(flags)
            .arg(&backing));
        let dev = LoopDev {
            path: PathBuf::from(out.trim()),
            _dir: dir,
        };
        // An earlier user of this loop device may have left partitions behind (see drop).
        delete_partitions(&dev.path);
        dev
    }

    pub(crate) fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        let f = std::fs::File::open(&self.path).unwrap();
        f.read_exact_at(&mut buf, offset).unwrap();
        buf
    }

    pub(crate) fn write(&self, offset: u64, data: &[u8]) {
        let f = std::fs::OpenOptions::new().write(true).open(&self.path);
        let f = f.unwrap();
        f.write_all_at(data, offset).unwrap();
        f.sync_all().unwrap();
    }

    /// The file behind the device.
    pub(crate) fn backing(&self) -> PathBuf {
        self._dir.path().join("disk.img")
    }

    /// Fill the first `len` bytes with `byte`: data that was there before, which every byte the
    /// next write leaves out would show.
    pub(crate) fn fill(&self, len: u64, byte: u8) {
        fill(&self.path, len, byte);
    }

    /// The sha256 of the whole device.
    pub(crate) fn sha256(&self) -> String {
        run(Command::new("sha256sum").arg(&self.path))[..64].to_string()
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).output();
        delete_partitions(&self.path);
        let _ = Command::new("losetup").arg("-d").arg(&self.path).output();
    }
}

/// Write `len` bytes of `byte` from the start of `path` (a device or a file), durably.
pub(crate) fn fill(path: &Path, len: u64, byte: u8) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let chunk = vec![byte; 1 << 20];
    let mut at = 0;
    while at < len {
        let n = chunk.len().min((len - at) as usize);
        f.write_all_at(&chunk[..n], at).unwrap();
        at += n as u64;
    }
    f.sync_all().unwrap();
}

/// Remove every partition the kernel has for `dev`. Partitions added with BLKPG (by our writer,
/// or `partx -a`) outlive `losetup -d` on a loop device attached without `--partscan`: the next
/// test that gets the same device would see them, and `partx -a` on it fails with "error
/// adding partitions". `partx -d` fails when there are none; that is fine.
pub(crate) fn delete_partitions(dev: &Path) {
    let _ = Command::new("partx").arg("-d").arg(dev).output();
}

/// `sgdisk -v` output, asserting it found no problems.
pub(crate) fn sgdisk_verify(dev: &Path) -> String {
    let out = run(Command::new("sgdisk").arg("-v").arg(dev));
    assert!(
        out.contains("No problems found"),
        "sgdisk -v {} reports problems:\n{out}",
        dev.display()
    );
    out
}

/// The GPT of `dev` (a device or image file) at `ss`-byte sectors.
pub(crate) fn read_gpt(dev: &Path, ss: u64) -> gptman::GPT {
    let mut f = std::fs::File::open(dev).unwrap();
    gptman::GPT::read_from(&mut f, ss).unwrap_or_else(|e| panic!("GPT of {}: {e}", dev.display()))
}

/// (number, name) of the used entries of `gpt`.
pub(crate) fn labels(gpt: &gptman::GPT) -> Vec<(u32, String)> {
    let used = gpt.iter().filter(|(_, p)| p.is_used());
    used.map(|(n, p)| (n, p.partition_name.as_str().to_string()))
        .collect()
}

/// The device (or disk-image file) holds an empty, valid GPT at `ss`-byte sectors, its backup
/// at the end: nothing on it can boot.
pub(crate) fn assert_empty_gpt(dev: &Path, ss: u64) {
    sgdisk_verify(dev);
    let gpt = read_gpt(dev, ss);
    assert_eq!(labels(&gpt), [], "partitions left: the disk could boot");
    let len = std::fs::File::open(dev)
        .and_then(|mut f| std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)));
    assert_eq!(
        gpt.header.backup_lba,
        len.unwrap() / ss - 1,
        "backup at the end"
    );
}

/// The ext4 file system in the partition labelled `label` of a disk (a device or an image
/// file), read with debugfs without mounting: `disk?offset=` is e2fsprogs' own syntax.
pub(crate) struct Ext4(pub String);

impl Ext4 {
    pub(crate) fn on(disk: &Path, ss: u64, label: &str) -> Ext4 {
        let gpt = read_gpt(disk, ss);
        let found = gpt
            .iter()
            .find(|(_, p)| p.is_used() && p.partition_name.as_str() == label);
        let (_, p) = found.unwrap_or_else(|| panic!("no partition {label} on {}", disk.display()));
        Ext4(format!("{}?offset={}", disk.display(), p.starting_lba * ss))
    }

    /// `debugfs -R request`'s output, which must not be empty.
    pub(crate) fn debugfs(&self, request: &str) -> Vec<u8> {
        let mut cmd = Command::new("debugfs");
        let out = cmd.arg("-R").arg(request).arg(&self.0).output().unwrap();
        assert!(
            out.status.success() && !out.stdout.is_empty(),
            "debugfs -R {request:?} {}: {}",
            self.0,
            text(&out)
        );
        out.stdout
    }

    pub(crate) fn text(&self, path: &str) -> String {
        String::from_utf8(self.debugfs(&format!("cat {path}"))).unwrap()
    }

    /// The permission bits of `path`.
    pub(crate) fn mode(&self, path: &str) -> u32 {
        let stat = String::from_utf8(self.debugfs(&format!("stat {path}"))).unwrap();
        let mode = stat
            .split_once("Mode:")
            .and_then(|(_, m)| m.split_whitespace().next());
        let mode = mode.unwrap_or_else(|| panic!("debugfs stat {path}: {stat}"));
        u32::from_str_radix(mode, 8).unwrap() & 0o7777
    }

    /// The `options` line of the BLS entry at `entry`.
    pub(crate) fn bls_options(&self, entry: &str) -> String {
        let bls = self.text(entry);
        let options = bls.lines().find_map(|l| l.strip_prefix("options "));
        options
            .unwrap_or_else(|| panic!("no options in {entry}:\n{bls}"))
            .to_string()
    }
}
