//! The object extents of the image, in image order, read ahead of the cursor by a pool of
//! threads.
//!
//! coreos-installer opens each object anew for every extent and reads it through an 8 KiB
//! pipe, on the thread that also hashes and writes. Here consecutive extents are grouped into
//! batches; each batch is read by one of `readers` threads ([`Store::default_readers`] unless
//! `--read-threads` says otherwise) into one of `readers + SPARE_BUFFERS` recycled buffers
//! (large reads straight into the buffer, zeros only past an object's end), and batches come
//! back in order. So:
//! - memory in flight is at most [`READ_AHEAD_BUDGET`], whatever the number of readers and the
//!   object sizes: the budget is split among the buffers, so more readers read smaller batches
//!   (1 MiB, [`MAX_READ`], up to 4 readers; 120 KiB with 64), and nothing is allocated once the
//!   buffers exist;
//! - every reader has a batch to read while the consumer copies out of one and a few finished
//!   ones wait their turn: slow media (a live ISO on virtual media) stay busy, and on the live
//!   ISO, whose root is a squashfs, every reader decompresses on its own core (from the
//!   squashfs image, see [`super::store`]; or through the kernel, where a kernel with per-CPU
//!   decompressors does the same and one with a single decompressor serializes them);
//! - many small objects cost one message per batch, not one per object.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use super::plan::Extent;
use super::squashfs::Decoder;
use super::store::Store;

/// The largest read, and the largest batch (the plan cuts longer extents to this).
pub(crate) const MAX_READ: u64 = 1 << 20;
/// Bytes of batches in memory at once (being read, read and waiting their turn, being copied
/// out), whatever the number of readers: on a many-core machine, or with `--read-threads 64`,
/// the read-ahead must not grow the install's memory (the xz dictionary of an ISO's osmet takes
/// 64 MiB of the 128 MiB an install may use).
pub(crate) const READ_AHEAD_BUDGET: u64 = 8 << 20;
/// Buffers beyond one per reader: the batch the consumer is copying out of, and finished
/// batches that wait behind a slower one (batches come back in order), so that a reader never
/// waits for a buffer while an earlier batch is still being read.
const SPARE_BUFFERS: usize = 4;
/// The most reader threads.
pub(crate) const MAX_READERS: usize = 64;
/// Batches are whole filesystem blocks, as the plan's extents.
const BATCH_ALIGN: u64 = 4096;

/// The size of a batch, and of every buffer, for `readers` threads: [`READ_AHEAD_BUDGET`] split
/// among the `readers + SPARE_BUFFERS` buffers, at most [`MAX_READ`].
pub(crate) fn batch_len(readers: usize) -> u64 {
    let buffers = (readers.clamp(1, MAX_READERS) + SPARE_BUFFERS) as u64;
    (READ_AHEAD_BUDGET / buffers / BATCH_ALIGN * BATCH_ALIGN).min(MAX_READ)
}

/// `extents` cut so that none is longer than `max` (a multiple of [`BATCH_ALIGN`]).
fn cut(extents: Vec<Extent>, max: u64) -> Vec<Extent> {
    if extents.iter().all(|e| e.len <= max) {
        return extents;
    }
    let mut out = Vec::with_capacity(extents.len());
    for e in extents {
        for from in (0..e.len).step_by(max as usize) {
            out.push(Extent {
                logical: e.logical + from,
                len: (e.len - from).min(max),
                at: e.at + from,
                ..e
            });
        }
    }
    out
}
/// Extents in one batch, at most (a batch of many tiny objects is read by one thread).
const MAX_BATCH_EXTENTS: usize = 128;

struct Job {
    extents: Vec<Extent>,
    buf: Vec<u8>,
    reply: Sender<io::Result<Vec<u8>>>,
}

fn reader_thread(store: Arc<Store>, jobs: Receiver<Job>, batch: usize) {
    let mut decoder = Decoder::new();
    while let Ok(mut job) = jobs.recv() {
        job.buf.clear();
        job.buf.reserve_exact(batch);
        let result = job
            .extents
            .iter()
            .try_for_each(|e| store.read_extent(e, &mut job.buf, &mut decoder))
            .map(|()| job.buf);
        // The rebuild may be gone (failed or dropped): then nobody wants the answer.
        let _ = job.reply.send(result);
    }
}

/// The concatenation of all extents' bytes, in order, as a stream.
pub(crate) struct Objects {
    extents: Vec<Extent>,
    /// The size of a batch (see [`batch_len`]).
    batch_len: u64,
    /// The next extent to dispatch.
    next: usize,
    ahead: VecDeque<Receiver<io::Result<Vec<u8>>>>,
    free: Vec<Vec<u8>>,
    jobs: Option<Sender<Job>>,
    batch: Vec<u8>,
    pos: usize,
    threads: Vec<JoinHandle<()>>,
}

impl Objects {
    /// Start reading `extents` (in image order) from `store` on `readers` threads (1 to
    /// [`MAX_READERS`] or the store's [`Store::reader_cap`]; clamped there, with a line in the
    /// log when fewer than asked).
    pub(crate) fn start(extents: Vec<Extent>, store: Store, readers: usize) -> io::Result<Objects> {
        let max = store
            .reader_cap()
            .map_or(MAX_READERS, |cap| cap.min(MAX_READERS));
        if readers > max {
            tracing::info!(
                "live image: {readers} reader threads asked, {max} run: more would add memory, not speed"
            );
        }
        let readers = readers.clamp(1, max);
        let batch = batch_len(readers);
        let (jobs_tx, jobs_rx) = unbounded::<Job>();
        let store = Arc::new(store);
        let threads = (0..readers)
            .map(|i| {
                let (rx, store) = (jobs_rx.clone(), store.clone());
                std::thread::Builder::new()
                    .name(format!("osmet-read-{i}"))
                    .spawn(move || reader_thread(store, rx, batch as usize))
            })
            .collect::<io::Result<_>>()?;
        let mut o = Objects {
            extents: cut(extents, batch),
            batch_len: batch,
            next: 0,
            ahead: VecDeque::new(),
            free: (0..readers + SPARE_BUFFERS).map(|_| Vec::new()).collect(),
            jobs: Some(jobs_tx),
            batch: Vec::new(),
            pos: 0,
            threads,
        };
        o.dispatch();
        Ok(o)
    }

    /// Send batches to the readers while there are free buffers.
    fn dispatch(&mut self) {
        let Some(jobs) = &self.jobs else { return };
        while self.next < self.extents.len() {
            let Some(buf) = self.free.pop() else { return };
            let mut total = 0;
            let first = self.next;
            while self.next < self.extents.len()
                && self.next - first < MAX_BATCH_EXTENTS
                && total + self.extents[self.next].len <= self.batch_len
            {
                total += self.extents[self.next].len;
                self.next += 1;
            }
            let (reply, rx) = bounded(1);
            let job = Job {
                extents: self.extents[first..self.next].to_vec(),
                buf,
                reply,
            };
            if jobs.send(job).is_err() {
                return;
            }
            self.ahead.push_back(rx);
        }
    }

    /// The next object bytes; 0 once every extent was delivered.
    pub(crate) fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.batch.len() {
            let spent = std::mem::take(&mut self.batch);
            self.pos = 0;
            if spent.capacity() > 0 {
                self.free.push(spent);
            }
            self.dispatch();
            let Some(rx) = self.ahead.pop_front() else {
                return Ok(0);
            };
            self.batch = rx
                .recv()
                .map_err(|_| io::Error::other("an object reader thread died"))??;
        }
        let n = out.len().min(self.batch.len() - self.pos);
        out[..n].copy_from_slice(&self.batch[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl Drop for Objects {
    fn drop(&mut self) {
        // Close the job queue and drop the pending replies: every reader then ends after at
        // most its current batch.
        self.jobs = None;
        self.ahead.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::format::ObjectId;
    use super::super::store::READERS;
    use super::*;

    /// 600 objects of sizes from 1 byte to 1.3 MiB (several batches of many small extents, and
    /// extents of a whole batch), each extent its object rounded up to 4 KiB, as the plan cuts
    /// them; and the bytes they make in order.
    fn objects(repo: &std::path::Path) -> (Vec<Extent>, Vec<u8>) {
        let (mut extents, mut want, mut at) = (Vec::new(), Vec::new(), 0);
        for n in 0..600u32 {
            let size = if n % 50 == 0 {
                1_300_000
            } else {
                (n * 997 % 9000 + 1) as usize
            };
            let mut id = [0u8; 32];
            id[..4].copy_from_slice(&n.to_be_bytes());
            let object = ObjectId(id);
            let bytes: Vec<u8> = (0..size).map(|i| (i as u32 ^ n) as u8 | 1).collect();
            let path = repo.join(object.relative_path());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
            let rounded = (size as u64).next_multiple_of(4096);
            for logical in (0..rounded).step_by(MAX_READ as usize) {
                let len = (rounded - logical).min(MAX_READ);
                extents.push(Extent {
                    object,
                    logical,
                    len,
                    at,
                });
                at += len;
            }
            want.extend_from_slice(&bytes);
            want.resize(want.len() + (rounded as usize - size), 0);
        }
        (extents, want)
    }

    #[test]
    fn the_bytes_come_in_image_order_whatever_the_number_of_readers() {
        let dir = tempfile::tempdir().unwrap();
        let (extents, want) = objects(dir.path());
        // Asked for 0 or too many readers: kept within 1..=MAX_READERS.
        let (max, r) = (MAX_READERS, READERS);
        for (asked, readers) in [
            (1, 1),
            (2, 2),
            (7, 7),
            (r, r),
            (max, max),
            (0, 1),
            (max + 1, max),
        ] {
            let mut o = Objects::start(extents.clone(), Store::files(dir.path()), asked).unwrap();
            assert_eq!(o.threads.len(), readers, "{asked} readers asked");
            assert_eq!(o.free.len() + o.ahead.len(), readers + SPARE_BUFFERS);
            let got = read_to_end(&mut o);
            assert!(got == want, "{readers} readers: the object bytes differ");
        }
    }

    /// Everything `o` reads, in 100,000-byte reads.
    fn read_to_end(o: &mut Objects) -> Vec<u8> {
        let (mut got, mut buf) = (Vec::new(), vec![0u8; 100_000]);
        loop {
            let n = o.read(&mut buf).unwrap();
            if n == 0 {
                return got;
            }
            got.extend_from_slice(&buf[..n]);
        }
    }

    /// However many readers run, every batch in memory at once (the buffers, which circulate
    /// and never grow) fits in the one budget; with more readers, batches get smaller.
    #[test]
    fn the_read_ahead_stays_within_its_budget_whatever_the_number_of_readers() {
        let dir = tempfile::tempdir().unwrap();
        let (extents, want) = objects(dir.path());
        for readers in [1, 2, 4, 8, 16, 32, MAX_READERS] {
            let mut o = Objects::start(extents.clone(), Store::files(dir.path()), readers).unwrap();
            let got = read_to_end(&mut o);
            assert!(got == want, "{readers} readers: the object bytes differ");
            // At the end every buffer is back among the free ones.
            assert_eq!(o.free.len(), readers + SPARE_BUFFERS, "{readers} readers");
            let held: usize = o.free.iter().map(Vec::capacity).sum();
            assert!(
                held as u64 <= READ_AHEAD_BUDGET,
                "{readers} readers held {held} bytes of batches, the budget is {READ_AHEAD_BUDGET}"
            );
            assert!(o
                .free
                .iter()
                .all(|b| b.capacity() as u64 <= batch_len(readers)));
        }
        assert_eq!(
            batch_len(2),
            MAX_READ,
            "few readers read whole 1 MiB batches"
        );
        assert!(batch_len(MAX_READERS) >= 64 << 10);
    }
}
