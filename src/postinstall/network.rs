//! `--copy-network`: copy the live system's NetworkManager keyfiles to
//! `/boot/coreos-firstboot-network/`, which the initramfs (coreos-copy-firstboot-network) moves
//! into the installed system on first boot.

use anyhow::{Context, Result};
use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::Path;

use super::ignition::{write_secret_file, Existing};

/// Relative to the /boot root.
pub(crate) const NETWORK_DIR: &str = "coreos-firstboot-network";

/// Copy every regular file directly in `src_dir` (symlinks to regular files are followed;
/// directories, symlinks to directories or to nothing, sockets and FIFOs are skipped; no
/// recursion) into `<boot_root>/coreos-firstboot-network/`. Returns the copied names, sorted.
///
/// Keyfiles hold secrets (Wi-Fi and 802.1X passwords, VPN keys), and NetworkManager itself
/// refuses keyfiles readable by others. coreos-installer keeps whatever mode the copy gets; we
/// create the directory 0700 and each file 0600 from the start instead, so nothing is ever
/// world-readable on /boot, which any local user of the installed system can read. Contents are
/// never logged, only names.
pub(crate) fn copy_network_dir(src_dir: &Path, boot_root: &Path) -> Result<Vec<OsString>> {
    let dest_dir = boot_root.join(NETWORK_DIR);
    let copy = || -> Result<Vec<OsString>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(src_dir).context("listing the source directory")? {
            let entry = entry.context("listing the source directory")?;
            let path = entry.path();
            // fs::metadata follows symlinks: a link to a keyfile counts, a link to a dir does not.
            let meta = match std::fs::metadata(&path) {
                Ok(meta) => meta,
                // A dangling symlink: skipped, as coreos-installer does.
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    tracing::warn!("skipping dangling symlink {}", path.display());
                    continue;
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("reading the type of {}", path.display()))
                }
            };
            if meta.is_file() {
                names.push(entry.file_name());
            }
        }
        names.sort();

        super::files::create_private_dir(&dest_dir)?;
        for name in &names {
            let src = src_dir.join(name);
            let dest = dest_dir.join(name);
            let read = std::fs::read(&src).context("reading the source");
            read.and_then(|bytes| write_secret_file(&dest, &bytes, Existing::Replace))
                .with_context(|| format!("copying {} to {}", src.display(), dest.display()))?;
            tracing::info!("copied network config {name:?} to /boot/{NETWORK_DIR}");
        }
        super::files::sync_dir(&dest_dir)?;
        Ok(names)
    };
    copy().with_context(|| {
        format!(
            "copying network config from {} to {}",
            src_dir.display(),
            dest_dir.display()
        )
    })
}

/// The kernel arguments among `kargs` that boot the root from an iSCSI disk: dracut's
/// `rd.iscsi.*` (an initiator, a target, `rd.iscsi.firmware` for the firmware's iBFT),
/// `netroot=iscsi:…`, and `ip=ibft` (the network the iBFT describes).
pub(crate) fn iscsi_boot_kargs<'a>(kargs: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    kargs
        .into_iter()
        .filter(|k| {
            let key = k.split_once('=').map_or(*k, |(key, _)| key);
            key.starts_with("rd.iscsi.")
                || k.starts_with("netroot=iscsi")
                || key == "ip" && k.split('=').nth(1) == Some("ibft")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::Permissions;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn iscsi_boot_arguments_are_picked_out_of_a_command_line() {
        let cmdline = "BOOT_IMAGE=/images/pxeboot/vmlinuz rd.iscsi.firmware=1 ip=ibft ro \
            netroot=iscsi:192.0.2.7::::iqn.2024-01.example:disk0 rd.iscsi.initiator=iqn.x \
            ip=dhcp rd.iscsi_x=1 xnetroot=iscsi:y netroot=nbd:z rd.iscsi=1";
        assert_eq!(
            iscsi_boot_kargs(cmdline.split_whitespace()),
            [
                "rd.iscsi.firmware=1",
                "ip=ibft",
                "netroot=iscsi:192.0.2.7::::iqn.2024-01.example:disk0",
                "rd.iscsi.initiator=iqn.x"
            ]
        );
        assert!(iscsi_boot_kargs("ro quiet ip=dhcp".split_whitespace()).is_empty());
    }

    #[test]
    fn copies_regular_files_only() {
        let src = tempfile::tempdir().unwrap();
        let boot = tempfile::tempdir().unwrap();
        let s = src.path();
        std::fs::write(s.join("ens3.nmconnection"), "[connection]\nid=ens3\n").unwrap();
        std::fs::write(s.join("wifi.nmconnection"), "[wifi-security]\npsk=secret\n").unwrap();
        std::fs::set_permissions(s.join("ens3.nmconnection"), Permissions::from_mode(0o644))
            .unwrap();
        std::fs::create_dir(s.join("subdir")).unwrap();
        std::fs::write(s.join("subdir/nested.nmconnection"), "x").unwrap();
        symlink(s.join("subdir"), s.join("link-to-dir")).unwrap();
        symlink(
            s.join("ens3.nmconnection"),
            s.join("link-to-file.nmconnection"),
        )
        .unwrap();
        symlink(s.join("missing"), s.join("dangling")).unwrap();
        nix::unistd::mkfifo(&s.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();

        let names = copy_network_dir(s, boot.path()).unwrap();
        assert_eq!(
            names,
            [
                "ens3.nmconnection",
                "link-to-file.nmconnection",
                "wifi.nmconnection"
            ]
            .map(OsString::from)
        );
        let dest = boot.path().join(NETWORK_DIR);
        assert_eq!(mode(&dest), 0o700);
        for name in &names {
            let path = dest.join(name);
            assert!(path.symlink_metadata().unwrap().is_file(), "{path:?}");
            assert_eq!(mode(&path), 0o600, "{path:?}");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                std::fs::read(s.join(name)).unwrap()
            );
        }
        let mut listed: Vec<_> = std::fs::read_dir(&dest)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        listed.sort();
        assert_eq!(listed, names);
    }

    /// An empty source gives an empty directory; a missing one is an error naming both.
    #[test]
    fn empty_or_missing_source() {
        let src = tempfile::tempdir().unwrap();
        let boot = tempfile::tempdir().unwrap();
        assert!(copy_network_dir(src.path(), boot.path())
            .unwrap()
            .is_empty());
        assert!(boot.path().join(NETWORK_DIR).is_dir());
        let src = boot.path().join("nope");
        let err = copy_network_dir(&src, boot.path()).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "copying network config from {} to {}",
                src.display(),
                boot.path().join(NETWORK_DIR).display()
            )
        );
    }
}
