//! Test fixtures: a /boot laid out like a freshly written RHCOS metal image.

use std::path::Path;

/// A platform table shaped like RHCOS x86_64's `coreos/platforms.json`. The values are ours,
/// chosen so each path is exercised:
/// - metal: both consoles, serial primary; GRUB on serial and the firmware console;
/// - aws: serial only, with GRUB commands identical to metal's (so GRUB is left alone);
/// - vmware: graphical primary, with GRUB commands that differ from metal's (so GRUB is rewritten);
/// - qemu: kargs only (`grub_commands` omitted, so an empty console block).
pub(super) const PLATFORMS: &str = r#"{
  "metal": {
    "grub_commands": ["serial --speed=115200", "terminal_input serial console", "terminal_output serial console"],
    "kernel_arguments": ["console=tty0", "console=ttyS0,115200n8"]
  },
  "aws": {
    "grub_commands": ["serial --speed=115200", "terminal_input serial console", "terminal_output serial console"],
    "kernel_arguments": ["console=ttyS0,115200n8"]
  },
  "vmware": {
    "grub_commands": ["serial --speed=115200", "terminal_input console serial", "terminal_output console serial"],
    "kernel_arguments": ["console=ttyS0,115200n8", "console=tty0"]
  },
  "qemu": {
    "kernel_arguments": ["console=tty0", "console=ttyS0,115200n8"]
  }
}"#;

pub(super) const BLS_ENTRY_NAME: &str = "ostree-1-rhcos.conf";

/// The options line of the image's BLS entry, metal console kargs included (coreos-assembler
/// bakes metal's `kernel_arguments` from platforms.json into it).
pub(super) const OPTIONS: &str = "ignition.platform.id=metal $ignition_firstboot \
    ostree=/ostree/boot.1/rhcos/abc/0 root=UUID=910678ff-f77e-4a7d-8d53-86f2ac47a823 rw \
    rootflags=prjquota boot=UUID=3e0ac4c5-6f7d-4f7b-9b8e-2a1b0c9d8e7f \
    console=tty0 console=ttyS0,115200n8";

pub(super) fn bls_entry() -> String {
    format!(
        "title Red Hat Enterprise Linux CoreOS 418.94.202501010000-0 (Plow) (ostree:0)\n\
         version 1\n\
         options {OPTIONS}\n\
         linux /ostree/rhcos-abc/vmlinuz-5.14.0-427.el9.x86_64\n\
         initrd /ostree/rhcos-abc/initramfs-5.14.0-427.el9.x86_64.img\n"
    )
}

pub(super) const GRUB_HEAD: &str = "set pager=1\n\
    # Any non-default console settings will be inserted here.\n\
    # CONSOLE-SETTINGS-START\n";
pub(super) const GRUB_METAL_BLOCK: &str = "serial --speed=115200\n\
    terminal_input serial console\n\
    terminal_output serial console\n";
pub(super) const GRUB_TAIL: &str = "# CONSOLE-SETTINGS-END\n\
    \n\
    if [ -f ${config_directory}/grubenv ]; then\n  load_env -f ${config_directory}/grubenv\nfi\n\
    source /ignition.firstboot\nblscfg\n";

pub(super) fn grub_cfg(block: &str) -> String {
    format!("{GRUB_HEAD}{block}{GRUB_TAIL}")
}

pub(super) const FIRSTBOOT: &str =
    "# Remove this file to rerun Ignition\nset ignition_network_kcmdline=\"\"\n";

/// Lay out a /boot like RHCOS's under `root`. `with_platforms`: whether coreos/platforms.json
/// exists (older images lack it).
pub(super) fn make_boot(root: &Path, with_platforms: bool) {
    let write = |rel: &str, contents: &str| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    };
    write(&format!("loader/entries/{BLS_ENTRY_NAME}"), &bls_entry());
    write("grub2/grub.cfg", &grub_cfg(GRUB_METAL_BLOCK));
    write("ignition.firstboot", FIRSTBOOT);
    if with_platforms {
        write("coreos/platforms.json", PLATFORMS);
    }
}
