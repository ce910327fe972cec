//! `make bench`, guest part: the offline install with one object reader thread against eight,
//! in one QEMU guest (2 vCPUs) on Debian's kernel, whose squashfs decompresses on every CPU
//! (`CONFIG_SQUASHFS_DECOMP_MULTI_PERCPU`), as the Fedora and RHEL kernels of a live ISO do;
//! this host's kernel may have a single decompressor, which serializes the readers.
//!
//! The guest gets the test-size live fixture as a live ISO has it: its root tree as a zstd
//! squashfs (level 15, as the ISO build makes it) on a read-only virtio disk, which every
//! round mounts afresh on /sysroot (so no decompressed page survives from the round before;
//! the compressed disk is read once into the guest's memory first, as a PXE-booted live
//! system holds it), and its osmet file, copied from the share to /run/coreos-installer/osmet.
//! Five rounds run `write-image --read-threads 1` and `--read-threads 8` onto a scratch virtio
//! disk, in alternating order, with `--read-through-mount` (the kernel's decompressors are what
//! this bench measures; the image decoded by the installer itself is the offline bench's row); the host prints the medians of the summary's seconds, their
//! ratio, the guest's vCPUs and its kernel's squashfs decompressor setting.
//!
//! The guest rig is tests/common/vm.rs (KVM when it works here, else emulation). Needs root
//! and QEMU; prints why and exits otherwise.

// Clippy checks this target with cfg(test) but, without the test harness, drops the #[test]
// functions of these files' test modules: their imports are then unused.
#[allow(unused_imports)]
#[path = "../testdata/boot_parts.rs"]
mod boot_parts;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[allow(unused_imports)]
#[path = "../testdata/guest_parts.rs"]
mod guest_parts;
#[path = "../testdata/live_fixture.rs"]
mod live_fixture;
#[allow(dead_code)]
mod common {
    #[path = "../../tests/common/firmware.rs"]
    pub(crate) mod firmware;
    #[path = "../../tests/common/root.rs"]
    pub(crate) mod root;
    #[path = "../../tests/common/vm.rs"]
    pub(crate) mod vm;
}

use common::vm::{qemu_missing, run_guest, sparse_disk, Bus, GuestDisk, GuestSpec};
use std::time::{Duration, Instant};

const ROUNDS: usize = 5;
const THREADS: [u32; 2] = [1, 8];
const SQUASHFS_LEVEL: u32 = 15;

/// The case: the guest's facts into `info`, then the rounds, each write's output into
/// `r<round>-t<threads>.out`.
fn script() -> String {
    let mut s = String::from(
        r#"{ echo "vcpus $(grep -c ^processor /proc/cpuinfo)"
  grep SQUASHFS_DECOMP "/boot/config-$(uname -r)"; } >/share/info
sq=$(ai-disk ai-squashfs); dst=$(ai-disk ai-target)
cat "$sq" >/dev/null
mkdir -p /sysroot /run/coreos-installer/osmet
# write ROUND THREADS
write() {
  mount -t squashfs -o ro "$sq" /sysroot || exit 90
  rm -f /run/coreos-installer/osmet/*
  cp /share/osmet/* /run/coreos-installer/osmet/ || exit 91
  out=/share/r$1-t$2.out
  assisted-installer write-image --read-through-mount --read-threads $2 "$dst" >$out 2>&1 \
    || { echo "write-image --read-threads $2 failed"; tail -n 20 $out; exit 92; }
  umount /sysroot || exit 93
  echo "round $1, $2 threads: $(grep '^wrote' $out)"
}
"#,
    );
    for round in 1..=ROUNDS {
        let [a, b] = THREADS;
        let (first, second) = if round % 2 == 1 { (a, b) } else { (b, a) };
        s.push_str(&format!("write {round} {first}\nwrite {round} {second}\n"));
    }
    s
}

/// The seconds of a write-image summary (`wrote N bytes (...) in S s: ...`).
fn summary_secs(out: &str) -> Option<f64> {
    let line = out.lines().find(|l| l.starts_with("wrote "))?;
    let (_, rest) = line.split_once(" in ")?;
    rest.split_once(" s:")?.0.trim().parse().ok()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // Cargo passes --bench (and filters); this bench has nothing to filter.
    let why = if !nix::unistd::geteuid().is_root() {
        Some("it needs root (the guest's disks and share are root's files)".to_string())
    } else {
        qemu_missing()
    };
    if let Some(why) = why {
        eprintln!("guest_readers: skipped: {why}");
        return;
    }
    let t = Instant::now();
    let fx = live_fixture::cached_live_fixture(512, false).expect("the live test fixture");
    let squashfs =
        live_fixture::cached_live_squashfs(&fx, SQUASHFS_LEVEL).expect("the fixture's squashfs");
    let parts = guest_parts::cached_guest_parts().expect("the guest's kernel and initramfs");
    eprintln!(
        "guest_readers: fixture (raw {} MiB), squashfs ({} MiB) and guest parts ready in {:.1?}",
        fx.raw_size >> 20,
        std::fs::metadata(&squashfs).unwrap().len() >> 20,
        t.elapsed()
    );
    let work = common::root::run_dir("bench-guest-readers");
    let share = work.path().join("share");
    let osmet_dir = share.join("osmet");
    std::fs::create_dir_all(&osmet_dir).unwrap();
    std::fs::copy(&fx.osmet, osmet_dir.join(fx.osmet.file_name().unwrap())).unwrap();
    let target = work.path().join("target.img");
    sparse_disk(&target, fx.raw_size + (64 << 20));

    let mut spec = GuestSpec::new(parts.kernel, parts.initramfs, &share);
    spec.disks = vec![
        GuestDisk::new(&squashfs, Bus::VirtioBlk, 512, "ai-squashfs").read_only(),
        GuestDisk::new(&target, Bus::VirtioBlk, 512, "ai-target"),
    ];
    spec.expect_disks = vec!["vda".into(), "vdb".into()];
    spec.script = script();
    spec.limit = Duration::from_secs(3600);
    let run = run_guest(&spec);
    if run.exit_code() != Some(0) {
        panic!("the guest's case failed\n{}", run.transcript());
    }

    let secs = |threads: u32| -> Vec<f64> {
        (1..=ROUNDS)
            .map(|r| {
                let out = run.shared(&format!("r{r}-t{threads}.out"));
                summary_secs(&out)
                    .unwrap_or_else(|| panic!("round {r}, {threads} threads: no summary in\n{out}"))
            })
            .collect()
    };
    let (one, eight) = (secs(THREADS[0]), secs(THREADS[1]));
    let info = run.shared("info");
    println!(
        "\nguest_readers: write-image of the live fixture ({} MiB raw) from a zstd-{SQUASHFS_LEVEL} squashfs, \
         {ROUNDS} rounds, QEMU {} on Debian's kernel {}",
        fx.raw_size >> 20,
        run.accel,
        parts.kernel_release
    );
    for line in info.lines() {
        println!("  guest: {line}");
    }
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|s| format!("{s:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (m1, m8) = (median(one.clone()), median(eight.clone()));
    println!("  --read-threads 1: median {m1:.2} s ({})", fmt(&one));
    println!("  --read-threads 8: median {m8:.2} s ({})", fmt(&eight));
    println!("  1 thread / 8 threads: {:.2}", m1 / m8);
}
