//! A loop device over a disk-image file, so post-install steps can mount the image's /boot the
//! same way as on a real disk. Detached on drop.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) struct LoopAttachment {
    path: PathBuf,
}

impl LoopAttachment {
    /// `losetup --find --show --sector-size SS FILE` (util-linux, present on the CoreOS live
    /// system and in the installer image).
    pub(crate) fn attach(file: &Path, sector_size: u64) -> Result<LoopAttachment> {
        let out = Command::new("losetup")
            .args(["--find", "--show", "--sector-size"])
            .arg(sector_size.to_string())
            .arg(file)
            .output()
            .context("running losetup (util-linux) to attach the image file")?;
        if !out.status.success() {
            bail!(
                "losetup could not attach {}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        tracing::debug!("attached {} as {}", file.display(), path.display());
        Ok(LoopAttachment { path })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LoopAttachment {
    fn drop(&mut self) {
        let detached = Command::new("losetup")
            .arg("--detach")
            .arg(&self.path)
            .output();
        let why = match detached {
            Ok(o) if o.status.success() => return,
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        };
        tracing::warn!("detaching {}: {why}", self.path.display());
    }
}
