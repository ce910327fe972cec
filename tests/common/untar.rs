#![allow(dead_code)]
//! Reading back the tar.gz archives the programs upload (controller logs, must-gather).

use std::io::Read;

/// The entries of a tar.gz, in order: (name, bytes); directories have no bytes.
pub(crate) fn untar_gz(archive: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    let entries = tar.entries().expect("a tar.gz stream");
    entries
        .map(|entry| {
            let mut entry = entry.expect("a valid tar entry");
            let name = entry.path().expect("a path").to_string_lossy().into_owned();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).expect("the entry's bytes");
            (name, data)
        })
        .collect()
}
