//! What on the host may stop the written system's first boot, looked at once a write is done:
//! another disk's `boot` filesystem (CoreOS refuses to boot with two), and network keyfiles
//! copied onto a disk reached over iSCSI (the initramfs needs the network to read them). Each
//! finding is one warning, logged here and returned: `write-image` has only the log, the
//! install flows also report it to the service.

use std::path::Path;

use crate::disk::{iscsi_session_of, other_boot_filesystems_warning};
use crate::postinstall::network::iscsi_boot_kargs;

/// The written disk and what was put on it, and where the host is seen.
pub struct FirstBootCheck<'a> {
    /// The installed device (or disk-image file).
    pub device: &'a Path,
    /// Where sysfs and the device nodes are: `/sys` and `/dev`.
    pub sys: &'a Path,
    pub dev: &'a Path,
    /// `--copy-network` was given: the keyfiles are on the disk's /boot.
    pub copy_network: bool,
    /// `--append-karg`: kernel arguments of the installed system.
    pub append_kargs: &'a [String],
    /// The live system's kernel command line (empty when the disk is an image file).
    pub live_cmdline: &'a str,
}

/// The warnings about `check`'s disk, each logged.
pub fn first_boot_warnings(check: &FirstBootCheck) -> Vec<String> {
    let mut warnings = Vec::new();
    if check.copy_network {
        let session = iscsi_session_of(check.sys, check.device);
        let kargs = check.append_kargs.iter().map(String::as_str);
        let kargs = iscsi_boot_kargs(kargs.chain(check.live_cmdline.split_whitespace()));
        warnings.extend(network_on_iscsi(check.device, session, &kargs));
    }
    warnings.extend(other_boot_filesystems_warning(
        check.sys,
        check.dev,
        check.device,
    ));
    for w in &warnings {
        tracing::warn!("{w}");
    }
    warnings
}

/// The warning about keyfiles copied onto `device` when it is reached over iSCSI: its
/// `session` (the device on it, the session's name) or iSCSI boot arguments in `kargs` say so.
fn network_on_iscsi(
    device: &Path,
    session: Option<(String, String)>,
    kargs: &[&str],
) -> Option<String> {
    let mut why: Vec<String> = session
        .into_iter()
        .map(|(on, session)| format!("{on} is on iSCSI {session}"))
        .collect();
    if !kargs.is_empty() {
        why.push(format!("kernel arguments {}", kargs.join(" ")));
    }
    if why.is_empty() {
        return None;
    }
    Some(format!(
        "--copy-network onto {}, an iSCSI disk ({}): the network keyfiles are copied to its /boot, \
         which the initramfs cannot read before the network is up, so the first boot hangs. Give \
         the installed system its network as kernel arguments instead (ip=..., rd.iscsi.initiator=... \
         and netroot=iscsi:..., or rd.iscsi.firmware=1 for the firmware's iBFT; with --append-karg \
         or the host's kernel arguments at the service), and drop --copy-network (for the \
         assisted-service: no static network config for this host)",
        device.display(),
        why.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyfiles_on_an_iscsi_disk_are_warned_about_with_what_says_so() {
        let dev = Path::new("/dev/mapper/mpatha");
        assert_eq!(network_on_iscsi(dev, None, &[]), None);
        let on_session = network_on_iscsi(dev, Some(("sdc".into(), "session4".into())), &[]);
        let w = on_session.unwrap();
        assert!(
            w.starts_with(
                "--copy-network onto /dev/mapper/mpatha, an iSCSI disk (sdc is on iSCSI session4)"
            ),
            "{w}"
        );
        for says in [
            "first boot hangs",
            "rd.iscsi.initiator=",
            "drop --copy-network",
        ] {
            assert!(w.contains(says), "{says:?}: {w}");
        }
        let by_kargs = network_on_iscsi(dev, None, &["rd.iscsi.firmware=1", "ip=ibft"]).unwrap();
        assert!(
            by_kargs.contains("(kernel arguments rd.iscsi.firmware=1 ip=ibft)"),
            "{by_kargs}"
        );
    }

    /// The whole check over a fake /sys and /dev: a local disk and no iSCSI arguments, no
    /// warning; the same disk with `rd.iscsi.*` on the live command line, or without
    /// `--copy-network`, as they say; another disk's `boot` filesystem whatever the network.
    #[test]
    fn the_checks_look_at_the_network_only_when_it_is_copied() {
        let host = tempfile::tempdir().unwrap();
        let (sys, dev) = (host.path().join("sys"), host.path().join("dev"));
        std::fs::create_dir_all(sys.join("block/sda")).unwrap();
        std::fs::create_dir_all(&dev).unwrap();
        let check = |copy_network, live_cmdline| {
            first_boot_warnings(&FirstBootCheck {
                device: Path::new("/dev/sda"),
                sys: &sys,
                dev: &dev,
                copy_network,
                append_kargs: &["console=ttyS0".to_string()],
                live_cmdline,
            })
        };
        assert!(check(true, "ro quiet").is_empty());
        assert!(check(false, "rd.iscsi.firmware=1").is_empty());
        let w = check(true, "ro rd.iscsi.firmware=1");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("(kernel arguments rd.iscsi.firmware=1)"),
            "{w:?}"
        );
        // sdb: a whole-device XFS labelled boot.
        std::fs::create_dir_all(sys.join("block/sdb")).unwrap();
        let mut xfs = vec![0u8; 4096];
        xfs[..4].copy_from_slice(b"XFSB");
        xfs[108..112].copy_from_slice(b"boot");
        std::fs::write(dev.join("sdb"), &xfs).unwrap();
        let w = check(false, "");
        assert_eq!(w.len(), 1, "{w:?}");
        let node = dev.join("sdb").display().to_string();
        assert!(
            w[0].contains(&format!(
                "wipefs -a {node} (or, to keep its data, xfs_admin -L old-boot {node})"
            )),
            "{w:?}"
        );
    }
}
