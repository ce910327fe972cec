//! The benches' target: a loop device with direct I/O over a sparse file, detached on drop.

use std::path::PathBuf;
use std::process::Command;

pub(crate) struct BenchLoop {
    pub path: PathBuf,
    _backing: tempfile::TempDir,
}

impl BenchLoop {
    /// `size` bytes at 512-byte sectors, with extra `losetup` flags.
    pub(crate) fn new(size: u64, flags: &[&str]) -> BenchLoop {
        let backing = tempfile::Builder::new()
            .prefix("bench-loop")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let file = backing.path().join("disk.img");
        std::fs::File::create(&file).unwrap().set_len(size).unwrap();
        let out = Command::new("losetup")
            .args(["--find", "--show", "--direct-io=on", "--sector-size", "512"])
            .args(flags)
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        BenchLoop {
            path: PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
            _backing: backing,
        }
    }
}

impl BenchLoop {
    /// Detach now: a bench's fixture lives in a static, which is never dropped.
    /// Partitions added with BLKPG outlive `losetup -d`; remove them first so the next user of
    /// the device does not inherit them.
    pub(crate) fn detach(&self) {
        let _ = Command::new("partx").arg("-d").arg(&self.path).output();
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}

impl BenchLoop {
    /// `dd oflag=direct bs=4M` of `image` onto this device: the write limit benches compare
    /// against.
    pub(crate) fn dd_direct(&self, image: &std::path::Path) {
        let st = Command::new("dd")
            .arg(format!("if={}", image.display()))
            .arg(format!("of={}", self.path.display()))
            .args(["bs=4M", "oflag=direct", "status=none"])
            .status()
            .unwrap();
        assert!(st.success());
    }
}

impl Drop for BenchLoop {
    fn drop(&mut self) {
        self.detach();
    }
}

/// A bench's `main`: root only (loop devices), then the criterion `group`, its summary and the
/// bench's own `report`, and last the target loop device of the fixture, if one was made,
/// detached (the fixture lives in a static, never dropped).
pub(crate) fn run_bench(
    name: &str,
    group: fn(),
    report: fn(),
    target: impl FnOnce() -> Option<&'static BenchLoop>,
) {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("the {name} bench needs root (loop devices); skipped");
        return;
    }
    group();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
    report();
    if let Some(t) = target() {
        t.detach();
    }
}
