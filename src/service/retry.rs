//! The client's retry policy, as data for the one retry loop (`Clock::retry`).

use std::time::Duration;

use crate::clock::{Delay, Failure, Schedule};

/// Retry policy (Go `CreateInventoryClientWithDelay`). With `attempt` counted from 0, a call is
/// retried when:
/// * the status is 404, 423 or 425 and `attempt < min_retries`;
/// * the status is 408, 429 or 5xx and `attempt < max_retries`;
/// * the request failed without a response (refused, reset, timed out…) and `attempt < max_retries`.
///
/// The wait before the next attempt is a random duration in
/// `[0, min(delay_cap, delay_base × 2^attempt))` ("full jitter"). This is data for the one retry
/// loop (`Clock::retry`): [`ClientRetry::schedule`] and [`ClientRetry::classify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientRetry {
    pub min_retries: u32,
    pub max_retries: u32,
    pub delay_base: Duration,
    pub delay_cap: Duration,
}

impl ClientRetry {
    /// Go `minRetries`.
    pub const MIN_RETRIES: u32 = 10;
    /// Go `maxRetries` for the installer.
    pub const MAX_RETRIES: u32 = 360;
    /// Go `maxRetries` in dry-run mode.
    pub const DRY_RUN_MAX_RETRIES: u32 = 3;

    /// The installer's policy: 10 / 360 retries, delays from 2 s capped at 10 s.
    pub fn installer() -> Self {
        ClientRetry {
            min_retries: Self::MIN_RETRIES,
            max_retries: Self::MAX_RETRIES,
            delay_base: Duration::from_secs(2),
            delay_cap: Duration::from_secs(10),
        }
    }

    /// Go `maxRetries` for the assisted-installer-controller.
    pub const CONTROLLER_MAX_RETRIES: u32 = 15;

    /// The controller's policy: as [`ClientRetry::installer`] with 15 retries for the "max"
    /// classes (408/429/5xx/no answer) instead of 360.
    pub fn controller() -> Self {
        ClientRetry {
            max_retries: Self::CONTROLLER_MAX_RETRIES,
            ..Self::installer()
        }
    }

    /// The dry-run policy: as [`ClientRetry::installer`] with 3 retries for the "max" classes.
    pub fn dry_run() -> Self {
        ClientRetry {
            max_retries: Self::DRY_RUN_MAX_RETRIES,
            ..Self::installer()
        }
    }

    /// `max_retries` retries with full-jitter delays; no overall deadline (the Go client sets
    /// none).
    pub fn schedule(&self) -> Schedule {
        Schedule {
            retries: Some(self.max_retries),
            timeout: None,
            delay: Delay::FullJitter {
                base: self.delay_base,
                cap: self.delay_cap,
            },
        }
    }

    /// An answer with a failed `status`: 404/423/425 have a budget of their own
    /// (`min_retries`), 408/429/5xx the schedule's, anything else is final.
    pub fn classify<E>(&self, status: u16, error: E) -> Failure<E> {
        match status {
            404 | 423 | 425 => Failure::RetryWithin(self.min_retries, error),
            408 | 429 | 500..=599 => Failure::Retry(error),
            _ => Failure::Fatal(error),
        }
    }

    /// Whether a response with `status` to attempt number `attempt` (0-based) is retried.
    pub fn retry_status(&self, status: u16, attempt: u32) -> bool {
        self.schedule()
            .permits(&self.classify(status, ()), attempt + 1)
    }

    /// Whether a failure without a usable response (connection refused or reset, timeout, a body
    /// cut short) on attempt number `attempt` (0-based) is retried.
    pub fn retry_transport(&self, attempt: u32) -> bool {
        self.schedule().permits(&Failure::Retry(()), attempt + 1)
    }

    /// Upper bound (exclusive) of the wait after attempt number `attempt`.
    pub fn delay_bound(&self, attempt: u32) -> Duration {
        self.schedule().delay.bound(attempt + 1)
    }

    /// A random wait in `[0, delay_bound(attempt))`.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.schedule().delay.after(attempt + 1)
    }
}

impl Default for ClientRetry {
    fn default() -> Self {
        Self::installer()
    }
}
