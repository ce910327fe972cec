//! Time as an effect, and the waits and retries of both programs.
//!
//! Polls and retries sleep through a [`Clock`] so tests run at once on a [`FakeClock`], and
//! through a [`Stop`] token (the install's `image::Cancel`, with its children, or a clock
//! [`Deadline`]) so that SIGTERM ends a wait at once instead of after its interval. `retry` (a method of `dyn Clock`) is the loop: a [`Schedule`]
//! (how many retries, how long in all, how long between tries) is data, and the try itself says
//! whether its failure is worth another try ([`Failure`]). `poll_until` is the Go installer's
//! endless wait on top of it:
//!
//! ```text
//! f.host.clock.poll_until(&stop, f.intervals.poll, || done.exists().then_some(()))?;
//! ```

#[cfg(any(test, feature = "test-support"))]
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub mod ticks;

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

/// A clock for tests: `sleep` returns at once, records the duration and moves `now` forward.
#[cfg(any(test, feature = "test-support"))]
#[derive(Debug)]
pub struct FakeClock {
    start: Instant,
    state: Mutex<(Duration, Vec<Duration>)>,
}

#[cfg(any(test, feature = "test-support"))]
impl Default for FakeClock {
    fn default() -> Self {
        FakeClock::new()
    }
}

#[cfg(any(test, feature = "test-support"))]
impl FakeClock {
    pub fn new() -> Self {
        FakeClock {
            start: Instant::now(),
            state: Mutex::new((Duration::ZERO, Vec::new())),
        }
    }

    /// Every sleep so far.
    pub fn sleeps(&self) -> Vec<Duration> {
        self.state.lock().unwrap().1.clone()
    }

    /// Time passed on this clock (the sum of the sleeps and of [`FakeClock::advance`]).
    pub fn elapsed(&self) -> Duration {
        self.state.lock().unwrap().0
    }

    /// Moves time forward without recording a sleep.
    pub fn advance(&self, d: Duration) {
        self.state.lock().unwrap().0 += d;
    }

    /// The instant `elapsed` after this clock's start (for a [`Deadline`]).
    pub fn at(&self, elapsed: Duration) -> Instant {
        self.start + elapsed
    }
}

#[cfg(any(test, feature = "test-support"))]
impl Clock for FakeClock {
    fn sleep(&self, d: Duration) {
        let mut state = self.state.lock().unwrap();
        state.0 += d;
        state.1.push(d);
    }

    fn now(&self) -> Instant {
        self.start + self.elapsed()
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
}

impl Delay {
    /// The wait after failure number `failures`; for [`Delay::FullJitter`], the exclusive upper
    /// bound of the random wait.
    pub fn bound(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1);
        match *self {
            Delay::Fixed(d) => d,
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

    /// Whether failure number `failures` (1 for the first) may be followed by another try, by
    /// the retry count (the deadline is the clock's business).
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

impl<E> Failure<E> {
    pub fn into_inner(self) -> E {
        match self {
            Failure::Retry(e) | Failure::RetryWithin(_, e) | Failure::Fatal(e) => e,
        }
    }
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
}

impl Tries {
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

/// How a wait ended without its value. `failures` counts the failed tries (of the job, for
/// `retry_counting`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitError<E> {
    /// The stop token fired, before a try or during a wait; `last` is the last failure, if any.
    Stopped { failures: u32, last: Option<E> },
    /// The retries or the time ran out; `last` is the last failure.
    GaveUp { failures: u32, last: E },
    /// A failure that was not worth another try.
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

impl<E: std::fmt::Display> std::fmt::Display for WaitError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitError::Stopped { .. } => write!(f, "{Stopped}"),
            WaitError::GaveUp { failures, last } => {
                write!(f, "{last} (gave up after {failures} tries)")
            }
            WaitError::Fatal { error, .. } => write!(f, "{error}"),
        }
    }
}

impl<E: std::fmt::Debug + std::fmt::Display> std::error::Error for WaitError<E> {}

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
            if stop.is_stopped() {
                return Err(WaitError::Stopped {
                    failures: tries.failures,
                    last,
                });
            }
            let first = *tries.first.get_or_insert_with(|| self.now());
            let failure = match attempt(tries.failures) {
                Ok(value) => return Ok(value),
                Err(failure) => failure,
            };
            tries.failures += 1;
            let failures = tries.failures;
            let permitted = schedule.permits(&failure, failures);
            let retries = match &failure {
                Failure::RetryWithin(n, _) => Some(*n),
                _ => schedule.retries,
            };
            let error = match failure {
                Failure::Fatal(error) => return Err(WaitError::Fatal { failures, error }),
                other => other.into_inner(),
            };
            let delay = schedule.delay.after(failures);
            let late = schedule
                .timeout
                .is_some_and(|t| self.now() + delay > first + t);
            if !permitted || late {
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
            if self.sleep_or_stop(delay, stop) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Cancel;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn retry_stops_after_the_tries() {
        let fake = FakeClock::new();
        let c: &dyn Clock = &fake;
        let mut n = 0;
        let r: Result<(), _> = c.retry(
            &NeverStop,
            &Schedule::tries(3, secs(5)),
            |_| {
                n += 1;
                Err(Failure::Retry(n))
            },
            |_, _| {},
        );
        assert_eq!(
            r,
            Err(WaitError::GaveUp {
                failures: 3,
                last: 3
            })
        );
        assert_eq!(fake.sleeps(), vec![secs(5); 2]);
    }

    #[test]
    fn retry_returns_the_first_success() {
        let fake = FakeClock::new();
        let c: &dyn Clock = &fake;
        let r: Result<u32, WaitError<()>> = c.retry(
            &NeverStop,
            &Schedule::tries(3, secs(5)),
            |failures| {
                if failures == 1 {
                    Ok(failures)
                } else {
                    Err(Failure::Retry(()))
                }
            },
            |_, _| {},
        );
        assert_eq!(r, Ok(1));
        assert_eq!(fake.sleeps().len(), 1);
    }

    #[test]
    fn a_fatal_failure_is_not_retried() {
        let fake = FakeClock::new();
        let c: &dyn Clock = &fake;
        let r: Result<(), _> = c.retry(
            &NeverStop,
            &Schedule::every(secs(5)),
            |failures| Err(Failure::Fatal(failures)),
            |_, _| {},
        );
        assert_eq!(
            r,
            Err(WaitError::Fatal {
                failures: 1,
                error: 0
            })
        );
        assert!(fake.sleeps().is_empty());
    }

    #[test]
    fn retry_within_the_time_gives_up_after_the_timeout() {
        let fake = FakeClock::new();
        let c: &dyn Clock = &fake;
        let mut n = 0;
        let r: Result<(), _> = c.retry(
            &NeverStop,
            &Schedule::within(secs(20), secs(5)),
            |_| {
                n += 1;
                Err(Failure::Retry(n))
            },
            |_, _| {},
        );
        assert_eq!(
            r.unwrap_err().into_last(),
            Some(5),
            "tries at 0, 5, 10, 15 and 20 s"
        );
        assert_eq!(fake.elapsed(), secs(20));
    }

    #[test]
    fn time_spent_inside_a_try_counts_against_the_timeout() {
        let fake = FakeClock::new();
        let c: &dyn Clock = &fake;
        let mut n = 0;
        let r: Result<(), _> = c.retry(
            &NeverStop,
            &Schedule::within(secs(20), secs(5)),
            |_| {
                n += 1;
                fake.advance(secs(6));
                Err(Failure::Retry(n))
            },
            |_, _| {},
        );
        // Tries start at 0, 11 (6 + 5) and 22 would be too late.
        assert_eq!(r.unwrap_err().failures(), 2);
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
    fn a_failure_with_its_own_budget_ignores_the_schedules() {
        // Go's service client: 404 retried `minRetries` (10) times even when `maxRetries` is 3.
        let fake = FakeClock::new();
        let c: &dyn Clock = &fake;
        let schedule = Schedule::tries(4, secs(1));
        let r: Result<(), _> = c.retry(
            &NeverStop,
            &schedule,
            |_| Err(Failure::RetryWithin(10, 404)),
            |_, r| assert_eq!(r.retries, Some(10)),
        );
        assert_eq!(r.unwrap_err().failures(), 11);
        assert!(schedule.permits(&Failure::Retry(()), 3));
        assert!(!schedule.permits(&Failure::Retry(()), 4));
        assert!(schedule.permits(&Failure::RetryWithin(10, ()), 10));
        assert!(!schedule.permits(&Failure::Fatal(()), 1));
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
        let e = anyhow::Error::from(Stopped).context("waiting for bootkube");
        assert!(e.downcast_ref::<Stopped>().is_some());
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
        assert_eq!(tries.failures(), 1);
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
