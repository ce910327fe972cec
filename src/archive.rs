//! A gzip-compressed tar archive of in-memory files, the form the assisted-service expects for a
//! log upload (Go's `WriteToTarGz`). Only what that needs: regular files with short names,
//! written as POSIX ustar entries in the given order.

use anyhow::{ensure, Context, Result};
use flate2::write::GzEncoder;
use flate2::Compression;

/// ustar's name field; longer names would need a prefix or a PAX header.
const NAME_LEN: usize = 100;

/// One file of the archive.
pub(crate) struct Entry<'a> {
    pub name: &'a str,
    pub mode: u32,
    /// Seconds since the Unix epoch.
    pub mtime: u64,
    pub data: &'a [u8],
}

/// The archive of `entries`, gzip-compressed.
pub(crate) fn tar_gz(entries: &[Entry<'_>]) -> Result<Vec<u8>> {
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
    for entry in entries {
        ensure!(
            !entry.name.is_empty() && entry.name.len() <= NAME_LEN,
            "tar entry name {:?} must be 1 to {NAME_LEN} bytes",
            entry.name
        );
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(entry.mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_size(entry.data.len() as u64);
        header.set_mtime(entry.mtime);
        header
            .set_path(entry.name)
            .and_then(|()| {
                header.set_cksum();
                tar.append(&header, entry.data)
            })
            .with_context(|| format!("archiving {}", entry.name))?;
    }
    tar.into_inner()
        .and_then(GzEncoder::finish)
        .context("finishing the tar.gz archive")
}

#[cfg(test)]
pub(crate) mod read {
    //! Reading back what [`super::tar_gz`] writes, for the tests (here and in the uploads').

    use std::io::Read;

    /// (name, mode, mtime, data) of each entry: ustar regular files (the reader checks the
    /// checksums), then the two zero end blocks and nothing after them.
    pub(crate) fn entries(archive: &[u8]) -> Vec<(String, u32, u64, Vec<u8>)> {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(archive)
            .read_to_end(&mut raw)
            .expect("gzip");
        assert_eq!(raw.len() % 512, 0);
        let mut out = Vec::new();
        let mut tar = tar::Archive::new(raw.as_slice());
        let mut end = 0;
        for entry in tar.entries().expect("a tar stream") {
            let mut entry = entry.expect("a valid tar entry");
            let h = entry.header();
            assert_eq!(&h.as_bytes()[257..265], b"ustar\x0000");
            assert_eq!(h.entry_type(), tar::EntryType::Regular);
            let name = h.path().unwrap().to_string_lossy().into_owned();
            let (mode, mtime) = (h.mode().unwrap(), h.mtime().unwrap());
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            end = entry.raw_file_position() as usize + data.len().div_ceil(512) * 512;
            out.push((name, mode, mtime, data));
        }
        assert!(raw.len() - end >= 1024, "two end blocks");
        assert!(raw[end..].iter().all(|&b| b == 0), "data after the end");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(name: &'a str, mode: u32, mtime: u64, data: &'a [u8]) -> Entry<'a> {
        Entry {
            name,
            mode,
            mtime,
            data,
        }
    }

    #[test]
    fn entries_keep_their_order_names_modes_times_and_bytes() {
        let big = vec![b'x'; 1300];
        let logs = "assisted-installer-controller.logs";
        let archive = tar_gz(&[
            entry("must-gather.tar.gz", 0o600, 1_700_000_000, &big),
            entry(logs, 0o644, 1_700_000_001, b"line 1\nline 2\n"),
            entry("empty", 0o644, 0, b""),
        ])
        .unwrap();
        assert_eq!(
            read::entries(&archive),
            vec![
                ("must-gather.tar.gz".into(), 0o600, 1_700_000_000, big),
                (
                    logs.into(),
                    0o644,
                    1_700_000_001,
                    b"line 1\nline 2\n".to_vec()
                ),
                ("empty".into(), 0o644, 0, Vec::new()),
            ]
        );
    }

    #[test]
    fn system_tar_reads_it_when_present() {
        let archive = tar_gz(&[entry("a.logs", 0o644, 1_700_000_000, b"hello\n")]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.tar.gz");
        std::fs::write(&file, &archive).unwrap();
        let Ok(out) = std::process::Command::new("tar")
            .arg("-xzOf")
            .arg(&file)
            .output()
        else {
            eprintln!("no tar on this machine: only the in-process reader checked the archive");
            return;
        };
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout, b"hello\n");
    }

    #[test]
    fn names_that_do_not_fit_are_refused() {
        let long = "n".repeat(101);
        assert!(tar_gz(&[entry(&long, 0o644, 0, b"")]).is_err());
        assert!(tar_gz(&[entry("", 0o644, 0, b"")]).is_err());
        assert!(tar_gz(&[entry(&long[..100], 0o644, 0, b"")]).is_ok());
    }
}
