//! The Go controller's loop helpers (`wait.PollUntilContextTimeout`, `utils.Retry`, tickers),
//! whose exact semantics fix the call counts its tests expect. They differ from
//! [`super::Clock::retry`] in that the first call is made even when the stop token has fired;
//! they sleep through the same [`Clock`] and end a wait at once on the same [`Stop`] token (Go's
//! context cancellation).
//!
//! - [`poll`]: P at once, then every interval, until P holds, the stop token fires
//!   ([`PollError::Canceled`]) or the deadline passes ([`PollError::TimedOut`]). P runs at least
//!   once, even when already stopped. Ticks fall on a fixed grid from the first call, as with
//!   Go's ticker: a tick that passed while P ran makes P run again at once. A tick that falls
//!   before the deadline runs P; at the deadline the poll times out.
//! - [`poll_with_cancel`]: the same, and whenever P is false, C is asked; C true ends the loop
//!   as cancelled.
//! - [`retry_attempts`]: up to `attempts` calls, `sleep` apart; the first call is made even when
//!   stopped, a stop during a wait ends it with [`RetryError::Canceled`], and running out gives
//!   Go's `failed after <n> attempts, last error: <err>`.
//! - [`ticker`]: acts after one interval, not at once, then on every tick; a tick missed while
//!   acting is not made up, except one that is taken at once (Go's `time.Ticker` buffers one).

use std::fmt;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use crate::clock::{Clock, Stop};

/// How a poll ended without its predicate holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PollError {
    /// The stop token fired, or the cancel predicate held (Go: the context's error).
    #[error("context canceled")]
    Canceled,
    /// The deadline passed.
    #[error("timed out")]
    TimedOut,
}

/// Runs `p` at once and then every `interval` until it returns true, `stop` fires or `timeout`
/// (from the first call; `None`: forever) passes.
pub fn poll(
    clock: &dyn Clock,
    stop: &dyn Stop,
    interval: Duration,
    timeout: Option<Duration>,
    p: impl FnMut() -> bool,
) -> Result<(), PollError> {
    poll_with_cancel(clock, stop, interval, timeout, p, || false)
}

/// [`poll`], and whenever `p` is false, `cancel` is asked: true ends the loop as cancelled.
pub fn poll_with_cancel(
    clock: &dyn Clock,
    stop: &dyn Stop,
    interval: Duration,
    timeout: Option<Duration>,
    mut p: impl FnMut() -> bool,
    mut cancel: impl FnMut() -> bool,
) -> Result<(), PollError> {
    let start = clock.now();
    let deadline = timeout.map(|t| start + t);
    let mut began = start;
    loop {
        if p() {
            return Ok(());
        }
        if cancel() {
            return Err(PollError::Canceled);
        }
        let now = clock.now();
        let mut next = first_tick_after(start, interval, began);
        if next <= now {
            // A tick passed while P ran: Go's ticker holds one, so P runs again at once.
            next = now;
        }
        if let Some(deadline) = deadline {
            if next >= deadline {
                let left = deadline.saturating_duration_since(now);
                if !left.is_zero() && clock.sleep_or_stop(left, stop) {
                    return Err(PollError::Canceled);
                }
                return Err(PollError::TimedOut);
            }
        }
        let stopped = if next > now {
            clock.sleep_or_stop(next - now, stop)
        } else {
            stop.is_stopped()
        };
        if stopped {
            return Err(PollError::Canceled);
        }
        began = next;
    }
}

/// How a retry ended without success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryError<E> {
    /// The stop token fired during a wait (Go returns the context's error alone).
    Canceled,
    /// Every attempt failed; `last` is the last failure.
    Exhausted { attempts: u32, last: E },
}

impl<E: fmt::Display> fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryError::Canceled => write!(f, "context canceled"),
            RetryError::Exhausted { attempts, last } => {
                write!(f, "failed after {attempts} attempts, last error: {last}")
            }
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for RetryError<E> {}

/// Calls `f` up to `attempts` times (at least once), `sleep` apart, until it succeeds. The
/// first call is made even when `stop` has fired; a wait ends at once when it fires.
pub fn retry_attempts<T, E>(
    clock: &dyn Clock,
    stop: &dyn Stop,
    attempts: u32,
    sleep: Duration,
    mut f: impl FnMut() -> Result<T, E>,
) -> Result<T, RetryError<E>> {
    for _ in 1..attempts {
        match f() {
            Ok(v) => return Ok(v),
            Err(_) => {
                if clock.sleep_or_stop(sleep, stop) {
                    return Err(RetryError::Canceled);
                }
            }
        }
    }
    f().map_err(|last| RetryError::Exhausted { attempts, last })
}

/// Calls `act` once per `interval`, the first time after one interval, until `stop` fires or
/// `act` breaks. Ticks fall on a fixed grid from the start; when `act` overruns one or more
/// ticks, it runs again at once (one buffered tick) and then on the grid.
pub fn ticker(
    clock: &dyn Clock,
    stop: &dyn Stop,
    interval: Duration,
    mut act: impl FnMut() -> ControlFlow<()>,
) {
    let start = clock.now();
    let mut next = start + interval;
    loop {
        let now = clock.now();
        if now < next && clock.sleep_or_stop(next - now, stop) {
            return;
        }
        if stop.is_stopped() {
            return;
        }
        let acted_at = next.max(clock.now());
        if act().is_break() {
            return;
        }
        let done = clock.now();
        next = first_tick_after(start, interval, acted_at);
        if next <= done {
            // A tick passed while acting: Go's ticker holds it, so the next act is at once;
            // the ones after it are back on the grid.
            next = done;
        }
    }
}

/// The first tick of the grid `start + k·interval` (k ≥ 1) strictly after `t`.
fn first_tick_after(start: Instant, interval: Duration, t: Instant) -> Instant {
    if interval.is_zero() {
        return t;
    }
    let since = t.saturating_duration_since(start).as_nanos();
    let k = since / interval.as_nanos() + 1;
    start + Duration::from_nanos(u64::try_from(k * interval.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{FakeClock, NeverStop};
    use crate::image::Cancel;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn poll_runs_at_once_then_every_interval() {
        let clock = FakeClock::new();
        let mut calls = 0;
        let r = poll(&clock, &NeverStop, secs(30), None, || {
            calls += 1;
            calls == 4
        });
        assert_eq!(r, Ok(()));
        assert_eq!(calls, 4);
        assert_eq!(clock.sleeps(), vec![secs(30); 3]);
    }

    #[test]
    fn poll_succeeding_at_once_does_not_sleep() {
        let clock = FakeClock::new();
        assert_eq!(poll(&clock, &NeverStop, secs(30), None, || true), Ok(()));
        assert!(clock.sleeps().is_empty());
    }

    #[test]
    fn poll_times_out_at_the_deadline() {
        let clock = FakeClock::new();
        let mut calls = 0;
        let r = poll(&clock, &NeverStop, secs(1), Some(secs(10)), || {
            calls += 1;
            false
        });
        assert_eq!(r, Err(PollError::TimedOut));
        assert_eq!(r.unwrap_err().to_string(), "timed out");
        assert_eq!(calls, 10, "at 0..=9 s; the tick at 10 s is the deadline");
        assert_eq!(clock.elapsed(), secs(10));
        // A deadline between ticks: the last wait is cut short.
        let clock = FakeClock::new();
        let mut calls = 0;
        let r = poll(&clock, &NeverStop, secs(30), Some(secs(70)), || {
            calls += 1;
            false
        });
        assert_eq!(r, Err(PollError::TimedOut));
        assert_eq!(calls, 3);
        assert_eq!(clock.sleeps(), vec![secs(30), secs(30), secs(10)]);
    }

    #[test]
    fn poll_runs_once_even_when_already_cancelled() {
        let clock = FakeClock::new();
        let stop = Cancel::new();
        stop.cancel();
        let mut calls = 0;
        let r = poll(&clock, &stop, secs(30), None, || {
            calls += 1;
            false
        });
        assert_eq!(r, Err(PollError::Canceled));
        assert_eq!(r.unwrap_err().to_string(), "context canceled");
        assert_eq!(calls, 1);
        assert!(clock.sleeps().is_empty());
        // And a true predicate wins over the cancellation.
        assert_eq!(poll(&clock, &stop, secs(30), None, || true), Ok(()));
    }

    #[test]
    fn poll_ends_when_cancelled_between_calls() {
        let clock = FakeClock::new();
        let stop = Cancel::new();
        let mut calls = 0;
        let r = poll(&clock, &stop, secs(5), Some(secs(3600)), || {
            calls += 1;
            if calls == 3 {
                stop.cancel();
            }
            false
        });
        assert_eq!(r, Err(PollError::Canceled));
        assert_eq!(calls, 3);
        assert_eq!(clock.sleeps(), vec![secs(5); 2]);
    }

    #[test]
    fn poll_keeps_its_grid_when_the_predicate_takes_time() {
        let clock = FakeClock::new();
        let mut calls = 0;
        let r = poll(&clock, &NeverStop, secs(10), None, || {
            calls += 1;
            clock.advance(secs(4));
            calls == 3
        });
        assert_eq!(r, Ok(()));
        assert_eq!(clock.sleeps(), vec![secs(6), secs(6)]);
    }

    #[test]
    fn poll_runs_at_once_after_a_predicate_that_overran_a_tick() {
        let clock = FakeClock::new();
        let t0 = clock.now();
        let mut at = Vec::new();
        let r = poll(&clock, &NeverStop, secs(10), None, || {
            at.push(clock.now() - t0);
            if at.len() == 1 {
                clock.advance(secs(25));
            }
            at.len() == 3
        });
        assert_eq!(r, Ok(()));
        assert_eq!(at, [secs(0), secs(25), secs(30)]);
        assert_eq!(
            clock.sleeps(),
            vec![secs(5)],
            "no zero-length sleep recorded"
        );
    }

    #[test]
    fn poll_with_cancel_asks_after_each_false() {
        let clock = FakeClock::new();
        let (mut p_calls, mut c_calls) = (0, 0);
        let r = poll_with_cancel(
            &clock,
            &NeverStop,
            secs(30),
            None,
            || {
                p_calls += 1;
                false
            },
            || {
                c_calls += 1;
                c_calls == 2
            },
        );
        assert_eq!(r, Err(PollError::Canceled));
        assert_eq!((p_calls, c_calls), (2, 2));
        assert_eq!(clock.sleeps(), vec![secs(30)]);
        // C is not asked when P holds.
        let mut asked = false;
        let r = poll_with_cancel(
            &clock,
            &NeverStop,
            secs(30),
            None,
            || true,
            || {
                asked = true;
                true
            },
        );
        assert_eq!(r, Ok(()));
        assert!(!asked);
    }

    #[test]
    fn retry_makes_n_attempts_with_go_s_error_text() {
        let clock = FakeClock::new();
        let mut calls = 0;
        let r: Result<(), _> = retry_attempts(&clock, &NeverStop, 5, secs(10), || {
            calls += 1;
            Err(format!("boom {calls}"))
        });
        let e = r.unwrap_err();
        assert_eq!(e.to_string(), "failed after 5 attempts, last error: boom 5");
        assert_eq!(calls, 5);
        assert_eq!(clock.sleeps(), vec![secs(10); 4], "no wait after the last");
    }

    #[test]
    fn retry_returns_the_first_success() {
        let clock = FakeClock::new();
        let mut calls = 0;
        let r: Result<u32, RetryError<&str>> =
            retry_attempts(&clock, &NeverStop, 5, secs(10), || {
                calls += 1;
                if calls == 2 {
                    Ok(calls)
                } else {
                    Err("no")
                }
            });
        assert_eq!(r, Ok(2));
        assert_eq!(clock.sleeps(), vec![secs(10)]);
    }

    #[test]
    fn retry_calls_once_even_when_cancelled_then_stops() {
        let clock = FakeClock::new();
        let stop = Cancel::new();
        stop.cancel();
        let mut calls = 0;
        let r: Result<(), _> = retry_attempts(&clock, &stop, 5, secs(10), || {
            calls += 1;
            Err("no")
        });
        assert_eq!(r, Err(RetryError::Canceled));
        assert_eq!(calls, 1);
        assert!(clock.sleeps().is_empty());
        assert_eq!(
            RetryError::<String>::Canceled.to_string(),
            "context canceled"
        );
    }

    #[test]
    fn retry_with_one_or_zero_attempts_calls_once() {
        for n in [0, 1] {
            let clock = FakeClock::new();
            let mut calls = 0;
            let r: Result<(), _> = retry_attempts(&clock, &NeverStop, n, secs(10), || {
                calls += 1;
                Err("no")
            });
            assert_eq!(calls, 1);
            assert!(clock.sleeps().is_empty());
            assert_eq!(
                r.unwrap_err().to_string(),
                format!("failed after {n} attempts, last error: no")
            );
        }
    }

    #[test]
    fn the_ticker_acts_after_one_interval() {
        let clock = FakeClock::new();
        let t0 = clock.now();
        let mut at = Vec::new();
        ticker(&clock, &NeverStop, secs(300), || {
            at.push(clock.now() - t0);
            if at.len() == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        assert_eq!(at, [secs(300), secs(600), secs(900)]);
    }

    #[test]
    fn the_ticker_stops_on_the_token() {
        let clock = FakeClock::new();
        let stop = Cancel::new();
        let mut acts = 0;
        ticker(&clock, &stop, secs(30), || {
            acts += 1;
            if acts == 2 {
                stop.cancel();
            }
            ControlFlow::Continue(())
        });
        assert_eq!(acts, 2);
        assert_eq!(clock.sleeps(), vec![secs(30); 2]);
        // Already stopped: never acts.
        ticker(&clock, &stop, secs(30), || panic!("acted"));
    }

    #[test]
    fn a_slow_act_takes_one_missed_tick_at_once_then_the_grid() {
        let clock = FakeClock::new();
        let t0 = clock.now();
        let mut at = Vec::new();
        ticker(&clock, &NeverStop, secs(10), || {
            at.push(clock.now() - t0);
            if at.len() == 1 {
                clock.advance(secs(25)); // 10 → 35: ticks 20 and 30 pass
            }
            if at.len() == 4 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        assert_eq!(at, [secs(10), secs(35), secs(40), secs(50)]);
    }
}
