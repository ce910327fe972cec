//! `--verify`: read the written image back from the disk and check it against what was streamed.
//!
//! ```text
//! readers (O_DIRECT pread, 4 MiB) x LANES --lane i%LANES--> checker (CRC-32 per MiB, SHA-256)
//! ```
//!
//! Chunk `i` is read by lane `i % LANES` and the checker takes the chunks in that same round
//! robin, so order is kept with one bounded channel per lane and two buffers each: memory is
//! fixed whatever the image size, and several reads are in flight so the device sets the pace.
//! The first MiB is not on the disk yet (it is written at commit, see the pipeline): the checker
//! hashes it from memory, so the SHA-256 covers the whole image like the stream's did.

use anyhow::{anyhow, bail, Context, Result};
use crossbeam_channel::{bounded, select, Receiver, Sender};
use sha2::Digest;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::cancel::{Cancel, CancelOnDrop, Interrupted, POLL};
use super::digest::{Sha256, Sha256Sum};
use crate::disk::device::Device;
use crate::disk::direct::{round_up, AlignedBuf};

/// Bytes per read: large enough that the device, not the syscalls, sets the pace.
const CHUNK: usize = 4 << 20;
/// Reads in flight. A queue depth of three keeps an SSD or NVMe disk busy while the checker
/// hashes; each lane owns two buffers (one being read, one being checked), 24 MiB in all.
const LANES: usize = 3;
const MIB: u64 = 1 << 20;

/// What the sha256 stage saw of the uncompressed stream: its SHA-256, and with `--verify` a
/// CRC-32 of each MiB (entry `i` covers bytes `[i MiB, (i+1) MiB)`) so that a read-back mismatch
/// can be placed.
#[derive(Clone, Debug)]
pub(crate) struct StreamSums {
    pub(crate) sha256: Sha256Sum,
    pub(crate) mib_crc32: Vec<u32>,
}

/// [`StreamSums`] taken block by block as the stream passes (the sha256 stage's and the
/// benches' one way to make them). Blocks are whole MiBs but the last.
pub(crate) struct SumsBuilder {
    hasher: Sha256,
    per_mib: bool,
    mib_crc32: Vec<u32>,
}

impl SumsBuilder {
    /// `per_mib`: also what a `--verify` read-back needs of each MiB.
    pub(crate) fn new(per_mib: bool) -> SumsBuilder {
        SumsBuilder {
            hasher: Sha256::new(),
            per_mib,
            mib_crc32: Vec::new(),
        }
    }

    pub(crate) fn update(&mut self, block: &[u8]) {
        self.hasher.update(block);
        if self.per_mib {
            self.mib_crc32.push(crc32fast::hash(block));
        }
    }

    pub(crate) fn finish(self) -> StreamSums {
        StreamSums {
            sha256: Sha256Sum::of(self.hasher),
            mib_crc32: self.mib_crc32,
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

type Lane = (Receiver<Result<(AlignedBuf, usize)>>, Sender<AlignedBuf>);

/// Read `[head.len(), image_len)` of `dev` back and check it against `sums`, with `head` (the
/// image's first MiB, held in memory) standing for the start. `sector`: reads are padded to it
/// on an O_DIRECT target, as the writes were. `progress` sees the bytes checked so far (the
/// head counts from the start) and the time taken, about every [`POLL`].
pub(crate) fn read_back(
    dev: &Device,
    head: &[u8],
    sums: &StreamSums,
    image_len: u64,
    sector: u64,
    stop: &Cancel,
    progress: &dyn Fn(u64, Duration),
) -> Result<ReadBack> {
    let start = Instant::now();
    let from = head.len() as u64;
    let chunks = image_len.saturating_sub(from).div_ceil(CHUNK as u64);
    let pad = dev.is_direct().then_some(sector);
    let done = AtomicU64::new(from);
    let cancel = stop.child();
    let (lanes, ends): (Vec<Lane>, Vec<_>) = (0..LANES)
        .map(|_| {
            let (full_tx, full_rx) = bounded(1);
            let (free_tx, free_rx) = bounded(2);
            for _ in 0..2 {
                free_tx.send(AlignedBuf::new(CHUNK)).expect("room for two");
            }
            ((full_rx, free_tx), (free_rx, full_tx))
        })
        .unzip();
    let read_sha = std::thread::scope(|s| {
        // Whatever happens below, no reader outlives this scope.
        let _guard = CancelOnDrop(&cancel);
        let (cancel, done, lanes) = (&cancel, &done, &lanes);
        for (lane, (free, full)) in ends.into_iter().enumerate() {
            let read = move |i: u64| {
                let off = from + i * CHUNK as u64;
                let len = (image_len - off).min(CHUNK as u64);
                (
                    off,
                    len as usize,
                    pad.map_or(len, |s| round_up(len, s)) as usize,
                )
            };
            std::thread::Builder::new()
                .name(format!("read-back-{lane}"))
                .spawn_scoped(s, move || {
                    for i in (lane as u64..chunks).step_by(LANES) {
                        let mut buf = select! {
                            recv(free) -> b => match b { Ok(b) => b, Err(_) => return },
                            recv(cancel.receiver()) -> _ => return,
                        };
                        let (off, len, padded) = read(i);
                        let r = dev.read_at(&mut buf.as_mut_slice()[..padded], off);
                        let failed = r.is_err();
                        select! {
                            send(full, r.map(|()| (buf, len))) -> sent => if sent.is_err() { return },
                            recv(cancel.receiver()) -> _ => return,
                        }
                        if failed {
                            return;
                        }
                    }
                })?;
        }
        let checker = std::thread::Builder::new()
            .name("read-back-sha256".into())
            .spawn_scoped(s, move || {
                check_in_order(dev, head, lanes, chunks, sums, done, cancel)
            })?;
        while !checker.is_finished() {
            if stop.is_cancelled() {
                return Err(Interrupted.into());
            }
            progress(done.load(Ordering::Relaxed), start.elapsed());
            std::thread::sleep(POLL);
        }
        checker
            .join()
            .map_err(|_| anyhow!("the read-back's checker panicked"))?
    })?;
    if read_sha != sums.sha256 {
        // Every MiB's CRC-32 matched yet the digest differs: a CRC collision, or bytes moved.
        bail!(
            "{} did not return what was written: the sha256 read back is {read_sha}, {} was written (every MiB's CRC-32 matched)",
            dev.path().display(),
            sums.sha256
        );
    }
    progress(image_len, start.elapsed());
    Ok(ReadBack {
        bytes: image_len.saturating_sub(from),
        elapsed: start.elapsed(),
    })
}

/// The checker: takes the chunks in order, stops at the first MiB whose CRC-32 differs from the
/// stream's, and returns the SHA-256 of `head` and everything read.
fn check_in_order(
    dev: &Device,
    head: &[u8],
    lanes: &[Lane],
    chunks: u64,
    sums: &StreamSums,
    done: &AtomicU64,
    cancel: &Cancel,
) -> Result<Sha256Sum> {
    let from = head.len() as u64;
    let mut sha = Sha256::new();
    sha.update(head);
    for i in 0..chunks {
        let (rx, back) = &lanes[(i % LANES as u64) as usize];
        let (buf, len) = select! {
            recv(rx) -> m => m.map_err(|_| anyhow!("a read-back thread stopped"))?
                .context("reading the image back")?,
            recv(cancel.receiver()) -> _ => return Err(Interrupted.into()),
        };
        let data = &buf.as_slice()[..len];
        let first = (from + i * CHUNK as u64) / MIB;
        for (mib, bytes) in (first..).zip(data.chunks(MIB as usize)) {
            if sums.mib_crc32.get(mib as usize) != Some(&crc32fast::hash(bytes)) {
                bail!(
                    "{} did not return what was written: the first differing MiB is MiB {mib} (offset {})",
                    dev.path().display(),
                    mib * MIB
                );
            }
        }
        sha.update(data);
        done.fetch_add(len as u64, Ordering::Relaxed);
        // The reader may be gone (its last chunk): the buffer is simply dropped then.
        let _ = back.send(buf);
    }
    Ok(Sha256Sum::of(sha))
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
        use std::io::Read;
        let mut file = std::fs::File::open(image)
            .with_context(|| format!("opening {}", image.display()))?;
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
        let _ = threads;
        read_back(
            &dev,
            &self.head,
            &self.sums,
            self.len,
            sector,
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
        let sums = StreamSums {
            sha256: Sha256Sum::of(Sha256::new_with_prefix(&image)),
            mib_crc32: image.chunks(MIB as usize).map(crc32fast::hash).collect(),
        };
        (file, image, sums)
    }

    fn check(file: &Path, image: &[u8], sums: &StreamSums) -> Result<ReadBack> {
        let dev = Device::open_for_write(file).unwrap();
        let seen = std::sync::Mutex::new(Vec::new());
        let r = read_back(
            &dev,
            &image[..MIB as usize],
            sums,
            image.len() as u64,
            512,
            &Cancel::new(),
            &|n, _| seen.lock().unwrap().push(n),
        );
        if r.is_ok() {
            assert_eq!(seen.lock().unwrap().last(), Some(&(image.len() as u64)));
        }
        r
    }

    use std::path::Path;

    #[test]
    fn a_clean_disk_passes_and_the_bytes_read_exclude_the_head() {
        // 14.5 MiB: four chunks over three lanes, the last one short and not a whole MiB.
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

    #[test]
    fn a_digest_that_differs_with_every_crc_matching_still_fails() {
        let (file, image, mut sums) = written(3 * MIB as usize);
        sums.sha256 = Sha256Sum([0; 32]);
        let e = check(file.path(), &image, &sums).unwrap_err().to_string();
        assert!(e.contains("every MiB's CRC-32 matched"), "{e}");
    }
}
