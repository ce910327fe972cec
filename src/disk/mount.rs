//! Mount a partition privately, run a closure on it, unmount.
//!
//! The mount happens on a thread of its own that first leaves the process's mount namespace
//! (`unshare(CLONE_NEWNS)`: in a multithreaded process it applies to the calling thread only)
//! and marks every mount private, so nothing propagates to the host (systemd makes `/` shared)
//! and a crash cannot leave a stray mount behind: the namespace dies with the thread. The
//! mountpoint is a fresh directory, unmounted with retries on every path and removed with
//! `rmdir`, never recursively, so a failed unmount can never delete files of /boot.

use anyhow::{anyhow, Context, Result};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::clock::{Failure, NeverStop, Schedule, SYSTEM_CLOCK};

/// coreos-installer's unmount retries: 20 tries, 100 ms apart.
const UNMOUNT_TRIES: Schedule = Schedule::tries(20, Duration::from_millis(100));

/// A mountpoint directory and whether something is mounted on it. Dropped without
/// [`Mounted::finish`] (an early return or a panic in the caller's closure), it unmounts and
/// removes the directory itself, logging what fails.
struct Mounted {
    dir: PathBuf,
    mounted: bool,
    /// Cleared by `finish`: the explicit unmount already removed the directory, and a second
    /// `rmdir` in `drop` would only log a spurious ENOENT warning after every success.
    armed: bool,
}

impl Mounted {
    /// Unmount, retried while the kernel reports the filesystem busy (20 × 100 ms, as
    /// coreos-installer), then `rmdir` the mountpoint.
    fn unmount(&mut self) -> Result<()> {
        if self.mounted {
            SYSTEM_CLOCK
                .retry(
                    &NeverStop,
                    &UNMOUNT_TRIES,
                    |_| umount2(&self.dir, MntFlags::empty()).map_err(Failure::Retry),
                    |_, _| {},
                )
                .map_err(|e| anyhow!("unmounting {}: {e}", self.dir.display()))?;
            self.mounted = false;
        }
        std::fs::remove_dir(&self.dir)
            .with_context(|| format!("removing the mountpoint {}", self.dir.display()))
    }

    /// The explicit unmount once the work is done; its error is the caller's, and `drop` then
    /// has nothing left to do.
    fn finish(mut self) -> Result<()> {
        self.armed = false;
        self.unmount()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = self.unmount() {
                tracing::warn!("{e:#}");
            }
        }
    }
}

/// Mount `source` (a partition node) as `fstype` on a fresh directory in a private mount
/// namespace, call `f` with the mountpoint, and unmount (also when `f` fails).
pub(crate) fn with_private_mount<T: Send>(
    source: &Path,
    fstype: &str,
    f: impl FnOnce(&Path) -> Result<T> + Send,
) -> Result<T> {
    private_mount(source, fstype, MsFlags::empty(), f)
}

/// [`with_private_mount`], read-only: for reading a written disk without changing a byte of it
/// (not even an ext4 mount count).
pub(crate) fn with_private_mount_read_only<T: Send>(
    source: &Path,
    fstype: &str,
    f: impl FnOnce(&Path) -> Result<T> + Send,
) -> Result<T> {
    private_mount(source, fstype, MsFlags::MS_RDONLY, f)
}

fn private_mount<T: Send>(
    source: &Path,
    fstype: &str,
    extra: MsFlags,
    f: impl FnOnce(&Path) -> Result<T> + Send,
) -> Result<T> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("mount".into())
            .spawn_scoped(s, move || -> Result<T> {
                unshare(CloneFlags::CLONE_NEWNS)
                    .context("entering a private mount namespace (needs root)")?;
                mount(
                    None::<&str>,
                    "/",
                    None::<&str>,
                    MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                    None::<&str>,
                )
                .context("making mounts private")?;
                let dir =
                    nix::unistd::mkdtemp(&std::env::temp_dir().join("assisted-installer-XXXXXX"))
                        .context("creating a mountpoint")?;
                let mut guard = Mounted {
                    dir,
                    mounted: false,
                    armed: true,
                };
                mount(
                    Some(source),
                    &guard.dir,
                    Some(fstype),
                    MsFlags::MS_NOSUID | MsFlags::MS_NODEV | extra,
                    None::<&str>,
                )
                .with_context(|| {
                    format!(
                        "mounting {} ({fstype}) on {}",
                        source.display(),
                        guard.dir.display()
                    )
                })?;
                guard.mounted = true;
                let result = f(&guard.dir);
                let unmounted = guard.finish();
                let value = result?;
                unmounted?;
                Ok(value)
            })
            .context("starting the mount thread")?
            .join()
            .map_err(|_| anyhow!("the mount thread panicked"))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mountpoint_is_removed_once_by_finish_or_by_drop() {
        for finish in [true, false] {
            let parent = tempfile::tempdir().unwrap();
            let dir = parent.path().join("mnt");
            std::fs::create_dir(&dir).unwrap();
            let guard = Mounted {
                dir: dir.clone(),
                mounted: false,
                armed: true,
            };
            // After the explicit unmount, drop has nothing left to do: no second removal to
            // warn about.
            let ((), warned) = crate::logging::warnings_during(|| {
                if finish {
                    guard.finish().unwrap()
                } else {
                    drop(guard)
                }
            });
            assert!(!dir.exists(), "the mountpoint is removed");
            assert!(warned.is_empty(), "finish: {finish}: {warned:?}");
        }
    }
}
