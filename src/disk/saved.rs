//! `--save-partlabel` / `--save-partindex`: partitions of the old table that survive the
//! install. Here they are selected from the old table and merged into the image's; they are
//! read before anything is written, checked by a dry run of their table, kept in every table
//! we write (the pre-stream wipe, the reset after a failure) and merged after the image's own
//! partitions at the end, renumbered upward where the image uses their numbers.

use anyhow::{bail, Context, Result};
use gptman::{GPTPartitionEntry, GPT};
use std::ops::Range;
use std::path::Path;

use super::table;
use super::windows::DiskWindows;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionFilter {
    /// A glob over the GPT partition name (`*`, `?`, `[...]`).
    Label(String),
    /// An inclusive range of partition numbers; either end may be open.
    Index(Option<u32>, Option<u32>),
}

impl PartitionFilter {
    pub fn matches(&self, number: u32, label: &str) -> bool {
        match self {
            PartitionFilter::Label(glob) => glob_match(glob, label),
            PartitionFilter::Index(lo, hi) => {
                lo.is_none_or(|lo| number >= lo) && hi.is_none_or(|hi| number <= hi)
            }
        }
    }
}

/// `--save-partlabel` values: repeatable and comma-separated globs.
pub(crate) fn label_filters(values: &[String]) -> Vec<PartitionFilter> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .filter(|g| !g.is_empty())
        .map(|g| PartitionFilter::Label(g.to_string()))
        .collect()
}

/// `--save-partindex` values: repeatable and comma-separated `N`, `N-M`, `N-`, `-M` (1-based).
pub(crate) fn index_filters(values: &[String]) -> Result<Vec<PartitionFilter>> {
    let num = |s: &str, v: &str| -> Result<u32> {
        match s.parse::<u32>() {
            Ok(0) => bail!("--save-partindex {v:?}: partition numbers start at 1"),
            Ok(n) => Ok(n),
            Err(_) => bail!("--save-partindex {v:?}: {s:?} is not a partition number"),
        }
    };
    let filter = |v: &str| -> Result<PartitionFilter> {
        let (lo, hi) = match v.split_once('-') {
            None => (Some(num(v, v)?), Some(num(v, v)?)),
            Some(("", "")) => bail!("--save-partindex {v:?}: a range needs at least one end"),
            Some((lo, "")) => (Some(num(lo, v)?), None),
            Some(("", hi)) => (None, Some(num(hi, v)?)),
            Some((lo, hi)) if num(lo, v)? > num(hi, v)? => {
                bail!("--save-partindex {v:?}: the range is backwards")
            }
            Some((lo, hi)) => (Some(num(lo, v)?), Some(num(hi, v)?)),
        };
        Ok(PartitionFilter::Index(lo, hi))
    };
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(filter)
        .collect()
}

/// Whether a partition name matches a `--save-partlabel` glob: the `glob` crate's patterns with
/// its default options, as coreos-installer matches them (`*`, `?`, `[abc]`, `[a-z]`, `[!x]`;
/// case-sensitive; `*` also matches `/`). coreos-installer refuses a pattern the crate cannot
/// parse (an unclosed `[`); we match such a pattern literally instead, which keeps the
/// `label_filters` call infallible for its callers.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    glob::Pattern::new(pattern)
        .or_else(|_| glob::Pattern::new(&glob::Pattern::escape(pattern)))
        .is_ok_and(|p| p.matches(text))
}

/// The refusal of a table whose signature is there but which cannot be read: what is wrong
/// with each header, and the two ways on.
fn unreadable_table(disk: &Path, headers: &[table::HeaderState]) -> String {
    let disk = disk.display();
    let what: Vec<String> = headers.iter().map(ToString::to_string).collect();
    format!(
        "the GPT partition table of {disk} is damaged ({}), so the partitions to keep \
         (--save-partlabel, --save-partindex) cannot be found in it; nothing was written. Either \
         repair the table and install again (gdisk {disk}: its recovery menu, r, rebuilds a \
         header from the other one or from the partition entries; or sgdisk --load-backup=FILE \
         {disk} from a copy saved with sgdisk --backup), or drop --save-partlabel and \
         --save-partindex to install over the whole disk, losing its partitions",
        what.join("; ")
    )
}

/// The partitions to keep, with their original numbers.
#[derive(Clone, Debug, Default)]
pub struct SavedPartitions {
    pub sector_size: u64,
    pub entries: Vec<(u32, GPTPartitionEntry)>,
}

impl SavedPartitions {
    pub fn none() -> SavedPartitions {
        SavedPartitions::default()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Select from the table in `w` (the first and last MiB of `disk`). Without filters the
    /// old table is ignored entirely, so a corrupt or missing one does not matter. With them,
    /// a table that is there (its signature is) but cannot be read is refused, as
    /// coreos-installer refuses it: writing over it would lose the partitions asked for.
    pub fn select(
        w: &mut DiskWindows,
        disk: &Path,
        disk_sector_size: Option<u64>,
        filters: &[PartitionFilter],
    ) -> Result<SavedPartitions> {
        if filters.is_empty() {
            return Ok(SavedPartitions::none());
        }
        let gpt = match table::read(w, disk_sector_size) {
            Ok(g) => g,
            Err(e) => {
                for ss in disk_sector_size.map_or(vec![512, 4096], |ss| vec![ss]) {
                    let headers = table::headers(w, ss)?;
                    if headers.iter().any(|h| h.signed) {
                        bail!(unreadable_table(disk, &headers));
                    }
                }
                let has_mbr = w.head()[510..512] == [0x55, 0xaa];
                let by_index = filters
                    .iter()
                    .any(|f| matches!(f, PartitionFilter::Index(..)));
                if has_mbr && by_index {
                    bail!("the disk has an MBR partition table, not GPT: saving partitions by index from an MBR disk is not supported");
                }
                tracing::info!("no readable GPT on the disk ({e}); no partition to save");
                return Ok(SavedPartitions::none());
            }
        };
        if let Some(ss) = disk_sector_size {
            if gpt.sector_size != ss {
                bail!(
                    "the disk's GPT uses {}-byte sectors but the disk has {ss}-byte sectors; cannot save its partitions",
                    gpt.sector_size
                );
            }
        }
        let entries: Vec<_> = gpt
            .iter()
            .filter(|(n, p)| {
                p.is_used()
                    && filters
                        .iter()
                        .any(|f| f.matches(*n, p.partition_name.as_str()))
            })
            .map(|(n, p)| (n, p.clone()))
            .collect();
        for (n, p) in &entries {
            tracing::info!(
                "saving partition {n} ({:?}, LBA {}-{})",
                p.partition_name.as_str(),
                p.starting_lba,
                p.ending_lba
            );
        }
        Ok(SavedPartitions {
            sector_size: gpt.sector_size,
            entries,
        })
    }

    /// Byte ranges of the saved partitions.
    pub fn byte_ranges(&self) -> Vec<Range<u64>> {
        self.entries
            .iter()
            .map(|(_, p)| table::byte_range(p, self.sector_size))
            .collect()
    }

    /// The saved partition that starts first: the image must end before it.
    pub fn first(&self) -> Option<(u32, &str, u64)> {
        self.entries
            .iter()
            .min_by_key(|(_, p)| p.starting_lba)
            .map(|(n, p)| {
                let start = table::byte_range(p, self.sector_size).start;
                (*n, p.partition_name.as_str(), start)
            })
    }

    /// Dry run on a scratch disk of the same size: if the saved entries cannot be written as a
    /// table (duplicate GUIDs, overlaps), fail now, before the disk is touched, rather than
    /// after the image when the restore (and then the reset) would fail and lose them.
    pub fn trial(&self, disk_size: u64) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let mut scratch = DiskWindows::zeroed(disk_size)?;
        table::write_new(
            &mut scratch,
            self.sector_size,
            &self.entries,
            "a table of the saved partitions",
        )
        .map(drop)
        .context("failed dry run restoring the saved partitions; the disk's partition table may be invalid")
    }

    /// Add the saved entries to the image's table after its own partitions: each goes to
    /// max(next free number after the highest used, its original number).
    pub fn merge_into(&self, gpt: &mut GPT) -> Result<()> {
        let mut next = gpt
            .iter()
            .filter(|(_, p)| p.is_used())
            .map(|(n, _)| n)
            .max()
            .unwrap_or(0)
            + 1;
        let mut entries = self.entries.clone();
        entries.sort_by_key(|(n, _)| *n);
        for (orig, p) in entries {
            let n = next.max(orig);
            if n > gpt.header.number_of_partition_entries {
                bail!("no room in the partition table for saved partition {orig}");
            }
            if n != orig {
                tracing::info!("saved partition {orig} becomes partition {n}");
            }
            gpt[n] = p;
            next = n + 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        for (p, t, want) in [
            ("*", "", true),
            ("*", "data", true),
            ("data", "data", true),
            ("data", "data2", false),
            ("d?ta", "dota", true),
            ("d*a", "dxxxa", true),
            ("d*a", "dxxxb", false),
            ("[a-c]x", "bx", true),
            ("[a-c]x", "dx", false),
            ("[!a-c]x", "dx", true),
            ("[!a-c]x", "ax", false),
            ("var-*", "var-lib", true),
            ("[", "[", true),
            ("", "", true),
            ("", "x", false),
        ] {
            assert_eq!(glob_match(p, t), want, "{p:?} ~ {t:?}");
        }
    }

    #[test]
    fn index_ranges_parse_and_match() {
        let f = index_filters(&["5".into(), "7-9,11-".into(), "-2".into()]).unwrap();
        assert_eq!(
            f,
            vec![
                PartitionFilter::Index(Some(5), Some(5)),
                PartitionFilter::Index(Some(7), Some(9)),
                PartitionFilter::Index(Some(11), None),
                PartitionFilter::Index(None, Some(2)),
            ]
        );
        let m = |n| f.iter().any(|f| f.matches(n, ""));
        assert!(m(1) && m(2) && m(5) && m(8) && m(11) && m(100));
        assert!(!m(3) && !m(6) && !m(10));
        for bad in ["0", "a", "-", "9-7", "1-x", ""] {
            let e = index_filters(&[bad.to_string()]).unwrap_err().to_string();
            assert!(e.contains("--save-partindex"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn label_filters_split_on_commas() {
        assert_eq!(
            label_filters(&["data,var-*".into(), "x".into()]),
            vec![
                PartitionFilter::Label("data".into()),
                PartitionFilter::Label("var-*".into()),
                PartitionFilter::Label("x".into())
            ]
        );
    }

    fn entry(start: u64, end: u64, name: &str, guid: u8) -> GPTPartitionEntry {
        GPTPartitionEntry {
            partition_type_guid: [0x11; 16],
            unique_partition_guid: [guid; 16],
            starting_lba: start,
            ending_lba: end,
            attribute_bits: 0,
            partition_name: name.into(),
        }
    }

    /// A disk whose table has partitions 1 (boot-ish), 4 ("data") and 5 ("var").
    fn old_disk(ss: u64) -> DiskWindows {
        let mut w = DiskWindows::zeroed(64 << 20).unwrap();
        let l = |mib: u64| mib * (1 << 20) / ss;
        let old = [
            (1, entry(l(1), l(8) - 1, "boot", 1)),
            (4, entry(l(40), l(50) - 1, "data", 4)),
            (5, entry(l(50), l(60) - 1, "var", 5)),
        ];
        table::write_new(&mut w, ss, &old, "the old table").unwrap();
        w
    }

    /// The numbers of the partitions `select` saves from `w` read at `ss`-byte sectors.
    fn saved(w: &mut DiskWindows, ss: u64, filters: &[PartitionFilter]) -> Vec<u32> {
        let s = SavedPartitions::select(w, Path::new(DISK), Some(ss), filters).unwrap();
        s.entries.iter().map(|(n, _)| *n).collect()
    }

    const NOTHING: [u32; 0] = [];
    const DISK: &str = "/dev/sdz";

    fn labels(labels: &[&str]) -> Vec<PartitionFilter> {
        label_filters(&labels.iter().map(|l| l.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn selection_by_label_and_index() {
        for ss in [512u64, 4096] {
            let mut w = old_disk(ss);
            let s = SavedPartitions::select(&mut w, Path::new(DISK), Some(ss), &labels(&["data"]))
                .unwrap();
            assert_eq!(s.first().unwrap().2, 40 << 20);
            assert_eq!(saved(&mut w, ss, &labels(&["data"])), [4]);
            let from_5 = index_filters(&["5-".into()]).unwrap();
            assert_eq!(saved(&mut w, ss, &from_5), [5]);
            assert_eq!(saved(&mut w, ss, &labels(&["nomatch"])), NOTHING);
            assert_eq!(saved(&mut w, ss, &[]), NOTHING, "no filters: nothing saved");
            // A table of the other sector size is not read (at 512 there is no GPT at LBA 1 of
            // a 4096-byte disk): nothing is found to save.
            assert_eq!(saved(&mut w, 4608 - ss, &labels(&["*"])), NOTHING, "{ss}");
        }
        // A corrupt primary header: the backup is read.
        let mut w = old_disk(512);
        w.head_mut()[512 + 20] ^= 0xff;
        assert_eq!(saved(&mut w, 512, &labels(&["data"])), [4]);
    }

    fn overwrite(w: &mut DiskWindows, at: u64, bytes: &[u8]) {
        use std::io::{Seek, SeekFrom, Write};
        w.seek(SeekFrom::Start(at)).unwrap();
        w.write_all(bytes).unwrap();
    }

    /// Both headers damaged, their signatures still there: refused, naming the disk, each
    /// header and what is wrong with it, and the two ways on, with either kind of filter; the
    /// windows (what would be written back) are untouched. A disk whose headers have no
    /// signature at all has no table: nothing to save, as before.
    #[test]
    fn a_damaged_table_is_refused_when_partitions_are_to_be_saved() {
        for ss in [512u64, 4096] {
            let mut w = old_disk(ss);
            let backup = w.size() - ss;
            w.head_mut()[ss as usize + 16] ^= 0xff; // the primary header's CRC
            overwrite(&mut w, backup + 24, &[0x7f]); // the backup's own LBA field
            let (head, tail) = (w.head().to_vec(), w.tail().to_vec());
            for filters in [labels(&["data"]), index_filters(&["4".into()]).unwrap()] {
                let e = SavedPartitions::select(&mut w, Path::new(DISK), Some(ss), &filters)
                    .unwrap_err()
                    .to_string();
                for want in [
                    "GPT partition table of /dev/sdz is damaged",
                    "primary GPT header (LBA 1): corrupted CRC32 checksum",
                    &format!("backup GPT header (LBA {}): corrupted CRC32", backup / ss),
                    "nothing was written",
                    "gdisk /dev/sdz",
                    "drop --save-partlabel and --save-partindex",
                ] {
                    assert!(e.contains(want), "{ss}: {want:?} not in {e}");
                }
            }
            assert!(
                w.head() == head && w.tail() == tail,
                "{ss}: the windows changed"
            );
            // Only the entry array is damaged, the backup header is gone: still refused.
            let mut w = old_disk(ss);
            w.head_mut()[2 * ss as usize + 40] ^= 0xff;
            overwrite(&mut w, backup, &[0; 8]);
            let e = SavedPartitions::select(&mut w, Path::new(DISK), Some(ss), &labels(&["*"]))
                .unwrap_err()
                .to_string();
            assert!(e.contains("primary GPT header (LBA 1): its partition entry array: corrupted partition entry array CRC32"), "{e}");
            assert!(
                e.contains("backup GPT header") && e.contains("no GPT signature"),
                "{e}"
            );
            // No signature at either place: no table, nothing saved.
            w.head_mut()[ss as usize..ss as usize + 8].fill(0);
            assert_eq!(saved(&mut w, ss, &labels(&["*"])), NOTHING);
        }
    }

    #[test]
    fn an_mbr_disk_refuses_index_filters_only() {
        let mut w = DiskWindows::zeroed(8 << 20).unwrap();
        w.head_mut()[510] = 0x55;
        w.head_mut()[511] = 0xaa;
        let e = SavedPartitions::select(
            &mut w,
            Path::new(DISK),
            Some(512),
            &index_filters(&["1".into()]).unwrap(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("MBR"), "{e}");
        assert_eq!(saved(&mut w, 512, &labels(&["*"])), NOTHING);
    }

    #[test]
    fn duplicate_guids_fail_the_trial_before_anything_is_written() {
        let s = SavedPartitions {
            sector_size: 512,
            entries: vec![
                (1, entry(2048, 4095, "a", 9)),
                (2, entry(4096, 8191, "b", 9)),
            ],
        };
        let e = format!("{:#}", s.trial(64 << 20).unwrap_err());
        assert!(e.contains("failed dry run"), "{e}");
        let ok = SavedPartitions {
            sector_size: 512,
            entries: vec![(1, entry(2048, 4095, "a", 1))],
        };
        ok.trial(64 << 20).unwrap();
    }

    #[test]
    fn merge_renumbers_upward_after_the_image() {
        let mut w = DiskWindows::zeroed(64 << 20).unwrap();
        let mut img = table::write_new(&mut w, 512, &[], "the image's table").unwrap();
        for n in 1..=4u32 {
            img[n] = entry(
                2048 * n as u64,
                2048 * n as u64 + 2047,
                "img",
                100 + n as u8,
            );
        }
        let s = SavedPartitions {
            sector_size: 512,
            entries: vec![
                (4, entry(80000, 90000, "data", 4)),
                (7, entry(90001, 99999, "var", 7)),
                (2, entry(70000, 79999, "two", 2)),
            ],
        };
        s.merge_into(&mut img).unwrap();
        let names: Vec<(u32, String)> = img
            .iter()
            .filter(|(_, p)| p.is_used())
            .map(|(n, p)| (n, p.partition_name.as_str().to_string()))
            .collect();
        assert_eq!(
            names,
            vec![
                (1, "img".into()),
                (2, "img".into()),
                (3, "img".into()),
                (4, "img".into()),
                (5, "two".into()),
                (6, "data".into()),
                (7, "var".into()),
            ]
        );
    }
}
