//! `--firstboot-args`: kernel arguments for the first boot only (the live ISO forwards its network
//! kargs this way: `rd.neednet=1 ip=… nameserver=…`).
//!
//! They go into `/boot/ignition.firstboot`, a GRUB script that the image's grub.cfg sources only
//! while Ignition has not run yet; `ignition_network_kcmdline` is expanded on that boot's kernel
//! command line.

use anyhow::{bail, Context, Result};
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Relative to the /boot root.
pub(crate) const FIRSTBOOT_FILE: &str = "ignition.firstboot";

/// Reject what would break out of, or be reinterpreted inside, GRUB's double quotes: `"` ends the
/// string, `\` escapes, `$` expands a variable, and a control character (newline above all) would
/// start a new command.
pub(crate) fn check_args(args: &str) -> Result<()> {
    if let Some(c) = args
        .chars()
        .find(|&c| matches!(c, '"' | '\\' | '$') || c.is_control())
    {
        bail!(
            "{c:?} is not allowed (the arguments are written inside a double-quoted GRUB string)"
        );
    }
    Ok(())
}

/// Append the line to the EXISTING `ignition.firstboot`. Its absence means the image is not a
/// CoreOS metal image we understand (or is too old), and creating it would make GRUB run
/// Ignition again on every boot: fail instead. Returns the file's path.
pub(crate) fn write_args(boot_root: &Path, args: &str) -> Result<PathBuf> {
    let path = boot_root.join(FIRSTBOOT_FILE);
    let write = || -> Result<()> {
        check_args(args)?;
        let line = format!("set ignition_network_kcmdline=\"{args}\"\n");
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .context("opening the file (it must already exist in the image)")?;
        // A later `set` overrides an earlier one, so appending is enough; but if the last line
        // lacks its newline, ours would be glued onto it.
        let mut existing = Vec::new();
        file.read_to_end(&mut existing)
            .context("reading the file")?;
        let glue = if existing.last().is_some_and(|b| *b != b'\n') {
            "\n"
        } else {
            ""
        };
        file.write_all(format!("{glue}{line}").as_bytes())
            .context("appending to the file")?;
        file.sync_all().context("syncing the file")
    };
    write()
        .with_context(|| format!("writing first-boot kernel arguments to {}", path.display()))?;
    tracing::info!("wrote first-boot kernel arguments to {}", path.display());
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGINAL: &str =
        "# Remove this file to rerun Ignition\nset ignition_network_kcmdline=\"\"\n";

    #[test]
    fn rejected_characters() {
        for bad in ["a\"b", "a\nb", "a\rb", "a\\b", "ip=$x", "a\tb"] {
            let err = check_args(bad).unwrap_err().to_string();
            assert!(err.contains("is not allowed"), "{bad:?}: {err}");
        }
    }

    /// On one /boot: a missing file is an error and is not created; bad arguments leave the file
    /// alone; a missing final newline is added, and an empty file gets no leading one.
    #[test]
    fn write_args_edits_the_existing_file_only() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join(FIRSTBOOT_FILE);
        let err = format!("{:#}", write_args(root.path(), "ip=dhcp").unwrap_err());
        let step = format!(
            "writing first-boot kernel arguments to {}: opening the file",
            path.display()
        );
        assert!(err.starts_with(&step), "{err}");
        assert!(err.contains("it must already exist"), "{err}");
        assert!(!path.exists());

        std::fs::write(&path, ORIGINAL).unwrap();
        assert!(write_args(root.path(), "a\"; boot").is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), ORIGINAL);

        std::fs::write(&path, "# comment").unwrap();
        write_args(root.path(), "ip=dhcp").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# comment\nset ignition_network_kcmdline=\"ip=dhcp\"\n"
        );
        std::fs::write(&path, "").unwrap();
        write_args(root.path(), "ip=dhcp").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "set ignition_network_kcmdline=\"ip=dhcp\"\n"
        );
    }
}
