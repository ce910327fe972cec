//! `--verify`: read the written image back from the disk and check it against what was streamed.
//!
//! ```text
//! readers x N: claim the next chunk, O_DIRECT pread it, check it (CRC-32 per MiB, SHA-256 link)
//! ```
//!
//! Every chunk is checked on its own, on the thread that read it: no checker takes them in
//! order. The stream's sha256 stage keeps its hasher's state at the end of every MiB (about 112
//! bytes each). A chunk starting at MiB `m` is hashed on from the stream's state after `m` MiB,
//! and must end in the stream's state after its last MiB (the last chunk: in the stream's
//! SHA-256). Chained, chunks that all match prove that the SHA-256 of what the disk returned
//! (the first MiB, not on the disk yet, from memory: it is written at commit, see the pipeline)
//! is the stream's, exactly as one sequential hash of the read-back would; but the hashing runs
//! on every reader at once, so the read-back keeps the device's pace on any number of cores
//! instead of one core's SHA-256 pace. Each MiB's CRC-32 names the first MiB that differs.
//!
//! Memory is one aligned buffer per reader, within [`BUFFER_BUDGET`] whatever their number;
//! readers claim chunks in increasing order, so a mismatch stops further claims and the lowest
//! failing chunk, once the ones before it are done, is the one reported.

use anyhow::{anyhow, bail, Context, Result};
use sha2::Digest;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::cancel::{Cancel, CancelOnDrop, Interrupted, POLL};
use super::digest::{Sha256, Sha256Sum};
use crate::disk::device::Device;
use crate::disk::direct::{round_up, AlignedBuf};

const MIB: u64 = 1 << 20;
/// The largest read: large enough that the device, not the syscalls, sets the pace.
const MAX_CHUNK: u64 = 4 << 20;
/// The readers' buffers together, whatever their number: more readers read smaller chunks.
pub(crate) const BUFFER_BUDGET: u64 = 24 << 20;
/// The most readers (at 1 MiB each they stay within the budget).
pub(crate) const MAX_THREADS: usize = 16;

/// Readers by default: one per core, at least four so that reads stay in flight while two cores
/// hash, at most [`MAX_THREADS`].
pub(crate) fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(4, |n| n.get())
        .clamp(4, MAX_THREADS)
}

/// Bytes per read for `threads` readers: whole MiBs, 1 to 4 MiB, within [`BUFFER_BUDGET`].
pub(crate) fn chunk_len(threads: usize) -> u64 {
    let share = BUFFER_BUDGET / threads.clamp(1, MAX_THREADS) as u64;
    (share / MIB * MIB).clamp(MIB, MAX_CHUNK)
}

/// What the sha256 stage saw of the uncompressed stream: its SHA-256, and with `--verify`, for
/// each MiB `i` (bytes `[i MiB, (i+1) MiB)`), a CRC-32 that places a read-back mismatch and the
/// SHA-256 state after it that each read-back chunk starts from and must reach.
#[derive(Clone, Debug)]
pub(crate) struct StreamSums {
    pub(crate) sha256: Sha256Sum,
    pub(crate) mib_crc32: Vec<u32>,
    pub(crate) mib_states: Vec<Sha256>,
}

/// [`StreamSums`] taken block by block as the stream passes (the sha256 stage's and the
/// benches' one way to make them). Blocks are whole MiBs but the last.
pub(crate) struct SumsBuilder {
    hasher: Sha256,
    per_mib: bool,
    mib_crc32: Vec<u32>,
    mib_states: Vec<Sha256>,
}

impl SumsBuilder {
    /// `per_mib`: also what a `--verify` read-back needs of each MiB.
    pub(crate) fn new(per_mib: bool) -> SumsBuilder {
        SumsBuilder {
            hasher: Sha256::new(),
            per_mib,
            mib_crc32: Vec::new(),
            mib_states: Vec::new(),
        }
    }

    pub(crate) fn update(&mut self, block: &[u8]) {
        self.hasher.update(block);
        if self.per_mib {
            self.mib_crc32.push(crc32fast::hash(block));
            self.mib_states.push(self.hasher.clone());
        }
    }

    pub(crate) fn finish(self) -> StreamSums {
        StreamSums {
            sha256: Sha256Sum::of(self.hasher),
            mib_crc32: self.mib_crc32,
            mib_states: self.mib_states,
        }
    }
}

/// A read-back that matched.
#[derive(Clone, Copy, Debug)]
pub struct ReadBack {
    /// Bytes read from the disk (the image after its first MiB).
    pub bytes: u64,
    pub elapsed: Duration,
}

impl std::fmt::Display for ReadBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        write!(
            f,
            "read back: sha256 matches ({:.1} MiB in {secs:.2} s: {:.0} MB/s)",
            self.bytes as f64 / MIB as f64,
            self.bytes as f64 / secs.max(1e-9) / 1e6
        )
    }
}

/// Read `[head.len(), image_len)` of `dev` back on `threads` readers and check it against
/// `sums`, with `head` (the image's first MiB, held in memory) standing for the start.
/// `sector`: reads are padded to it on an O_DIRECT target, as the writes were. `progress` sees
/// the bytes checked so far (the head counts from the start) and the time taken, about every
/// [`POLL`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_back(
    dev: &Device,
    head: &[u8],
    sums: &StreamSums,
    image_len: u64,
    sector: u64,
    threads: usize,
    stop: &Cancel,
    progress: &dyn Fn(u64, Duration),
) -> Result<ReadBack> {
    let start = Instant::now();
    let from = head.len() as u64;
    let threads = threads.clamp(1, MAX_THREADS);
    let chunk = chunk_len(threads);
    let chunks = image_len.saturating_sub(from).div_ceil(chunk);
    if chunks > 0 && !from.is_multiple_of(MIB) {
        bail!("the read-back starts at byte {from}, not on a MiB (this is a bug)");
    }
    let pad = dev.is_direct().then_some(sector);
    let done = AtomicU64::new(from);
    let next = AtomicU64::new(0);
    // The lowest chunk that failed, and why.
    let failed: Mutex<Option<(u64, anyhow::Error)>> = Mutex::new(None);
    let first_failed = AtomicU64::new(u64::MAX);
    let cancel = stop.child();
    std::thread::scope(|s| -> Result<()> {
        // Whatever happens below, no reader outlives this scope.
        let _guard = CancelOnDrop(&cancel);
        let (cancel, done, next, failed, first_failed) =
            (&cancel, &done, &next, &failed, &first_failed);
        let readers: Vec<_> = (0..(threads as u64).min(chunks))
            .map(|r| {
                std::thread::Builder::new()
                    .name(format!("read-back-{r}"))
                    .spawn_scoped(s, move || {
                        let mut buf = AlignedBuf::new(chunk as usize);
                        loop {
                            let i = next.fetch_add(1, Ordering::SeqCst);
                            if i >= chunks
                                || i > first_failed.load(Ordering::SeqCst)
                                || cancel.is_cancelled()
                            {
                                return;
                            }
                            let off = from + i * chunk;
                            let len = (image_len - off).min(chunk);
                            let padded = pad.map_or(len, |s| round_up(len, s)) as usize;
                            let read = &mut buf.as_mut_slice()[..padded];
                            let checked = dev
                                .read_at(read, off)
                                .context("reading the image back")
                                .and_then(|()| {
                                    check_chunk(dev, &read[..len as usize], off, image_len, sums)
                                });
                            match checked {
                                Ok(()) => {
                                    done.fetch_add(len, Ordering::Relaxed);
                                }
                                Err(e) => {
                                    let mut f = failed.lock().expect("read-back failure lock");
                                    if f.as_ref().is_none_or(|(at, _)| i < *at) {
                                        *f = Some((i, e));
                                    }
                                    first_failed.fetch_min(i, Ordering::SeqCst);
                                }
                            }
                        }
                    })
            })
            .collect::<std::io::Result<_>>()?;
        while !readers.iter().all(|r| r.is_finished()) {
            if stop.is_cancelled() {
                return Err(Interrupted.into());
            }
            progress(done.load(Ordering::Relaxed), start.elapsed());
            std::thread::sleep(POLL);
        }
        for r in readers {
            r.join()
                .map_err(|_| anyhow!("a read-back thread panicked"))?;
        }
        Ok(())
    })?;
    if let Some((_, e)) = failed.into_inner().expect("read-back failure lock") {
        return Err(e);
    }
    if stop.is_cancelled() {
        return Err(Interrupted.into());
    }
    progress(image_len, start.elapsed());
    Ok(ReadBack {
        bytes: image_len.saturating_sub(from),
        elapsed: start.elapsed(),
    })
}

/// Check `data`, read from `dev` at `off` (a whole MiB from the start), against the stream:
/// each MiB's CRC-32, then the SHA-256 carried from the stream's state at `off` to its state at
/// the chunk's end (at `image_len`: the stream's SHA-256).
fn check_chunk(
    dev: &Device,
    data: &[u8],
    off: u64,
    image_len: u64,
    sums: &StreamSums,
) -> Result<()> {
    #[cfg(test)]
    tests::note_checking_thread(dev);
    let first = off / MIB;
    for (mib, bytes) in (first..).zip(data.chunks(MIB as usize)) {
        if sums.mib_crc32.get(mib as usize) != Some(&crc32fast::hash(bytes)) {
            bail!(
                "{} did not return what was written: the first differing MiB is MiB {mib} (offset {})",
                dev.path().display(),
                mib * MIB
            );
        }
    }
    let state = |mib: u64| {
        mib.checked_sub(1)
            .and_then(|i| sums.mib_states.get(i as usize))
            .ok_or_else(|| anyhow!("no stream state after MiB {mib} (this is a bug)"))
    };
    let mut sha = state(first)?.clone();
    sha.update(data);
    let read = Sha256Sum::of(sha);
    let end = off + data.len() as u64;
    if end == image_len {
        if read != sums.sha256 {
            // Every MiB's CRC-32 matched yet the digest differs: a CRC collision, or bytes moved.
            bail!(
                "{} did not return what was written: the sha256 read back is {read}, {} was written (every MiB's CRC-32 matched)",
                dev.path().display(),
                sums.sha256
            );
        }
    } else if read != Sha256Sum::of(state(end / MIB)?.clone()) {
        bail!(
            "{} did not return what was written: the sha256 of the image up to offset {end} read back differs from the stream's (every MiB's CRC-32 matched)",
            dev.path().display()
        );
    }
    Ok(())
}

/// The read-back alone, for the benches: an image's sums taken once as the stream would, then
/// its read-back from a device that holds it (from its second MiB on) on `threads` readers.
#[cfg(any(test, feature = "test-support"))]
pub struct ReadBackCheck {
    head: Vec<u8>,
    sums: StreamSums,
    len: u64,
}

#[cfg(any(test, feature = "test-support"))]
impl ReadBackCheck {
    /// The sums of the raw image `image`, read in 1 MiB blocks as the pipeline streams it.
    pub fn of_image(image: &std::path::Path) -> Result<ReadBackCheck> {
        let mut file =
            std::fs::File::open(image).with_context(|| format!("opening {}", image.display()))?;
        let (mut sums, mut head, mut len) = (SumsBuilder::new(true), Vec::new(), 0u64);
        let mut block = vec![0u8; MIB as usize];
        loop {
            let n = super::format::fill(&mut file, &mut block)?;
            if n == 0 {
                break;
            }
            sums.update(&block[..n]);
            if head.is_empty() {
                head = block[..n].to_vec();
            }
            len += n as u64;
        }
        Ok(ReadBackCheck {
            head,
            sums: sums.finish(),
            len,
        })
    }

    /// Read the image back from `device` and check it, on `threads` readers.
    pub fn run(&self, device: &std::path::Path, threads: usize) -> Result<ReadBack> {
        let dev = Device::open_for_write(device)?;
        let sector = dev.sector_size().unwrap_or(512);
        read_back(
            &dev,
            &self.head,
            &self.sums,
            self.len,
            sector,
            threads,
            &Cancel::new(),
            &|_, _| {},
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An image of `len` bytes whose every MiB differs, written to a file the way the pipeline
    /// leaves a disk before commit (the first MiB not written), and the sums of its stream.
    fn written(len: usize) -> (tempfile::NamedTempFile, Vec<u8>, StreamSums) {
        let image: Vec<u8> = (0..len).map(|i| (i / 4096 * 7 + i % 251) as u8).collect();
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut on_disk = image.clone();
        on_disk[..MIB as usize].fill(0);
        std::fs::write(file.path(), &on_disk).unwrap();
        let mut sums = SumsBuilder::new(true);
        image.chunks(MIB as usize).for_each(|b| sums.update(b));
        (file, image, sums.finish())
    }

    /// The threads that checked a chunk read from each device, by name.
    static CHECKED_ON: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());

    pub(super) fn note_checking_thread(dev: &Device) {
        let name = std::thread::current().name().unwrap_or("").to_string();
        let mut on = CHECKED_ON.lock().unwrap();
        on.push((dev.path().to_path_buf(), name));
    }

    fn check(file: &Path, image: &[u8], sums: &StreamSums) -> Result<ReadBack> {
        check_on(file, image, sums, default_threads())
    }

    fn check_on(file: &Path, image: &[u8], sums: &StreamSums, threads: usize) -> Result<ReadBack> {
        let dev = Device::open_for_write(file).unwrap();
        let seen = std::sync::Mutex::new(Vec::new());
        let r = read_back(
            &dev,
            &image[..MIB as usize],
            sums,
            image.len() as u64,
            512,
            threads,
            &Cancel::new(),
            &|n, _| seen.lock().unwrap().push(n),
        );
        if r.is_ok() {
            assert_eq!(seen.lock().unwrap().last(), Some(&(image.len() as u64)));
        }
        r
    }

    use std::path::{Path, PathBuf};

    #[test]
    fn a_clean_disk_passes_and_the_bytes_read_exclude_the_head() {
        // 14.5 MiB: chunks over several readers, the last one short and not a whole MiB.
        let (file, image, sums) = written(14 * MIB as usize + 512 * 1024 + 512);
        let r = check(file.path(), &image, &sums).unwrap();
        assert_eq!(r.bytes, image.len() as u64 - MIB);
        assert!(
            r.to_string()
                .starts_with("read back: sha256 matches (13.5 MiB in "),
            "{r}"
        );
    }

    #[test]
    fn a_changed_mib_behind_the_writers_back_is_named() {
        for bad in [1u64, 6, 14] {
            let (file, image, sums) = written(14 * MIB as usize + 4096);
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(file.path())
                .unwrap();
            std::os::unix::fs::FileExt::write_all_at(&f, b"lie", bad * MIB + 77).unwrap();
            let e = check(file.path(), &image, &sums).unwrap_err().to_string();
            assert!(e.contains("did not return what was written"), "{e}");
            assert!(e.contains(&file.path().display().to_string()), "{e}");
            let want = format!("first differing MiB is MiB {bad} (offset {})", bad * MIB);
            assert!(e.contains(&want), "{e}");
        }
    }

    /// Readers check chunks in any order: the MiB named is still the first that differs, on one
    /// reader as on the most.
    #[test]
    fn the_first_changed_mib_is_named_whatever_the_number_of_readers() {
        let (file, image, sums) = written(40 * MIB as usize + 4096);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(file.path())
            .unwrap();
        for bad in [33u64, 9, 30] {
            std::os::unix::fs::FileExt::write_all_at(&f, b"lie", bad * MIB + 5).unwrap();
        }
        for threads in [1, 2, 7, MAX_THREADS, 64] {
            let e = check_on(file.path(), &image, &sums, threads).unwrap_err();
            let want = format!("first differing MiB is MiB 9 (offset {})", 9 * MIB);
            assert!(e.to_string().contains(&want), "{threads} readers: {e}");
        }
    }

    /// The SHA-256 runs on every reader, each from the stream's state where its chunk starts:
    /// not on one thread taking the chunks in order, which caps the read-back at one core's
    /// SHA-256 speed on a device that reads faster.
    #[test]
    fn the_read_back_hashes_on_every_reader() {
        let (file, image, sums) = written(64 * MIB as usize);
        let threads = 4;
        check_on(file.path(), &image, &sums, threads).unwrap();
        let on = CHECKED_ON.lock().unwrap();
        let names: std::collections::BTreeSet<_> = on
            .iter()
            .filter(|(p, _)| p == file.path())
            .map(|(_, n)| n.as_str())
            .collect();
        assert!(names.len() > 1, "the chunks were hashed on {names:?} only");
        assert!(
            names.iter().all(|n| n.starts_with("read-back-")),
            "{names:?}"
        );
    }

    /// Each chunk is checked alone: a chunk that matches passes without the ones before it, and
    /// a chunk whose bytes differ with every CRC-32 matching fails on its own SHA-256 link.
    #[test]
    fn a_chunk_is_checked_alone_against_the_streams_states() {
        let (file, image, mut sums) = written(12 * MIB as usize);
        let dev = Device::open_for_write(file.path()).unwrap();
        let (off, end) = (5 * MIB as usize, 9 * MIB as usize);
        check_chunk(&dev, &image[off..end], off as u64, 12 * MIB, &sums).unwrap();
        check_chunk(&dev, &image[end..], end as u64, 12 * MIB, &sums).unwrap();
        // The stream's state after MiB 8 as if other bytes had streamed (the CRCs still match).
        sums.mib_states[8] = Sha256::new_with_prefix(b"other bytes");
        let e = check_chunk(&dev, &image[off..end], off as u64, 12 * MIB, &sums).unwrap_err();
        let want = "the sha256 of the image up to offset 9437184 read back differs";
        assert!(e.to_string().contains(want), "{e}");
        assert!(e.to_string().contains("every MiB's CRC-32 matched"), "{e}");
    }

    /// The readers' buffers stay within the budget whatever their number.
    #[test]
    fn the_buffers_stay_within_the_budget_whatever_the_number_of_readers() {
        for threads in 1..=64 {
            let (readers, chunk) = (threads.clamp(1, MAX_THREADS) as u64, chunk_len(threads));
            assert!(readers * chunk <= BUFFER_BUDGET, "{threads} readers");
            assert!(chunk.is_multiple_of(MIB) && (MIB..=MAX_CHUNK).contains(&chunk));
        }
        assert!((4..=MAX_THREADS).contains(&default_threads()));
    }

    #[test]
    fn a_digest_that_differs_with_every_crc_matching_still_fails() {
        let (file, image, mut sums) = written(3 * MIB as usize);
        sums.sha256 = Sha256Sum([0; 32]);
        let e = check(file.path(), &image, &sums).unwrap_err().to_string();
        assert!(e.contains("every MiB's CRC-32 matched"), "{e}");
    }
}
