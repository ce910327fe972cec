//! Writing the Ignition config to `/boot/ignition/config.ign`, and secret files in general,
//! without ever making them readable by others.

use crate::ignition::IgnitionConfig;
use anyhow::{Context, Result};
use std::fs::{OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Relative to the /boot root; ignition-setup-user picks it up on first boot.
pub(crate) const CONFIG_DIR: &str = "ignition";
pub(crate) const CONFIG_FILE: &str = "ignition/config.ign";

/// Write the config to `<boot_root>/ignition/config.ign`. Returns that path.
///
/// CVE-2021-3917: the config must never be readable by others, not even for a moment, so the
/// directory (when we create it) gets 0700 and the file is written by [`write_secret_file`].
/// An existing file is refused: the written disk's /boot has none, and we do not reuse one.
pub(crate) fn write_config(boot_root: &Path, config: &IgnitionConfig) -> Result<PathBuf> {
    let dir = boot_root.join(CONFIG_DIR);
    let path = boot_root.join(CONFIG_FILE);
    let write = || -> Result<()> {
        super::files::create_private_dir(&dir)?;
        write_secret_file(&path, config.bytes(), Existing::Refuse)?;
        super::files::sync_dir(&dir)
    };
    write().with_context(|| format!("writing the Ignition config to {}", path.display()))?;
    tracing::info!(
        bytes = config.bytes().len(),
        version = config.version(),
        "wrote the Ignition config to {}",
        path.display()
    );
    Ok(path)
}

/// What [`write_secret_file`] does with a file already at the path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Existing {
    /// Fail: the caller expects a fresh file.
    Refuse,
    /// Truncate it and make it 0600 before the secret goes in (a rerun of a step).
    Replace,
}

/// Writes a file holding a secret (an Ignition config, the pull secret, a token) so that it is
/// never readable by others: created with mode 0600 (the umask can only clear bits), set to
/// exactly 0600 before any byte is written (an odd umask, or a replaced file's old mode), then
/// fsynced. A symbolic link at `path` is refused rather than followed.
pub(crate) fn write_secret_file(path: &Path, bytes: &[u8], existing: Existing) -> Result<()> {
    let mut options = OpenOptions::new();
    options
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW);
    match existing {
        Existing::Refuse => options.create_new(true),
        Existing::Replace => options.create(true).truncate(true),
    };
    let mut file = options.open(path).context("creating the file")?;
    file.set_permissions(Permissions::from_mode(0o600))
        .context("setting the file mode")?;
    file.write_all(bytes).context("writing the file")?;
    file.sync_all().context("syncing the file")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &[u8] = br#"{"ignition":{"version":"3.2.0"}}"#;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn write_creates_private_dir_and_file() {
        let root = tempfile::tempdir().unwrap();
        let cfg = IgnitionConfig::from_bytes(CONFIG.to_vec(), None).unwrap();
        let path = write_config(root.path(), &cfg).unwrap();
        assert_eq!(path, root.path().join("ignition/config.ign"));
        assert_eq!(std::fs::read(&path).unwrap(), CONFIG);
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&root.path().join("ignition")), 0o700);

        // Never overwrites an existing config.
        let err = format!("{:#}", write_config(root.path(), &cfg).unwrap_err());
        assert!(
            err.starts_with(&format!(
                "writing the Ignition config to {}: creating the file",
                path.display()
            )),
            "{err}"
        );
    }

    #[test]
    fn secret_files_are_private_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        write_secret_file(&path, b"first", Existing::Refuse).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert!(write_secret_file(&path, b"again", Existing::Refuse).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"first");

        // A replaced file loses its old, wider mode before the secret goes in.
        std::fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        write_secret_file(&path, b"second", Existing::Replace).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read(&path).unwrap(), b"second");

        // A link planted at the path is not followed.
        let target = dir.path().join("elsewhere");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(write_secret_file(&link, b"secret", Existing::Replace).is_err());
        assert!(!target.exists());
    }

    #[test]
    fn write_keeps_an_existing_dir() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ignition");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, Permissions::from_mode(0o750)).unwrap();
        let cfg = IgnitionConfig::from_bytes(CONFIG.to_vec(), None).unwrap();
        let path = write_config(root.path(), &cfg).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir), 0o750);
    }
}
