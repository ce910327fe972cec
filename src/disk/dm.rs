//! The few device-mapper requests we make, on `/dev/mapper/control`: create a device, load a
//! table of linear targets, resume it (which swaps the loaded table in), and remove a device.
//! That is all kpartx does to a multipath map's partitions, and it needs neither libdevmapper
//! nor udev. The request buffers are built and read by pure functions; `sys::dm_ioctl` makes
//! the call.
//!
//! Layout of `struct dm_ioctl` (include/uapi/linux/dm-ioctl.h, 312 bytes): version[3] u32 at 0,
//! data_size u32 at 12, data_start u32 at 16, target_count u32 at 20, open_count i32 at 24,
//! flags u32 at 28, event_nr u32 at 32, padding at 36, dev u64 at 40, name[128] at 48,
//! uuid[129] at 176, data[7] at 305. A `struct dm_target_spec` (40 bytes: sector_start u64,
//! length u64, status i32, next u32, target_type[16]) follows at `data_start` for each target,
//! each followed by its NUL-terminated parameter string, padded to 8 bytes.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::sys::{self, DM_IOCTL_HEADER};

/// The device-mapper control node (devtmpfs creates it when `dm_mod` is loaded).
pub(crate) const CONTROL: &str = "/dev/mapper/control";

const DM_DEV_CREATE: u8 = 3;
const DM_DEV_REMOVE: u8 = 4;
const DM_DEV_SUSPEND: u8 = 6;
const DM_TABLE_LOAD: u8 = 9;

/// The interface version we speak: major 4 (the only one), minor 0 (every kernel has it).
const VERSION: [u32; 3] = [4, 0, 0];
const NAME_LEN: usize = 128;
const UUID_LEN: usize = 129;
const TARGET_SPEC: usize = 40;
const TARGET_TYPE_LEN: usize = 16;

/// One `linear` target: `length` 512-byte sectors of the device mapped from sector `start` of
/// `major:minor` (device-mapper counts in 512-byte sectors whatever the logical block size).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Linear {
    pub length: u64,
    pub major: u64,
    pub minor: u64,
    pub start: u64,
}

impl Linear {
    /// The target's parameter string, as `dmsetup table` prints it.
    pub(crate) fn params(&self) -> String {
        format!("{}:{} {}", self.major, self.minor, self.start)
    }
}

/// A request buffer: the header with `name` (and `uuid`), then `payload`.
fn request(name: &str, uuid: &str, target_count: u32, payload: &[u8]) -> Result<Vec<u8>> {
    if name.is_empty() || name.len() >= NAME_LEN || name.contains('/') {
        bail!("{name:?} cannot be a device-mapper name (1 to 127 bytes, no '/')");
    }
    if uuid.len() >= UUID_LEN {
        bail!("{uuid:?} is too long for a device-mapper uuid (at most 128 bytes)");
    }
    let mut buf = vec![0u8; DM_IOCTL_HEADER + payload.len()];
    for (i, v) in VERSION.iter().enumerate() {
        buf[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    let data_size = buf.len() as u32;
    buf[12..16].copy_from_slice(&data_size.to_ne_bytes());
    buf[16..20].copy_from_slice(&(DM_IOCTL_HEADER as u32).to_ne_bytes());
    buf[20..24].copy_from_slice(&target_count.to_ne_bytes());
    buf[48..48 + name.len()].copy_from_slice(name.as_bytes());
    buf[176..176 + uuid.len()].copy_from_slice(uuid.as_bytes());
    buf[DM_IOCTL_HEADER..].copy_from_slice(payload);
    Ok(buf)
}

/// The payload of a table load: one target spec and parameter string per target.
fn linear_payload(targets: &[Linear]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut sector = 0u64;
    for t in targets {
        let mut params = t.params().into_bytes();
        params.push(0);
        // The kernel finds the next spec `next` bytes after this one; keep it 8-byte aligned.
        let len = (TARGET_SPEC + params.len()).next_multiple_of(8);
        let mut spec = vec![0u8; len];
        spec[0..8].copy_from_slice(&sector.to_ne_bytes());
        spec[8..16].copy_from_slice(&t.length.to_ne_bytes());
        spec[20..24].copy_from_slice(&(len as u32).to_ne_bytes());
        let kind = b"linear";
        spec[24..24 + kind.len()].copy_from_slice(kind);
        debug_assert!(kind.len() < TARGET_TYPE_LEN);
        spec[TARGET_SPEC..TARGET_SPEC + params.len()].copy_from_slice(&params);
        out.extend_from_slice(&spec);
        sector += t.length;
    }
    out
}

/// An open `/dev/mapper/control`.
pub(crate) struct Control {
    file: File,
}

impl Control {
    pub(crate) fn open() -> Result<Control> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(CONTROL)
            .with_context(|| {
                format!(
                    "opening {CONTROL} (the device-mapper control node; is the dm_mod module loaded and /dev mounted from the host?)"
                )
            })?;
        Ok(Control { file })
    }

    /// Request `cmd` on the device `name` (with `uuid`), with `targets` as its table.
    fn call(
        &self,
        cmd: u8,
        what: &str,
        name: &str,
        uuid: &str,
        targets: &[Linear],
    ) -> io::Result<()> {
        let payload = linear_payload(targets);
        let mut buf =
            request(name, uuid, targets.len() as u32, &payload).map_err(io::Error::other)?;
        tracing::trace!("device-mapper {what}");
        sys::dm_ioctl(self.file.as_fd(), cmd, &mut buf)
    }

    /// A new device `name` without a table (as `dmsetup create --notable`), `uuid` may be empty.
    /// EBUSY: the name or uuid is taken.
    pub(crate) fn create(&self, name: &str, uuid: &str) -> io::Result<()> {
        self.call(DM_DEV_CREATE, "create", name, uuid, &[])
    }

    /// Load `targets` as the inactive table of `name`, then resume it, which swaps the table
    /// in (suspending the device first when it had one).
    pub(crate) fn load_and_resume(&self, name: &str, targets: &[Linear]) -> io::Result<()> {
        self.call(DM_TABLE_LOAD, "table load", name, "", targets)?;
        // DM_DEV_SUSPEND without DM_SUSPEND_FLAG is a resume.
        self.call(DM_DEV_SUSPEND, "resume", name, "", &[])
    }

    /// Remove device `name`. EBUSY: it is open (mounted, or held by another device).
    pub(crate) fn remove(&self, name: &str) -> io::Result<()> {
        self.call(DM_DEV_REMOVE, "remove", name, "", &[])
    }
}

/// Whether `/dev/mapper/control` exists (device-mapper is usable here).
pub(crate) fn available() -> bool {
    Path::new(CONTROL).exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn a_request_header_has_the_version_sizes_name_and_uuid() {
        let b = request("mpatha1", "part1-mpath-3600a", 0, &[]).unwrap();
        assert_eq!(b.len(), 312);
        assert_eq!([u32_at(&b, 0), u32_at(&b, 4), u32_at(&b, 8)], [4, 0, 0]);
        assert_eq!(u32_at(&b, 12), 312, "data_size");
        assert_eq!(u32_at(&b, 16), 312, "data_start");
        assert_eq!(&b[48..55], b"mpatha1");
        assert_eq!(b[55], 0);
        assert_eq!(&b[176..193], b"part1-mpath-3600a");
        assert_eq!(b[193], 0);
    }

    #[test]
    fn bad_names_are_refused_before_any_call() {
        assert!(request("", "", 0, &[]).is_err());
        assert!(request("a/b", "", 0, &[]).is_err());
        assert!(request(&"x".repeat(128), "", 0, &[]).is_err());
        assert!(request("x", &"u".repeat(129), 0, &[]).is_err());
        assert!(request(&"x".repeat(127), &"u".repeat(128), 0, &[]).is_ok());
    }

    #[test]
    fn a_linear_table_is_one_aligned_spec_per_target() {
        let t = Linear {
            length: 2048,
            major: 253,
            minor: 0,
            start: 4096,
        };
        assert_eq!(t.params(), "253:0 4096");
        let payload = linear_payload(std::slice::from_ref(&t));
        // 40 bytes of spec + "253:0 4096\0" (11) = 51, padded to 56.
        assert_eq!(payload.len(), 56);
        assert_eq!(u64_at(&payload, 0), 0, "sector_start");
        assert_eq!(u64_at(&payload, 8), 2048, "length");
        assert_eq!(u32_at(&payload, 20), 56, "next");
        assert_eq!(&payload[24..31], b"linear\0");
        assert_eq!(&payload[40..51], b"253:0 4096\0");
        let b = request("agent1", "", 1, &payload).unwrap();
        assert_eq!(u32_at(&b, 12), 312 + 56);
        assert_eq!(u32_at(&b, 20), 1, "target_count");
        assert_eq!(&b[312..], &payload[..]);

        let two = linear_payload(&[t.clone(), Linear { start: 0, ..t }]);
        assert_eq!(
            u64_at(&two, 56),
            2048,
            "the second target starts where the first ends"
        );
    }
}
