//! `make bench-kexec`: how long a reboot into the installed system takes with kexec against a
//! reboot through the firmware, in the guest rig of tests/common/vm.rs, one run measuring both.
//!
//! Kexec: a guest on Debian's kernel writes the bootable test image (testdata/boot_parts.rs:
//! Debian's kernel and the reporting initramfs) onto its virtio disk with `write-image --kexec`,
//! prints its reboot request and runs `kexec -e` (tests/common/kexec_guest.rs); timed from
//! that line to the written kernel's first console line (`Linux version`). Firmware: the same
//! written disk booted under OVMF (tests/common/firmware.rs, as tests/boot_qemu.rs boots it),
//! timed from QEMU's start (the reset a firmware reboot ends in) through the firmware, its
//! boot manager and systemd-boot to the same kernel line. Both are also timed to the written
//! initramfs's first report line. Rounds alternate; the host prints each round, the medians
//! and their ratio. Real servers' power-on self test (memory training, option ROMs) comes on
//! top of the firmware time measured here.
//!
//! Needs root and QEMU with OVMF; prints why and exits otherwise.

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
#[allow(dead_code)]
mod common {
    #[path = "../../tests/common/firmware.rs"]
    pub(crate) mod firmware;
    #[path = "../../tests/common/kexec_guest.rs"]
    pub(crate) mod kexec_guest;
    #[path = "../../tests/common/root.rs"]
    pub(crate) mod root;
    #[path = "../../tests/common/vm.rs"]
    pub(crate) mod vm;
}

use common::firmware::{boot, firmware_missing};
use common::kexec_guest::{kexec_spec, KERNEL_FIRST_LINE, REBOOT_LINE};
use common::vm::{run_guest, Run};
use coreos_image::{cached_image_set, ImageSpec};
use std::time::Duration;

const ROUNDS: usize = 3;
/// The written initramfs's first report line.
const REPORT_LINE: &str = "AI-BOOT cmdline";

/// (to the kernel's first line, to the report) from the console line `from` on, measured from
/// `start` (QEMU's start when `None`).
fn times(run: &Run, start: Option<&str>) -> (Duration, Duration) {
    let fail = |what: &str| -> ! { panic!("no {what} on the console\n{}", run.transcript()) };
    let (from, t0) = match start {
        Some(text) => run.seen(text, 0).unwrap_or_else(|| fail(text)),
        None => (0, Duration::ZERO),
    };
    let at = |text: &str| run.seen(text, from).unwrap_or_else(|| fail(text)).1 - t0;
    (at(KERNEL_FIRST_LINE), at(REPORT_LINE))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    // Cargo passes --bench (and filters); this bench has nothing to filter.
    let why = if !nix::unistd::geteuid().is_root() {
        Some("it needs root (the guest's disks and share are root's files)".to_string())
    } else {
        firmware_missing()
    };
    if let Some(why) = why {
        eprintln!("kexec_reboot: skipped: {why}");
        return;
    }
    let ss = 512;
    let boot_parts = boot_parts::cached_boot_parts().expect("boot parts");
    let set = cached_image_set(&ImageSpec::test(ss).with_boot(boot_parts)).expect("test images");
    let parts = guest_parts::cached_guest_parts().expect("the guest's kernel and initramfs");
    let work = common::root::run_dir("bench-kexec-reboot");
    let share = work.path().join("share");
    std::fs::create_dir_all(&share).unwrap();
    std::fs::copy(&set.zst.path, share.join("image.raw.zst")).unwrap();
    // The console argument makes the written kernel talk on the serial console the bench reads.
    let write = format!(
        "assisted-installer write-image --image-file /share/image.raw.zst --sha256 {} \
         --append-karg console=ttyS0,115200n8 --firstboot-args 'rd.neednet=1 ip=dhcp' \
         --kexec \"$1\"\n",
        set.zst.sha256
    );
    let disk = work.path().join("disk.img");
    let target = (disk.as_path(), set.raw.size + (64 << 20), ss);
    let (mut kexec, mut firmware) = (Vec::new(), Vec::new());
    let (mut guest_accel, mut firmware_accel) = ("", "");
    for round in 1..=ROUNDS {
        let spec = kexec_spec((&parts.kernel, &parts.initramfs), &share, &write, target);
        let run = run_guest(&spec);
        let k = times(&run, Some(REBOOT_LINE));
        guest_accel = run.accel;
        // The disk the guest just wrote; the firmware's writes go to a snapshot overlay.
        let run = boot(&disk, ss, None);
        let f = times(&run, None);
        firmware_accel = run.accel;
        eprintln!(
            "kexec_reboot: round {round}: kexec {:.2?} (report {:.2?}), firmware {:.2?} (report {:.2?})",
            k.0, k.1, f.0, f.1
        );
        kexec.push(k);
        firmware.push(f);
    }
    let med = |v: &[(Duration, Duration)], pick: fn(&(Duration, Duration)) -> Duration| {
        median(v.iter().map(pick).collect())
    };
    println!(
        "\nkexec_reboot: reboot request to the installed kernel, {ROUNDS} rounds, Debian's kernel {} \
         (guest {guest_accel}, firmware {firmware_accel})",
        parts.kernel_release
    );
    println!(
        "  {:<32} {:>14} {:>14}",
        "", "kernel line", "initramfs line"
    );
    for (name, v) in [
        ("kexec (kexec -e)", &kexec),
        ("firmware (OVMF, systemd-boot)", &firmware),
    ] {
        let (a, b) = (med(v, |t| t.0), med(v, |t| t.1));
        println!(
            "  {name:<32} {:>12.2} s {:>12.2} s",
            a.as_secs_f64(),
            b.as_secs_f64()
        );
    }
    let ratio = |pick: fn(&(Duration, Duration)) -> Duration| {
        med(&firmware, pick).as_secs_f64() / med(&kexec, pick).as_secs_f64()
    };
    println!(
        "  {:<32} {:>14.1} {:>14.1}",
        "firmware / kexec",
        ratio(|t| t.0),
        ratio(|t| t.1)
    );
}
