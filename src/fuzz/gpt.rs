//! A disk's old GPT, read to save some of its partitions, and an image's GPT, read from the
//! first MiB of the stream. Seeds: the first sectors of disks (a GPT made by sgdisk: its MBR,
//! header and first entries; an MBR), laid at the start of a zeroed 2 MiB disk. Only the primary
//! table is kept: mutations then land on its fields rather than on the zeros in between.

use proptest::prelude::*;
use std::path::Path;

use super::{bounded, config, corpus, mutated};
use crate::disk::gpt::{DiskWindows, ImageLayout, WINDOW};
use crate::disk::saved::{index_filters, label_filters, SavedPartitions};

/// Make the primary header's two checksums (entry array, header) match again after a mutation,
/// as a hostile or buggy partitioner's table would: without it nearly every mutation stops at
/// the CRC check and the fields behind it (LBAs, entry count and size) are never reached.
fn fix_checksums(disk: &mut [u8], ss: usize) {
    let u32_at = |d: &[u8], at: usize| u32::from_le_bytes(d[at..at + 4].try_into().unwrap());
    if disk.len() < 2 * ss {
        return;
    }
    let h = ss;
    let entries_lba = u64::from_le_bytes(disk[h + 72..h + 80].try_into().unwrap());
    let len = u64::from(u32_at(disk, h + 80)) * u64::from(u32_at(disk, h + 84));
    let entries = entries_lba
        .checked_mul(ss as u64)
        .and_then(|start| Some(start..start.checked_add(len)?))
        .and_then(|r| disk.get(r.start as usize..r.end as usize));
    if let Some(entries) = entries {
        let crc = crc32fast::hash(entries);
        disk[h + 88..h + 92].copy_from_slice(&crc.to_le_bytes());
    }
    let header_len = (u32_at(disk, h + 12) as usize).clamp(92, ss);
    disk[h + 16..h + 20].fill(0);
    let crc = crc32fast::hash(&disk[h..h + header_len]);
    disk[h + 16..h + 20].copy_from_slice(&crc.to_le_bytes());
}

/// Every error of a table read names the table and what was wrong with it.
fn assert_named(e: &anyhow::Error) {
    let m = format!("{e:#}");
    let named = ["GPT", "MBR", "partition"].iter().any(|w| m.contains(w));
    assert!(named, "an error that does not name the table: {m}");
}

proptest! {
    #![proptest_config(config("testdata/fuzz/regressions/gpt.txt"))]

    #[test]
    fn a_disks_old_gpt_and_an_images_gpt(
        input in mutated(corpus("gpt")),
        fix in any::<bool>(),
        ss in prop::sample::select(vec![None, Some(512u64), Some(4096)]),
    ) {
        let size = 2 * WINDOW;
        let mut w = DiskWindows::zeroed(size).unwrap();
        let n = input.len().min(WINDOW as usize);
        w.head_mut()[..n].copy_from_slice(&input[..n]);
        if fix {
            fix_checksums(w.head_mut(), 512);
        }
        let filters = [
            label_filters(&["*".into()]),
            index_filters(&["1-".into()]).unwrap(),
        ]
        .concat();
        match bounded(n, 0, || SavedPartitions::select(&mut w, Path::new("/dev/fuzz"), ss, &filters)) {
            Ok(saved) => {
                saved.byte_ranges();
                saved.first();
                if let Err(e) = saved.trial(size) {
                    assert!(format!("{e:#}").contains("saved partitions"), "{e:#}");
                }
            }
            Err(e) => assert_named(&e),
        }
        if let Err(e) = bounded(n, 0, || ImageLayout::parse(w.head())) {
            assert_named(&e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sgdisk seed laid on a 2 MiB disk, `edit`ed, checksums fixed.
    fn seed_disk(edit: impl FnOnce(&mut [u8])) -> DiskWindows {
        let seed = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/fuzz/gpt/sgdisk-512-three-partitions.head"
        ))
        .unwrap();
        let mut w = DiskWindows::zeroed(2 * WINDOW).unwrap();
        w.head_mut()[..seed.len()].copy_from_slice(&seed);
        edit(w.head_mut());
        fix_checksums(w.head_mut(), 512);
        w
    }

    fn saved(w: &mut DiskWindows) -> Result<Vec<(u32, String)>, String> {
        SavedPartitions::select(
            w,
            Path::new("/dev/seed"),
            None,
            &label_filters(&["*".into()]),
        )
        .map(|s| {
            let e = s.entries.iter();
            e.map(|(n, p)| (*n, p.partition_name.as_str().to_string()))
                .collect()
        })
        .map_err(|e| format!("{e:#}"))
    }

    #[test]
    fn the_seed_parses_with_its_three_partitions() {
        let mut w = seed_disk(|_| {});
        let names = [(1, "boot"), (2, "data"), (5, "var")].map(|(n, l)| (n, l.to_string()));
        assert_eq!(saved(&mut w).unwrap(), names);
        assert_eq!(ImageLayout::parse(w.head()).unwrap().partitions.len(), 128);
    }

    /// Fields set to huge values behind valid checksums: before the checks, the entry count made
    /// gptman reserve 2^32 entries (an abort), and the LBAs overflowed when turned into bytes
    /// (a panic). Now the image's table is refused, naming the field, and the disk's table is
    /// refused as damaged when partitions are to be saved from it, naming the field too.
    #[test]
    fn huge_counts_and_lbas_behind_valid_checksums_are_refused() {
        let cases = [
            (512 + 80, 4, "partition entries (a table has at most 1024)"),
            (512 + 84, 4, "entries are 4294967295 bytes long"),
            (512 + 72, 8, "lie past any disk"),
            (512 + 32, 8, "lie past any disk"),
            (512 + 48, 8, "lie past any disk"),
            (
                1024 + 40,
                8,
                "partition 1 spans LBAs 40 to 18446744073709551615",
            ),
        ];
        for (at, width, says) in cases {
            let edit =
                |h: &mut [u8]| h[at..at + width].copy_from_slice(&u64::MAX.to_le_bytes()[..width]);
            let e = ImageLayout::parse(seed_disk(edit).head()).unwrap_err();
            assert!(format!("{e:#}").contains(says), "byte {at}: {e:#}");
            let e = saved(&mut seed_disk(edit)).unwrap_err();
            assert!(
                e.contains("is damaged") && e.contains(says),
                "byte {at}: {e}"
            );
        }
        // Every partition at LBA 0: gptman's alignment guess unwrapped nothing (a panic).
        let at_zero = |h: &mut [u8]| {
            [1024, 1152, 1536]
                .iter()
                .for_each(|e| h[e + 32..e + 40].fill(0))
        };
        let e = saved(&mut seed_disk(at_zero)).unwrap_err();
        assert!(e.contains("partition 1 spans LBAs 0 to 113"), "{e}");
        let e = ImageLayout::parse(seed_disk(at_zero).head()).unwrap_err();
        assert!(
            format!("{e:#}").contains("partition 1 spans LBAs 0 to 113"),
            "{e:#}"
        );
        // A backup header inside the entry array: the write would zero "stale" sectors before 0.
        let edit = |h: &mut [u8]| {
            h[1024..2048].fill(0);
            h[512 + 32..512 + 40].copy_from_slice(&20u64.to_le_bytes());
            h[512 + 48..512 + 56].copy_from_slice(&10u64.to_le_bytes());
        };
        let e = ImageLayout::parse(seed_disk(edit).head()).unwrap_err();
        assert!(e.to_string().contains("inconsistent"), "{e:#}");
    }
}
