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

const BLKPG: libc::c_ulong = nix::request_code_none!(0x12, 105) as libc::c_ulong;
const BLKPG_ADD_PARTITION: libc::c_int = 1;
const BLKPG_DEL_PARTITION: libc::c_int = 2;

/// `struct blkpg_partition` from include/uapi/linux/blkpg.h (offsets and lengths in bytes).
#[repr(C)]
struct BlkpgPartition {
    start: libc::c_longlong,
    length: libc::c_longlong,
    pno: libc::c_int,
    devname: [libc::c_char; 64],
    volname: [libc::c_char; 64],
}

/// `struct blkpg_ioctl_arg`.
#[repr(C)]
struct BlkpgIoctlArg {
    op: libc::c_int,
    flags: libc::c_int,
    datalen: libc::c_int,
    data: *mut libc::c_void,
}

fn blkpg(fd: BorrowedFd<'_>, op: libc::c_int, pno: u32, start: u64, length: u64) -> io::Result<()> {
    let mut part = BlkpgPartition {
        start: start as libc::c_longlong,
        length: length as libc::c_longlong,
        pno: pno as libc::c_int,
        devname: [0; 64],
        volname: [0; 64],
    };
    let mut arg = BlkpgIoctlArg {
        op,
        flags: 0,
        datalen: std::mem::size_of::<BlkpgPartition>() as libc::c_int,
        data: &mut part as *mut BlkpgPartition as *mut libc::c_void,
    };
    // SAFETY: BLKPG reads a blkpg_ioctl_arg whose `data` points at a blkpg_partition of
    // `datalen` bytes; both are live locals laid out as the kernel's structs (repr(C)).
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), BLKPG, &mut arg as *mut BlkpgIoctlArg) };
    check(
        ret,
        if op == BLKPG_ADD_PARTITION {
            "BLKPG add partition"
        } else {
            "BLKPG delete partition"
        },
    )
}

/// Tell the kernel partition `pno` spans `length` bytes from byte `start` (what `partx -a` does);
/// devtmpfs then creates its node.
pub fn add_partition(fd: BorrowedFd<'_>, pno: u32, start: u64, length: u64) -> io::Result<()> {
    blkpg(fd, BLKPG_ADD_PARTITION, pno, start, length)
}

/// Remove partition `pno` from the kernel's view of the disk (the table on disk is untouched).
pub fn delete_partition(fd: BorrowedFd<'_>, pno: u32) -> io::Result<()> {
    blkpg(fd, BLKPG_DEL_PARTITION, pno, 0, 0)
}

/// The raw OS error, unwrapped, so callers can branch on `raw_os_error()` (EBUSY, EINVAL);
/// they add the context. `_what` names the request for the reader of this file.
fn check(ret: libc::c_int, _what: &str) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
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
    fn ioctls_on_a_regular_file_keep_the_raw_os_error() {
        let f = tempfile::tempfile().unwrap();
        let err = logical_sector_size(f.as_fd()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTTY), "{err}");
        let err = size_bytes(f.as_fd()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTTY), "{err}");
        let err = reread_partitions(f.as_fd()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTTY), "{err}");
    }
}
