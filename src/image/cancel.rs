//! Cooperative cancellation for the pipeline threads. A flag for polling, plus a channel that
//! never carries a message but disconnects on cancel, so a thread blocked in `select!` on its
//! work channel wakes immediately.

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone)]
pub struct Cancel {
    inner: Arc<Inner>,
}

struct Inner {
    flag: AtomicBool,
    keepalive: Mutex<Option<Sender<()>>>,
    rx: Receiver<()>,
}

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancel {
    pub fn new() -> Cancel {
        let (tx, rx) = crossbeam_channel::bounded(0);
        Cancel {
            inner: Arc::new(Inner {
                flag: AtomicBool::new(false),
                keepalive: Mutex::new(Some(tx)),
                rx,
            }),
        }
    }

    pub fn cancel(&self) {
        self.inner.flag.store(true, Ordering::SeqCst);
        self.inner
            .keepalive
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.flag.load(Ordering::SeqCst)
    }

    /// Becomes ready (disconnected) when cancelled; use in `crossbeam_channel::select!`.
    pub fn receiver(&self) -> &Receiver<()> {
        &self.inner.rx
    }

    /// Sleep for `d` unless cancelled first; returns whether it was cancelled.
    pub fn sleep(&self, d: Duration) -> bool {
        match self.inner.rx.recv_timeout(d) {
            Err(RecvTimeoutError::Timeout) => self.is_cancelled(),
            _ => true,
        }
    }
}

/// The stop token of the host's waits and retries (they live below `image`, hence the trait).
impl crate::clock::Stop for Cancel {
    fn is_stopped(&self) -> bool {
        self.is_cancelled()
    }

    fn sleep(&self, d: Duration) -> bool {
        Cancel::sleep(self, d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn cancel_wakes_a_sleeper_at_once() {
        let c = Cancel::new();
        let c2 = c.clone();
        let t = std::thread::spawn(move || {
            let start = Instant::now();
            let cancelled = c2.sleep(Duration::from_secs(30));
            (cancelled, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        c.cancel();
        let (cancelled, took) = t.join().unwrap();
        assert!(cancelled && took < Duration::from_secs(5));
        assert!(c.is_cancelled());
    }

    #[test]
    fn sleep_runs_out_when_not_cancelled() {
        let c = Cancel::new();
        assert!(!c.sleep(Duration::from_millis(10)));
    }
}
