//! The fetch of the encapsulated MachineConfig, on a thread of its own from the moment the
//! Ignition config is known, so that it overlaps the disk write and adds nothing to the
//! critical path when the machine-config-server is up by then.
//!
//! Go fetches after the write (and a worker's wait), every 5 s for at most 20 minutes. Here
//! the tries start earlier and go on until [`EarlyFetch::finish`] at Go's point, from which the
//! budget counts: Go's window is always covered, the time before it is extra. Every sleep ends
//! at once when the flow's stop token fires or the fetch is dropped unfinished.

use anyhow::Result;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::clock::{Clock, Failure, Schedule, Stopped, WaitError};
use crate::image::Cancel;

/// How long, after Go's point, the fetch may go on (Go: 20 minutes).
pub(crate) const FETCH_BUDGET: Duration = Duration::from_secs(20 * 60);

pub(crate) struct EarlyFetch<T> {
    handle: Option<JoinHandle<Result<T>>>,
    shared: Arc<Shared>,
}

struct Shared {
    /// No try starts after this; unknown (`None`) until `finish`.
    deadline: Mutex<Option<Instant>>,
    /// A child of the flow's token, also fired when the fetch is dropped unfinished: its
    /// result is no longer wanted.
    abandoned: Cancel,
}

impl<T: Send + 'static> EarlyFetch<T> {
    /// Starts trying `fetch` at once, then every `interval` after a failure, on `clock`; each
    /// failure goes to `on_failure` (to be logged), with the number of failures so far.
    pub(crate) fn start(
        clock: Arc<dyn Clock>,
        stop: Cancel,
        interval: Duration,
        fetch: impl Fn() -> Result<T> + Send + 'static,
        on_failure: impl Fn(&anyhow::Error, u32) + Send + 'static,
    ) -> EarlyFetch<T> {
        let shared = Arc::new(Shared {
            deadline: Mutex::new(None),
            abandoned: stop.child(),
        });
        let thread_shared = shared.clone();
        // The flow's log subscriber, so this thread's lines land where the flow's do.
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        let handle = std::thread::Builder::new()
            .name("skip-mco-fetch".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    poll(clock.as_ref(), interval, &thread_shared, fetch, on_failure)
                })
            })
            .expect("spawning the skip-MCO fetch thread");
        EarlyFetch {
            handle: Some(handle),
            shared,
        }
    }

    /// Go's point: from now on the fetch has `budget` (no try starts later); waits for its
    /// result. `Err(Stopped)` when the flow's stop token fired.
    pub(crate) fn finish(mut self, clock: &dyn Clock, budget: Duration) -> Result<T> {
        *lock(&self.shared.deadline) = Some(clock.now() + budget);
        let handle = self.handle.take().expect("finished once");
        handle
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the skip-MCO fetch thread panicked")))
    }
}

impl<T> Drop for EarlyFetch<T> {
    /// Unfinished: the thread ends after the try in flight (at most one request's time
    /// limit); nobody waits for it.
    fn drop(&mut self) {
        if self.handle.is_some() {
            self.shared.abandoned.cancel();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn poll<T>(
    clock: &dyn Clock,
    interval: Duration,
    shared: &Shared,
    fetch: impl Fn() -> Result<T>,
    on_failure: impl Fn(&anyhow::Error, u32),
) -> Result<T> {
    let result = clock.retry(
        &shared.abandoned,
        &Schedule::every(interval),
        |failures| {
            fetch().map_err(|e| {
                on_failure(&e, failures + 1);
                // Another try only if it would start within the budget.
                let deadline = *lock(&shared.deadline);
                match deadline {
                    Some(d) if clock.now() + interval > d => Failure::Fatal(e),
                    _ => Failure::Retry(e),
                }
            })
        },
        |_, _| {},
    );
    match result {
        Ok(v) => Ok(v),
        Err(WaitError::Fatal { failures, error }) => {
            Err(error.context(format!("gave up after {failures} tries")))
        }
        Err(WaitError::Stopped { .. }) => Err(Stopped.into()),
        // `Schedule::every` has no limit of its own.
        Err(WaitError::GaveUp { last, .. }) => Err(last),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use std::sync::atomic::{AtomicU32, Ordering};

    const FIVE: Duration = Duration::from_secs(5);

    /// A fetch that fails (counting its tries) until try number `succeed_at`, if any; its first
    /// try waits for `go`, so a test can call `finish` before anything happened.
    fn scripted(
        succeed_at: Option<u32>,
    ) -> (
        Arc<AtomicU32>,
        crossbeam_channel::Sender<()>,
        impl Fn() -> Result<u32> + Send + 'static,
    ) {
        let tries = Arc::new(AtomicU32::new(0));
        let (go_tx, go) = crossbeam_channel::bounded::<()>(1);
        let counted = tries.clone();
        let fetch = move || {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            if n == 1 {
                let _ = go.recv();
            }
            match succeed_at {
                Some(s) if n >= s => Ok(n),
                _ => anyhow::bail!("connection refused"),
            }
        };
        (tries, go_tx, fetch)
    }

    #[test]
    fn the_budget_counts_from_finish_and_ends_at_the_last_try_within_it() {
        let clock = Arc::new(FakeClock::new());
        let (tries, go, fetch) = scripted(None);
        let fetcher = EarlyFetch::start(clock.clone(), Cancel::new(), FIVE, fetch, |_, _| {});
        // The budget starts at time 0, while the first try is in flight: tries at 0, 5, …,
        // 1200 s, the last one that starts within 20 minutes.
        while tries.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let shared = fetcher.shared.clone();
        std::thread::spawn(move || {
            while lock(&shared.deadline).is_none() {
                std::thread::yield_now();
            }
            go.send(()).unwrap();
        });
        let e = fetcher.finish(clock.as_ref(), FETCH_BUDGET).unwrap_err();
        assert_eq!(tries.load(Ordering::SeqCst), 241);
        assert_eq!(clock.elapsed(), FETCH_BUDGET);
        assert!(clock.sleeps().iter().all(|d| *d == FIVE));
        assert_eq!(
            format!("{e:#}"),
            "gave up after 241 tries: connection refused"
        );
    }

    #[test]
    fn tries_go_on_until_finish_and_a_success_ends_them() {
        let clock = Arc::new(FakeClock::new());
        let (tries, go, fetch) = scripted(Some(4));
        go.send(()).unwrap();
        let failures = Arc::new(Mutex::new(Vec::new()));
        let seen = failures.clone();
        let fetcher = EarlyFetch::start(clock.clone(), Cancel::new(), FIVE, fetch, move |e, n| {
            seen.lock().unwrap().push(format!("{n}: {e}"))
        });
        assert_eq!(fetcher.finish(clock.as_ref(), FETCH_BUDGET).unwrap(), 4);
        assert_eq!(tries.load(Ordering::SeqCst), 4);
        assert_eq!(clock.sleeps(), vec![FIVE; 3]);
        assert_eq!(
            *failures.lock().unwrap(),
            [
                "1: connection refused",
                "2: connection refused",
                "3: connection refused"
            ]
        );
    }

    #[test]
    fn a_result_ready_before_finish_costs_nothing_after_it() {
        let clock = Arc::new(FakeClock::new());
        let (_, go, fetch) = scripted(Some(1));
        go.send(()).unwrap();
        let fetcher = EarlyFetch::start(clock.clone(), Cancel::new(), FIVE, fetch, |_, _| {});
        while !fetcher.handle.as_ref().unwrap().is_finished() {
            std::thread::yield_now();
        }
        let before = clock.elapsed();
        assert_eq!(fetcher.finish(clock.as_ref(), FETCH_BUDGET).unwrap(), 1);
        assert_eq!(clock.elapsed(), before);
    }

    /// The flow's stop, or dropping the unfinished fetch, ends it at once (on the real clock:
    /// its 5 s wait must end): no second try.
    #[test]
    fn the_flows_stop_or_a_drop_ends_the_fetch() {
        let clock: Arc<dyn Clock> = Arc::new(crate::clock::SystemClock);
        for drop_it in [false, true] {
            let stop = Cancel::new();
            let (tries, go, fetch) = scripted(None);
            go.send(()).unwrap();
            let fetcher = EarlyFetch::start(clock.clone(), stop.clone(), FIVE, fetch, |_, _| {});
            while tries.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
            let started = Instant::now();
            if drop_it {
                let shared = fetcher.shared.clone();
                drop(fetcher);
                assert!(shared.abandoned.is_cancelled());
                // The thread let go of `shared`.
                while Arc::strong_count(&shared) > 1 {
                    let running = started.elapsed() < Duration::from_secs(4);
                    assert!(running, "the fetch thread is still running");
                    std::thread::sleep(Duration::from_millis(10));
                }
            } else {
                stop.cancel();
                let e = fetcher.finish(clock.as_ref(), FETCH_BUDGET).unwrap_err();
                assert!(e.downcast_ref::<Stopped>().is_some(), "{e:#}");
                assert!(started.elapsed() < Duration::from_secs(4));
            }
            assert_eq!(tries.load(Ordering::SeqCst), 1, "drop: {drop_it}");
        }
    }
}
