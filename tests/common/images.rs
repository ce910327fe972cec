//! Small synthetic GPT disk images (no filesystems) and their compressed forms, built in memory.

use assisted_installer::disk::gpt::{empty_table, WINDOW};
use std::io::Write;

/// Deterministic, moderately compressible bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
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
pub fn gpt_image(size: u64, ss: u64, seed: u64) -> Vec<u8> {
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

pub fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

pub fn xz(data: &[u8]) -> Vec<u8> {
    let stream = liblzma::stream::MtStreamBuilder::new()
        .threads(2)
        .block_size(1 << 20)
        .preset(0)
        .encoder()
        .unwrap();
    let mut e = liblzma::write::XzEncoder::new_stream(Vec::new(), stream);
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

pub fn zst(data: &[u8]) -> Vec<u8> {
    let mut e = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    e.include_checksum(true).unwrap();
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
