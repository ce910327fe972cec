//! The one GPT writer. Every table this program puts on a disk goes through [`write`] with a
//! protective MBR: the empty table written before a stream, the reset after a failure, the dry
//! run of saved partitions and the image's table stretched to the disk. New tables draw their
//! disk GUID here, and nowhere else. Pure over `Read + Write + Seek` (in practice a
//! [`DiskWindows`](super::windows::DiskWindows)).

use anyhow::{anyhow, bail, Result};
use gptman::{GPTHeader, GPTPartitionEntry, GPT};
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::Range;

/// Write `gpt` (primary and backup header and entry arrays) and a protective MBR covering the
/// disk. gptman refuses a table with duplicate partition GUIDs or overlapping or inverted
/// partitions; `what` names the table in that error.
pub(super) fn write<D: Write + Seek>(disk: &mut D, gpt: &mut GPT, what: &str) -> Result<()> {
    gpt.write_into(disk)
        .map_err(|e| anyhow!("writing {what}: {e}"))?;
    GPT::write_protective_mbr_into(disk, gpt.sector_size)
        .map_err(|e| anyhow!("writing a protective MBR: {e}"))
}

/// Write a new table sized to `disk` (128 entries), with a fresh random disk GUID, holding
/// `entries` at their partition numbers (none: an empty table).
pub(super) fn write_new<D: Read + Write + Seek>(
    disk: &mut D,
    sector_size: u64,
    entries: &[(u32, GPTPartitionEntry)],
    what: &str,
) -> Result<GPT> {
    let guid = *uuid::Uuid::new_v4().as_bytes();
    let mut gpt =
        GPT::new_from(disk, sector_size, guid).map_err(|e| anyhow!("building {what}: {e}"))?;
    for (n, p) in entries {
        gpt[*n] = p.clone();
    }
    write(disk, &mut gpt, what)?;
    Ok(gpt)
}

/// The table on `disk`, read at the device's sector size, or at 512 then 4096 bytes when it has
/// none of its own (an image file). gptman falls back to the backup header when the primary is
/// damaged, and trusts what it reads: each header and its entries are checked first
/// ([`check_header`], [`check_entries`]).
pub(crate) fn read<D: Read + Seek>(disk: &mut D, sector_size: Option<u64>) -> Result<GPT> {
    let len = disk.seek(SeekFrom::End(0))?;
    for ss in sector_size.map_or(vec![512, 4096], |ss| vec![ss]) {
        let backup = (len / ss).saturating_sub(1) * ss;
        for (at, which) in [(ss, "primary"), (backup, "backup")] {
            disk.seek(SeekFrom::Start(at))?;
            let Ok(h) = GPTHeader::read_from(disk) else {
                continue;
            };
            check_header(&h, ss, which)?;
            if let Ok(entries) = h.read_partitions(disk, ss) {
                check_entries(&h, (1..).zip(&entries))?;
            }
        }
    }
    let gpt = match sector_size {
        Some(ss) => GPT::read_from(disk, ss),
        None => GPT::find_from(disk),
    }
    .map_err(|e| anyhow!("{e}"))?;
    Ok(gpt)
}

/// One of a disk's two GPT headers as [`headers`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HeaderState {
    /// `primary` or `backup`.
    pub which: &'static str,
    pub lba: u64,
    /// The GPT signature (`EFI PART`) is there: a table was written at this place.
    pub signed: bool,
    /// Why it cannot be used (no signature, a checksum, a field, its entry array); `None`: it
    /// reads well.
    pub damage: Option<String>,
}

impl std::fmt::Display for HeaderState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.damage.as_deref().unwrap_or("readable");
        write!(f, "{} GPT header (LBA {}): {state}", self.which, self.lba)
    }
}

/// Both headers at `ss`-byte sectors (the primary at LBA 1, the backup at the last LBA), each
/// checked as [`read`] checks it.
pub(crate) fn headers<D: Read + Seek>(disk: &mut D, ss: u64) -> Result<[HeaderState; 2]> {
    let len = disk.seek(SeekFrom::End(0))?;
    let last = (len / ss).saturating_sub(1);
    let mut state = |lba: u64, which: &'static str| -> Result<HeaderState> {
        let mut signature = [0u8; 8];
        disk.seek(SeekFrom::Start(lba * ss))?;
        let signed =
            lba >= 1 && disk.read_exact(&mut signature).is_ok() && &signature == b"EFI PART";
        let damage = if signed {
            disk.seek(SeekFrom::Start(lba * ss))?;
            match GPTHeader::read_from(disk) {
                Err(e) => Some(e.to_string()),
                Ok(h) => match check_header(&h, ss, which) {
                    Err(e) => Some(e.to_string()),
                    Ok(()) => match h.read_partitions(disk, ss) {
                        Err(e) => Some(format!("its partition entry array: {e}")),
                        Ok(entries) => check_entries(&h, (1..).zip(&entries))
                            .err()
                            .map(|e| e.to_string()),
                    },
                },
            }
        } else {
            Some("no GPT signature".to_string())
        };
        Ok(HeaderState {
            which,
            lba,
            signed,
            damage,
        })
    };
    Ok([state(1, "primary")?, state(last, "backup")?])
}

/// The most partition entries a table may have: UEFI asks for room for 128 and partitioners
/// write 128. gptman reserves memory for the header's count (a u32: up to 4 G entries of 80
/// bytes) before it reads the array, so a damaged or hostile count must be refused first.
const MAX_ENTRIES: u32 = 1024;

/// The fields of a GPT header (with valid checksum) that gptman trusts to read the entry array
/// and that we trust to turn LBAs into byte offsets; `which` names the header in the error.
pub(super) fn check_header(h: &GPTHeader, ss: u64, which: &str) -> Result<()> {
    let n = h.number_of_partition_entries;
    if n > MAX_ENTRIES {
        bail!("the {which} GPT header says it has {n} partition entries (a table has at most {MAX_ENTRIES})");
    }
    if h.size_of_partition_entry != 128 {
        bail!(
            "the {which} GPT header says its partition entries are {} bytes long, not 128",
            h.size_of_partition_entry
        );
    }
    let bytes = |lba: u64, extra: u64| lba.checked_mul(ss)?.checked_add(extra);
    let fits = bytes(h.partition_entry_lba, u64::from(n) * 128).is_some()
        && bytes(h.last_usable_lba, ss).is_some()
        && bytes(h.backup_lba, ss).is_some();
    if !fits {
        bail!(
            "the {which} GPT header's LBAs (entries at {}, last usable {}, backup {}) lie past any disk with {ss}-byte sectors",
            h.partition_entry_lba,
            h.last_usable_lba,
            h.backup_lba
        );
    }
    Ok(())
}

/// Each used entry lies inside the table's usable LBAs (which [`check_header`] keeps
/// addressable), so [`byte_range`] cannot overflow, and none starts at LBA 0 (gptman's
/// alignment guess panics on a table whose partitions all start there).
pub(super) fn check_entries<'a>(
    h: &GPTHeader,
    entries: impl Iterator<Item = (u32, &'a GPTPartitionEntry)>,
) -> Result<()> {
    for (n, p) in entries.filter(|(_, p)| p.is_used()) {
        let usable = h.first_usable_lba.max(1)..=h.last_usable_lba;
        if p.starting_lba > p.ending_lba
            || !usable.contains(&p.starting_lba)
            || !usable.contains(&p.ending_lba)
        {
            bail!(
                "GPT partition {n} spans LBAs {} to {}, not inside the table's usable LBAs ({} to {})",
                p.starting_lba,
                p.ending_lba,
                usable.start(),
                usable.end()
            );
        }
    }
    Ok(())
}

/// The bytes a partition entry spans on a disk of `sector_size`-byte LBAs.
pub(super) fn byte_range(p: &GPTPartitionEntry, sector_size: u64) -> Range<u64> {
    p.starting_lba * sector_size..(p.ending_lba + 1) * sector_size
}

/// A partition as our own parse of the GPT sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PartitionSpec {
    pub number: u32,
    /// Byte offset and length on the disk.
    pub start: u64,
    pub length: u64,
    /// GPT partition name (PARTLABEL).
    pub label: String,
}

impl PartitionSpec {
    /// The used entries of a GPT, numbered as the kernel numbers them (1-based).
    pub(crate) fn from_gpt(gpt: &gptman::GPT) -> Vec<PartitionSpec> {
        gpt.iter()
            .filter(|(_, p)| p.is_used())
            .map(|(n, p)| {
                let bytes = byte_range(p, gpt.sector_size);
                PartitionSpec {
                    number: n,
                    start: bytes.start,
                    length: bytes.end - bytes.start,
                    label: p.partition_name.as_str().to_string(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::windows::DiskWindows;

    fn entry(guid: u8, start: u64, end: u64) -> GPTPartitionEntry {
        GPTPartitionEntry {
            partition_type_guid: [0x11; 16],
            unique_partition_guid: [guid; 16],
            starting_lba: start,
            ending_lba: end,
            attribute_bits: 0,
            partition_name: "p".into(),
        }
    }

    #[test]
    fn a_new_table_holds_its_entries_at_their_numbers() {
        let mut w = DiskWindows::zeroed(8 << 20).unwrap();
        write_new(&mut w, 512, &[(3, entry(1, 2048, 4095))], "a test table").unwrap();
        let gpt = read(&mut w, Some(512)).unwrap();
        assert_eq!(gpt[3].starting_lba, 2048);
        assert_eq!(gpt.iter().filter(|(_, p)| p.is_used()).count(), 1);
        assert_eq!(byte_range(&gpt[3], 512), 2048 * 512..4096 * 512);
        assert_eq!(byte_range(&gpt[3], 4096), 2048 * 4096..4096 * 4096);
    }

    #[test]
    fn an_invalid_table_is_named_in_the_error() {
        let mut w = DiskWindows::zeroed(8 << 20).unwrap();
        let dup = [(1, entry(9, 2048, 4095)), (2, entry(9, 4096, 8191))];
        let e = write_new(&mut w, 512, &dup, "a test table").unwrap_err();
        assert!(e.to_string().starts_with("writing a test table: "), "{e}");
    }
}
