//! The pipeline's stages, each on its own thread: fetch, decode, hash and write, with the
//! channels and the shared first-error slot that join them.

use anyhow::{anyhow, bail, Context, Result};
use crossbeam_channel::{select, Receiver, Sender};
use sha2::Digest;
use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::cancel::Cancel;
use super::digest::{Sha256, Sha256Sum};
use super::format::{fill, sniff, ChannelReader, Decompressor, Format, XzSettings, SNIFF_LEN};
use super::osmet::LiveSource;
use super::signing::feed::Feed;
use super::signing::ImageSignature;
use super::source::ImageSource;
use super::verify::{StreamSums, SumsBuilder};
use super::zeros::Zeroing;
use crate::disk::device::Device;
use crate::disk::direct::{pad_to_sector, AlignedBuf};

/// Uncompressed bytes per buffer. Also the held-back head: block 0 is exactly the first MiB.
pub(crate) const BLOCK: usize = 1 << 20;
/// Compressed bytes per message from the fetch stage.
const CHUNK: usize = 256 << 10;

pub(super) struct Block {
    pub(super) offset: u64,
    pub(super) buf: AlignedBuf,
    pub(super) len: usize,
}

/// A chunk of the compressed stream; `None` at its end.
pub(super) type Msg = Option<Vec<u8>>;

/// State shared by the stages: the first error wins (later ones are usually its echoes, e.g.
/// a closed channel), and it cancels everything else.
pub(super) struct Shared {
    pub(super) error: Mutex<Option<anyhow::Error>>,
    /// Set by the decoder once it has sniffed the stream, before it sends the first MiB.
    pub(super) format: std::sync::OnceLock<Format>,
    pub(super) cancel: Cancel,
    pub(super) written: AtomicU64,
    pub(super) downloaded: AtomicU64,
    pub(super) zeros: Zeroing,
}

impl Shared {
    pub(super) fn fail(&self, e: anyhow::Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() && !self.cancel.is_cancelled() {
            *slot = Some(e);
        }
        drop(slot);
        self.cancel.cancel();
    }

    pub(super) fn take_error(&self) -> Option<anyhow::Error> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// A stage's outcome: its error, if any, recorded; `None` when it stopped early.
    fn settle<T>(&self, r: Result<Option<T>>) -> Option<T> {
        r.unwrap_or_else(|e| {
            self.fail(e);
            None
        })
    }
}

/// Sends block 0 to the coordinator and every other block to the writers.
pub(super) struct Router {
    pub(super) head: Sender<Block>,
    pub(super) write: Sender<Block>,
}

impl Router {
    pub(super) fn send(&self, b: Block, cancel: &Cancel) -> bool {
        let tx = if b.offset == 0 {
            &self.head
        } else {
            &self.write
        };
        select! {
            send(tx, b) -> r => r.is_ok(),
            recv(cancel.receiver()) -> _ => false,
        }
    }
}

/// Where a block goes after the decoder: straight to the router, or through the hasher.
pub(super) enum Next {
    Route(Router),
    Hash(Sender<Block>),
}

/// With `sig`, the bytes also go to the signature check, and the stage ends with its verdict
/// (a bad one is the stage's error): the pipeline commits only after the stage ended well.
pub(super) fn fetch_stage(
    source: &mut dyn ImageSource,
    tx: Sender<Msg>,
    sig: Option<&ImageSignature>,
    sh: &Shared,
) -> Option<(u64, Sha256Sum)> {
    let mut run = || -> Result<Option<(u64, Sha256Sum)>> {
        let feed = sig.map(Feed::start).transpose()?;
        let mut hasher = Sha256::new();
        let mut total = 0u64;
        loop {
            let mut buf = Vec::with_capacity(CHUNK + (64 << 10));
            let mut eof = false;
            while buf.len() < CHUNK {
                match source.read_more(&mut buf, &sh.cancel)? {
                    0 => {
                        eof = true;
                        break;
                    }
                    n => sh.downloaded.fetch_add(n as u64, Ordering::Relaxed),
                };
            }
            hasher.update(&buf);
            if feed.as_ref().is_some_and(|f| !f.send(&buf, &sh.cancel)) {
                return Ok(None);
            }
            total += buf.len() as u64;
            let msgs = (!buf.is_empty())
                .then_some(Some(buf))
                .into_iter()
                .chain(eof.then_some(None));
            for m in msgs {
                select! {
                    send(tx, m) -> r => if r.is_err() { return Ok(None) },
                    recv(sh.cancel.receiver()) -> _ => return Ok(None),
                }
            }
            if eof {
                feed.map(Feed::finish).transpose()?;
                return Ok(Some((total, Sha256Sum::of(hasher))));
            }
        }
    };
    sh.settle(run())
}

/// What the decode stage reads: compressed chunks from the fetch stage, or a raw image.
pub(super) enum DecodeInput {
    Channel(Receiver<Msg>, XzSettings),
    Raw(Box<LiveSource>),
}

pub(super) enum Decoding {
    Decoded(Box<Decompressor<ChannelReader>>),
    Raw(Box<LiveSource>),
}

impl Read for Decoding {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match self {
            Decoding::Decoded(d) => d.read(out),
            Decoding::Raw(r) => r.read(out),
        }
    }
}

pub(super) fn decode_stage(
    input: DecodeInput,
    pool: Receiver<AlignedBuf>,
    next: Next,
    sh: &Shared,
) -> Option<(u64, Format)> {
    let run = || -> Result<Option<(u64, Format)>> {
        let (mut dec, format) = match input {
            DecodeInput::Channel(rx, xz) => {
                let mut input = ChannelReader::new(rx, sh.cancel.clone());
                let head = input.fill_buf().context("reading the image")?;
                let format = sniff(&head[..head.len().min(SNIFF_LEN)]);
                tracing::debug!("image format: {format}");
                (
                    Decoding::Decoded(Box::new(Decompressor::new(format, input, xz)?)),
                    format,
                )
            }
            DecodeInput::Raw(r) => (Decoding::Raw(r), Format::Raw),
        };
        let rebuilt = matches!(dec, Decoding::Raw(_));
        let _ = sh.format.set(format);
        let mut offset = 0u64;
        loop {
            let mut buf = if offset == 0 {
                AlignedBuf::new(BLOCK)
            } else {
                select! {
                    recv(pool) -> b => match b { Ok(b) => b, Err(_) => return Ok(None) },
                    recv(sh.cancel.receiver()) -> _ => return Ok(None),
                }
            };
            let len = fill(&mut dec, buf.as_mut_slice()).with_context(|| {
                if rebuilt {
                    format!("rebuilding the image at offset {offset}")
                } else {
                    format!("decoding the {format} image at uncompressed offset {offset}")
                }
            })?;
            if rebuilt {
                sh.downloaded.fetch_add(len as u64, Ordering::Relaxed);
            }
            if len == 0 {
                if offset == 0 {
                    bail!("the image is empty");
                }
                break;
            }
            let block = Block { offset, buf, len };
            let sent = match &next {
                Next::Route(r) => r.send(block, &sh.cancel),
                Next::Hash(tx) => select! {
                    send(tx, block) -> r => r.is_ok(),
                    recv(sh.cancel.receiver()) -> _ => false,
                },
            };
            if !sent {
                return Ok(None);
            }
            offset += len as u64;
            if len < BLOCK {
                break;
            }
        }
        if let Decoding::Decoded(d) = dec {
            d.finish()
                .with_context(|| format!("after {offset} bytes of the {format} image"))?;
        }
        Ok(Some((offset, format)))
    };
    sh.settle(run())
}

/// With `per_mib`, also a CRC-32 of each block (each MiB: the decoder fills every block but the
/// last), which a `--verify` read-back compares to place a mismatch; a few KiB even for a large
/// image. Without it none is taken: this thread is on every live install's critical path.
pub(super) fn hash_stage(
    rx: Receiver<Block>,
    router: Router,
    per_mib: bool,
    sh: &Shared,
) -> Option<StreamSums> {
    let mut sums = SumsBuilder::new(per_mib);
    loop {
        let block = select! {
            recv(rx) -> b => match b { Ok(b) => b, Err(_) => break },
            recv(sh.cancel.receiver()) -> _ => return None,
        };
        sums.update(&block.buf.as_slice()[..block.len]);
        if !router.send(block, &sh.cancel) {
            return None;
        }
    }
    Some(sums.finish())
}

pub(super) fn write_stage(
    dev: &Device,
    sector: usize,
    limit: Option<(u32, &str, u64)>,
    rx: Receiver<Block>,
    pool: Sender<AlignedBuf>,
    sh: &Shared,
) {
    let run = || -> Result<Option<()>> {
        loop {
            let mut block = select! {
                recv(rx) -> b => match b { Ok(b) => b, Err(_) => return Ok(None) },
                recv(sh.cancel.receiver()) -> _ => return Ok(None),
            };
            let len = if dev.is_direct() {
                pad_to_sector(&mut block.buf, block.len, sector)
            } else {
                block.len
            };
            let end = block.offset + len as u64;
            if end > dev.size() {
                bail!(
                    "the image is larger than {} ({} bytes): it continues past byte {}",
                    dev.path().display(),
                    dev.size(),
                    dev.size()
                );
            }
            if let Some((n, label, start)) = limit.filter(|&(_, _, start)| end > start) {
                bail!(
                    "collision with saved partition {n} ({label:?}) at offset {start}: the image continues past it"
                );
            }
            let buf = &block.buf.as_slice()[..len];
            sh.zeros.write_block(dev, buf, block.offset, block.len)?;
            sh.written.fetch_add(block.len as u64, Ordering::Relaxed);
            // The pool has room for every buffer; a closed pool means the decoder is gone.
            let _ = pool.send(block.buf);
        }
    };
    sh.settle(run());
}

pub(super) fn joined<T>(r: std::thread::Result<T>) -> Result<T> {
    r.map_err(|_| anyhow!("a pipeline thread panicked"))
}
