//! Small file helpers shared by the post-install steps.

use anyhow::{Context, Result};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// Replace the contents of an existing file in place, then fsync it.
///
/// In place rather than write-and-rename, so the file keeps its owner, mode and inode (GRUB and
/// BLS files on /boot are root-owned with image-defined modes). A crash half-way is not a concern
/// here: any failure during post-install fails the install, and the disk is reset.
pub(super) fn rewrite(path: &Path, contents: &[u8]) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .context("opening the file for writing")?;
    file.write_all(contents).context("writing the file")?;
    file.sync_all().context("syncing the file")
}

/// fsync a directory so that entries just created in it are durable.
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing directory {}", dir.display()))
}
