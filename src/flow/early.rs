//! The early write: the bootstrap and single-node install disks are not needed by the live
//! system, so the image is streamed while the bootstrap control plane forms; the Ignition
//! config and partition table (seconds) wait for the usual `Writing image to disk` point, and
//! until then the disk cannot boot and stays held with O_EXCL. The reported stages do not
//! change: percentages are kept until that point. A failed early write is written again there.

use anyhow::{anyhow, Result};
use crossbeam_channel::{bounded, select, Receiver};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::writer::{DiskWriter, PendingDisk, WriteRequest};
use crate::service::reporter::Reporter;

pub(crate) struct EarlyWrite {
    handle: JoinHandle<Result<Box<dyn PendingDisk>>>,
    done: Receiver<()>,
    percents: Receiver<u8>,
    device: PathBuf,
}

impl EarlyWrite {
    /// Start streaming the image of `req` on a thread of its own.
    pub(crate) fn start(writer: Arc<dyn DiskWriter>, req: &WriteRequest) -> EarlyWrite {
        let (pct_tx, percents) = bounded::<u8>(256);
        let (done_tx, done) = bounded::<()>(1);
        let req = req.clone();
        let device = req.device.clone();
        tracing::info!(
            "writing the image to {} early, while the control plane forms",
            device.display()
        );
        let handle = std::thread::Builder::new()
            .name("early-write".into())
            .spawn(move || {
                // Progress is kept for later; a full queue only drops intermediate values.
                let percent = move |p: u8| {
                    let _ = pct_tx.try_send(p);
                };
                let result = writer.stream(&req, &percent);
                let _ = done_tx.send(());
                result
            })
            .expect("spawning the early-write thread");
        EarlyWrite {
            handle,
            done,
            percents,
            device,
        }
    }

    /// At the write point: forward the progress until the stream is done, then embed
    /// `ignition` (if any) and write the partition table.
    pub(crate) fn complete(self, reporter: &Reporter, ignition: Option<&Path>) -> Result<()> {
        loop {
            select! {
                recv(self.percents) -> p => if let Ok(p) = p { reporter.write_percent(p) },
                recv(self.done) -> _ => break,
            }
        }
        while let Ok(p) = self.percents.try_recv() {
            reporter.write_percent(p);
        }
        let pending = self
            .handle
            .join()
            .map_err(|_| anyhow!("the early write of {} panicked", self.device.display()))??;
        pending.finish(ignition)?;
        reporter.write_percent(100);
        Ok(())
    }

    /// The flow failed before the write point: reset the streamed disk (it must not look
    /// half-installed) and report `why`.
    pub(crate) fn abandon(self, why: anyhow::Error) -> anyhow::Error {
        match self.handle.join() {
            Ok(Ok(pending)) => pending.abandon(why),
            _ => why,
        }
    }
}
