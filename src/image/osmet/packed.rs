//! The packed stream of an osmet file (the image with every object extent cut out), xz-decoded
//! on its own thread.
//!
//! Most packed bytes are zeros (free space, empty ESP and /boot areas), and decoding them is,
//! with the image's SHA-256, the costliest stage: on two cores the two must run side by side,
//! so the decoder has to get far ahead of the cursor. A chunk that decodes to all zeros
//! therefore travels as a count, and only chunks with data take one of a few recycled
//! buffers: the decoder runs ahead through free space at no memory cost.

use std::fs::File;
use std::io::{self, BufReader};

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::image::format::{fill, Decompressor, Format, XzSettings};

/// Decoded bytes per chunk.
const CHUNK: usize = 1 << 20;
/// Buffers for chunks with data (at most this many exist).
const BUFFERS: usize = 4;
/// Chunks of either kind queued ahead of the cursor.
const QUEUE: usize = 4096;

enum PackedChunk {
    Data(Vec<u8>),
    Zeros(usize),
}

pub(crate) struct Packed {
    rx: Receiver<io::Result<PackedChunk>>,
    /// Buffers of consumed chunks, back to the decoder.
    free: Sender<Vec<u8>>,
    cur: Vec<u8>,
    pos: usize,
    /// Zeros left of the current zero chunk.
    zeros: usize,
    /// The osmet file, for messages.
    pub name: String,
}

impl Packed {
    /// Decode the xz stream `input` (the osmet file positioned after its body) on a new thread.
    /// The thread is not joined: it ends on its own once this reader is dropped (its sends and
    /// its wait for a free buffer then fail), after at most the chunk it is decoding.
    pub(crate) fn spawn(input: BufReader<File>, name: String) -> io::Result<Packed> {
        let (tx, rx) = bounded::<io::Result<PackedChunk>>(QUEUE);
        let (free_tx, free_rx) = bounded::<Vec<u8>>(BUFFERS);
        for _ in 0..BUFFERS {
            free_tx.send(Vec::new()).expect("room for every buffer");
        }
        let what = name.clone();
        std::thread::Builder::new()
            .name("osmet-xz".into())
            .spawn(move || {
                if let Err(e) = decode(input, &tx, &free_rx) {
                    let e = io::Error::new(
                        e.kind(),
                        format!("the packed image in {what} is damaged: {e}"),
                    );
                    let _ = tx.send(Err(e));
                }
            })?;
        Ok(Packed {
            rx,
            free: free_tx,
            cur: Vec::new(),
            pos: 0,
            zeros: 0,
            name,
        })
    }

    /// Up to `out.len()` packed bytes; 0 only at the end of the packed stream.
    pub(crate) fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.cur.len() && self.zeros == 0 {
            match self.rx.recv() {
                Ok(chunk) => match chunk? {
                    PackedChunk::Data(buf) => {
                        let spent = std::mem::replace(&mut self.cur, buf);
                        if spent.capacity() > 0 {
                            let _ = self.free.try_send(spent);
                        }
                        self.pos = 0;
                    }
                    PackedChunk::Zeros(n) => self.zeros = n,
                },
                // The decoder ended (after an error, it sent the error first).
                Err(_) => return Ok(0),
            }
        }
        if self.zeros > 0 {
            let n = out.len().min(self.zeros);
            out[..n].fill(0);
            self.zeros -= n;
            return Ok(n);
        }
        let n = out.len().min(self.cur.len() - self.pos);
        out[..n].copy_from_slice(&self.cur[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The decoder thread. Returns when the stream ended (and was checked for trailing data) or
/// when the reader is gone.
fn decode(
    input: BufReader<File>,
    tx: &Sender<io::Result<PackedChunk>>,
    free: &Receiver<Vec<u8>>,
) -> io::Result<()> {
    // One thread: the packer writes a single xz block, there is nothing to parallelise.
    let xz = XzSettings {
        threads: 1,
        ..XzSettings::default()
    };
    let mut dec = Decompressor::new(Format::Xz, input, xz)?;
    let Ok(mut buf) = free.recv() else {
        return Ok(());
    };
    loop {
        buf.resize(CHUNK, 0);
        let n = fill(&mut dec, &mut buf)?;
        if n == 0 {
            break;
        }
        buf.truncate(n);
        let chunk = if buf.iter().all(|&b| b == 0) {
            PackedChunk::Zeros(n)
        } else {
            let Ok(next) = free.recv() else {
                return Ok(());
            };
            PackedChunk::Data(std::mem::replace(&mut buf, next))
        };
        if tx.send(Ok(chunk)).is_err() {
            return Ok(());
        }
    }
    dec.finish()
}
