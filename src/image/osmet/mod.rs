//! The live system's own image: the CoreOS metal image rebuilt from the osmet file the live ISO
//! carries and the OSTree objects of the running live root. What `coreos-installer install`
//! does when given no image; here it is the default source, streamed through the same pipeline
//! as a download (same checks, wipe, first MiB last, post-install, commit).

pub(crate) mod choose;
pub mod format;
pub(crate) mod objects;
pub(crate) mod packed;
pub(crate) mod plan;
pub(crate) mod rebuild;
pub(crate) mod squashfs;
mod store;

use anyhow::{bail, Context, Result};
use std::io::Read;
use std::path::{Path, PathBuf};

// The installer container mounts neither /run/coreos-installer nor /sysroot: without a host
// root from the flow, the defaults are also looked for through PID1_ROOT (the agent runs the
// container with --pid=host, so PID 1 is the host's init).
use crate::host::root::{HostRoot, PID1_ROOT};
use crate::image::digest::Sha256Sum;
use choose::Wanted;
pub(crate) use objects::MAX_READERS;
use rebuild::Rebuild;
#[cfg(any(test, feature = "test-support"))]
pub use store::READERS;

/// Where the live ISO's service (`coreos-liveiso-persist-osmet`) or the PXE initramfs puts the
/// osmet files.
pub const DEFAULT_OSMET_DIR: &str = "/run/coreos-installer/osmet";
/// The live root's OSTree repository (the rootfs image is mounted on /sysroot).
const DEFAULT_OSTREE_REPO: &str = "/sysroot/ostree/repo";

/// `--osmet-dir` and `--ostree-repo`; `None` means the live system's defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveImage {
    pub osmet_dir: Option<PathBuf>,
    pub ostree_repo: Option<PathBuf>,
    /// Where the install flows found the host's root: the defaults are looked for there only.
    /// `None` (`write-image`): here, else through /proc/1/root.
    pub host_root: Option<HostRoot>,
    /// Threads reading the objects (`--read-threads`); `None`: [`store::READERS`].
    pub read_threads: Option<usize>,
    /// Read the objects through the mounted filesystem even when it is a squashfs whose image
    /// could be decoded here (`--read-through-mount`).
    pub read_through_mount: bool,
}

/// A default path, on the host the flow found; or without one, here if it exists here, else
/// through /proc/1/root.
fn find_default(path: &str, what: &str, host_root: Option<&HostRoot>) -> Result<PathBuf> {
    if let Some(root) = host_root {
        let local = root.local(Path::new(path))?;
        if local.is_dir() {
            return Ok(local);
        }
        bail!(
            "no live image to install: the host has no {what} {path}{}: it is not running a \
             CoreOS live system. To install another image, pass --image-url or --image-file",
            if local.as_path() == Path::new(path) {
                String::new()
            } else {
                format!(" (looked for at {})", local.display())
            }
        );
    }
    let local = Path::new(path);
    if local.is_dir() {
        return Ok(local.to_path_buf());
    }
    let via_host = HostRoot::At(PathBuf::from(PID1_ROOT)).local(Path::new(path))?;
    if via_host.is_dir() {
        return Ok(via_host);
    }
    bail!(
        "no live image to install: the {what} {path} exists neither here nor on the host ({}). \
         This is not a CoreOS live system, or the installer container cannot see the host: run it \
         with --privileged --pid=host. To install another image, pass --image-url or --image-file",
        via_host.display()
    )
}

/// `--osmet-dir`/`--ostree-repo` when given (it must exist), else the default.
fn dir_of(
    given: Option<&Path>,
    flag: &str,
    default: &str,
    what: &str,
    host_root: Option<&HostRoot>,
) -> Result<PathBuf> {
    match given {
        Some(d) if d.is_dir() => Ok(d.to_path_buf()),
        Some(d) => bail!("{flag} {}: no such directory", d.display()),
        None => find_default(default, what, host_root),
    }
}

impl LiveImage {
    /// Where the osmet files and objects are (given, or the live system's defaults).
    pub fn locate(&self) -> Result<(PathBuf, PathBuf)> {
        let root = self.host_root.as_ref();
        let dir = dir_of(
            self.osmet_dir.as_deref(),
            "--osmet-dir",
            DEFAULT_OSMET_DIR,
            "osmet directory",
            root,
        )?;
        let repo = dir_of(
            self.ostree_repo.as_deref(),
            "--ostree-repo",
            DEFAULT_OSTREE_REPO,
            "live OSTree repository",
            root,
        )?;
        if !repo.join("objects").is_dir() {
            bail!(
                "{} is not an OSTree repository (it has no objects directory)",
                repo.display()
            );
        }
        Ok((dir, repo))
    }

    /// Choose the osmet file for a target with `sector_size`-byte sectors and start rebuilding
    /// its image. Fails before anything is written when no file matches.
    pub fn open(&self, sector_size: u64) -> Result<LiveSource> {
        let (dir, repo) = self.locate()?;
        tracing::info!(
            "live image: osmet files in {}, OSTree objects in {}",
            dir.display(),
            repo.display()
        );
        // `uname -m`: what osmet files record as their architecture.
        let uname = nix::sys::utsname::uname().context("uname")?;
        let wanted = Wanted {
            architecture: uname.machine().to_string_lossy().into_owned(),
            sector_size,
        };
        let chosen = choose::choose(&dir, &choose::list(&dir)?, &wanted)?;
        let h = &chosen.header;
        let (os, ss, path) = (
            format!("{} {}", h.os_description, h.os_architecture),
            h.sector_size,
            chosen.path.display(),
        );
        tracing::info!("installing {os} ({ss}-byte sectors) from {path}");
        let describe = format!(
            "the live image ({os}, {ss}-byte sectors) rebuilt from {path} with the objects of {}",
            repo.display()
        );
        let mismatch = format!(
            "the checksum recorded in {path}: an object in {} differs from the one packed (a damaged or different live root)",
            repo.display()
        );
        let size = chosen.body.size;
        let rebuild = Rebuild::start(
            chosen.pieces,
            size,
            chosen.packed,
            chosen.path.display().to_string(),
            (&repo, self.read_through_mount),
            self.read_threads,
        )
        .context("starting the live image rebuild")?;
        Ok(LiveSource {
            rebuild,
            describe,
            size,
            checksum: Sha256Sum(chosen.body.checksum),
            mismatch,
        })
    }
}

/// The rebuilt live image, as the pipeline reads it.
pub struct LiveSource {
    rebuild: Rebuild,
    /// Where it comes from, for messages and the summary.
    pub(crate) describe: String,
    pub(crate) size: u64,
    /// The SHA-256 it must have, and what a mismatch means.
    pub(crate) checksum: Sha256Sum,
    pub(crate) mismatch: String,
}

impl Read for LiveSource {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        self.rebuild.read(out)
    }
}

/// Read every object extent the osmet file `osmet` maps from the OSTree repository `repo`, as a
/// rebuild does (the same plan, store, `readers` threads (`None`: the store's default) and
/// batches), and drop the bytes: the
/// benches' limit "the objects alone". The bytes read.
#[cfg(any(test, feature = "test-support"))]
pub fn read_objects_alone(
    osmet: &Path,
    repo: &Path,
    readers: Option<usize>,
    through_mount: bool,
) -> Result<u64> {
    let file =
        std::fs::File::open(osmet).with_context(|| format!("opening {}", osmet.display()))?;
    let mut d = format::Decoder::new(std::io::BufReader::new(file));
    d.header()?;
    let pieces = plan::plan(&d.body()?, objects::MAX_READ)?;
    let extents = plan::object_extents(&pieces);
    let store = store::Store::open(repo, &extents, through_mount);
    let readers = readers.unwrap_or_else(|| store.default_readers());
    let mut objects = objects::Objects::start(extents, store, readers)?;
    let (mut buf, mut total) = (vec![0u8; objects::MAX_READ as usize], 0);
    loop {
        match objects.read(&mut buf)? {
            0 => return Ok(total),
            n => total += n as u64,
        }
    }
}
