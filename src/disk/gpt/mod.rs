//! The partition tables of an install: what the image's own GPT says (read from its first MiB),
//! the table a disk is reset to (empty, or only the saved partitions) and the image's table
//! stretched to the disk with the saved partitions merged. Built in memory over the disk's two
//! ends ([`DiskWindows`]) and written by the one table writer ([`table`](super::table)).

use anyhow::{bail, Context, Result};
use gptman::{GPTHeader, GPTPartitionEntry, GPT};
use std::io::{Cursor, Seek, SeekFrom};

use super::device::Device;
use super::direct::AlignedBuf;
use super::saved::SavedPartitions;
use super::table;
pub use super::windows::{DiskWindows, WINDOW};

#[cfg(any(test, feature = "test-support"))]
mod testing;
#[cfg(any(test, feature = "test-support"))]
pub use testing::empty_table;

/// Sector size of a GPT image, from where its header sits in the first MiB: `EFI PART` at byte
/// 512 (512-byte LBAs) or at byte 4096 (4Kn).
fn detect_sector_size(head: &[u8]) -> Option<u64> {
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
        table::check_header(&header, sector_size, "image's primary")?;
        let partitions = header
            .read_partitions(&mut cur, sector_size)
            .map_err(|e| anyhow::anyhow!("the image's GPT partition entries are invalid: {e}"))?;
        table::check_entries(&header, (1..).zip(&partitions))
            .context("the image's GPT partition entries are invalid")?;
        // The write moves the backup table from the image's end: it must lie past an entry array.
        if header.primary_lba != 1
            || header.backup_lba <= header.last_usable_lba
            || header.backup_lba <= entry_array_sectors(sector_size)
        {
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

/// Reset `dev` to a valid GPT holding only the saved partitions (none: an empty table), with
/// both ends of the disk zeroed outside them; durable on return. Used before streaming and
/// after a failure. Zeroing both ends also clears the signatures that live there: old primary
/// and backup GPTs, MD 0.90/1.0 superblocks at the end, LVM labels and filesystem superblocks
/// at the start.
pub fn write_reset_table(dev: &Device, sector_size: u64, saved: &SavedPartitions) -> Result<()> {
    let mut w = if saved.is_empty() {
        // Nothing on the disk to keep: no need to read it.
        DiskWindows::zeroed(dev.size())?
    } else {
        let mut w = DiskWindows::load(dev)?;
        w.zero_except(&saved.byte_ranges());
        w
    };
    table::write_new(
        &mut w,
        sector_size,
        &saved.entries,
        "the reset partition table",
    )?;
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
    table::write(w, &mut gpt, "the final partition table")?;
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
        let mut disk = vec![0u8; w.size() as usize];
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
            // As an image, its layout comes from the primary header.
            let layout = ImageLayout::parse(w.head()).unwrap();
            assert_eq!((layout.sector_size, layout.size), (ss, size));
            // Another empty table gets another disk GUID.
            let other = empty_table(size, ss).unwrap();
            let guid = |w: &DiskWindows| w.head()[ss as usize + 56..ss as usize + 72].to_vec();
            assert_ne!(guid(&w), guid(&other));
        }
    }

    /// An "image" of `size` bytes: an empty table plus two partitions, as bytes.
    fn image_with_partitions(size: u64, ss: u64) -> Vec<u8> {
        let mut w = DiskWindows::zeroed(size).unwrap();
        let mib = (1 << 20) / ss;
        let entries: Vec<_> = (1..=2u32)
            .map(|n| {
                let p = GPTPartitionEntry {
                    partition_type_guid: [n as u8; 16],
                    unique_partition_guid: [0x40 + n as u8; 16],
                    starting_lba: mib * n as u64,
                    ending_lba: mib * (n as u64 + 1) - 1,
                    attribute_bits: 0,
                    partition_name: format!("p{n}").as_str().into(),
                };
                (n, p)
            })
            .collect();
        table::write_new(&mut w, ss, &entries, "the image's table").unwrap();
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
    fn a_head_without_gpt_is_not_a_metal_image_and_a_corrupt_header_is_named() {
        let err = ImageLayout::parse(&vec![0u8; WINDOW as usize]).unwrap_err();
        assert!(
            err.to_string().contains("not a CoreOS metal disk image"),
            "{err}"
        );
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
