//! Time as an effect: polls and retries sleep through a [`Clock`] so tests run at once.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub trait Clock: Send + Sync {
    fn sleep(&self, d: Duration);
    fn now(&self) -> Instant;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock for tests: `sleep` returns at once, records the duration and moves `now` forward.
#[derive(Debug)]
pub struct FakeClock {
    start: Instant,
    state: Mutex<(Duration, Vec<Duration>)>,
}

impl Default for FakeClock {
    fn default() -> Self {
        FakeClock::new()
    }
}

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
}

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

/// Runs `attempt` up to `attempts` times, sleeping `interval` between tries; returns the first
/// success or the last error.
pub fn retry<T, E>(
    clock: &dyn Clock,
    attempts: usize,
    interval: Duration,
    mut attempt: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let mut tries = 0;
    loop {
        tries += 1;
        match attempt() {
            Ok(v) => return Ok(v),
            Err(e) if tries >= attempts.max(1) => return Err(e),
            Err(_) => clock.sleep(interval),
        }
    }
}

/// Runs `attempt` at once and then every `interval` until it succeeds or `timeout` has passed
/// on `clock`; returns the first success or the last error.
pub fn poll<T, E>(
    clock: &dyn Clock,
    timeout: Duration,
    interval: Duration,
    mut attempt: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = clock.now() + timeout;
    loop {
        match attempt() {
            Ok(v) => return Ok(v),
            Err(e) if clock.now() + interval > deadline => return Err(e),
            Err(_) => clock.sleep(interval),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_records_and_advances() {
        let c = FakeClock::new();
        let t0 = c.now();
        c.sleep(Duration::from_secs(5));
        c.sleep(Duration::from_secs(2));
        assert_eq!(c.now() - t0, Duration::from_secs(7));
        assert_eq!(
            c.sleeps(),
            vec![Duration::from_secs(5), Duration::from_secs(2)]
        );
        c.advance(Duration::from_secs(1));
        assert_eq!(c.elapsed(), Duration::from_secs(8));
        assert_eq!(c.sleeps().len(), 2);
    }

    #[test]
    fn retry_stops_after_attempts() {
        let c = FakeClock::new();
        let mut n = 0;
        let r: Result<(), i32> = retry(&c, 3, Duration::from_secs(5), || {
            n += 1;
            Err(n)
        });
        assert_eq!(r, Err(3));
        assert_eq!(c.sleeps(), vec![Duration::from_secs(5); 2]);
    }

    #[test]
    fn retry_returns_first_success() {
        let c = FakeClock::new();
        let mut n = 0;
        let r: Result<i32, ()> = retry(&c, 3, Duration::from_secs(5), || {
            n += 1;
            if n == 2 {
                Ok(n)
            } else {
                Err(())
            }
        });
        assert_eq!(r, Ok(2));
        assert_eq!(c.sleeps().len(), 1);
    }

    #[test]
    fn poll_gives_up_after_timeout() {
        let c = FakeClock::new();
        let mut n = 0;
        let r: Result<(), i32> = poll(&c, Duration::from_secs(20), Duration::from_secs(5), || {
            n += 1;
            Err(n)
        });
        assert_eq!(r, Err(5), "tries at 0, 5, 10, 15 and 20 s");
        assert_eq!(c.elapsed(), Duration::from_secs(20));
    }

    #[test]
    fn system_clock_moves() {
        let c = SystemClock;
        let t = c.now();
        c.sleep(Duration::from_millis(1));
        assert!(c.now() > t);
    }
}
