//! Small synthetic GPT disk images (no filesystems), built in memory.

use assisted_installer::disk::gpt::{empty_table, WINDOW};

/// Deterministic, moderately compressible bytes.
pub(crate) fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|i| {
            if i % 64 == 0 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            if (i / 4096) % 3 == 0 {
                (x >> ((i % 8) * 8)) as u8
            } else {
                b"the quick brown fox jumps over the lazy dog "[i % 44]
            }
        })
        .collect()
}

/// A disk image of `size` bytes (a multiple of `ss`) with a valid, empty GPT at `ss`-byte sectors
/// and pattern data everywhere outside the GPT structures, including in the first MiB.
pub(crate) fn gpt_image(size: u64, ss: u64, seed: u64) -> Vec<u8> {
    assert_eq!(size % ss, 0);
    let w = empty_table(size, ss).unwrap();
    let mut img = pattern(size as usize, seed);
    // Keep the MBR + header + 128 entries (34 LBAs at 512, 6 at 4096) and their backups.
    let gpt_len = if ss == 512 { 34 * 512 } else { 6 * 4096 };
    img[..gpt_len].copy_from_slice(&w.head()[..gpt_len]);
    let tail_gpt = (size as usize) - (gpt_len - ss as usize);
    let tail_src = (WINDOW as usize) - (gpt_len - ss as usize);
    img[tail_gpt..].copy_from_slice(&w.tail()[tail_src..]);
    img
}

pub(crate) fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(data))
}

/// Check that `disk` holds `img` as written by write-image: every byte identical except those
/// the GPT fix-up rewrites by design (the protective MBR's partition record, the primary header
/// at LBA 1, and the image's own backup table at its end), with the same disk GUID and the
/// same partition entries in the disk's table.
pub(crate) fn assert_image_on_disk(disk: &[u8], img: &[u8], ss: u64) {
    let ss = ss as usize;
    let array = (128 * 128usize).div_ceil(ss) * ss;
    let end_of_data = img.len() - array - ss;
    assert!(disk.len() >= img.len(), "disk shorter than the image");
    assert!(disk[..446] == img[..446], "boot code differs");
    assert_eq!(&disk[510..512], &img[510..512], "MBR signature differs");
    let first_diff = (2 * ss..end_of_data).find(|&i| disk[i] != img[i]);
    assert_eq!(
        first_diff, None,
        "image data differs at byte {first_diff:?}"
    );
    let gpt = |b: &[u8]| gptman::GPT::read_from(&mut std::io::Cursor::new(b), ss as u64);
    let dg = gpt(disk).expect("valid GPT on the disk");
    let ig = gpt(img).expect("valid GPT in the image");
    assert_eq!(
        dg.header.disk_guid, ig.header.disk_guid,
        "disk GUID changed"
    );
    assert_eq!(
        dg.header.backup_lba as usize,
        disk.len() / ss - 1,
        "backup not at the disk's end"
    );
    let entries = |g: &gptman::GPT| -> Vec<(u32, gptman::GPTPartitionEntry)> {
        g.iter()
            .filter(|(_, p)| p.is_used())
            .map(|(n, p)| (n, p.clone()))
            .collect()
    };
    assert_eq!(entries(&dg), entries(&ig), "partition entries differ");
}

/// The summary's `zeros:` line of write-image's stdout: the MiB it counts and how they went
/// ("zeroed by the kernel (BLKZEROOUT)", "written as data (--write-zeros)" ...).
pub(crate) fn zeros_summary(stdout: &str) -> (f64, String) {
    let line = stdout.lines().find_map(|l| l.strip_prefix("zeros: "));
    let line = line.unwrap_or_else(|| panic!("no zeros line in the summary:\n{stdout}"));
    let (mib, rest) = line.split_once(" MiB (").unwrap();
    let how = rest.split_once(") ").unwrap().1;
    (mib.parse().unwrap(), how.to_string())
}
