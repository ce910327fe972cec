use super::testing::{coreos_boot, RecordingLoader};
use super::*;

#[test]
fn the_entry_kernel_initramfs_and_first_boot_command_line_are_loaded() {
    let boot = tempfile::tempdir().unwrap();
    coreos_boot(boot.path(), Some("rd.neednet=1 ip=dhcp"));
    let loader = RecordingLoader::default();
    let loaded = load_from_boot(boot.path(), &loader).unwrap();
    let cmdline =
        "ignition.firstboot rd.neednet=1 ip=dhcp ostree=/ostree/boot.1/rhcos/1/0 console=ttyS0";
    assert_eq!(loaded.image.cmdline, cmdline);
    assert_eq!(
        loaded.to_string(),
        "kexec: loaded /ostree/rhcos-1/vmlinuz (1.5 MiB initramfs); start it with: systemctl kexec"
    );
    let calls = loader.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].kernel, b"kernel image");
    assert_eq!(calls[0].initrd.as_ref().unwrap().len(), 3 << 19);
    assert_eq!(calls[0].cmdline, cmdline);
}

#[test]
fn after_the_first_boot_the_command_line_has_no_firstboot_arguments() {
    let boot = tempfile::tempdir().unwrap();
    coreos_boot(boot.path(), None);
    let image = read_image(boot.path()).unwrap();
    assert_eq!(
        image.cmdline,
        "ostree=/ostree/boot.1/rhcos/1/0 console=ttyS0"
    );
    assert_eq!(
        image.initrd.as_deref(),
        Some("/ostree/rhcos-1/initramfs.img")
    );
}

/// A case: its name, how it breaks /boot, what the error says.
type Breakage = (&'static str, fn(&Path), &'static str);

/// Each failure names the file on /boot and what was wrong, and nothing is loaded.
#[test]
fn failures_name_the_file_and_the_reason() {
    let cases: &[Breakage] = &[
        (
            "no entry",
            |b| std::fs::remove_file(b.join("loader/entries/ostree-1-rhcos.conf")).unwrap(),
            "no BLS entry (/loader/entries/*.conf) on /boot",
        ),
        (
            "no kernel",
            |b| std::fs::remove_file(b.join("ostree/rhcos-1/vmlinuz")).unwrap(),
            "the kernel /ostree/rhcos-1/vmlinuz on /boot: No such file",
        ),
        (
            "no initramfs",
            |b| std::fs::remove_file(b.join("ostree/rhcos-1/initramfs.img")).unwrap(),
            "the initramfs /ostree/rhcos-1/initramfs.img on /boot: No such file",
        ),
        (
            "kernel outside",
            |b| {
                std::fs::write(
                    b.join("loader/entries/ostree-1-rhcos.conf"),
                    "linux /../etc/passwd\noptions a\n",
                )
                .unwrap()
            },
            "the kernel /../etc/passwd on /boot: not a plain path on /boot",
        ),
        (
            "no linux line",
            |b| {
                std::fs::write(b.join("loader/entries/ostree-1-rhcos.conf"), "options a\n").unwrap()
            },
            "the BLS entry /loader/entries/ostree-1-rhcos.conf: the entry has no `linux` line",
        ),
        (
            "bad firstboot",
            |b| std::fs::write(b.join("ignition.firstboot"), "source x\n").unwrap(),
            "/ignition.firstboot on /boot: unexpected line",
        ),
    ];
    for (name, break_it, want) in cases {
        let boot = tempfile::tempdir().unwrap();
        coreos_boot(boot.path(), Some(""));
        break_it(boot.path());
        let loader = RecordingLoader::default();
        let e = format!("{:#}", load_from_boot(boot.path(), &loader).unwrap_err());
        assert!(e.contains(want), "{name}: {e}");
        assert!(loader.calls().is_empty(), "{name}");
    }
}

#[test]
fn a_refused_load_says_why() {
    let boot = tempfile::tempdir().unwrap();
    coreos_boot(boot.path(), None);
    for (errno, why) in [
        (libc::ENOSYS, "no kexec support"),
        (libc::EPERM, "not allowed"),
        (libc::EKEYREJECTED, "signature was refused"),
        (libc::EBADMSG, "signature was refused"),
        (libc::ENODATA, "signature was refused"),
        (libc::ENOEXEC, "not a kernel image"),
        (libc::EBUSY, "already in progress"),
    ] {
        let loader = RecordingLoader::refusing(errno);
        let e = load_from_boot(boot.path(), &loader)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("kexec_file_load of /ostree/rhcos-1/vmlinuz: ") && e.contains(why),
            "{errno}: {e}"
        );
        assert_eq!(loader.calls().len(), 1);
    }
}
