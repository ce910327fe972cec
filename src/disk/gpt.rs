//! GPT work, pure over bytes: read the image's table from its first MiB, and build tables in
//! memory over two windows of the disk (its first and last MiB) so that a whole table, with a
//! protective MBR, reaches the device as two aligned 1 MiB writes instead of the thousands of
//! tiny writes gptman would issue against a file descriptor.

use anyhow::{bail, Context, Result};
use gptman::{GPTHeader, GPTPartitionEntry, GPT};
use std::io::{self, Cursor, Read, Seek, SeekFrom, Write};

use super::device::Device;
use super::direct::AlignedBuf;
use super::saved::SavedPartitions;

/// Both ends of the disk that a table (and the wipe of old signatures) covers.
pub const WINDOW: u64 = 1 << 20;

/// Sector size of a GPT image, from where its header sits in the first MiB: `EFI PART` at byte
/// 512 (512-byte LBAs) or at byte 4096 (4Kn).
pub fn detect_sector_size(head: &[u8]) -> Option<u64> {
    [512u64, 4096]
        .into_iter()
        .find(|&ss| head.get(ss as usize..ss as usize + 8) == Some(b"EFI PART".as_slice()))
}

/// What the image's own primary GPT says about it.
#[derive(Debug, Clone)]
pub struct ImageLayout {
    pub sector_size: u64,
    /// Bytes the image spans: its backup header is at its last LBA.
    pub size: u64,
    pub header: GPTHeader,
    pub partitions: Vec<GPTPartitionEntry>,
}

impl ImageLayout {
    /// Parse the primary GPT from the image's first MiB. Only the primary is read: the backup
    /// lies at the image's end, which has not arrived yet.
    pub fn parse(head: &[u8]) -> Result<ImageLayout> {
        let sector_size = detect_sector_size(head).context(
            "the image has no GPT in its first MiB (no \"EFI PART\" at byte 512 or 4096): it is not a CoreOS metal disk image \
             (use the metal image, e.g. rhcos-…-metal.x86_64.raw.gz, not the live ISO or a qcow2)",
        )?;
        let mut cur = Cursor::new(head);
        cur.seek(SeekFrom::Start(sector_size))?;
        let header = GPTHeader::read_from(&mut cur)
            .map_err(|e| anyhow::anyhow!("the image's primary GPT header is invalid: {e}"))?;
        let partitions = header
            .read_partitions(&mut cur, sector_size)
            .map_err(|e| anyhow::anyhow!("the image's GPT partition entries are invalid: {e}"))?;
        if header.primary_lba != 1 || header.backup_lba <= header.last_usable_lba {
            bail!(
                "the image's GPT header is inconsistent (primary LBA {}, backup LBA {}, last usable LBA {})",
                header.primary_lba,
                header.backup_lba,
                header.last_usable_lba
            );
        }
        Ok(ImageLayout {
            sector_size,
            size: (header.backup_lba + 1) * sector_size,
            header,
            partitions,
        })
    }
}

/// A sparse view of a disk of `size` bytes in which only the first and last [`WINDOW`] bytes
/// are held in memory. Reads elsewhere return zeroes; writes elsewhere are refused, which keeps
/// a table builder from touching image data.
pub struct DiskWindows {
    size: u64,
    head: Vec<u8>,
    tail_start: u64,
    tail: Vec<u8>,
    pos: u64,
}

impl DiskWindows {
    /// Zero-filled windows for a disk of `size` bytes (at least two windows long).
    pub fn zeroed(size: u64) -> Result<DiskWindows> {
        if size < 2 * WINDOW {
            bail!("a disk of {size} bytes is too small to hold a GPT and an image (need at least {} bytes)", 2 * WINDOW);
        }
        Ok(DiskWindows {
            size,
            head: vec![0; WINDOW as usize],
            tail_start: size - WINDOW,
            tail: vec![0; WINDOW as usize],
            pos: 0,
        })
    }

    pub fn head(&self) -> &[u8] {
        &self.head
    }

    pub fn head_mut(&mut self) -> &mut [u8] {
        &mut self.head
    }

    pub fn tail(&self) -> &[u8] {
        &self.tail
    }

    pub fn tail_start(&self) -> u64 {
        self.tail_start
    }

    /// The disk's first and last MiB as they are on `dev` now.
    pub fn load(dev: &Device) -> Result<DiskWindows> {
        let mut w = DiskWindows::zeroed(dev.size())?;
        let mut buf = AlignedBuf::new(WINDOW as usize);
        dev.read_at(buf.as_mut_slice(), 0)?;
        w.head.copy_from_slice(buf.as_slice());
        dev.read_at(buf.as_mut_slice(), w.tail_start)?;
        w.tail.copy_from_slice(buf.as_slice());
        Ok(w)
    }

    /// Zero both windows except the bytes inside `keep` (saved partitions' data).
    pub fn zero_except(&mut self, keep: &[std::ops::Range<u64>]) {
        let kept = |at: u64| keep.iter().any(|r| r.contains(&at));
        for (i, b) in self.head.iter_mut().enumerate() {
            if !kept(i as u64) {
                *b = 0;
            }
        }
        let start = self.tail_start;
        for (i, b) in self.tail.iter_mut().enumerate() {
            if !kept(start + i as u64) {
                *b = 0;
            }
        }
    }

    /// Zero `len` bytes at `offset` if they lie inside a window; whether they did.
    fn zero_range(&mut self, offset: u64, len: u64) -> bool {
        if offset + len <= WINDOW {
            self.head[offset as usize..(offset + len) as usize].fill(0);
            true
        } else if offset >= self.tail_start && offset + len <= self.size {
            let at = (offset - self.tail_start) as usize;
            self.tail[at..at + len as usize].fill(0);
            true
        } else {
            false
        }
    }

    fn write_window(dev: &Device, data: &[u8], offset: u64) -> Result<()> {
        let mut buf = AlignedBuf::new(data.len());
        buf.as_mut_slice().copy_from_slice(data);
        dev.write_at(buf.as_slice(), offset)
    }

    /// Write both windows to `dev`, the last MiB first and the first MiB last (the primary
    /// table is what makes a disk bootable, so it is the commit point), fsyncing after each.
    pub fn write_to(&self, dev: &Device) -> Result<()> {
        Self::write_window(dev, &self.tail, self.tail_start)?;
        dev.sync()?;
        Self::write_window(dev, &self.head, 0)?;
        dev.sync()
    }

    fn locate(&self, len: usize) -> io::Result<(bool, usize)> {
        let end = self.pos + len as u64;
        if end <= WINDOW {
            Ok((true, self.pos as usize))
        } else if self.pos >= self.tail_start && end <= self.size {
            Ok((false, (self.pos - self.tail_start) as usize))
        } else {
            Err(io::Error::other(format!(
                "GPT write of {len} bytes at offset {} falls outside the first and last MiB",
                self.pos
            )))
        }
    }
}

impl Read for DiskWindows {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.size.saturating_sub(self.pos) as usize);
        let buf = &mut buf[..n];
        match self.locate(n) {
            Ok((true, at)) => buf.copy_from_slice(&self.head[at..at + n]),
            Ok((false, at)) => buf.copy_from_slice(&self.tail[at..at + n]),
            Err(_) => buf.fill(0),
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for DiskWindows {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (in_head, at) = self.locate(buf.len())?;
        let window = if in_head {
            &mut self.head
        } else {
            &mut self.tail
        };
        window[at..at + buf.len()].copy_from_slice(buf);
        self.pos += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for DiskWindows {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| io::Error::other("seek out of range"))?;
        Ok(self.pos)
    }
}

fn random_guid() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

/// An empty, valid GPT (fresh random disk GUID, no partitions) and a protective MBR over
/// zeroed first and last MiB of a disk of `disk_size` bytes. Zeroing both ends also clears the
/// signatures that live there: old primary and backup GPTs, MD 0.90/1.0 superblocks at the
/// end, LVM labels and filesystem superblocks at the start.
pub fn empty_table(disk_size: u64, sector_size: u64) -> Result<DiskWindows> {
    let mut w = DiskWindows::zeroed(disk_size)?;
    let mut gpt = GPT::new_from(&mut w, sector_size, random_guid())
        .map_err(|e| anyhow::anyhow!("building an empty GPT: {e}"))?;
    gpt.write_into(&mut w)
        .map_err(|e| anyhow::anyhow!("writing an empty GPT: {e}"))?;
    GPT::write_protective_mbr_into(&mut w, sector_size)
        .map_err(|e| anyhow::anyhow!("writing a protective MBR: {e}"))?;
    Ok(w)
}

/// Reset `dev` to a valid GPT holding only the saved partitions (none: an empty table), with
/// both ends of the disk zeroed outside them; durable on return. Used before streaming (it
/// wipes the old table and signatures) and after a failure.
pub fn write_reset_table(dev: &Device, sector_size: u64, saved: &SavedPartitions) -> Result<()> {
    let w = if saved.is_empty() {
        empty_table(dev.size(), sector_size)?
    } else {
        let mut w = DiskWindows::load(dev)?;
        w.zero_except(&saved.byte_ranges());
        saved.write_table_only(&mut w, sector_size)?;
        w
    };
    w.write_to(dev)
        .with_context(|| format!("resetting the partition table of {}", dev.path().display()))
}

/// Sectors of a 128-entry, 128-byte partition entry array.
fn entry_array_sectors(sector_size: u64) -> u64 {
    (128 * 128u64).div_ceil(sector_size)
}

/// The image's table stretched to the real disk: backup header and entry array at the disk's
/// end, last usable LBA updated, saved partitions merged after the image's own, protective MBR
/// sized to the disk. The disk GUID stays the image's: CoreOS's first boot randomises it (and
/// moves the backup) only when it still holds the placeholder GUID. `w` must hold the image's
/// first MiB in its head window and the disk's current last MiB in its tail window.
pub fn fix_image_table(
    w: &mut DiskWindows,
    sector_size: u64,
    saved: &SavedPartitions,
) -> Result<GPT> {
    let mut gpt = GPT::read_from(w, sector_size)
        .map_err(|e| anyhow::anyhow!("reading the image's partition table: {e}"))?;
    gpt.header
        .update_from(w, sector_size)
        .map_err(|e| anyhow::anyhow!("resizing the image's partition table to the disk: {e}"))?;
    saved.merge_into(&mut gpt)?;
    gpt.write_into(w)
        .map_err(|e| anyhow::anyhow!("writing the final partition table: {e}"))?;
    GPT::write_protective_mbr_into(w, sector_size)
        .map_err(|e| anyhow::anyhow!("writing a protective MBR: {e}"))?;
    Ok(gpt)
}

/// The last step of a write: make the disk's table the image's, fixed up for the disk, and
/// zero the stale backup table the image carried at its own end (a disk larger than the image
/// would otherwise hold two backup tables). Writes the tail first and the first MiB last.
pub fn commit_image_table(
    dev: &Device,
    head: &[u8],
    layout: &ImageLayout,
    saved: &SavedPartitions,
) -> Result<GPT> {
    let ss = layout.sector_size;
    let mut w = DiskWindows::load(dev)?;
    w.head_mut().copy_from_slice(&head[..WINDOW as usize]);
    let old_backup = layout.header.backup_lba;
    let stale_start = (old_backup - entry_array_sectors(ss)) * ss;
    let stale_len = (entry_array_sectors(ss) + 1) * ss;
    let moved = old_backup != dev.size() / ss - 1;
    if moved && !w.zero_range(stale_start, stale_len) {
        let zeros = AlignedBuf::new(stale_len as usize);
        dev.write_at(zeros.as_slice(), stale_start)
            .context("zeroing the image's stale backup partition table")?;
    }
    let gpt = fix_image_table(&mut w, ss, saved)?;
    w.write_to(dev)?;
    Ok(gpt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole_disk(w: &DiskWindows) -> Vec<u8> {
        let mut disk = vec![0u8; w.size as usize];
        disk[..WINDOW as usize].copy_from_slice(w.head());
        disk[w.tail_start() as usize..].copy_from_slice(w.tail());
        disk
    }

    #[test]
    fn an_empty_table_is_valid_at_both_sector_sizes() {
        for ss in [512u64, 4096] {
            let size = 8 << 20;
            let w = empty_table(size, ss).unwrap();
            let mut cur = Cursor::new(whole_disk(&w));
            let gpt = GPT::read_from(&mut cur, ss).unwrap();
            assert_eq!(gpt.header.backup_lba, size / ss - 1);
            assert_eq!(gpt.iter().filter(|(_, p)| p.is_used()).count(), 0);
            assert_eq!(
                &w.head()[510..512],
                &[0x55, 0xaa],
                "protective MBR signature"
            );
            assert_eq!(w.head()[446 + 4], 0xee, "protective partition type");
            assert_eq!(detect_sector_size(w.head()), Some(ss));
            // The backup header is at the last LBA of the disk.
            let backup = &w.tail()[(WINDOW - ss) as usize..][..8];
            assert_eq!(backup, b"EFI PART");
        }
    }

    #[test]
    fn two_empty_tables_get_different_disk_guids() {
        let a = empty_table(4 << 20, 512).unwrap();
        let b = empty_table(4 << 20, 512).unwrap();
        assert_ne!(a.head()[512 + 56..512 + 72], b.head()[512 + 56..512 + 72]);
    }

    #[test]
    fn windows_refuse_writes_between_the_ends() {
        let mut w = DiskWindows::zeroed(4 << 20).unwrap();
        w.seek(SeekFrom::Start(WINDOW)).unwrap();
        let err = w.write(&[1, 2, 3]).unwrap_err();
        assert!(err.to_string().contains("outside the first and last MiB"));
        let mut b = [9u8; 4];
        w.read_exact(&mut b).unwrap();
        assert_eq!(b, [0; 4], "reads between the windows are zeroes");
        assert!(DiskWindows::zeroed(WINDOW).is_err(), "too small");
    }

    #[test]
    fn image_layout_comes_from_the_primary_header() {
        for ss in [512u64, 4096] {
            let size = 6 << 20;
            let w = empty_table(size, ss).unwrap();
            let layout = ImageLayout::parse(w.head()).unwrap();
            assert_eq!(layout.sector_size, ss);
            assert_eq!(layout.size, size);
        }
    }

    /// An "image" of `size` bytes: an empty table plus two partitions, as bytes.
    fn image_with_partitions(size: u64, ss: u64) -> Vec<u8> {
        let mut w = empty_table(size, ss).unwrap();
        let mut gpt = GPT::read_from(&mut w, ss).unwrap();
        let mib = (1 << 20) / ss;
        for n in 1..=2u32 {
            gpt[n] = gptman::GPTPartitionEntry {
                partition_type_guid: [n as u8; 16],
                unique_partition_guid: [0x40 + n as u8; 16],
                starting_lba: mib * n as u64,
                ending_lba: mib * (n as u64 + 1) - 1,
                attribute_bits: 0,
                partition_name: format!("p{n}").as_str().into(),
            };
        }
        gpt.write_into(&mut w).unwrap();
        whole_disk(&w)
    }

    #[test]
    fn the_fixed_table_spans_the_disk_and_keeps_the_image_guid() {
        for ss in [512u64, 4096] {
            let img = image_with_partitions(4 << 20, ss);
            let disk_size = 16u64 << 20;
            let mut w = DiskWindows::zeroed(disk_size).unwrap();
            w.head_mut().copy_from_slice(&img[..WINDOW as usize]);
            let image_guid = GPT::read_from(&mut Cursor::new(&img), ss)
                .unwrap()
                .header
                .disk_guid;
            let gpt = fix_image_table(&mut w, ss, &SavedPartitions::none()).unwrap();
            assert_eq!(gpt.header.backup_lba, disk_size / ss - 1);
            assert_eq!(gpt.header.disk_guid, image_guid);
            let mut disk = Cursor::new(whole_disk(&w));
            let back = GPT::read_from(&mut disk, ss).unwrap();
            assert_eq!(
                back.header.last_usable_lba,
                disk_size / ss - 1 - entry_array_sectors(ss) - 1
            );
            assert_eq!(back.iter().filter(|(_, p)| p.is_used()).count(), 2);
            // The backup at the disk's end is valid on its own.
            let mut only_backup = whole_disk(&w);
            only_backup[ss as usize..2 * ss as usize].fill(0);
            let b = GPT::read_from(&mut Cursor::new(only_backup), ss).unwrap();
            assert_eq!(b.iter().filter(|(_, p)| p.is_used()).count(), 2);
        }
    }

    #[test]
    fn saved_partitions_merge_after_the_image_partitions() {
        let ss = 512;
        let img = image_with_partitions(4 << 20, ss);
        let mut w = DiskWindows::zeroed(32 << 20).unwrap();
        w.head_mut().copy_from_slice(&img[..WINDOW as usize]);
        let saved = SavedPartitions {
            sector_size: ss,
            entries: vec![(
                1,
                gptman::GPTPartitionEntry {
                    partition_type_guid: [9; 16],
                    unique_partition_guid: [0x99; 16],
                    starting_lba: 20 << 11,
                    ending_lba: (30 << 11) - 1,
                    attribute_bits: 0,
                    partition_name: "data".into(),
                },
            )],
        };
        let gpt = fix_image_table(&mut w, ss, &saved).unwrap();
        assert_eq!(
            gpt[3].partition_name.as_str(),
            "data",
            "renumbered after the image's 2"
        );
        assert_eq!(gpt[3].starting_lba, 20 << 11);
    }

    #[test]
    fn zero_except_keeps_saved_bytes() {
        let mut w = DiskWindows::zeroed(4 << 20).unwrap();
        w.head_mut().fill(1);
        w.tail.fill(1);
        let tail_start = w.tail_start();
        w.zero_except(&[100..200, tail_start + 10..tail_start + 20]);
        assert!(w.head()[..100].iter().all(|&b| b == 0));
        assert!(w.head()[100..200].iter().all(|&b| b == 1));
        assert!(w.head()[200..].iter().all(|&b| b == 0));
        assert!(w.tail()[10..20].iter().all(|&b| b == 1));
        assert_eq!(w.tail()[20], 0);
    }

    #[test]
    fn a_head_without_gpt_is_not_a_metal_image() {
        let err = ImageLayout::parse(&vec![0u8; WINDOW as usize]).unwrap_err();
        assert!(
            err.to_string().contains("not a CoreOS metal disk image"),
            "{err}"
        );
    }

    #[test]
    fn a_corrupt_primary_header_is_named() {
        let w = empty_table(4 << 20, 512).unwrap();
        let mut head = w.head().to_vec();
        head[512 + 40] ^= 1; // first usable LBA: the header CRC no longer matches
        let err = ImageLayout::parse(&head).unwrap_err();
        assert!(
            err.to_string().contains("primary GPT header is invalid"),
            "{err}"
        );
    }
}
