//! Small file helpers shared by the post-install steps.

use anyhow::{Context, Result};
use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// Create `dir` with mode 0700 unless it already exists (then it is the image's and keeps its
/// mode). The mode is given at creation, so the directory is never more open than 0700; it is
/// then set exactly, in case an odd umask cleared owner bits.
pub(super) fn create_private_dir(dir: &Path) -> Result<()> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => std::fs::set_permissions(dir, Permissions::from_mode(0o700))
            .with_context(|| format!("setting the mode of {}", dir.display())),
        Err(e) if e.kind() == ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating {}", dir.display())),
    }
}

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
