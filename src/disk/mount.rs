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

struct Mounted {
    dir: PathBuf,
    mounted: bool,
}

impl Mounted {
    fn unmount(&mut self) -> Result<()> {
        if self.mounted {
            let mut last = None;
            for _ in 0..20 {
                match umount2(&self.dir, MntFlags::empty()) {
                    Ok(()) => {
                        self.mounted = false;
                        last = None;
                        break;
                    }
                    Err(e) => {
                        last = Some(e);
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
            if let Some(e) = last {
                return Err(anyhow!("unmounting {}: {e}", self.dir.display()));
            }
        }
        std::fs::remove_dir(&self.dir)
            .with_context(|| format!("removing the mountpoint {}", self.dir.display()))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            tracing::warn!("{e:#}");
        }
    }
}

/// Mount `source` (a partition node) as `fstype` on a fresh directory in a private mount
/// namespace, call `f` with the mountpoint, and unmount (also when `f` fails).
pub fn with_private_mount<T: Send>(
    source: &Path,
    fstype: &str,
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
                };
                mount(
                    Some(source),
                    &guard.dir,
                    Some(fstype),
                    MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
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
                let unmounted = guard.unmount();
                let value = result?;
                unmounted?;
                Ok(value)
            })
            .context("starting the mount thread")?
            .join()
            .map_err(|_| anyhow!("the mount thread panicked"))?
    })
}
