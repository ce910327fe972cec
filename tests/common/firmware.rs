//! Booting a written disk under UEFI (OVMF) through the firmware's boot manager, as a host's
//! reboot through its firmware does; the tests read the test initramfs's `AI-BOOT` report
//! (testdata/boot_parts.rs) from the serial console. Used by tests/boot_qemu.rs and by the
//! kexec bench (benches/kexec_reboot.rs), which times it against a kexec reboot.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::vm::{have, kvm_or_tcg, qemu, qemu_missing, run_dir, run_qemu, Run};

/// Debian's `ovmf` package: the 4 MiB firmware (no Secure Boot) and its variable store.
pub(crate) const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub(crate) const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";

/// Why the firmware boots cannot run here (QEMU or OVMF missing), if they cannot.
pub(crate) fn firmware_missing() -> Option<String> {
    let ovmf = Path::new(OVMF_CODE).is_file() && Path::new(OVMF_VARS).is_file();
    qemu_missing()
        .or_else(|| (!ovmf).then(|| format!("{OVMF_CODE} is missing (Debian package ovmf)")))
}

/// Whether QEMU and OVMF are here; prints why not, or panics under AI_REQUIRE_ROOT_TESTS=1.
pub(crate) fn have_qemu(test: &str) -> bool {
    have(test, firmware_missing())
}

/// QEMU with OVMF; the disk, if any, on virtio with `ss`-byte logical blocks, in snapshot mode.
pub(crate) fn firmware(dir: &Path, accel: &str, disk: Option<(&Path, u64)>) -> Command {
    let mut cmd = qemu(dir, accel, 512);
    cmd.args(pflash_args(&dir.join("OVMF_VARS.fd")));
    if let Some((path, ss)) = disk {
        let file = path.display();
        cmd.arg("-drive")
            .arg(format!(
                "file={file},format=raw,if=none,id=disk0,snapshot=on"
            ))
            .arg("-device")
            .arg(format!(
                "virtio-blk-pci,drive=disk0,logical_block_size={ss},physical_block_size={ss}"
            ));
    }
    cmd
}

/// The `-drive` arguments of OVMF's two flash chips: the firmware, read-only, and `vars`, its
/// variable store (the UEFI NVRAM), writable, made from the empty store when it is missing. What
/// the firmware or a guest's `efibootmgr` writes to NVRAM stays in `vars`.
pub(crate) fn pflash_args(vars: &Path) -> [String; 4] {
    if !vars.exists() {
        fs::copy(OVMF_VARS, vars).unwrap_or_else(|e| panic!("{OVMF_VARS}: {e}"));
    }
    [
        "-drive".into(),
        format!("if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}"),
        "-drive".into(),
        format!("if=pflash,format=raw,unit=1,file={}", vars.display()),
    ]
}

/// `kvm` when KVM can run OVMF here (probed once per test binary: the firmware reaches its boot
/// manager, "BdsDxe" on the console), else `tcg`; software emulation takes about 13 s to get
/// there on two cores.
pub(crate) fn firmware_accel() -> &'static str {
    static ACCEL: OnceLock<&'static str> = OnceLock::new();
    ACCEL.get_or_init(|| {
        let probe = |d: &Path| firmware(d, "kvm", None);
        kvm_or_tcg("run OVMF", Duration::from_secs(20), "BdsDxe", probe)
    })
}

/// Boot `disk` (a block device or image file) with `ss`-byte logical blocks through the
/// firmware's boot manager, or start `direct` (a kernel, initramfs and command line QEMU hands
/// to the firmware) instead of its boot loader, and wait for the
/// machine to power off (the test initramfs's last step) or reset, at most a few minutes (then
/// QEMU is killed). [`Run::lines`] has the initramfs's report (see `INIT_SCRIPT` in
/// testdata/boot_parts.rs).
pub(crate) fn boot(disk: &Path, ss: u64, direct: Option<(&Path, &Path, &str)>) -> Run {
    let accel = firmware_accel();
    let limit = Duration::from_secs(if accel == "kvm" { 60 } else { 240 });
    let dir = run_dir("boot");
    let mut cmd = firmware(dir.path(), accel, Some((disk, ss)));
    if let Some((kernel, initrd, append)) = direct {
        cmd.arg("-kernel").arg(kernel).arg("-initrd").arg(initrd);
        cmd.args(["-append", append]);
    }
    run_qemu(cmd, dir.path(), accel, limit, ("AI-BOOT ", ""), None)
}
