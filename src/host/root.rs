//! The host's root: where the installer finds the files of the host it installs.
//!
//! The Go installer never reads host files itself: it runs coreos-installer in the host's
//! namespaces (`nsenter --target 1 … --mount`). Our writer runs in-process, inside the installer
//! container, which the agent starts with `--privileged --pid=host` and only `/dev`, `/opt`,
//! `/var/log`, the journal socket, `/etc/pki` and `/tmp` mounted: the container's
//! `/etc/NetworkManager`, `/run` and `/sysroot` are not the host's. With `--pid=host`, PID 1 is
//! the host's init, and `/proc/1/root` is the host's root directory.
//!
//! The decision compares mount namespaces, not environment variables: in the host's own mount
//! namespace, host paths are used as they are; in another one, through `/proc/1/root`. A
//! container started without `--pid=host` has its own PID 1 in its own namespace, which looks
//! like the host's: its container marker (`/run/.containerenv`, `/.dockerenv`) tells it apart,
//! and it is refused, since nothing of the host is reachable from it.
//!
//! In a container, the rest of the agent's line is checked too, before any disk is touched, so
//! a wrong `podman run` fails with the option it lacks rather than halfway through the write:
//! without `--privileged` the process has no CAP_SYS_ADMIN (it can neither look into PID 1 nor
//! mount /boot), and without `-v /dev:/dev` its `/dev` is the engine's own, not the host's
//! devtmpfs (no `/dev/disk/by-id` links, no nodes for partitions made during the write).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Overrides the decision (tests, unusual set-ups): the directory to use as the host's root.
const OVERRIDE_ENV: &str = "ASSISTED_INSTALLER_HOST_ROOT";
/// The host's root from a container that shares the host's PID namespace.
pub(crate) const PID1_ROOT: &str = "/proc/1/root";
/// Files container engines leave in their containers (podman, docker).
const CONTAINER_MARKERS: [&str; 2] = ["/run/.containerenv", "/.dockerenv"];
/// How the agent starts the installer's container (its `podman run` line, the image and the
/// installer's flags elided): what every refusal below tells the operator to do.
const AGENT_LINE: &str = "podman run --privileged --pid=host --net=host \
    -v /dev:/dev:rw -v /opt:/opt:rw -v /var/log:/var/log:rw \
    -v /run/systemd/journal/socket:/run/systemd/journal/socket -v /etc/pki:/etc/pki -v /tmp:/tmp \
    --env=PULL_SECRET_TOKEN IMAGE --role …";
/// CAP_SYS_ADMIN's bit in the capability sets of `/proc/self/status`.
const CAP_SYS_ADMIN: u32 = 21;
/// Symbolic links followed in one path, at most (as the kernel's limit).
const MAX_LINKS: usize = 40;

/// Where host paths are found.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum HostRoot {
    /// This process sees the host's mount namespace: host paths are local paths.
    #[default]
    Here,
    /// Through this directory (`/proc/1/root`, or the override).
    At(PathBuf),
}

/// The host's root cannot be reached: what was needed, and how to run the installer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot reach the host: {0}. The installer reads the host's files through PID 1's root and writes the host's disk through its /dev: start its container as the assisted-service agent does ({AGENT_LINE}), or, outside a container, set {OVERRIDE_ENV} to the host's root directory")]
pub struct Unreachable(pub String);

/// What the decision looks at, gathered by [`observe`].
#[derive(Clone, Debug)]
pub(crate) struct Observed {
    pub override_root: Option<PathBuf>,
    /// `readlink /proc/self/ns/mnt`.
    pub own_mount_ns: Option<String>,
    /// `readlink /proc/1/ns/mnt`, or why it could not be read.
    pub pid1_mount_ns: Result<String, String>,
    /// `/proc/1/root` can be listed.
    pub pid1_root_readable: bool,
    /// The container marker found, if any.
    pub container_marker: Option<String>,
    /// CAP_SYS_ADMIN is in this process's effective set (`None`: unknown).
    pub cap_sys_admin: Option<bool>,
    /// `/dev` and `/proc/1/root/dev` are the same filesystem (`None`: unknown).
    pub dev_is_pid1s: Option<bool>,
}

/// Decide where the host's files are (pure).
pub(crate) fn decide(o: &Observed) -> Result<HostRoot, Unreachable> {
    if let Some(root) = &o.override_root {
        return Ok(if root == Path::new("/") {
            HostRoot::Here
        } else {
            HostRoot::At(root.clone())
        });
    }
    if let (Some(marker), Some(false)) = (&o.container_marker, o.cap_sys_admin) {
        return Err(Unreachable(format!(
            "this is a container ({marker} exists) without CAP_SYS_ADMIN: it was started without --privileged, so it can neither look into PID 1 nor open and mount the disk"
        )));
    }
    let pid1 = o.pid1_mount_ns.as_ref().map_err(|why| {
        Unreachable(format!(
            "PID 1's mount namespace cannot be read ({why}): the installer lacks privileges over PID 1"
        ))
    })?;
    if o.own_mount_ns.as_deref() == Some(pid1.as_str()) {
        return match &o.container_marker {
            Some(marker) => Err(Unreachable(format!(
                "this is a container ({marker} exists) whose PID 1 shares its mount namespace: it was started without --pid=host"
            ))),
            None => Ok(HostRoot::Here),
        };
    }
    if !o.pid1_root_readable {
        return Err(Unreachable(format!(
            "{PID1_ROOT} cannot be read: the installer lacks privileges over PID 1"
        )));
    }
    if let (Some(marker), Some(false)) = (&o.container_marker, o.dev_is_pid1s) {
        return Err(Unreachable(format!(
            "this is a container ({marker} exists) whose /dev is not the host's: it was started without -v /dev:/dev, so the boot device's /dev/disk links and the partitions made during the write would not appear in it"
        )));
    }
    Ok(HostRoot::At(PathBuf::from(PID1_ROOT)))
}

/// Whether capability `bit` is in the `CapEff:` line of a `/proc/<pid>/status` text.
fn has_capability(status: &str, bit: u32) -> Option<bool> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    let set = u64::from_str_radix(hex.trim(), 16).ok()?;
    Some(set & (1 << bit) != 0)
}

/// Gather what [`decide`] needs from this process's view of the system.
pub(crate) fn observe() -> Observed {
    let link = |p: &str| {
        std::fs::read_link(p)
            .map(|l| l.display().to_string())
            .map_err(|e| e.to_string())
    };
    Observed {
        override_root: std::env::var_os(OVERRIDE_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
        own_mount_ns: link("/proc/self/ns/mnt").ok(),
        pid1_mount_ns: link("/proc/1/ns/mnt"),
        pid1_root_readable: std::fs::read_dir(PID1_ROOT).is_ok(),
        container_marker: CONTAINER_MARKERS
            .iter()
            .find(|m| Path::new(m).exists())
            .map(|m| m.to_string()),
        cap_sys_admin: std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| has_capability(&status, CAP_SYS_ADMIN)),
        dev_is_pid1s: same_filesystem(Path::new("/dev"), &Path::new(PID1_ROOT).join("dev")),
    }
}

/// `a` and `b` are on one filesystem (`None`: one of them cannot be looked at).
fn same_filesystem(a: &Path, b: &Path) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    Some(std::fs::metadata(a).ok()?.dev() == std::fs::metadata(b).ok()?.dev())
}

/// Decide for this process, and log the outcome.
pub(crate) fn detect() -> Result<HostRoot, Unreachable> {
    let root = decide(&observe());
    match &root {
        Ok(HostRoot::Here) => tracing::info!(
            "host files: read as they are (this process sees the host's mount namespace)"
        ),
        Ok(HostRoot::At(r)) => tracing::info!("host files: read through {}", r.display()),
        Err(e) => tracing::warn!("{e}"),
    }
    root
}

impl HostRoot {
    /// [`HostRoot::path`], with an error that names the host path.
    pub fn local(&self, host_path: &Path) -> anyhow::Result<PathBuf> {
        anyhow::Context::with_context(self.path(host_path), || {
            format!("reading the host's {}", host_path.display())
        })
    }

    /// The local path of the host's `host_path` (absolute, or relative to the host's root),
    /// with symbolic links resolved as the host would: an absolute link target starts again at
    /// the host's root, never at ours. Missing components are kept as they are (the caller
    /// reports what is missing).
    pub fn path(&self, host_path: &Path) -> io::Result<PathBuf> {
        match self {
            HostRoot::Here => Ok(host_path.to_path_buf()),
            HostRoot::At(root) => resolve_in(root, host_path),
        }
    }
}

/// The names of `p`, with `..` kept as a name (the walk pops on it) and `.` dropped.
fn names(p: &Path) -> VecDeque<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// `path` resolved under `root` as if `root` were `/`: every symbolic link met is read and
/// its target walked in place; an absolute target starts again at `root`, and `..` never climbs
/// above it.
fn resolve_in(root: &Path, path: &Path) -> io::Result<PathBuf> {
    let mut pending = names(path);
    let mut done: Vec<OsString> = Vec::new();
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        if name == ".." {
            done.pop();
            continue;
        }
        let mut here = root.to_path_buf();
        here.extend(&done);
        here.push(&name);
        let is_link = std::fs::symlink_metadata(&here).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            done.push(name);
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return Err(io::Error::other(format!(
                "too many symbolic links in the host's {}",
                path.display()
            )));
        }
        let target = std::fs::read_link(&here)?;
        if target.is_absolute() {
            done.clear();
        }
        let mut next = names(&target);
        next.extend(pending);
        pending = next;
    }
    let mut out = root.to_path_buf();
    out.extend(&done);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn seen(own: &str, pid1: Result<&str, &str>) -> Observed {
        Observed {
            override_root: None,
            own_mount_ns: Some(own.into()),
            pid1_mount_ns: pid1.map(String::from).map_err(String::from),
            pid1_root_readable: true,
            container_marker: None,
            cap_sys_admin: Some(true),
            dev_is_pid1s: Some(true),
        }
    }

    /// The host's own namespace reads as is, a --pid=host container through PID 1; a container
    /// without --pid=host, or without privileges over PID 1, is refused; the override wins.
    #[test]
    fn where_the_host_root_is() {
        assert_eq!(decide(&seen("mnt:[1]", Ok("mnt:[1]"))), Ok(HostRoot::Here));
        assert_eq!(
            decide(&seen("mnt:[2]", Ok("mnt:[1]"))),
            Ok(HostRoot::At(PathBuf::from("/proc/1/root")))
        );

        let mut o = seen("mnt:[2]", Ok("mnt:[2]"));
        o.container_marker = Some("/run/.containerenv".into());
        let e = decide(&o).unwrap_err().to_string();
        assert!(e.contains("started without --pid=host"), "{e}");
        assert!(e.contains(AGENT_LINE), "{e}");
        assert!(e.contains(OVERRIDE_ENV), "{e}");

        let e = decide(&seen("mnt:[2]", Err("Permission denied (os error 13)")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("Permission denied"), "{e}");
        assert!(e.contains(AGENT_LINE), "{e}");
        let mut o = seen("mnt:[2]", Ok("mnt:[1]"));
        o.pid1_root_readable = false;
        assert!(decide(&o).unwrap_err().to_string().contains("/proc/1/root"));

        // A container missing one of the agent's options is told which, whatever else is seen;
        // outside a container the same observations are no fault of a container line.
        let inside = |o: Observed| Observed {
            container_marker: Some("/run/.containerenv".into()),
            ..o
        };
        let unprivileged = Observed {
            cap_sys_admin: Some(false),
            ..seen("mnt:[2]", Err("Permission denied (os error 13)"))
        };
        let own_dev = Observed {
            dev_is_pid1s: Some(false),
            ..seen("mnt:[2]", Ok("mnt:[1]"))
        };
        for (o, missing) in [
            (unprivileged.clone(), "--privileged"),
            (own_dev.clone(), "-v /dev:/dev"),
        ] {
            let e = decide(&inside(o)).unwrap_err().to_string();
            assert!(e.contains(&format!("started without {missing},")), "{e}");
            assert!(e.contains(AGENT_LINE), "{e}");
        }
        assert!(!decide(&unprivileged)
            .unwrap_err()
            .0
            .contains("--privileged"));
        assert_eq!(decide(&own_dev), Ok(HostRoot::At(PathBuf::from(PID1_ROOT))));

        let mut o = seen("mnt:[2]", Err("denied"));
        o.override_root = Some("/proc/4242/root".into());
        assert_eq!(decide(&o), Ok(HostRoot::At("/proc/4242/root".into())));
        o.override_root = Some("/".into());
        assert_eq!(decide(&o), Ok(HostRoot::Here));
    }

    #[test]
    fn cap_sys_admin_is_read_from_the_effective_set() {
        let status = |eff: &str| format!("Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t{eff}\n");
        assert_eq!(
            has_capability(&status("000001ffffffffff"), CAP_SYS_ADMIN),
            Some(true)
        );
        // podman's default set, without --privileged.
        assert_eq!(
            has_capability(&status("00000000a80425fb"), CAP_SYS_ADMIN),
            Some(false)
        );
        assert_eq!(has_capability("Name:\tx\n", CAP_SYS_ADMIN), None);
        assert_eq!(has_capability(&status("zz"), CAP_SYS_ADMIN), None);
    }

    #[test]
    fn paths_map_under_the_root_and_links_resolve_as_on_the_host() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("etc/NetworkManager")).unwrap();
        std::fs::create_dir_all(root.join("var/lib/nm/keyfiles")).unwrap();
        // An absolute link: on the host it means the host's /var, not ours.
        symlink(
            "/var/lib/nm/keyfiles",
            root.join("etc/NetworkManager/system-connections"),
        )
        .unwrap();
        symlink("../../..", root.join("var/lib/nm/up")).unwrap();
        let at = HostRoot::At(root.to_path_buf());
        let cases = [
            (
                "/etc/NetworkManager/system-connections",
                "var/lib/nm/keyfiles",
            ),
            (
                "/etc/NetworkManager/system-connections/eno1.nmconnection",
                "var/lib/nm/keyfiles/eno1.nmconnection",
            ),
            // Relative links, `..` past the root, and missing parts.
            // var/lib/nm/up -> ../../.. climbs from var/lib/nm to the root.
            ("/var/lib/nm/up/etc", "etc"),
            ("/../../etc/x", "etc/x"),
            ("run/media/iso/registry", "run/media/iso/registry"),
        ];
        for (host, local) in cases {
            assert_eq!(
                at.path(Path::new(host)).unwrap(),
                root.join(local),
                "{host}"
            );
        }
        assert_eq!(
            HostRoot::Here.path(Path::new("/etc/x")).unwrap(),
            PathBuf::from("/etc/x")
        );
        // Link loops are an error.
        symlink("/b", root.join("a")).unwrap();
        symlink("/a", root.join("b")).unwrap();
        let e = at.path(Path::new("/a/x")).unwrap_err();
        assert!(e.to_string().contains("too many symbolic links"), "{e}");
    }
}
