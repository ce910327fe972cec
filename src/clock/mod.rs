//! Time as an effect, and the one wait-and-retry engine of both programs.
//!
//! Waits sleep through a [`Clock`] so tests run at once on a [`FakeClock`], and through a
//! [`Stop`] token (the install's `image::Cancel`, with its children, or a clock [`Deadline`]) so
//! that SIGTERM ends a wait at once instead of after its interval. `retry_counting` (a method of
//! `dyn Clock`) is the loop: a [`Schedule`] (how many retries, how long in all, how long between
//! tries) is data, and the try itself says whether its failure is worth another ([`Failure`]).
//! The rest are shapes of it: `poll_until` (the installer's endless waits), [`poll`],
//! [`retry_attempts`] and [`ticker`] (the Go controller's
//! `wait.PollUntilContextTimeout`, `utils.Retry` and `time.Ticker`, whose call counts its tests
//! pin):
//!
//! ```text
//! f.host.clock.poll_until(&stop, f.intervals.poll, || done.exists().then_some(()))?;
//! ```

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

#[cfg(any(test, feature = "test-support"))]
mod testing;
#[cfg(any(test, feature = "test-support"))]
pub use testing::FakeClock;

pub trait Clock: Send + Sync {
    fn sleep(&self, d: Duration);
    fn now(&self) -> Instant;

    /// Sleeps `d` unless `stop` fires first; returns whether it fired. The default suits clocks
    /// whose sleep returns at once (the fake); the real clock wakes as soon as `stop` fires.
    fn sleep_or_stop(&self, d: Duration, stop: &dyn Stop) -> bool {
        if stop.is_stopped() {
            return true;
        }
        self.sleep(d);
        stop.is_stopped()
    }
}

/// What ends a wait early. The install's stop token (`image::Cancel`, fired on SIGINT/SIGTERM)
/// is one; [`NeverStop`] stands in where a step has none.
pub trait Stop: Send + Sync {
    fn is_stopped(&self) -> bool;
    /// Sleeps `d`, waking at once when stopped; returns whether it was stopped.
    fn sleep(&self, d: Duration) -> bool;
}

/// A stop token that never fires.
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverStop;

impl Stop for NeverStop {
    fn is_stopped(&self) -> bool {
        false
    }

    fn sleep(&self, d: Duration) -> bool {
        std::thread::sleep(d);
        false
    }
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

/// The real clock, for code that has no clock handed to it.
pub const SYSTEM_CLOCK: &dyn Clock = &SystemClock;

impl Clock for SystemClock {
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_or_stop(&self, d: Duration, stop: &dyn Stop) -> bool {
        stop.is_stopped() || stop.sleep(d)
    }
}

/// A stop token that fires once `clock` reaches `at` (Go's `context.WithDeadline`).
pub struct Deadline<'a> {
    pub clock: &'a dyn Clock,
    pub at: Instant,
}

impl Stop for Deadline<'_> {
    fn is_stopped(&self) -> bool {
        self.clock.now() >= self.at
    }

    fn sleep(&self, d: Duration) -> bool {
        let left = self.at.saturating_duration_since(self.clock.now());
        self.clock.sleep(d.min(left));
        self.is_stopped()
    }
}

/// When a failed try is followed by another, and after how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Tries allowed after the first (`None`: no limit).
    pub retries: Option<u32>,
    /// No try starts later than this after the first one, on the clock (`None`: no deadline).
    pub timeout: Option<Duration>,
    pub delay: Delay,
}

/// The wait after failure number `n` (1 for the first failure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delay {
    /// Always the same (the Go installer's polls).
    Fixed(Duration),
    /// `first`, doubled after each failure, at most `cap` (coreos-installer's download backoff).
    Doubling { first: Duration, cap: Duration },
    /// A random wait in `[0, min(cap, base × 2^(n-1)))`: the Go service client's "full jitter"
    /// (`rehttp.ExpJitterDelay`).
    FullJitter { base: Duration, cap: Duration },
    /// Tries on the grid `first try + k·interval`, as Go's `time.Ticker`: a try that overran a
    /// tick is followed by another at once (the ticker holds one tick), and a timeout is waited
    /// out to the deadline rather than given up at the last tick before it.
    Ticks(Duration),
}

impl Delay {
    /// The wait after failure number `failures`; for [`Delay::FullJitter`], the exclusive upper
    /// bound of the random wait.
    pub fn bound(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1);
        match *self {
            Delay::Fixed(d) | Delay::Ticks(d) => d,
            Delay::Doubling { first: base, cap } | Delay::FullJitter { base, cap } => {
                if exp >= 31 {
                    cap
                } else {
                    base.saturating_mul(1u32 << exp).min(cap)
                }
            }
        }
    }

    /// The wait after failure number `failures`.
    pub fn after(&self, failures: u32) -> Duration {
        let bound = self.bound(failures);
        match self {
            Delay::FullJitter { .. } if !bound.is_zero() => {
                let nanos = u128::from(random_u64()) % bound.as_nanos();
                Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
            }
            _ => bound,
        }
    }
}

/// 64 random bits from the OS-seeded v4 UUID generator (no extra dependency for jitter).
fn random_u64() -> u64 {
    let v = u128::from_le_bytes(*uuid::Uuid::new_v4().as_bytes());
    // Folding the halves spreads the 6 fixed version/variant bits over random ones.
    (v as u64) ^ ((v >> 64) as u64)
}

impl Schedule {
    /// Tries every `interval` until one succeeds: the Go installer's waits, which end only by
    /// success or by the stop token.
    pub const fn every(interval: Duration) -> Schedule {
        Schedule {
            retries: None,
            timeout: None,
            delay: Delay::Fixed(interval),
        }
    }

    /// At most `tries` tries (at least one), `interval` apart.
    pub const fn tries(tries: u32, interval: Duration) -> Schedule {
        Schedule {
            retries: Some(tries.saturating_sub(1)),
            timeout: None,
            delay: Delay::Fixed(interval),
        }
    }

    /// Tries at once and then every `interval`, as long as the next try would start within
    /// `timeout` of the first.
    pub const fn within(timeout: Duration, interval: Duration) -> Schedule {
        Schedule {
            retries: None,
            timeout: Some(timeout),
            delay: Delay::Fixed(interval),
        }
    }

    /// Tries on the ticks of `interval` until `timeout` (`None`: no deadline): Go's waits.
    pub const fn ticks(interval: Duration, timeout: Option<Duration>) -> Schedule {
        Schedule {
            retries: None,
            timeout,
            delay: Delay::Ticks(interval),
        }
    }

    /// Whether failure number `failures` (1 for the first) may be followed by another try, by
    /// the retry count (the deadline is the clock's business); the engine's own check.
    pub fn permits<E>(&self, failure: &Failure<E>, failures: u32) -> bool {
        match failure {
            Failure::Retry(_) => self.retries.is_none_or(|n| failures <= n),
            Failure::RetryWithin(n, _) => failures <= *n,
            Failure::Fatal(_) => false,
        }
    }
}

/// A failed try, and whether it is worth another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure<E> {
    /// Worth another try, within the schedule's retries.
    Retry(E),
    /// Worth another try while this is failure number `n` or less, whatever the schedule's
    /// retries: a budget of its own for one kind of failure (the Go service client retries
    /// 404/423/425 `minRetries` times and server errors `maxRetries` times).
    RetryWithin(u32, E),
    /// Not worth another try.
    Fatal(E),
}

/// Told before each wait between tries: which retry comes, out of how many, after how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retrying {
    /// Failures so far (the coming retry is retry number `failures`).
    pub failures: u32,
    /// The retries allowed for this failure (`None`: no limit).
    pub retries: Option<u32>,
    pub delay: Duration,
}

impl std::fmt::Display for Retrying {
    /// `retry 2 of 5`, or `retry 2` without a limit.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "retry {}", self.failures)?;
        if let Some(n) = self.retries {
            write!(f, " of {n}")?;
        }
        Ok(())
    }
}

/// The failures of a retried job so far. A job that spans several calls keeps one (the HTTP
/// image source counts the failures since data last arrived, across reconnections).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tries {
    failures: u32,
    first: Option<Instant>,
    call_when_stopped: bool,
}

impl Tries {
    /// A job whose first try is made even when the stop token has already fired: Go's
    /// `wait.Poll*` and `utils.Retry` call once before looking at the context, and the
    /// controller's tests pin those call counts.
    pub fn calling_when_stopped() -> Tries {
        Tries {
            call_when_stopped: true,
            ..Tries::default()
        }
    }
}

/// How a wait ended without its value. `failures` counts the failed tries (of the job, for
/// `retry_counting`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaitError<E> {
    /// The stop token fired, before a try or during a wait; `last` is the last failure, if any.
    #[error("{}", Stopped)]
    Stopped { failures: u32, last: Option<E> },
    /// The retries or the time ran out; `last` is the last failure.
    #[error("{last} (gave up after {failures} tries)")]
    GaveUp { failures: u32, last: E },
    /// A failure that was not worth another try.
    #[error("{error}")]
    Fatal { failures: u32, error: E },
}

impl<E> WaitError<E> {
    pub fn failures(&self) -> u32 {
        match self {
            WaitError::Stopped { failures, .. }
            | WaitError::GaveUp { failures, .. }
            | WaitError::Fatal { failures, .. } => *failures,
        }
    }

    /// The last failure; `None` when stopped before the first try.
    pub fn into_last(self) -> Option<E> {
        match self {
            WaitError::Stopped { last, .. } => last,
            WaitError::GaveUp { last, .. } => Some(last),
            WaitError::Fatal { error, .. } => Some(error),
        }
    }
}

impl<E: Into<anyhow::Error>> WaitError<E> {
    /// The last failure as it is (its context chain intact), or [`Stopped`] when stopped.
    pub fn into_anyhow(self) -> anyhow::Error {
        match self {
            WaitError::Stopped { .. } => Stopped.into(),
            WaitError::GaveUp { last: e, .. } | WaitError::Fatal { error: e, .. } => e.into(),
        }
    }
}

/// A wait ended by the stop token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stop requested")]
pub struct Stopped;

impl dyn Clock + '_ {
    /// Runs `attempt` until it succeeds, as `schedule` and each failure allow; `on_retry` is told
    /// before each wait (to log it). The stop token is checked before every try and ends a wait
    /// at once. `attempt` gets the number of failures so far (0 on the first try).
    pub fn retry<T, E>(
        &self,
        stop: &dyn Stop,
        schedule: &Schedule,
        attempt: impl FnMut(u32) -> Result<T, Failure<E>>,
        on_retry: impl FnMut(&E, &Retrying),
    ) -> Result<T, WaitError<E>> {
        self.retry_counting(stop, schedule, &mut Tries::default(), attempt, on_retry)
    }

    /// `retry` for a job that spans calls: failures and the first try's time
    /// are kept in `tries` (start afresh with `Tries::default()`).
    pub fn retry_counting<T, E>(
        &self,
        stop: &dyn Stop,
        schedule: &Schedule,
        tries: &mut Tries,
        mut attempt: impl FnMut(u32) -> Result<T, Failure<E>>,
        mut on_retry: impl FnMut(&E, &Retrying),
    ) -> Result<T, WaitError<E>> {
        let mut last = None;
        loop {
            let first_try = tries.first.is_none();
            if stop.is_stopped() && !(first_try && tries.call_when_stopped) {
                return Err(WaitError::Stopped {
                    failures: tries.failures,
                    last,
                });
            }
            let began = self.now();
            let first = *tries.first.get_or_insert(began);
            let failure = match attempt(tries.failures) {
                Ok(value) => return Ok(value),
                Err(failure) => failure,
            };
            tries.failures += 1;
            let failures = tries.failures;
            let permitted = schedule.permits(&failure, failures);
            let (error, retries) = match failure {
                Failure::Fatal(error) => return Err(WaitError::Fatal { failures, error }),
                Failure::Retry(error) => (error, schedule.retries),
                Failure::RetryWithin(n, error) => (error, Some(n)),
            };
            let now = self.now();
            let ticks = matches!(schedule.delay, Delay::Ticks(_));
            let delay = match schedule.delay {
                Delay::Ticks(interval) => {
                    first_tick_after(first, interval, began).saturating_duration_since(now)
                }
                other => other.after(failures),
            };
            let deadline = schedule.timeout.map(|t| first + t);
            let late = deadline.is_some_and(|at| match ticks {
                true => now + delay >= at,
                false => now + delay > at,
            });
            if !permitted || late {
                let left = deadline.map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
                if late && ticks && !left.is_zero() && self.sleep_or_stop(left, stop) {
                    return Err(WaitError::Stopped {
                        failures,
                        last: Some(error),
                    });
                }
                return Err(WaitError::GaveUp {
                    failures,
                    last: error,
                });
            }
            on_retry(
                &error,
                &Retrying {
                    failures,
                    retries,
                    delay,
                },
            );
            let stopped = if ticks && delay.is_zero() {
                stop.is_stopped()
            } else {
                self.sleep_or_stop(delay, stop)
            };
            if stopped {
                return Err(WaitError::Stopped {
                    failures,
                    last: Some(error),
                });
            }
            last = Some(error);
        }
    }

    /// Calls `check` at once and then every `every` until it gives a value; only the stop token
    /// ends it otherwise. The Go installer's waits for the cluster, which never give up.
    pub fn poll_until<T>(
        &self,
        stop: &dyn Stop,
        every: Duration,
        mut check: impl FnMut() -> Option<T>,
    ) -> Result<T, Stopped> {
        let schedule = Schedule::every(every);
        match self.retry(
            stop,
            &schedule,
            |_| check().ok_or(Failure::Retry(())),
            |_, _| {},
        ) {
            Ok(value) => Ok(value),
            Err(WaitError::Stopped { .. }) => Err(Stopped),
            Err(e) => unreachable!("an endless schedule ended: {e:?}"),
        }
    }
}

/// The first tick of the grid `start + k·interval` (k ≥ 1) strictly after `t`.
fn first_tick_after(start: Instant, interval: Duration, t: Instant) -> Instant {
    if interval.is_zero() {
        return t;
    }
    let k = t.saturating_duration_since(start).as_nanos() / interval.as_nanos() + 1;
    start + Duration::from_nanos(u64::try_from(k * interval.as_nanos()).unwrap_or(u64::MAX))
}

/// How a Go-style poll ended without its predicate holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PollError {
    /// The stop token fired (Go: the context's error).
    #[error("context canceled")]
    Canceled,
    /// The deadline passed.
    #[error("timed out")]
    TimedOut,
}

/// Go's `wait.PollUntilContextTimeout(immediate)`: `p` at once (even when already stopped),
/// then on every tick of `interval`, until it holds, `stop` fires or `timeout` (from the first
/// call; `None`: forever) passes.
pub fn poll(
    clock: &dyn Clock,
    stop: &dyn Stop,
    interval: Duration,
    timeout: Option<Duration>,
    mut p: impl FnMut() -> bool,
) -> Result<(), PollError> {
    let polled = clock.retry_counting(
        stop,
        &Schedule::ticks(interval, timeout),
        &mut Tries::calling_when_stopped(),
        |_| if p() { Ok(()) } else { Err(Failure::Retry(())) },
        |_, _| {},
    );
    match polled {
        Ok(()) => Ok(()),
        Err(WaitError::GaveUp { .. }) => Err(PollError::TimedOut),
        Err(_) => Err(PollError::Canceled),
    }
}

/// How a Go-style retry ended without success.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetryError<E> {
    /// The stop token fired during a wait (Go returns the context's error alone).
    #[error("context canceled")]
    Canceled,
    /// Every attempt failed; `last` is the last failure.
    #[error("failed after {attempts} attempts, last error: {last}")]
    Exhausted { attempts: u32, last: E },
}

/// Go's `utils.Retry`: `f` up to `attempts` times (at least once, even when already stopped),
/// `sleep` apart, until it succeeds.
pub fn retry_attempts<T, E>(
    clock: &dyn Clock,
    stop: &dyn Stop,
    attempts: u32,
    sleep: Duration,
    mut f: impl FnMut() -> Result<T, E>,
) -> Result<T, RetryError<E>> {
    clock
        .retry_counting(
            stop,
            &Schedule::tries(attempts, sleep),
            &mut Tries::calling_when_stopped(),
            |_| f().map_err(Failure::Retry),
            |_, _| {},
        )
        .map_err(|e| match e {
            WaitError::GaveUp { last, .. } => RetryError::Exhausted { attempts, last },
            _ => RetryError::Canceled,
        })
}

/// Go's `time.Ticker` loop: `act` after one `interval`, then on every tick, until `stop` fires
/// or `act` breaks.
pub fn ticker(
    clock: &dyn Clock,
    stop: &dyn Stop,
    interval: Duration,
    mut act: impl FnMut() -> ControlFlow<()>,
) {
    // The first try only starts the grid: a ticker first fires after one interval.
    let _ = clock.retry(
        stop,
        &Schedule::ticks(interval, None),
        |n| {
            if n > 0 && act().is_break() {
                Ok(())
            } else {
                Err(Failure::Retry(()))
            }
        },
        |_, _| {},
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Cancel;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    type Attempt<'a> = &'a dyn Fn(u32, &FakeClock) -> Result<u32, Failure<u32>>;

    /// Each case: the schedule, try number `n` (from 1) and its outcome, the result, the
    /// sleeps (s) and the retries `on_retry` is told of.
    #[test]
    fn retry_follows_the_schedule_and_each_failure() {
        let gave_up = |n| {
            Err(WaitError::GaveUp {
                failures: n,
                last: n,
            })
        };
        let retry: Attempt = &|n, _| Err(Failure::Retry(n));
        type Case<'a> = (
            Schedule,
            Attempt<'a>,
            Result<u32, WaitError<u32>>,
            Vec<u64>,
            Option<u32>,
        );
        let cases: [Case; 6] = [
            (
                Schedule::tries(3, secs(5)),
                retry,
                gave_up(3),
                vec![5; 2],
                Some(2),
            ),
            (
                Schedule::tries(3, secs(5)),
                &|n, _| {
                    if n == 2 {
                        Ok(n)
                    } else {
                        Err(Failure::Retry(n))
                    }
                },
                Ok(2),
                vec![5],
                Some(2),
            ),
            (
                Schedule::every(secs(5)),
                &|n, _| Err(Failure::Fatal(n)),
                Err(WaitError::Fatal {
                    failures: 1,
                    error: 1,
                }),
                vec![],
                None,
            ),
            // Tries at 0, 5, 10, 15 and 20 s.
            (
                Schedule::within(secs(20), secs(5)),
                retry,
                gave_up(5),
                vec![5; 4],
                None,
            ),
            // Time spent inside a try counts: tries at 0 and 11 (6 + 5) s; 22 would be too late.
            (
                Schedule::within(secs(20), secs(5)),
                &|n, c| {
                    c.advance(secs(6));
                    Err(Failure::Retry(n))
                },
                gave_up(2),
                vec![5],
                None,
            ),
            // A budget of its own ignores the schedule's: Go's service client retries 404
            // `minRetries` (10) times even when `maxRetries` is 3.
            (
                Schedule::tries(4, secs(1)),
                &|n, _| Err(Failure::RetryWithin(10, n)),
                gave_up(11),
                vec![1; 10],
                Some(10),
            ),
        ];
        for (i, (schedule, attempt, result, sleeps, retries)) in cases.into_iter().enumerate() {
            let fake = FakeClock::new();
            let c: &dyn Clock = &fake;
            let r = c.retry(
                &NeverStop,
                &schedule,
                |failures| attempt(failures + 1, &fake),
                |_, r| assert_eq!(r.retries, retries, "case {i}"),
            );
            assert_eq!(r, result, "case {i}");
            let slept: Vec<u64> = fake.sleeps().iter().map(Duration::as_secs).collect();
            assert_eq!(slept, sleeps, "case {i}");
        }
        let schedule = Schedule::tries(4, secs(1));
        assert!(schedule.permits(&Failure::Retry(()), 3));
        assert!(!schedule.permits(&Failure::Retry(()), 4));
        assert!(schedule.permits(&Failure::RetryWithin(10, ()), 10));
        assert!(!schedule.permits(&Failure::Fatal(()), 1));
    }

    #[test]
    fn doubling_delays_are_capped_and_told_before_each_wait() {
        let fake = FakeClock::new();
        let c: &dyn Clock = &fake;
        let schedule = Schedule {
            retries: Some(6),
            timeout: None,
            delay: Delay::Doubling {
                first: secs(1),
                cap: secs(10),
            },
        };
        let mut told = Vec::new();
        let r: Result<(), _> = c.retry(
            &NeverStop,
            &schedule,
            |_| Err(Failure::Retry("down")),
            |e, r| told.push(format!("{e}: {r} in {}s", r.delay.as_secs())),
        );
        assert_eq!(r.unwrap_err().failures(), 7);
        let waits: Vec<u64> = fake.sleeps().iter().map(Duration::as_secs).collect();
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
        assert_eq!(told[0], "down: retry 1 of 6 in 1s");
        assert_eq!(told[5], "down: retry 6 of 6 in 10s");
        assert_eq!(schedule.delay.bound(1000), secs(10), "no overflow");
    }

    #[test]
    fn a_stop_ends_the_wait_before_the_next_try() {
        let fake = FakeClock::new();
        let c: &dyn Clock = &fake;
        let stop = Cancel::new();
        let mut tries = 0;
        let r: Result<(), _> = c.retry(
            &stop,
            &Schedule::every(secs(5)),
            |_| {
                tries += 1;
                if tries == 3 {
                    stop.cancel();
                }
                Err(Failure::Retry(tries))
            },
            |_, _| {},
        );
        assert_eq!(
            r,
            Err(WaitError::Stopped {
                failures: 3,
                last: Some(3)
            })
        );
        assert_eq!(tries, 3);
        assert_eq!(fake.sleeps().len(), 2, "no wait after the stop");
        // Stopped before the first try: nothing is tried.
        let r: Result<(), WaitError<()>> = c.retry(
            &stop,
            &Schedule::every(secs(5)),
            |_| unreachable!(),
            |_, _| {},
        );
        assert_eq!(
            r,
            Err(WaitError::Stopped {
                failures: 0,
                last: None
            })
        );
    }

    #[test]
    fn poll_until_waits_for_a_value_or_the_stop() {
        let fake = FakeClock::new();
        let c: &dyn Clock = &fake;
        let mut polls = 0;
        let found = c.poll_until(&NeverStop, secs(5), || {
            polls += 1;
            (polls == 4).then_some("ready")
        });
        assert_eq!(found, Ok("ready"));
        assert_eq!(fake.sleeps(), vec![secs(5); 3]);

        let stop = Cancel::new();
        let r = c.poll_until(&stop, secs(5), || {
            stop.cancel();
            None::<()>
        });
        assert_eq!(r, Err(Stopped));
    }

    #[test]
    fn tries_carry_over_between_calls() {
        let fake = FakeClock::new();
        let c: &dyn Clock = &fake;
        let schedule = Schedule::tries(3, secs(1));
        let mut tries = Tries::default();
        let mut n = 0;
        let ok: Result<(), WaitError<()>> = c.retry_counting(
            &NeverStop,
            &schedule,
            &mut tries,
            |_| {
                n += 1;
                if n == 2 {
                    Ok(())
                } else {
                    Err(Failure::Retry(()))
                }
            },
            |_, _| {},
        );
        assert!(ok.is_ok());
        assert_eq!(tries.failures, 1);
        let r: Result<(), _> = c.retry_counting(
            &NeverStop,
            &schedule,
            &mut tries,
            |_| Err(Failure::Retry(())),
            |_, _| {},
        );
        assert_eq!(
            r.unwrap_err().failures(),
            3,
            "one failure was already spent"
        );
    }

    /// Polls on a fake clock; `p` gets its call number (from 1), the clock and the stop token.
    fn polled(
        interval: u64,
        timeout: Option<u64>,
        stopped: bool,
        mut p: impl FnMut(usize, &FakeClock, &Cancel) -> bool,
    ) -> (Result<(), PollError>, usize, Vec<Duration>) {
        let (clock, stop, mut calls) = (FakeClock::new(), Cancel::new(), 0);
        if stopped {
            stop.cancel();
        }
        let r = poll(&clock, &stop, secs(interval), timeout.map(secs), || {
            calls += 1;
            p(calls, &clock, &stop)
        });
        (r, calls, clock.sleeps())
    }

    type Check<'a> = &'a dyn Fn(usize, &FakeClock, &Cancel) -> bool;

    #[test]
    fn poll_calls_at_once_then_on_every_tick_like_go() {
        use PollError::*;
        let never = |_: usize, _: &FakeClock, _: &Cancel| false;
        let cases: [(_, Check, _, _); 9] = [
            (
                (30, None, false),
                &|n, _, _| n == 4,
                (Ok(()), 4),
                vec![secs(30); 3],
            ),
            ((30, None, false), &|_, _, _| true, (Ok(()), 1), vec![]),
            // The tick at 10 s is the deadline: calls at 0..=9 s.
            (
                (1, Some(10), false),
                &never,
                (Err(TimedOut), 10),
                vec![secs(1); 10],
            ),
            // A deadline between ticks cuts the last wait short.
            (
                (30, Some(70), false),
                &never,
                (Err(TimedOut), 3),
                vec![secs(30), secs(30), secs(10)],
            ),
            // Go calls once even when the context is already done; a true answer wins.
            ((30, None, true), &never, (Err(Canceled), 1), vec![]),
            ((30, None, true), &|_, _, _| true, (Ok(()), 1), vec![]),
            (
                (5, Some(3600), false),
                &|n, _, s: &Cancel| {
                    if n == 3 {
                        s.cancel()
                    };
                    false
                },
                (Err(Canceled), 3),
                vec![secs(5); 2],
            ),
            // The grid holds when the predicate takes time.
            (
                (10, None, false),
                &|n, c: &FakeClock, _| {
                    c.advance(secs(4));
                    n == 3
                },
                (Ok(()), 3),
                vec![secs(6); 2],
            ),
            // Calls at 0, 25 (a tick passed: at once, no zero sleep) and 30 s.
            (
                (10, None, false),
                &|n, c: &FakeClock, _| {
                    if n == 1 {
                        c.advance(secs(25))
                    };
                    n == 3
                },
                (Ok(()), 3),
                vec![secs(5)],
            ),
        ];
        for ((interval, timeout, stopped), p, (result, calls), sleeps) in cases {
            let (r, n, slept) = polled(interval, timeout, stopped, p);
            assert_eq!(
                (r, n, slept),
                (result, calls, sleeps),
                "every {interval}s, {timeout:?}"
            );
        }
        assert_eq!(PollError::TimedOut.to_string(), "timed out");
        assert_eq!(PollError::Canceled.to_string(), "context canceled");
    }

    #[test]
    fn retry_attempts_is_go_s_utils_retry() {
        // (attempts, succeeds at call, pre-cancelled) -> (calls, sleeps, result)
        let cases = [
            (
                5,
                None,
                false,
                5,
                4,
                Err("failed after 5 attempts, last error: boom 5"),
            ),
            (5, Some(2), false, 2, 1, Ok(2)),
            (5, None, true, 1, 0, Err("context canceled")),
            (
                1,
                None,
                false,
                1,
                0,
                Err("failed after 1 attempts, last error: boom 1"),
            ),
            (
                0,
                None,
                false,
                1,
                0,
                Err("failed after 0 attempts, last error: boom 1"),
            ),
        ];
        for (attempts, ok_at, stopped, calls, sleeps, result) in cases {
            let (clock, stop, mut n) = (FakeClock::new(), Cancel::new(), 0);
            if stopped {
                stop.cancel();
            }
            let r = retry_attempts(&clock, &stop, attempts, secs(10), || {
                n += 1;
                if Some(n) == ok_at {
                    Ok(n)
                } else {
                    Err(format!("boom {n}"))
                }
            });
            assert_eq!(r.map_err(|e| e.to_string()), result.map_err(String::from));
            assert_eq!((n, clock.sleeps()), (calls, vec![secs(10); sleeps]));
        }
    }

    #[test]
    fn the_ticker_acts_on_ticks_after_one_interval() {
        // (interval, overrun on the first act, acts before the stop) -> act times
        let cases: [(u64, u64, usize, &[u64]); 3] = [
            (300, 0, 3, &[300, 600, 900]),
            // Ticks 20 and 30 pass during the first act: one is taken at once, then the grid.
            (10, 25, 4, &[10, 35, 40, 50]),
            (30, 0, 2, &[30, 60]),
        ];
        for (interval, overrun, acts, expected) in cases {
            let (clock, stop) = (FakeClock::new(), Cancel::new());
            let t0 = clock.now();
            let mut at = Vec::new();
            ticker(&clock, &stop, secs(interval), || {
                at.push((clock.now() - t0).as_secs());
                if at.len() == 1 {
                    clock.advance(secs(overrun));
                }
                if at.len() == acts {
                    stop.cancel();
                }
                ControlFlow::Continue(())
            });
            assert_eq!(at, expected);
            ticker(&clock, &stop, secs(interval), || {
                panic!("acted when stopped")
            });
        }
        let clock = FakeClock::new();
        ticker(&clock, &NeverStop, secs(5), || ControlFlow::Break(()));
        assert_eq!(clock.sleeps(), vec![secs(5)], "a break ends it");
    }

    #[test]
    fn system_clock_moves_and_wakes_on_stop() {
        let c = SystemClock;
        let t = c.now();
        c.sleep(Duration::from_millis(1));
        assert!(c.now() > t);
        let stopped = Cancel::new();
        stopped.cancel();
        let start = Instant::now();
        assert!(c.sleep_or_stop(secs(30), &stopped));
        assert!(start.elapsed() < secs(5));
        assert!(!c.sleep_or_stop(Duration::from_millis(1), &NeverStop));
    }
}
