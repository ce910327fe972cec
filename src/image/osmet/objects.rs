//! The object extents of the image, in image order, read ahead of the cursor by a pool of
//! threads.
//!
//! coreos-installer opens each object anew for every extent and reads it through an 8 KiB
//! pipe, on the thread that also hashes and writes. Here consecutive extents are grouped into
//! batches of up to [`MAX_READ`] bytes; each batch is read by one of [`READERS`] threads into
//! one of [`BUFFERS`] recycled 1 MiB buffers (large reads straight into the buffer, zeros only
//! past an object's end), and batches come back in order. So:
//! - memory in flight is exactly `BUFFERS × MAX_READ`, whatever the object sizes, with no
//!   allocation once the buffers exist;
//! - up to `BUFFERS` batches are in flight on `READERS` threads, which keeps slow media (a live
//!   ISO on virtual media) busy;
//! - many small objects cost one message per batch, not one per object.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};

use super::format::ObjectId;

/// The largest read, and the size of a batch (the plan cuts longer extents to this).
pub(crate) const MAX_READ: u64 = 1 << 20;
/// Buffers, hence batches in flight, at most.
pub(crate) const BUFFERS: usize = 12;
/// Threads reading objects.
pub(crate) const READERS: usize = 8;
/// Extents in one batch, at most (a batch of many tiny objects is read by one thread).
const MAX_BATCH_EXTENTS: usize = 128;

/// One extent of an object: `len` bytes from `logical`, needed at image offset `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Extent {
    pub object: ObjectId,
    pub logical: u64,
    pub len: u64,
    pub at: u64,
}

struct Job {
    extents: Vec<Extent>,
    buf: Vec<u8>,
    reply: Sender<io::Result<Vec<u8>>>,
}

/// An I/O error that names the object and where in the image it was needed.
fn object_error(e: io::Error, path: &Path, at: u64, doing: &str) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "OSTree object {} (needed at image offset {at}) {doing}: {e}",
            path.display()
        ),
    )
}

/// Append one extent to `buf`, zeros where the object ends first (an extent is rounded up to
/// the filesystem block, and the block's slack is zero on disk). The bytes are read into the
/// buffer's spare capacity: nothing is zeroed that is then overwritten.
fn read_extent(repo: &Path, e: &Extent, buf: &mut Vec<u8>) -> io::Result<()> {
    let path = repo.join(e.object.relative_path());
    let mut f =
        File::open(&path).map_err(|err| object_error(err, &path, e.at, "cannot be opened"))?;
    let end = buf.len() + e.len as usize;
    f.seek(SeekFrom::Start(e.logical))
        .and_then(|_| f.take(e.len).read_to_end(buf))
        .map_err(|err| object_error(err, &path, e.at, "cannot be read"))?;
    buf.resize(end, 0);
    Ok(())
}

fn reader_thread(repo: Arc<PathBuf>, jobs: Receiver<Job>) {
    while let Ok(mut job) = jobs.recv() {
        job.buf.clear();
        job.buf.reserve_exact(MAX_READ as usize);
        let result = job
            .extents
            .iter()
            .try_for_each(|e| read_extent(&repo, e, &mut job.buf))
            .map(|()| job.buf);
        // The rebuild may be gone (failed or dropped): then nobody wants the answer.
        let _ = job.reply.send(result);
    }
}

/// The concatenation of all extents' bytes, in order, as a stream.
pub(crate) struct Objects {
    extents: Vec<Extent>,
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
    /// Start reading `extents` (in image order) from the objects of `repo`.
    pub(crate) fn start(extents: Vec<Extent>, repo: &Path) -> io::Result<Objects> {
        let (jobs_tx, jobs_rx) = unbounded::<Job>();
        let repo = Arc::new(repo.to_path_buf());
        let threads = (0..READERS)
            .map(|i| {
                let (rx, repo) = (jobs_rx.clone(), repo.clone());
                std::thread::Builder::new()
                    .name(format!("osmet-read-{i}"))
                    .spawn(move || reader_thread(repo, rx))
            })
            .collect::<io::Result<_>>()?;
        let mut o = Objects {
            extents,
            next: 0,
            ahead: VecDeque::new(),
            free: (0..BUFFERS).map(|_| Vec::new()).collect(),
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
                && (self.next == first || total + self.extents[self.next].len <= MAX_READ)
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
