//! SIGINT/SIGTERM turn into a cancellation of the running install: a write resets the disk to an
//! empty partition table and a flow's wait ends at once, with one clear message instead of dying
//! mid-stream.

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use crate::image::Cancel;

/// Cancel `cancel` on the first SIGINT or SIGTERM; the returned cell holds that signal's number
/// (0 until then).
pub fn cancel_on_signal(cancel: &Cancel) -> Result<Arc<AtomicI32>> {
    let mut signals = Signals::new([SIGINT, SIGTERM]).context("installing signal handlers")?;
    let received = Arc::new(AtomicI32::new(0));
    let (cancel, cell) = (cancel.clone(), received.clone());
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                tracing::warn!(
                    "received {}: stopping the install",
                    if sig == SIGINT { "SIGINT" } else { "SIGTERM" }
                );
                cell.store(sig, Ordering::SeqCst);
                cancel.cancel();
            }
        })
        .context("starting the signal thread")?;
    Ok(received)
}
