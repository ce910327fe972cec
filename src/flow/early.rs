//! The early write: on the bootstrap and single-node hosts the install disk is not needed by
//! the live system, so the image is streamed to it while the bootstrap control plane forms.
//! Only the Ignition config and kernel arguments wait for the normal "Writing image to disk"
//! point, where embedding them and writing the partition table take seconds. Until then the
//! disk holds an empty partition table and cannot boot, and it stays held with O_EXCL.
//!
//! The stages reported to the service do not change: progress percentages are kept and only
//! sent once `Writing image to disk` is reported in its usual place. If the early write fails,
//! the flow writes the disk again in the normal place, with the usual three attempts.

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

    /// At the normal write point, with `Writing image to disk` reported: forward the progress
    /// until the stream is done, then embed `ignition` and write the partition table.
    pub(crate) fn complete(self, reporter: &Reporter, ignition: &Path) -> Result<()> {
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

    /// The flow failed before the write point: the streamed disk must not be left looking
    /// half-installed; reset it (when the stream got that far) and report `why`.
    pub(crate) fn abandon(self, why: anyhow::Error) -> anyhow::Error {
        match self.handle.join() {
            Ok(Ok(pending)) => pending.abandon(why),
            _ => why,
        }
    }
}
