//! A clock for the tests of both programs.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::Clock;

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

    /// The instant `elapsed` after this clock's start (for a [`Deadline`](super::Deadline)).
    pub fn at(&self, elapsed: Duration) -> Instant {
        self.start + elapsed
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
