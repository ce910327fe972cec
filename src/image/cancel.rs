//! The stop token: cooperative cancellation for the pipeline threads, the flows' waits and the
//! controller's tasks. A flag for polling, plus a channel that never carries a message but
//! disconnects on cancel, so a thread blocked in `select!` or in [`Cancel::sleep`] wakes at
//! once. A [`Cancel::child`] fires with its parent or on its own (Go's `context.WithCancel`).

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// How often a write's coordinators (the pipeline's, the read-back's) look at progress, errors
/// and signals.
pub(super) const POLL: Duration = Duration::from_millis(50);

/// The write was stopped from outside (SIGINT/SIGTERM).
#[derive(Debug, thiserror::Error)]
#[error("interrupted before the image was complete")]
pub struct Interrupted;

/// Cancels its token when dropped: at the top of a `thread::scope`'s body, so that however the
/// body ends (an error, an early return), the scope's threads are told to stop before the scope
/// waits for them.
pub(crate) struct CancelOnDrop<'a>(pub(crate) &'a Cancel);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

#[derive(Clone)]
pub struct Cancel {
    inner: Arc<Inner>,
}

struct Inner {
    flag: AtomicBool,
    keepalive: Mutex<Option<Sender<()>>>,
    rx: Receiver<()>,
    /// Cancelled with this one; locked while cancelling, so no child is missed.
    children: Mutex<Vec<Weak<Inner>>>,
}

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    fn cancel(&self) {
        let children = {
            let mut children = lock(&self.children);
            self.flag.store(true, Ordering::SeqCst);
            std::mem::take(&mut *children)
        };
        lock(&self.keepalive).take();
        for child in children.iter().filter_map(Weak::upgrade) {
            child.cancel();
        }
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
                children: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A token that is cancelled when this one is, and can be cancelled alone.
    pub fn child(&self) -> Cancel {
        let child = Cancel::new();
        let mut children = lock(&self.inner.children);
        if self.is_cancelled() {
            child.cancel();
        } else {
            children.retain(|c| c.strong_count() > 0);
            children.push(Arc::downgrade(&child.inner));
        }
        child
    }

    pub fn cancel(&self) {
        Inner::cancel(&self.inner);
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

    #[test]
    fn a_child_fires_with_its_parent_but_not_the_other_way() {
        let parent = Cancel::new();
        let (a, b) = (parent.child(), parent.child());
        let grandchild = a.child();
        a.cancel();
        assert!(a.is_cancelled() && grandchild.is_cancelled());
        assert!(!parent.is_cancelled() && !b.is_cancelled());
        parent.cancel();
        assert!(b.sleep(Duration::from_secs(30)), "woken at once");
        assert!(parent.child().is_cancelled(), "born cancelled");
    }
}
