#![allow(dead_code)]
//! The "live system" fixture: what a CoreOS live ISO gives `coreos-installer install` when no
//! image URL is passed — an osmet file describing the metal image, plus the live root whose
//! OSTree objects the osmet file refers to.
//!
//! One fixture per sector size (512 and 4096), each a directory in the test-data cache holding
//!
//! - `rhcos-metal[4k].x86_64.raw`: a CoreOS-like metal image ([`ImageSpec::live`]: the usual GPT
//!   layout, ext4 `boot`, **XFS** `root` holding `ostree/repo/objects/<2>/<62>.file` hard-linked
//!   from a deployment tree, whose `usr/lib/modules/<kver>/{vmlinuz,initramfs.img}` are
//!   byte-identical to /boot's kernel and initramfs);
//! - `rhcos-metal[4k].x86_64.osmet`: packed from that image by the **real** `coreos-installer`
//!   0.27.0 (`pack osmet --fast`), so readers are checked against the reference packer rather
//!   than against our own idea of the format;
//! - `sysroot/`: the root filesystem's tree as staged, byte-identical to the XFS contents (it
//!   was copied into the XFS with `cp -a`), for tests to bind-mount read-only on `/sysroot`;
//! - beside it, on demand ([`cached_live_squashfs`]), that tree as the live ISO ships it: a zstd
//!   squashfs (`root.squashfs`), which the tests' live layout (`tests/common/live_ns.rs`) mounts
//!   on `/sysroot` through a loop device, afresh per command, so reads go through the kernel's
//!   squashfs decompressor with cold caches as on a live system. The byte-for-byte offline
//!   install (`tests/offline_loop.rs`, 512-byte sectors) and the offline bench read from it.
//!
//! Generation needs root (loop devices, mounts), xfsprogs, util-linux (`losetup`, `partx`,
//! `unshare`, `lsblk`, `blkid`) and the packer; it takes ~20 s per test fixture on two cores.
//! The cache key is the image spec, [`LIVE_FIXTURE_VERSION`] and the packer's `--version`;
//! concurrent test binaries share one generation through an exclusive flock, like
//! `cached_image_set`. The raw image is not byte-reproducible (XFS inode times are those of
//! the copy): always use [`LiveFixture::raw_sha256`].

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::coreos_image::{
    build_raw_staged, cached, find_tool, lock_cache, marker_spec_line, sha256_file, verbose,
    ImageSpec, BUILD_ID,
};

/// Bump whenever the fixture's layout or packing changes; part of the cache key.
pub(crate) const LIVE_FIXTURE_VERSION: u32 = 1;
/// The packer release the fixtures are made with.
pub(crate) const COREOS_INSTALLER_VERSION: &str = "0.27.0";
/// First 8 bytes of every osmet file.
pub(crate) const OSMET_MAGIC: [u8; 8] = *b"OSMET\0\0\0";
/// Environment variable naming the packer binary (else `coreos-installer` on PATH).
pub(crate) const COREOS_INSTALLER_ENV: &str = "COREOS_INSTALLER";

#[derive(Clone, Debug)]
pub(crate) struct LiveFixture {
    pub sector_size: u64,
    /// The raw metal image.
    pub raw: PathBuf,
    pub raw_size: u64,
    /// Lowercase hex SHA-256 of the raw image.
    pub raw_sha256: String,
    /// Packed from `raw` by the real coreos-installer.
    pub osmet: PathBuf,
    /// Directory with `ostree/repo/objects/<2hex>/<62hex>.file` (the whole root tree).
    pub sysroot: PathBuf,
    /// What was passed to `--description`.
    pub description: String,
    /// The spec the raw image was generated from.
    pub spec: ImageSpec,
}

impl LiveFixture {
    /// The spec the raw image was generated from.
    pub(crate) fn spec(&self) -> ImageSpec {
        self.spec.clone()
    }

    /// Path of the kernel inside the boot filesystem (no leading slash).
    pub(crate) fn kernel_boot_path(&self) -> String {
        self.spec().kernel_path()
    }

    /// Path of the initramfs inside the boot filesystem (no leading slash).
    pub(crate) fn initramfs_boot_path(&self) -> String {
        self.spec().initramfs_path()
    }

    /// Object names (64 hex digits) of the kernel and the initramfs: the packer maps /boot's
    /// copies to these objects.
    pub(crate) fn boot_objects(&self) -> (String, String) {
        self.spec().boot_payload_objects()
    }

    /// `sysroot/ostree/repo/objects/<2>/<62>.file` for a 64-hex-digit object name.
    pub(crate) fn object_path(&self, object: &str) -> PathBuf {
        self.sysroot.join(format!(
            "ostree/repo/objects/{}/{}.file",
            &object[..2],
            &object[2..]
        ))
    }

    /// The deployment directory inside `sysroot` (its `usr/lib/modules/<kver>/vmlinuz` is the
    /// kernel object's other name).
    pub(crate) fn deployment(&self) -> PathBuf {
        self.sysroot.join(self.spec().deployment_dir())
    }
}

/// What the fixtures pass to `--description`: the image's `PRETTY_NAME`, as the real build does.
pub(crate) fn description() -> String {
    format!("Red Hat Enterprise Linux CoreOS {BUILD_ID} (Plow)")
}

/// Base name of the osmet file, after the raw image's (`rhcos-metal[4k].x86_64.osmet`).
pub(crate) fn osmet_file_name(spec: &ImageSpec) -> String {
    let raw = spec.raw_file_name();
    format!("{}.osmet", raw.strip_suffix(".raw").unwrap_or(&raw))
}

/// The coreos-installer binary to use, checked to be 0.27.0, with a clear error otherwise.
pub(crate) fn coreos_installer() -> Result<PathBuf> {
    coreos_installer_with_version().map(|(p, _)| p)
}

const INSTALL_HINT: &str = "install it with `cargo install --locked coreos-installer --version \
     0.27.0 --root /usr/local` (needs libssl-dev, libzstd-dev, pkg-config; `make deps` does it) \
     or point $COREOS_INSTALLER at such a binary";

/// The binary and its `--version` line.
fn coreos_installer_with_version() -> Result<(PathBuf, String)> {
    let path = match std::env::var_os(COREOS_INSTALLER_ENV).filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        // `cargo install --root /usr/local` puts it in /usr/local/bin, which a minimal PATH
        // (sudo's secure_path, for one) may lack.
        None => find_tool("coreos-installer")
            .or_else(|| {
                let p = PathBuf::from("/usr/local/bin/coreos-installer");
                p.is_file().then_some(p)
            })
            .ok_or_else(|| {
                anyhow!("coreos-installer {COREOS_INSTALLER_VERSION} not found: {INSTALL_HINT}")
            })?,
    };
    let out = Command::new(&path)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version ({INSTALL_HINT})", path.display()))?;
    let version = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    ensure!(
        out.status.success() && version == format!("coreos-installer {COREOS_INSTALLER_VERSION}"),
        "{} --version says {:?} ({}), need coreos-installer {COREOS_INSTALLER_VERSION}: {INSTALL_HINT}",
        path.display(),
        version,
        out.status
    );
    Ok((path, version))
}

// ---------------------------------------------------------------------------------------------
// Packing
// ---------------------------------------------------------------------------------------------

/// A read-only loop device over an image, with its partitions added by `partx`; both undone on
/// drop, whatever happened in between.
struct PartitionedLoop {
    dev: PathBuf,
}

impl PartitionedLoop {
    fn attach_read_only(image: &Path, sector_size: u64) -> Result<Self> {
        // Read-only: the packer mounts XFS read-only, and XFS still writes its log on a
        // read-only mount of a writable device, which would break the image's checksum.
        let out = Command::new("losetup")
            .args(["--read-only", "--sector-size", &sector_size.to_string()])
            .args(["--find", "--show"])
            .arg(image)
            .output()
            .context("running losetup")?;
        ensure!(
            out.status.success(),
            "losetup -r {} failed: {}",
            image.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        ensure!(
            dev.starts_with("/dev"),
            "losetup printed no device: {dev:?}"
        );
        let this = PartitionedLoop { dev };
        // BLKPG partitions outlive `losetup -d`: an earlier user of this device may have left
        // some, and `partx -a` would then fail with "error adding partitions".
        let _ = Command::new("partx").arg("-d").arg(&this.dev).output();
        // This kernel may lack partition-table parsers (then `losetup -P` adds nothing), and
        // no udev may run: partx reads the GPT itself and adds each partition with BLKPG, and
        // devtmpfs creates the nodes.
        let out = Command::new("partx")
            .arg("-a")
            .arg(&this.dev)
            .output()
            .context("running partx")?;
        ensure!(
            out.status.success(),
            "partx -a {} failed: {}",
            this.dev.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        this.wait_for_partition_nodes(4)?;
        Ok(this)
    }

    fn partition(&self, n: u32) -> PathBuf {
        PathBuf::from(format!("{}p{n}", self.dev.display()))
    }

    /// devtmpfs (or udev) creates the nodes asynchronously.
    fn wait_for_partition_nodes(&self, count: u32) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let missing: Vec<PathBuf> = (1..=count)
                .map(|n| self.partition(n))
                .filter(|p| {
                    !fs::metadata(p)
                        .map(|m| m.file_type().is_block_device())
                        .unwrap_or(false)
                })
                .collect();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "partition nodes {missing:?} did not appear (is /dev a devtmpfs, or udev running?)"
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for PartitionedLoop {
    fn drop(&mut self) {
        let _ = Command::new("partx").arg("-d").arg(&self.dev).output();
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).output();
    }
}

/// Pack `raw` into `out` with the real packer, through a read-only loop device.
///
/// The packer decides how to read partition labels by whether `/run/udev/control` exists: if
/// it does but no udev runs (a leftover, or a test's fake), it trusts lsblk, which then has no
/// labels, and fails. So it runs in a private mount namespace with an empty tmpfs over `/run`:
/// it then always asks blkid, and nothing on the host changes. Its mounts are private anyway
/// (it unshares itself), and `TMPDIR` keeps its temporary files and mountpoints in `tmp`.
fn pack_osmet(
    installer: &Path,
    raw: &Path,
    sector_size: u64,
    sha256: &str,
    description: &str,
    out: &Path,
    tmp: &Path,
) -> Result<String> {
    // All fixtures' roots share one XFS UUID and XFS refuses to mount a second filesystem with
    // a UUID already mounted: one packer at a time, across processes.
    let _lock = lock_cache("live-pack")?;
    fs::create_dir_all(tmp)?;

    let lo = PartitionedLoop::attach_read_only(raw, sector_size)?;
    let mut cmd = if Path::new("/run").is_dir() {
        let mut c = Command::new(
            find_tool("unshare")
                .ok_or_else(|| anyhow!("unshare not found (install util-linux)"))?,
        );
        c.args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount -n -t tmpfs -o size=1m,mode=0755 live-fixture-run /run && exec "$@""#)
            .arg("sh")
            .arg(installer);
        c
    } else {
        Command::new(installer)
    };
    // (No backtraces in its error messages: they would drown the cause.)
    cmd.env("TMPDIR", tmp)
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .args(["pack", "osmet"])
        .arg(&lo.dev)
        .args([
            "--checksum",
            sha256,
            "--description",
            description,
            "--output",
        ])
        .arg(out)
        .arg("--fast");
    // Another test may have a filesystem with the same UUID mounted for a moment (e.g. checking
    // an installed disk): retry a failed mount a few times.
    let mut attempt = 0;
    loop {
        attempt += 1;
        let output = cmd.output().with_context(|| format!("running {cmd:?}"))?;
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if output.status.success() {
            return Ok(stderr);
        }
        let mount_failed = stderr.contains("mounting device");
        if attempt < 4 && mount_failed {
            std::thread::sleep(Duration::from_secs(2));
            continue;
        }
        bail!(
            "{} pack osmet {} failed with {}{}: {}",
            installer.display(),
            lo.dev.display(),
            output.status,
            if mount_failed {
                " (is another XFS with the root's UUID mounted?)"
            } else {
                ""
            },
            stderr.trim()
        );
    }
}

/// The header of an osmet file (format version 1), as the fixtures' tests want to see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OsmetHeader {
    pub version: u32,
    /// Version of the packer that wrote it.
    pub app_version: String,
    pub sector_size: u32,
    pub os_description: String,
    pub os_architecture: String,
}

/// Read an osmet file's header: the magic, then bincode-1 varints and strings (see
/// `osmet.md`, section 3). A small reader of its own, so the fixture does not depend on the
/// implementation under test.
pub(crate) fn read_osmet_header(path: &Path) -> Result<OsmetHeader> {
    let mut head = Vec::with_capacity(4096);
    File::open(path)
        .with_context(|| format!("opening {}", path.display()))?
        .take(4096)
        .read_to_end(&mut head)?;
    struct Cursor<'a>(&'a [u8]);
    impl<'a> Cursor<'a> {
        fn take(&mut self, n: usize) -> Result<&'a [u8]> {
            ensure!(n <= self.0.len(), "header truncated");
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            Ok(head)
        }
        fn varint(&mut self) -> Result<u64> {
            let le = |b: &[u8]| b.iter().rev().fold(0u64, |v, &x| (v << 8) | x as u64);
            Ok(match self.take(1)?[0] {
                tag @ 0..=250 => tag as u64,
                251 => le(self.take(2)?),
                252 => le(self.take(4)?),
                253 => le(self.take(8)?),
                tag => bail!("invalid varint tag {tag}"),
            })
        }
        fn string(&mut self) -> Result<String> {
            let len = usize::try_from(self.varint()?)?;
            Ok(String::from_utf8(self.take(len)?.to_vec())?)
        }
    }
    let mut c = Cursor(&head);
    let parse = |c: &mut Cursor| -> Result<OsmetHeader> {
        ensure!(c.take(8)? == OSMET_MAGIC, "no osmet magic at the start");
        let version = u32::try_from(c.varint()?)?;
        ensure!(version == 1, "osmet version {version}, expected 1");
        Ok(OsmetHeader {
            version,
            app_version: c.string()?,
            sector_size: u32::try_from(c.varint()?)?,
            os_description: c.string()?,
            os_architecture: c.string()?,
        })
    };
    parse(&mut c).with_context(|| format!("reading the osmet header of {}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Generation and cache
// ---------------------------------------------------------------------------------------------

/// Generate the fixture into `dir` (no locking, no marker); `installer` is the packer.
pub(crate) fn generate_live_fixture(
    spec: &ImageSpec,
    installer: &Path,
    dir: &Path,
) -> Result<LiveFixture> {
    spec.validate()?;
    ensure!(
        nix::unistd::geteuid().is_root(),
        "the live fixture needs root (loop devices, mounts)"
    );
    fs::create_dir_all(dir)?;
    let t = Instant::now();
    let raw_name = spec.raw_file_name();
    let raw = dir.join(&raw_name);
    let raw_tmp = dir.join(format!("{raw_name}.partial"));
    let build = build_raw_staged(spec, &raw_tmp)?;
    let (raw_size, raw_sha256) = sha256_file(&raw_tmp)?;
    fs::rename(&raw_tmp, &raw)?;
    verbose(t, "live raw image hashed");

    // The staged root is what went into the XFS, byte for byte: keep it as the sysroot.
    let sysroot = dir.join("sysroot");
    fs::rename(&build.root_stage, &sysroot)
        .with_context(|| format!("moving the staged root to {}", sysroot.display()))?;

    let osmet = dir.join(osmet_file_name(spec));
    let description = description();
    let log = pack_osmet(
        installer,
        &raw,
        spec.sector_size,
        &raw_sha256,
        &description,
        &osmet,
        &build.dir().join("tmp"),
    )?;
    verbose(t, "osmet packed");
    if std::env::var_os("COREOS_IMAGE_VERBOSE").is_some() {
        for line in log.lines() {
            eprintln!("coreos_image:   packer: {line}");
        }
    }
    drop(build);
    // The packer creates it 0600; tests copy it around as root anyway, but readable is simpler.
    fs::set_permissions(&osmet, fs::Permissions::from_mode(0o644))?;
    let header = read_osmet_header(&osmet)?;
    ensure!(
        u64::from(header.sector_size) == spec.sector_size,
        "{} says {}-byte sectors, expected {}",
        osmet.display(),
        header.sector_size,
        spec.sector_size
    );
    Ok(LiveFixture {
        sector_size: spec.sector_size,
        raw,
        raw_size,
        raw_sha256,
        osmet,
        sysroot,
        description,
        spec: spec.clone(),
    })
}

const MARKER_NAME: &str = "COMPLETE";
const MARKER_HEADER: &str = "coreos-live-fixture";

fn spec_line(spec: &ImageSpec) -> String {
    format!(
        "{} live_fixture_version={LIVE_FIXTURE_VERSION}",
        marker_spec_line(spec)
    )
}

fn write_marker(dir: &Path, spec: &ImageSpec, packer: &str, fx: &LiveFixture) -> Result<()> {
    let name = |p: &Path| -> Result<String> {
        p.file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .ok_or_else(|| anyhow!("bad name {}", p.display()))
    };
    let osmet_size = fs::metadata(&fx.osmet)?.len();
    let text = format!(
        "{MARKER_HEADER}\n{}\npacker {packer}\nraw {} {} {}\nosmet {} {osmet_size}\ndescription {}\n",
        spec_line(spec),
        name(&fx.raw)?,
        fx.raw_size,
        fx.raw_sha256,
        name(&fx.osmet)?,
        fx.description
    );
    let tmp = dir.join(format!("{MARKER_NAME}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(MARKER_NAME))?;
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// The cached fixture, or `None` if missing, for another spec or packer, or not matching.
fn read_marker(dir: &Path, spec: &ImageSpec, packer: &str) -> Option<LiveFixture> {
    let text = fs::read_to_string(dir.join(MARKER_NAME)).ok()?;
    let mut lines = text.lines();
    if lines.next()? != MARKER_HEADER
        || lines.next()? != spec_line(spec)
        || lines.next()?.strip_prefix("packer ")? != packer
    {
        return None;
    }
    let raw: Vec<&str> = lines.next()?.strip_prefix("raw ")?.split(' ').collect();
    let osmet: Vec<&str> = lines.next()?.strip_prefix("osmet ")?.split(' ').collect();
    let description = lines.next()?.strip_prefix("description ")?.to_string();
    if raw.len() != 3 || raw[2].len() != 64 || osmet.len() != 2 {
        return None;
    }
    let raw_path = dir.join(raw[0]);
    let raw_size: u64 = raw[1].parse().ok()?;
    let osmet_path = dir.join(osmet[0]);
    let osmet_size: u64 = osmet[1].parse().ok()?;
    let sysroot = dir.join("sysroot");
    if fs::metadata(&raw_path).ok()?.len() != raw_size
        || fs::metadata(&osmet_path).ok()?.len() != osmet_size
        || !sysroot.join("ostree/repo/objects").is_dir()
    {
        return None;
    }
    Some(LiveFixture {
        sector_size: spec.sector_size,
        raw: raw_path,
        raw_size,
        raw_sha256: raw[2].to_string(),
        osmet: osmet_path,
        sysroot,
        description,
        spec: spec.clone(),
    })
}

/// Cache subdirectory of a fixture, e.g. `live1-v1-ss512-root320-seed1-xfs-bootobj`.
pub(crate) fn live_cache_name(spec: &ImageSpec) -> String {
    format!("live{LIVE_FIXTURE_VERSION}-{}", spec.cache_name())
}

/// The live fixture at `sector_size` (512 or 4096): the test size (363 MiB raw), or the bench
/// size (1143 MiB raw) with `bench`. Generated once and cached (see the module docs).
///
/// Needs root and coreos-installer 0.27.0 (PATH, or $COREOS_INSTALLER).
pub(crate) fn cached_live_fixture(sector_size: u64, bench: bool) -> Result<LiveFixture> {
    cached_live_fixture_of(ImageSpec::live(sector_size, bench))
}

/// The live fixture of another image spec (a bootable one, for the boot tests).
pub(crate) fn cached_live_fixture_of(spec: ImageSpec) -> Result<LiveFixture> {
    spec.validate()?;
    let (installer, packer) = coreos_installer_with_version()?;
    cached(
        &live_cache_name(&spec),
        "live_fixture",
        |dir| read_marker(dir, &spec, &packer),
        |dir| {
            let fx = generate_live_fixture(&spec, &installer, dir)?;
            write_marker(dir, &spec, &packer, &fx)?;
            Ok(fx)
        },
    )
}

/// The fixture's root tree as a live ISO ships it: a zstd squashfs (the ISO's `root.squashfs`,
/// which the live system mounts on /sysroot), made by `mksquashfs` (squashfs-tools) from
/// `fx.sysroot` at zstd `level`. mksquashfs's default, 15, is the live ISO build's; the tests
/// pass 3, which packs in seconds instead of minutes: zstd decodes at about the same speed
/// whatever the level, and reading through the kernel's decompressor is what the fixture is
/// for. Cached beside the fixture, tied to its raw image's checksum (the tree belongs to it).
pub(crate) fn cached_live_squashfs(fx: &LiveFixture, level: u32) -> Result<PathBuf> {
    let name = format!("{}-squashfs-zstd{level}", live_cache_name(&fx.spec));
    let marker = format!("root.squashfs of raw {}", fx.raw_sha256);
    cached(
        &name,
        "live squashfs",
        |dir| {
            let done = fs::read_to_string(dir.join(MARKER_NAME)).ok()? == marker;
            done.then(|| dir.join("root.squashfs"))
        },
        |dir| {
            fs::create_dir_all(dir)?;
            let out = dir.join("root.squashfs");
            let mksquashfs = find_tool("mksquashfs")
                .ok_or_else(|| anyhow!("mksquashfs not found (install squashfs-tools)"))?;
            let status = Command::new(mksquashfs)
                .arg(&fx.sysroot)
                .arg(&out)
                .args(["-comp", "zstd", "-Xcompression-level", &level.to_string()])
                .args(["-noappend", "-quiet", "-no-progress"])
                .status()
                .context("running mksquashfs")?;
            ensure!(
                status.success(),
                "mksquashfs {} failed: {status}",
                fx.sysroot.display()
            );
            fs::write(dir.join(MARKER_NAME), &marker)?;
            Ok(out)
        },
    )
}
