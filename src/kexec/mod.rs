//! Rebooting into the installed system without going through the firmware: the kernel, the
//! initramfs and the command line the boot loader would start from the written disk's /boot
//! (its BLS entry, with what GRUB adds on the first boot), loaded with `kexec_file_load` so a
//! kexec reboot (`systemctl kexec`) starts them. Opt-in (`write-image --kexec`, `ai.kexec`);
//! whoever loads falls back to a firmware reboot on any error.

pub(crate) mod entry;

use anyhow::{anyhow, bail, Context, Result};
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::postinstall::firstboot::FIRSTBOOT_FILE;
use crate::postinstall::kargs::bls_entry_path;

/// What the boot loader would start, as found on /boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KexecImage {
    /// The kernel's path on the boot partition, as the entry names it.
    pub kernel: String,
    /// The initramfs's path on the boot partition.
    pub initrd: Option<String>,
    /// The kernel command line, first-boot arguments expanded.
    pub cmdline: String,
}

/// A loaded installed system, ready for a kexec reboot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    pub image: KexecImage,
    pub initramfs_bytes: u64,
}

impl std::fmt::Display for Loaded {
    /// The line `write-image --kexec` prints on stdout.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "kexec: loaded {} ({:.1} MiB initramfs); start it with: systemctl kexec",
            self.image.kernel,
            self.initramfs_bytes as f64 / 1048576.0
        )
    }
}

/// The effect boundary: hand the kernel a kernel image, an initramfs and a command line.
pub trait KexecLoader: Send + Sync {
    fn load(&self, kernel: &File, initrd: Option<&File>, cmdline: &CStr) -> io::Result<()>;
}

/// The real one: `kexec_file_load(2)`.
pub struct SyscallLoader;

impl KexecLoader for SyscallLoader {
    fn load(&self, kernel: &File, initrd: Option<&File>, cmdline: &CStr) -> io::Result<()> {
        use std::os::fd::AsFd;
        crate::disk::sys::kexec_file_load(kernel.as_fd(), initrd.map(|f| f.as_fd()), cmdline)
    }
}

/// Why the kernel refused a load, for the one warning before a firmware reboot.
pub(crate) fn refusal(e: &io::Error) -> String {
    let why = match e.raw_os_error() {
        Some(libc::ENOSYS) => "this kernel has no kexec support (built without CONFIG_KEXEC_FILE)",
        Some(libc::EPERM) => {
            "kexec is not allowed here (no CAP_SYS_BOOT, kernel.kexec_load_disabled, or lockdown)"
        }
        Some(
            libc::EKEYREJECTED
            | libc::EBADMSG
            | libc::EKEYREVOKED
            | libc::EKEYEXPIRED
            | libc::ENOKEY
            // No signature at all, or no way to check its kind, where one is required.
            | libc::ENODATA
            | libc::ENOPKG,
        ) => "the kernel's signature was refused (Secure Boot or lockdown wants a kernel signed by a trusted key)",
        Some(libc::ENOEXEC) => "not a kernel image this kernel can boot",
        Some(libc::EBUSY) => "a kexec load is already in progress",
        Some(libc::ENOMEM) => "not enough memory for the kernel and initramfs",
        Some(libc::EINVAL) => "the kernel refused the arguments (a command line too long?)",
        _ => "the kernel refused the load",
    };
    format!("{why} ({e})")
}

/// `path` as a path on /boot, for messages (`/loader/entries/…`), not the private mountpoint.
fn on_boot(boot_root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(boot_root);
    rel.map_or_else(
        |_| path.display().to_string(),
        |r| format!("/{}", r.display()),
    )
}

/// Read the BLS entry (the one post-install edits: the last by name, which GRUB's blscfg
/// starts) and `ignition.firstboot` on the mounted /boot at `boot_root`.
pub(crate) fn read_image(boot_root: &Path) -> Result<KexecImage> {
    let entry_path = bls_entry_path(boot_root)
        .map_err(|_| anyhow!("no BLS entry (/loader/entries/*.conf) on /boot"))?;
    let shown = on_boot(boot_root, &entry_path);
    let entry = std::fs::read_to_string(&entry_path)
        .map_err(anyhow::Error::from)
        .and_then(|text| entry::parse_entry(&text))
        .with_context(|| format!("the BLS entry {shown}"))?;
    let firstboot_path = boot_root.join(FIRSTBOOT_FILE);
    let firstboot = match std::fs::read_to_string(&firstboot_path) {
        Ok(text) => Some(
            entry::firstboot_network_args(&text)
                .with_context(|| format!("/{FIRSTBOOT_FILE} on /boot"))?,
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading /{FIRSTBOOT_FILE} on /boot")),
    };
    let cmdline = entry::expand_options(&entry.options, firstboot.as_deref())
        .with_context(|| format!("the options of the BLS entry {shown}"))?;
    Ok(KexecImage {
        kernel: entry.linux,
        initrd: entry.initrd,
        cmdline,
    })
}

/// Open `path` (a path on /boot) under `boot_root`: a regular file, not outside /boot.
fn open_on_boot(boot_root: &Path, path: &str, what: &str) -> Result<File> {
    let open = || -> Result<File> {
        let rel = Path::new(path.trim_start_matches('/'));
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            bail!("not a plain path on /boot");
        }
        let full: PathBuf = boot_root.join(rel);
        let real = full.canonicalize()?;
        if !real.starts_with(boot_root.canonicalize()?) {
            bail!("a symbolic link out of /boot");
        }
        let file = File::open(&real)?;
        if !file.metadata()?.is_file() {
            bail!("not a regular file");
        }
        Ok(file)
    };
    open().with_context(|| format!("the {what} {path} on /boot"))
}

/// Read what the boot loader would start from the mounted /boot at `boot_root` and load it.
pub fn load_from_boot(boot_root: &Path, loader: &dyn KexecLoader) -> Result<Loaded> {
    let image = read_image(boot_root)?;
    tracing::info!(
        "kexec: loading {} with options {}",
        image.kernel,
        image.cmdline
    );
    let kernel = open_on_boot(boot_root, &image.kernel, "kernel")?;
    let initrd = image.initrd.as_deref();
    let initrd = initrd.map(|path| open_on_boot(boot_root, path, "initramfs"));
    let initrd = initrd.transpose()?;
    let initramfs_bytes = initrd.as_ref().map(File::metadata).transpose()?;
    let initramfs_bytes = initramfs_bytes.map_or(0, |m| m.len());
    let cmdline = CString::new(image.cmdline.clone())
        .map_err(|_| anyhow!("the command line has a NUL byte"))?;
    loader
        .load(&kernel, initrd.as_ref(), &cmdline)
        .map_err(|e| anyhow!("kexec_file_load of {}: {}", image.kernel, refusal(&e)))?;
    Ok(Loaded {
        image,
        initramfs_bytes,
    })
}

/// Load the installed system of the written disk `device` (a block device or a disk-image
/// file), its /boot mounted read-only while the kernel reads the files.
pub fn load_installed(device: &Path, loader: &dyn KexecLoader) -> Result<Loaded> {
    crate::write::post_install::with_written_boot(device, |root| load_from_boot(root, loader))
        .with_context(|| {
            format!(
                "loading the installed system of {} for a kexec reboot",
                device.display()
            )
        })
}

/// The flows' effect boundary: load the installed system of a written disk.
pub trait InstalledLoader: Send + Sync {
    fn load(&self, device: &Path) -> Result<Loaded>;
}

/// The real one: the disk's /boot, mounted, through a [`KexecLoader`].
pub struct FromDisk(pub Arc<dyn KexecLoader>);

impl InstalledLoader for FromDisk {
    fn load(&self, device: &Path) -> Result<Loaded> {
        load_installed(device, self.0.as_ref())
    }
}

#[cfg(any(test, feature = "test-support"))]
pub mod testing;

#[cfg(test)]
mod tests;
