#![allow(dead_code)]
//! Reading back the tar.gz archives the programs upload (controller logs, must-gather).

use std::io::Read;

/// The entries of a tar.gz, in order: (name, bytes); directories have no bytes.
pub(crate) fn untar_gz(archive: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(archive)
        .read_to_end(&mut tar)
        .expect("a gzip stream");
    let mut files = Vec::new();
    let mut at = 0;
    while at + 512 <= tar.len() && tar[at..at + 512].iter().any(|&b| b != 0) {
        let h = &tar[at..at + 512];
        let name_end = h[..100].iter().position(|&b| b == 0).unwrap_or(100);
        let name = String::from_utf8(h[..name_end].to_vec()).expect("a UTF-8 entry name");
        let size_text = std::str::from_utf8(&h[124..136]).expect("an octal size");
        let size = usize::from_str_radix(size_text.trim_matches(|c| c == '\0' || c == ' '), 8)
            .expect("an octal size");
        files.push((name, tar[at + 512..at + 512 + size].to_vec()));
        at += 512 + size.div_ceil(512) * 512;
    }
    files
}
