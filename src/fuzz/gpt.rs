//! A disk's old GPT, read to save some of its partitions, and an image's GPT, read from the
//! first MiB of the stream. Seeds: disks of 128 KiB (a GPT made by sgdisk, an MBR).

use proptest::prelude::*;

use super::{bounded, config, corpus, mutated};
use crate::disk::gpt::{DiskWindows, ImageLayout, WINDOW};
use crate::disk::saved::{index_filters, label_filters, SavedPartitions};

/// CRC-32 (IEEE, reflected), as a GPT header and its entry array carry.
fn crc32(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |mut c, &b| {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 == 1 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
        }
        c
    })
}

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
        let crc = crc32(entries);
        disk[h + 88..h + 92].copy_from_slice(&crc.to_le_bytes());
    }
    let header_len = (u32_at(disk, h + 12) as usize).clamp(92, ss);
    disk[h + 16..h + 20].fill(0);
    let crc = crc32(&disk[h..h + header_len]);
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
        mut input in mutated(corpus("gpt")),
        fix in any::<bool>(),
        ss in prop::sample::select(vec![None, Some(512u64), Some(4096)]),
    ) {
        if fix {
            fix_checksums(&mut input, 512);
        }
        let size = 2 * WINDOW;
        let mut w = DiskWindows::zeroed(size).unwrap();
        let n = input.len().min(WINDOW as usize);
        w.head_mut()[..n].copy_from_slice(&input[..n]);
        let filters = [
            label_filters(&["*".into()]),
            index_filters(&["1-".into()]).unwrap(),
        ]
        .concat();
        match bounded(n, 0, || SavedPartitions::select(&mut w, ss, &filters)) {
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
