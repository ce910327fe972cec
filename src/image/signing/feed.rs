//! The signature checked over the compressed image as the fetch stage reads it: a thread runs
//! rPGP's streaming verify over a `Read` fed chunk by chunk through a bounded channel, so the
//! image is read once and memory stays a few chunks whatever its size.

use anyhow::{anyhow, Result};
use crossbeam_channel::{bounded, select, Sender};
use std::thread::JoinHandle;

use super::ImageSignature;
use crate::image::cancel::Cancel;
use crate::image::format::ChannelReader;

/// Chunks in flight to the verifier: it hashes faster than any download, so a few suffice.
const DEPTH: usize = 4;

/// A verification in progress.
pub(crate) struct Feed {
    /// `Some(chunk)`, then `None` at the end; dropped without `None`, the verify fails.
    tx: Sender<Option<Vec<u8>>>,
    verdict: JoinHandle<Result<()>>,
}

impl Feed {
    pub(crate) fn start(sig: &ImageSignature) -> Result<Feed> {
        let (tx, rx) = bounded(DEPTH);
        let sig = sig.clone();
        let verdict = std::thread::Builder::new()
            .name("signature".into())
            // Never cancelled: the verifier ends when the stream does, or is left to fail alone.
            .spawn(move || sig.verify(ChannelReader::new(rx, Cancel::new())))?;
        Ok(Feed { tx, verdict })
    }

    /// Pass the next bytes on; false when cancelled (the verifier is then left to fail alone).
    pub(crate) fn send(&self, chunk: &[u8], cancel: &Cancel) -> bool {
        select! {
            // A closed channel means the verifier stopped early: its verdict says why.
            send(self.tx, Some(chunk.to_vec())) -> _ => true,
            recv(cancel.receiver()) -> _ => false,
        }
    }

    /// The end of the image: the verdict.
    pub(crate) fn finish(self) -> Result<()> {
        let _ = self.tx.send(None);
        drop(self.tx);
        self.verdict
            .join()
            .map_err(|_| anyhow!("the signature check panicked"))?
    }
}
