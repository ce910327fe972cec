//! Zeros by the kernel: the runs of zeros in each decoded block are zeroed by the target
//! (`BLKZEROOUT`, or a hole punched in a regular file) instead of being written, so they never
//! cross from user space, and the device may not even store them. The digests are taken before
//! this, over every byte.

use anyhow::Result;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::disk::device::{Device, ZeroMethod, ZeroRefused};

/// The granularity of zeroing: whole, aligned 64 KiB chunks that are all zeros. Each run costs
/// one syscall and one device command (and splits the block's data write around it), which is
/// worth it only for a range far larger than the ~4 KiB a command itself costs to send; the free
/// space of ext4/XFS and an empty ESP come in runs of many MiB, so larger chunks lose little
/// and smaller ones mostly add calls for scattered metadata-sized gaps. A 1 MiB block splits
/// into at most 8 zeroed runs and 8 writes. 64 KiB is a multiple of every logical sector size
/// (512, 4096) and of the page size, so the zeroed ranges and the O_DIRECT writes between them
/// stay aligned on every disk.
pub(crate) const ZERO_CHUNK: usize = 64 << 10;

/// The runs of whole `chunk`-aligned chunks of `data` that hold only zeros, merged, in order.
/// A partial chunk at the end never counts (it is written with the data before it).
pub(crate) fn zero_runs(data: &[u8], chunk: usize) -> Vec<Range<usize>> {
    let mut runs: Vec<Range<usize>> = Vec::new();
    for (i, c) in data.chunks_exact(chunk).enumerate() {
        if !is_zero(c) {
            continue;
        }
        let start = i * chunk;
        match runs.last_mut() {
            Some(r) if r.end == start => r.end += chunk,
            _ => runs.push(start..start + chunk),
        }
    }
    runs
}

/// Whether `b` is all zeros: 64 bytes OR-ed at a time (the compiler vectorises the fixed-size
/// fold), stopping at the first non-zero group, which data almost always has in its first.
fn is_zero(b: &[u8]) -> bool {
    let mut groups = b.chunks_exact(64);
    groups.all(|g| g.iter().fold(0u8, |a, &x| a | x) == 0)
        && groups.remainder().iter().all(|&x| x == 0)
}

/// What the writers share about zeroing: whether it is (still) on, why it is off, and counts.
pub(super) struct Zeroing {
    enabled: AtomicBool,
    by_option: bool,
    refused: OnceLock<ZeroRefused>,
    /// Bytes in whole zero chunks, whether the kernel zeroed them or not.
    found: AtomicU64,
    zeroed: AtomicU64,
}

impl Zeroing {
    pub(super) fn new(enabled: bool) -> Zeroing {
        Zeroing {
            enabled: AtomicBool::new(enabled),
            by_option: !enabled,
            refused: OnceLock::new(),
            found: AtomicU64::new(0),
            zeroed: AtomicU64::new(0),
        }
    }

    /// Write `buf` (the block, padded to the sector for O_DIRECT) at `offset`, of which the
    /// first `len` bytes are the image's: its zero runs by the kernel while the target takes
    /// them, everything else as data.
    pub(super) fn write_block(
        &self,
        dev: &Device,
        buf: &[u8],
        offset: u64,
        len: usize,
    ) -> Result<()> {
        let runs = zero_runs(&buf[..len], ZERO_CHUNK);
        let found: u64 = runs.iter().map(|r| r.len() as u64).sum();
        self.found.fetch_add(found, Ordering::Relaxed);
        if found > 0 && self.enabled.load(Ordering::Relaxed) {
            match write_around(dev, buf, offset, &runs) {
                Ok(()) => {
                    self.zeroed.fetch_add(found, Ordering::Relaxed);
                    return Ok(());
                }
                Err(e) => match e.downcast::<ZeroRefused>() {
                    Ok(refused) => self.refuse(refused),
                    Err(e) => return Err(e),
                },
            }
        }
        // Zeroing off or refused: the whole block as data, including any part of it already
        // zeroed or written above (the same bytes again).
        dev.write_at(buf, offset)
    }

    /// The first refusal turns zeroing off for the rest of the write, and is logged once (the
    /// writers may meet it together).
    fn refuse(&self, refused: ZeroRefused) {
        if self.enabled.swap(false, Ordering::Relaxed) {
            tracing::warn!("{refused}: writing the zeros as data for the rest of the image");
            let _ = self.refused.set(refused);
        }
    }

    pub(super) fn summary(&self, dev: &Device, image_bytes: u64) -> ZeroSummary {
        let how = if self.by_option {
            ZeroHow::Disabled
        } else if let Some(r) = self.refused.get() {
            ZeroHow::Refused(r.to_string())
        } else {
            ZeroHow::Kernel(dev.zero_method())
        };
        ZeroSummary {
            found: self.found.load(Ordering::Relaxed),
            zeroed: self.zeroed.load(Ordering::Relaxed),
            image_bytes,
            how,
        }
    }
}

/// Zero `runs` of `buf` by the kernel and write the rest.
fn write_around(dev: &Device, buf: &[u8], offset: u64, runs: &[Range<usize>]) -> Result<()> {
    let mut at = 0;
    for r in runs {
        if r.start > at {
            dev.write_at(&buf[at..r.start], offset + at as u64)?;
        }
        dev.zero_range(offset + r.start as u64, r.len() as u64)?;
        at = r.end;
    }
    if at < buf.len() {
        dev.write_at(&buf[at..], offset + at as u64)?;
    }
    Ok(())
}

/// How the image's zeros reached the disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZeroHow {
    Kernel(ZeroMethod),
    /// `--write-zeros`.
    Disabled,
    /// The target refused (the refusal, naming the device and the errno).
    Refused(String),
}

/// The zeros of the image (after its first MiB, which is written as data with the partition
/// table), for the summary.
#[derive(Clone, Debug)]
pub struct ZeroSummary {
    /// Bytes in whole zero chunks of [`ZERO_CHUNK`].
    pub found: u64,
    /// Of those, the bytes the kernel zeroed.
    pub zeroed: u64,
    pub image_bytes: u64,
    pub how: ZeroHow,
}

impl std::fmt::Display for ZeroSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |n: u64| n as f64 / 1048576.0;
        let pct = (self.found * 100)
            .checked_div(self.image_bytes)
            .unwrap_or(0);
        write!(f, "zeros: {:.1} MiB ({pct}%) ", mib(self.found))?;
        match &self.how {
            ZeroHow::Kernel(m) => write!(f, "zeroed by the kernel ({m})"),
            ZeroHow::Disabled => write!(f, "written as data (--write-zeros)"),
            ZeroHow::Refused(why) if self.zeroed > 0 => write!(
                f,
                "written as data: {why} after {:.1} MiB zeroed",
                mib(self.zeroed)
            ),
            ZeroHow::Refused(why) => write!(f, "written as data: {why}"),
        }
    }
}

#[cfg(test)]
// The expected values are lists of runs, some of one run.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    const C: usize = ZERO_CHUNK;

    /// A block of `n` chunks (plus `tail` bytes) of 0xee, with the chunks in `zero` cleared.
    fn block(n: usize, tail: usize, zero: &[usize]) -> Vec<u8> {
        let mut b = vec![0xeeu8; n * C + tail];
        for &i in zero {
            b[i * C..(i + 1) * C].fill(0);
        }
        b
    }

    /// `len` zero bytes but those at `ones`.
    fn with(len: usize, ones: &[usize]) -> Vec<u8> {
        let mut b = vec![0u8; len];
        ones.iter().for_each(|&i| b[i] = 1);
        b
    }

    #[test]
    fn runs_are_whole_aligned_chunks_merged() {
        let mut cases: Vec<(Vec<u8>, usize, Vec<Range<usize>>)> = vec![
            // At the start and end of a block, merged.
            (
                block(16, 0, &[0, 1, 2, 7, 14, 15]),
                C,
                vec![0..3 * C, 7 * C..8 * C, 14 * C..16 * C],
            ),
            (vec![0; 16 * C], C, vec![0..16 * C]),
            (block(16, 0, &[]), C, vec![]),
            (vec![], C, vec![]),
            // A short last block counts only whole chunks.
            (vec![0; 3 * C + 4096], C, vec![0..3 * C]),
            (vec![0; C - 512], C, vec![]),
            (block(2, 512, &[1]), C, vec![C..2 * C]),
            // 4096-byte chunks, and a chunk that is not a multiple of 64.
            (
                with(8 * 4096, &[2 * 4096 + 4095, 5 * 4096]),
                4096,
                vec![0..2 * 4096, 3 * 4096..5 * 4096, 6 * 4096..8 * 4096],
            ),
            (vec![0; 300], 100, vec![0..300]),
            (with(300, &[299]), 100, vec![0..200]),
        ];
        // One non-zero byte anywhere in a chunk keeps it as data.
        for at in [0, 1, 63, 64, C / 2, C - 1] {
            cases.push((with(4 * C, &[C + at]), C, vec![0..C, 2 * C..4 * C]));
        }
        for (i, (data, chunk, want)) in cases.into_iter().enumerate() {
            assert_eq!(zero_runs(&data, chunk), want, "case {i}");
        }
    }

    #[test]
    fn the_chunk_is_aligned_to_every_sector_size() {
        for ss in [512, 4096] {
            assert_eq!(ZERO_CHUNK % ss, 0);
        }
        assert_eq!(super::super::stages::BLOCK % ZERO_CHUNK, 0);
    }

    /// One MiB block (chunks 0, 3-4 and 15 zero, and a short tail) written over old data in an
    /// image file, with zeroing on and off: the same bytes, counted the same, holes only when on.
    #[test]
    fn a_block_is_written_around_its_zero_runs_over_old_data() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        for on in [true, false] {
            let f = tempfile::NamedTempFile::new().unwrap();
            f.as_file().write_all_at(&vec![0x5a; 3 << 20], 0).unwrap();
            f.as_file().sync_all().unwrap();
            let dev = Device::open_for_write(f.path()).unwrap();
            let z = Zeroing::new(on);
            let mut buf = crate::disk::direct::AlignedBuf::new(16 * C);
            buf.as_mut_slice()
                .copy_from_slice(&block(16, 0, &[0, 3, 4, 15]));
            z.write_block(&dev, buf.as_slice(), 1 << 20, 16 * C)
                .unwrap();
            // A short last block: its zero tail is less than a chunk, so it is data.
            let mut tail = crate::disk::direct::AlignedBuf::new(C);
            tail.as_mut_slice()[..512].fill(1);
            z.write_block(&dev, &tail.as_slice()[..4096], 2 << 20, 4096)
                .unwrap();
            let mut back = vec![0u8; 3 << 20];
            f.as_file().read_exact_at(&mut back, 0).unwrap();
            assert!(back[..1 << 20].iter().all(|&x| x == 0x5a));
            // (assert! rather than assert_eq!: a failure would print MiBs.)
            assert!(back[1 << 20..2 << 20] == *buf.as_slice(), "zeroing {on}");
            assert!(back[2 << 20..(2 << 20) + 4096] == tail.as_slice()[..4096]);
            assert!(back[(2 << 20) + 4096..].iter().all(|&x| x == 0x5a));
            let s = z.summary(&dev, 3 << 20);
            assert_eq!(
                (s.found, s.zeroed),
                (4 * C as u64, if on { 4 * C as u64 } else { 0 })
            );
            let holes = f.as_file().metadata().unwrap().blocks() * 512 <= (3 << 20) - 4 * C as u64;
            assert_eq!(holes, on, "holes punched with zeroing {on}");
            let how = if on {
                ZeroHow::Kernel(ZeroMethod::PunchHole)
            } else {
                ZeroHow::Disabled
            };
            assert_eq!(s.how, how);
        }
    }

    #[test]
    fn the_summary_line_says_how() {
        let s = |how, zeroed| {
            ZeroSummary {
                found: 3 << 20,
                zeroed,
                image_bytes: 6 << 20,
                how,
            }
            .to_string()
        };
        let cases = [
            (
                ZeroHow::Kernel(ZeroMethod::ZeroOut),
                3 << 20,
                "zeroed by the kernel (BLKZEROOUT)",
            ),
            (
                ZeroHow::Kernel(ZeroMethod::PunchHole),
                3 << 20,
                "zeroed by the kernel (holes punched)",
            ),
            (ZeroHow::Disabled, 0, "written as data (--write-zeros)"),
            (
                ZeroHow::Refused("/d refused zeroing (EOPNOTSUPP)".into()),
                0,
                "written as data: /d refused zeroing (EOPNOTSUPP)",
            ),
        ];
        for (how, zeroed, says) in cases {
            assert_eq!(s(how, zeroed), format!("zeros: 3.0 MiB (50%) {says}"));
        }
    }
}
