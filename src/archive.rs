//! A gzip-compressed tar archive of in-memory files, the form the assisted-service expects for a
//! log upload (Go's `WriteToTarGz`). Only what that needs: regular files with short names,
//! written as POSIX ustar entries in the given order.

use anyhow::{ensure, Context, Result};
use flate2::write::GzEncoder;
use flate2::Compression;
use std::io::Write;

const BLOCK: usize = 512;
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

/// `value` in octal, right-aligned in `field` with zeros and ended by a NUL.
fn octal(field: &mut [u8], value: u64) -> Result<()> {
    let digits = format!("{value:o}");
    let width = field.len() - 1;
    ensure!(
        digits.len() <= width,
        "{value} does not fit a tar header field"
    );
    let padded = format!("{digits:0>width$}");
    field[..width].copy_from_slice(padded.as_bytes());
    field[width] = 0;
    Ok(())
}

fn header(entry: &Entry<'_>) -> Result<[u8; BLOCK]> {
    let name = entry.name.as_bytes();
    ensure!(
        !name.is_empty() && name.len() <= NAME_LEN,
        "tar entry name {:?} must be 1 to {NAME_LEN} bytes",
        entry.name
    );
    let mut h = [0u8; BLOCK];
    h[..name.len()].copy_from_slice(name);
    octal(&mut h[100..108], u64::from(entry.mode))?;
    octal(&mut h[108..116], 0)?; // uid
    octal(&mut h[116..124], 0)?; // gid
    octal(&mut h[124..136], entry.data.len() as u64)?;
    octal(&mut h[136..148], entry.mtime)?;
    h[156] = b'0'; // a regular file
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    // The checksum is summed with its own field as spaces, then written as six octal digits,
    // a NUL and a space.
    h[148..156].fill(b' ');
    let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
    octal(&mut h[148..155], sum)?;
    h[155] = b' ';
    Ok(h)
}

/// The archive of `entries`, gzip-compressed.
pub(crate) fn tar_gz(entries: &[Entry<'_>]) -> Result<Vec<u8>> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    for entry in entries {
        gz.write_all(&header(entry)?)
            .and_then(|()| gz.write_all(entry.data))
            .and_then(|()| {
                let pad = (BLOCK - entry.data.len() % BLOCK) % BLOCK;
                gz.write_all(&[0u8; BLOCK][..pad])
            })
            .with_context(|| format!("archiving {}", entry.name))?;
    }
    // The end of the archive: two zero blocks.
    gz.write_all(&[0u8; 2 * BLOCK])
        .and_then(|()| gz.finish())
        .context("finishing the tar.gz archive")
}

#[cfg(test)]
pub(crate) mod read {
    //! Reading back what [`super::tar_gz`] writes, for the tests (here and in the uploads').

    use std::io::Read;

    /// (name, mode, mtime, data) of each entry; checks the checksums and the end blocks.
    pub(crate) fn entries(archive: &[u8]) -> Vec<(String, u32, u64, Vec<u8>)> {
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(archive)
            .read_to_end(&mut tar)
            .expect("gzip");
        assert_eq!(tar.len() % 512, 0);
        let octal = |f: &[u8]| {
            let text = std::str::from_utf8(f).unwrap();
            u64::from_str_radix(text.trim_matches(|c| c == '\0' || c == ' '), 8).unwrap()
        };
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            let h = &tar[at..at + 512];
            if h.iter().all(|&b| b == 0) {
                assert!(tar[at..].iter().all(|&b| b == 0), "data after the end");
                assert!(tar.len() - at >= 1024, "two end blocks");
                return out;
            }
            let mut summed = h.to_vec();
            summed[148..156].fill(b' ');
            let sum: u64 = summed.iter().map(|&b| u64::from(b)).sum();
            assert_eq!(octal(&h[148..156]), sum, "checksum");
            assert_eq!(&h[257..265], b"ustar\x0000");
            assert_eq!(h[156], b'0');
            let name_end = h[..100].iter().position(|&b| b == 0).unwrap_or(100);
            let name = String::from_utf8(h[..name_end].to_vec()).unwrap();
            let size = octal(&h[124..136]) as usize;
            let data = tar[at + 512..at + 512 + size].to_vec();
            out.push((name, octal(&h[100..108]) as u32, octal(&h[136..148]), data));
            at += 512 + size.div_ceil(512) * 512;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_keep_their_order_names_modes_times_and_bytes() {
        let big = vec![b'x'; 1300];
        let archive = tar_gz(&[
            Entry {
                name: "must-gather.tar.gz",
                mode: 0o600,
                mtime: 1_700_000_000,
                data: &big,
            },
            Entry {
                name: "assisted-installer-controller.logs",
                mode: 0o644,
                mtime: 1_700_000_001,
                data: b"line 1\nline 2\n",
            },
            Entry {
                name: "empty",
                mode: 0o644,
                mtime: 0,
                data: b"",
            },
        ])
        .unwrap();
        let entries = read::entries(&archive);
        assert_eq!(
            entries,
            vec![
                ("must-gather.tar.gz".into(), 0o600, 1_700_000_000, big),
                (
                    "assisted-installer-controller.logs".into(),
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
        let archive = tar_gz(&[Entry {
            name: "a.logs",
            mode: 0o644,
            mtime: 1_700_000_000,
            data: b"hello\n",
        }])
        .unwrap();
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
        let entry = |name| Entry {
            name,
            mode: 0o644,
            mtime: 0,
            data: b"",
        };
        assert!(tar_gz(&[entry(&long)]).is_err());
        assert!(tar_gz(&[entry("")]).is_err());
        assert!(tar_gz(&[entry(&long[..100])]).is_ok());
    }
}
