//! The block-device ioctls. This is the only module of the crate with `unsafe`: every block
//! below calls `ioctl(2)` on a descriptor we own, with an argument of exactly the type the
//! kernel's `include/uapi/linux/fs.h` (and `blkpg.h`) declares for that request.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

// libc does not export these two; their numbers come from the _IO/_IOR encodings in
// include/uapi/linux/fs.h.
const BLKRRPART: libc::c_ulong = nix::request_code_none!(0x12, 95) as libc::c_ulong;
const BLKGETSIZE64: libc::c_ulong =
    nix::request_code_read!(0x12, 114, std::mem::size_of::<libc::size_t>()) as libc::c_ulong;

fn check(ret: libc::c_int, what: &str) -> io::Result<()> {
    if ret < 0 {
        let err = io::Error::last_os_error();
        Err(io::Error::new(err.kind(), format!("{what}: {err}")))
    } else {
        Ok(())
    }
}

/// Logical sector size (`BLKSSZGET`): the unit O_DIRECT offsets and lengths must be multiples of,
/// and the LBA size the GPT is written in.
pub fn logical_sector_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one `int` through the pointer, which points at a live local.
    let ret = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::BLKSSZGET,
            &mut size as *mut libc::c_int,
        )
    };
    check(ret, "BLKSSZGET")?;
    Ok(size as u64)
}

/// Device size in bytes (`BLKGETSIZE64`).
pub fn size_bytes(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one `u64` (declared `size_t` in the _IOR, 8 bytes on 64-bit
    // kernels; the kernel always stores a u64) through the pointer to a live local.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    check(ret, "BLKGETSIZE64")?;
    Ok(size)
}

/// Ask the kernel to re-read the partition table (`BLKRRPART`). Fails with EBUSY while a
/// partition of the disk is open, and succeeds without creating anything on kernels built
/// without partition-table parsers.
pub fn reread_partitions(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: BLKRRPART takes no argument; the fd is open for the duration of the call.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), BLKRRPART) };
    check(ret, "BLKRRPART")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn ioctls_on_a_regular_file_fail_with_a_named_request() {
        let f = tempfile::tempfile().unwrap();
        let err = logical_sector_size(f.as_fd()).unwrap_err();
        assert!(err.to_string().starts_with("BLKSSZGET"), "{err}");
        let err = size_bytes(f.as_fd()).unwrap_err();
        assert!(err.to_string().starts_with("BLKGETSIZE64"), "{err}");
    }
}
