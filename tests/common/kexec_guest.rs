//! A kexec reboot in the guest rig ([`super::vm::run_guest`]): the guest writes a bootable test
//! image onto its virtio disk (`vda`, where the test initramfs of testdata/boot_parts.rs looks)
//! with `write-image --kexec`, then starts the loaded kernel with kexec-tools' `kexec -e` (what
//! `systemctl kexec` ends in on a host). The written kernel then reports on the same serial
//! console (`AI-BOOT` lines) and powers off. Shared by tests/boot_qemu.rs (the report) and
//! benches/kexec_reboot.rs (the reboot's time against a firmware boot).

use std::path::Path;
use std::time::Duration;

use super::vm::{sparse_disk, Bus, GuestDisk, GuestSpec};

/// The guest's line right before `kexec -e`: the reboot request.
pub(crate) const REBOOT_LINE: &str = "AI-GUEST kexec-reboot";
/// The first line any kernel prints (the guest's and the written one are both Debian's).
pub(crate) const KERNEL_FIRST_LINE: &str = "Linux version ";
/// `/share/write.sh` runs `write-image` onto `$1`; its output goes to `write.out` and
/// `write.err` in the share. Exit 90: the write failed; 91: nothing was loaded; 92: `kexec -e`
/// came back.
const CASE: &str = r#"dst=$(ai-disk ai-target)
[ -n "$dst" ] || { echo "no target disk"; exit 89; }
sh /share/write.sh "$dst" >/share/write.out 2>/share/write.err || { cat /share/write.err; exit 90; }
cat /share/write.out
grep -q '^kexec: loaded ' /share/write.out || { cat /share/write.err; exit 91; }
sync
echo "AI-GUEST kexec-reboot $(cut -d' ' -f1 /proc/uptime)"
kexec -e
echo "kexec -e returned $?"
exit 92
"#;

/// The guest run: `write` (the shell text of `/share/write.sh`, a `write-image` command ending
/// in `"$1"`, the target) onto a fresh sparse `disk` of `size` bytes with `ss`-byte sectors.
/// The caller puts the image and the install's inputs into `share`.
pub(crate) fn kexec_spec(
    (kernel, initramfs): (&Path, &Path),
    share: &Path,
    write: &str,
    (disk, size, ss): (&Path, u64, u64),
) -> GuestSpec {
    std::fs::write(share.join("write.sh"), write).unwrap();
    sparse_disk(disk, size);
    let mut spec = GuestSpec::new(kernel.into(), initramfs.into(), share);
    spec.disks = vec![GuestDisk::new(disk, Bus::VirtioBlk, ss, "ai-target")];
    spec.expect_disks = vec!["vda".into()];
    spec.script = CASE.to_string();
    spec.limit = Duration::from_secs(900);
    spec
}

/// The written kernel's report: its `AI-BOOT` lines after the reboot request, without that
/// prefix (the guest prints none of its own).
pub(crate) fn report_after_kexec(console: &str) -> Vec<String> {
    let after = console.split_once(REBOOT_LINE).map_or("", |(_, a)| a);
    after
        .lines()
        .filter_map(|l| Some(l.split_once("AI-BOOT ")?.1.trim_end().to_string()))
        .collect()
}
