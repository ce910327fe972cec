//! The typed handle every destructive operation takes. Opening a block device uses O_EXCL, which
//! the kernel refuses with EBUSY while the disk or any of its partitions is mounted, used as
//! swap, or claimed by device-mapper/MD; we then look up who holds it so the message can say so.

use anyhow::{bail, Context, Result};
use nix::fcntl::{fallocate, FallocateFlags};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::holders::{self, DeviceBusy};
use super::partitions;
use super::sys;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// A real block device (disk, loop device, NVMe namespace ...).
    Block,
    /// A regular file used as a disk image.
    File,
}

/// How the kernel zeroes a range of a target without the zeros crossing from user space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroMethod {
    /// `BLKZEROOUT` on a block device: the device's own zeroing command where it has one.
    ZeroOut,
    /// `fallocate(PUNCH_HOLE | KEEP_SIZE)` on a regular file: the range becomes a hole.
    PunchHole,
}

impl std::fmt::Display for ZeroMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ZeroMethod::ZeroOut => "BLKZEROOUT",
            ZeroMethod::PunchHole => "holes punched",
        })
    }
}

/// The target cannot zero a range itself (the operation, not the disk, failed): the zeros must
/// be written as data. Carried as the root of [`Device::zero_range`]'s error.
#[derive(Debug, thiserror::Error)]
#[error("{device} refused zeroing ({errno})")]
pub(crate) struct ZeroRefused {
    device: String,
    /// The errno's name, e.g. `EOPNOTSUPP`.
    errno: String,
}

fn open_rw(path: &Path, flags: libc::c_int) -> io::Result<File> {
    let mut options = OpenOptions::new();
    let options = options.read(true).write(true);
    options.custom_flags(flags | libc::O_CLOEXEC).open(path)
}

/// An open target disk. Destructive code takes `&Device`, never a path.
#[derive(Debug)]
pub struct Device {
    file: File,
    path: PathBuf,
    kind: DeviceKind,
    sector_size: Option<u64>,
    size: u64,
    direct: bool,
}

impl Device {
    /// Open `path` for writing an image: a block device exclusively with O_DIRECT, or an existing
    /// regular file (O_DIRECT when its filesystem supports it).
    pub fn open_for_write(path: &Path) -> Result<Device> {
        let meta = std::fs::metadata(path).with_context(|| {
            format!(
                "cannot use {}: it does not exist (for a disk-image file, create it first, e.g. truncate -s 8G {})",
                path.display(),
                path.display()
            )
        })?;
        let ft = meta.file_type();
        if ft.is_block_device() {
            Self::open_block(path)
        } else if ft.is_file() {
            Self::open_file(path, meta.len())
        } else {
            bail!(
                "{} is neither a block device nor a regular file",
                path.display()
            )
        }
    }

    fn open_block(path: &Path) -> Result<Device> {
        let open = || open_rw(path, libc::O_EXCL | libc::O_DIRECT);
        let file = match open() {
            // A device-mapper disk (multipath, linear) held by nothing but its own partition
            // maps is ours to take, as coreos-installer takes a /dev/dm-* target: the maps are
            // removed here and made again from the new table after the write.
            Err(e)
                if e.raw_os_error() == Some(libc::EBUSY) && partitions::release_own_maps(path)? =>
            {
                open()
            }
            other => other,
        };
        let file = match file {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                let holders = holders::describe(path).unwrap_or_default();
                let holders = if holders.is_empty() {
                    "the kernel reports it busy; no mount, swap or holder was found, so another process may have it open exclusively".to_string()
                } else {
                    holders.join("; ")
                };
                return Err(DeviceBusy {
                    path: path.display().to_string(),
                    holders,
                }
                .into());
            }
            Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
        };
        let sector_size = sys::logical_sector_size(file.as_fd())
            .with_context(|| format!("BLKSSZGET: reading the sector size of {}", path.display()))?;
        let size = sys::size_bytes(file.as_fd())
            .with_context(|| format!("BLKGETSIZE64: reading the size of {}", path.display()))?;
        Ok(Device {
            file,
            path: path.to_path_buf(),
            kind: DeviceKind::Block,
            sector_size: Some(sector_size),
            size,
            direct: true,
        })
    }

    fn open_file(path: &Path, size: u64) -> Result<Device> {
        let open = |flags| open_rw(path, flags);
        // tmpfs and some overlay filesystems refuse O_DIRECT with EINVAL: fall back to the page
        // cache there, it is only a file.
        let (file, direct) = match open(libc::O_DIRECT) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                open(0).with_context(|| format!("cannot open {}", path.display()))?,
                false,
            ),
            Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
        };
        Ok(Device {
            file,
            path: path.to_path_buf(),
            kind: DeviceKind::File,
            sector_size: None,
            size,
            direct,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn kind(&self) -> DeviceKind {
        self.kind
    }

    /// The logical sector size of a block device; `None` for an image file, whose sector size is
    /// whatever the image says.
    pub fn sector_size(&self) -> Option<u64> {
        self.sector_size
    }

    /// Size in bytes (a regular file: its current length).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether writes bypass the page cache (and so must be aligned).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Write all of `buf` at `offset`. With O_DIRECT, `buf` must come from an
    /// [`AlignedBuf`](super::direct::AlignedBuf) and offset/length be sector multiples.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let end = offset + buf.len() as u64;
        if self.kind == DeviceKind::Block && end > self.size {
            bail!(
                "write of {} bytes at offset {offset} would pass the end of {} ({} bytes)",
                buf.len(),
                self.path.display(),
                self.size
            );
        }
        self.file.write_all_at(buf, offset).with_context(|| {
            format!(
                "writing {} bytes at offset {offset} of {}",
                buf.len(),
                self.path.display()
            )
        })
    }

    pub fn zero_method(&self) -> ZeroMethod {
        match self.kind {
            DeviceKind::Block => ZeroMethod::ZeroOut,
            DeviceKind::File => ZeroMethod::PunchHole,
        }
    }

    /// Make `len` bytes at `offset` read as zeros, by the kernel (see [`ZeroMethod`]); offset
    /// and length must be sector multiples. A target that cannot do it fails with a
    /// [`ZeroRefused`] root cause; any other error (EIO ...) is a failure of the disk.
    pub fn zero_range(&self, offset: u64, len: u64) -> Result<()> {
        let end = offset + len;
        if end > self.size {
            bail!(
                "zeroing {len} bytes at offset {offset} would pass the end of {} ({} bytes)",
                self.path.display(),
                self.size
            );
        }
        let done = match self.kind {
            DeviceKind::Block => sys::zero_out(self.file.as_fd(), offset, len),
            DeviceKind::File => {
                let mode =
                    FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
                fallocate(self.file.as_raw_fd(), mode, offset as i64, len as i64)
                    .map_err(io::Error::from)
            }
        };
        let Err(e) = done else { return Ok(()) };
        // The operation is missing (ENOTTY: no such ioctl; ENOSYS: no such syscall; EOPNOTSUPP:
        // a filesystem without hole punching, such as vfat, ramfs or the ext2 driver, or a stacked driver without
        // zeroing) or rejected as a whole (EINVAL: our ranges are sector-aligned and inside the
        // target, so only a driver or filesystem that does not take the request says it).
        // Writing the zeros instead is always correct. Anything else (EIO, ENOSPC ...) is the
        // disk failing, which writing would meet too.
        let errno = e.raw_os_error().map(nix::errno::Errno::from_raw);
        use nix::errno::Errno::{EINVAL, ENOSYS, ENOTTY, EOPNOTSUPP};
        match errno {
            Some(n @ (EOPNOTSUPP | ENOTTY | ENOSYS | EINVAL)) => Err(ZeroRefused {
                device: self.path.display().to_string(),
                errno: format!("{n:?}"),
            }
            .into()),
            _ => Err(e).with_context(|| {
                format!(
                    "zeroing {len} bytes at offset {offset} of {} ({})",
                    self.path.display(),
                    self.zero_method()
                )
            }),
        }
    }

    /// Read exactly `buf.len()` bytes at `offset` (same alignment rules as `write_at`).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.file.read_exact_at(buf, offset).with_context(|| {
            format!(
                "reading {} bytes at offset {offset} of {}",
                buf.len(),
                self.path.display()
            )
        })
    }

    /// Flush data and metadata to stable storage.
    pub fn sync(&self) -> Result<()> {
        self.file
            .sync_all()
            .with_context(|| format!("fsync of {}", self.path.display()))
    }

    /// `major:minor` of a block device.
    pub fn devno(&self) -> Option<(u64, u64)> {
        let meta = self.file.metadata().ok()?;
        if self.kind != DeviceKind::Block {
            return None;
        }
        let rdev = meta.rdev();
        Some((libc::major(rdev) as u64, libc::minor(rdev) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_says_how_to_make_an_image_file() {
        let err = Device::open_for_write(Path::new("/nonexistent/disk.img")).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("does not exist"), "{msg}");
        assert!(msg.contains("truncate -s"), "{msg}");
    }

    #[test]
    fn a_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = Device::open_for_write(dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("neither a block device nor a regular file"),
            "{err}"
        );
    }

    #[test]
    fn a_regular_file_is_a_device_of_its_length() {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(3 << 20).unwrap();
        let dev = Device::open_for_write(f.path()).unwrap();
        assert_eq!(dev.kind(), DeviceKind::File);
        assert_eq!(dev.size(), 3 << 20);
        assert_eq!(dev.sector_size(), None);
        let mut buf = super::super::direct::AlignedBuf::new(4096);
        buf.as_mut_slice().fill(7);
        dev.write_at(buf.as_slice(), 8192).unwrap();
        let mut back = super::super::direct::AlignedBuf::new(4096);
        dev.read_at(back.as_mut_slice(), 8192).unwrap();
        assert_eq!(back.as_slice(), buf.as_slice());
    }

    #[test]
    fn zeroing_a_regular_file_punches_a_hole_and_stays_inside_it() {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().write_all_at(&vec![0x5a; 1 << 20], 0).unwrap();
        f.as_file().sync_all().unwrap();
        let dev = Device::open_for_write(f.path()).unwrap();
        assert_eq!(dev.zero_method(), ZeroMethod::PunchHole);
        let blocks = || f.as_file().metadata().unwrap().blocks() * 512;
        let before = blocks();
        dev.zero_range(64 << 10, 512 << 10).unwrap();
        let mut back = super::super::direct::AlignedBuf::new(1 << 20);
        dev.read_at(back.as_mut_slice(), 0).unwrap();
        let b = back.as_slice();
        assert!(b[..64 << 10].iter().all(|&x| x == 0x5a));
        assert!(b[64 << 10..576 << 10].iter().all(|&x| x == 0));
        assert!(b[576 << 10..].iter().all(|&x| x == 0x5a));
        assert!(
            blocks() <= before - (512 << 10),
            "{} -> {}",
            before,
            blocks()
        );
        let err = dev.zero_range(1 << 20, 4096).unwrap_err();
        assert!(err.to_string().contains("would pass the end"), "{err}");
    }
}
