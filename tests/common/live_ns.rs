//! Run a command the way it runs on a CoreOS live system: in a private mount namespace where
//! /run is a fresh tmpfs holding the osmet files in /run/coreos-installer/osmet (what
//! `coreos-liveiso-persist-osmet.service` leaves there) and the live root is mounted read-only on
//! /sysroot: either a tree bound there (cheap, for tests that need no more), or, as the live ISO
//! has it, a squashfs image (its `root.squashfs`) mounted through a loop device. The squashfs is
//! mounted anew in each command's namespace, so every command reads it with cold squashfs caches,
//! as a live system's first read does; the mount holds the loop device's last reference and
//! `mount -o loop` sets autoclear, so the device is detached when the namespace goes. Optionally the NetworkManager keyfiles are laid in
//! /etc/NetworkManager/system-connections through an overlay of /etc, and the udev stand-ins
//! that `coreos-installer install` needs where no udev runs are added. Nothing of it is seen
//! outside the namespace; only /sysroot (a live system's mountpoint) is created if missing.
//! `mount -n`: the mount command must not create /run/mount on the host.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

const SCRIPT: &str = r#"set -eu
mount -n -t tmpfs -o mode=0755 live-run /run
mkdir -p /run/coreos-installer/osmet
IFS=:
for f in $LIVE_OSMETS; do cp "$f" /run/coreos-installer/osmet/; done
unset IFS
if [ -n "${LIVE_SQUASHFS:-}" ]; then
  mount -n -t squashfs -o ro,loop "$LIVE_SQUASHFS" /sysroot
else
  mount -n --bind -o ro "$LIVE_SYSROOT" /sysroot
fi
if [ -n "${LIVE_NM:-}" ]; then
  mount -n -t overlay live-etc -o "lowerdir=/etc,upperdir=$LIVE_WORK/upper,workdir=$LIVE_WORK/work" /etc
  mkdir -p /etc/NetworkManager/system-connections
  cp "$LIVE_NM"/* /etc/NetworkManager/system-connections/
fi
if [ -n "${LIVE_UDEV_STUB:-}" ]; then
  # coreos-installer waits for udev after writing: an empty control socket path and a udevadm
  # that exits 0 let it go on where no udev runs.
  mkdir -p /run/udev "$LIVE_WORK/bin"
  : > /run/udev/control
  printf '#!/bin/sh\nexit 0\n' > "$LIVE_WORK/bin/udevadm"
  chmod 755 "$LIVE_WORK/bin/udevadm"
  PATH="$LIVE_WORK/bin:$PATH"
fi
exec "$@"
"#;

pub(crate) struct LiveLayout {
    /// What is mounted on /sysroot: `LIVE_SYSROOT`, a directory bound read-only, or
    /// `LIVE_SQUASHFS`, a squashfs image mounted read-only through a loop device.
    root: (&'static str, PathBuf),
    /// Copied into /run/coreos-installer/osmet, in this order.
    pub osmets: Vec<PathBuf>,
    /// Files to put in /etc/NetworkManager/system-connections.
    pub network_dir: Option<PathBuf>,
    /// Add /run/udev/control and a `udevadm` that exits 0 (for coreos-installer).
    pub udev_stub: bool,
    work: tempfile::TempDir,
}

impl LiveLayout {
    /// The tree `sysroot` bound on /sysroot.
    pub(crate) fn new(sysroot: &Path, osmets: &[PathBuf]) -> LiveLayout {
        Self::with_root(("LIVE_SYSROOT", sysroot.to_path_buf()), osmets)
    }

    /// The squashfs image `image` mounted on /sysroot, afresh in each command.
    pub(crate) fn squashfs(image: &Path, osmets: &[PathBuf]) -> LiveLayout {
        Self::with_root(("LIVE_SQUASHFS", image.to_path_buf()), osmets)
    }

    fn with_root(root: (&'static str, PathBuf), osmets: &[PathBuf]) -> LiveLayout {
        std::fs::create_dir_all("/sysroot").unwrap();
        let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        for d in ["upper", "work"] {
            std::fs::create_dir(work.path().join(d)).unwrap();
        }
        LiveLayout {
            root,
            osmets: osmets.to_vec(),
            network_dir: None,
            udev_stub: false,
            work,
        }
    }

    /// `program args…` inside the live layout.
    pub(crate) fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private"])
            .args(["sh", "-c", SCRIPT, "live"])
            .arg(program)
            .env("LIVE_OSMETS", std::env::join_paths(&self.osmets).unwrap())
            .env("LIVE_WORK", self.work.path())
            .env(self.root.0, &self.root.1);
        if let Some(nm) = &self.network_dir {
            c.env("LIVE_NM", nm);
        }
        if self.udev_stub {
            c.env("LIVE_UDEV_STUB", "1");
        }
        c
    }
}

/// The loop devices whose backing file is `image` (`losetup -j`): none once every command of a
/// squashfs layout has ended, if the namespace took its loop device with it.
pub(crate) fn loop_devices_of(image: &Path) -> Vec<String> {
    let out = Command::new("losetup")
        .arg("-j")
        .arg(image)
        .output()
        .unwrap();
    assert!(out.status.success(), "losetup -j {}", image.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}
