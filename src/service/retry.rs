//! The client's retry policy, as data for the one retry loop (`Clock::retry`).

use std::time::Duration;

use crate::clock::{Delay, Failure, Schedule};

/// Retry policy (Go `CreateInventoryClientWithDelay`): which failures are retried how often
/// ([`ClientRetry::classify`]; a request without a response is retried `max_retries` times) and
/// the "full jitter" wait between attempts ([`ClientRetry::schedule`]).
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

    /// The installer's policy (Go `maxRetries` 360): 10 / 360 retries, delays from 2 s capped
    /// at 10 s.
    pub fn installer() -> Self {
        ClientRetry {
            min_retries: Self::MIN_RETRIES,
            max_retries: 360,
            delay_base: Duration::from_secs(2),
            delay_cap: Duration::from_secs(10),
        }
    }

    /// The controller's policy (its Go `maxRetries`): as [`ClientRetry::installer`] with 15
    /// retries for the "max" classes (408/429/5xx/no answer) instead of 360.
    pub fn controller() -> Self {
        ClientRetry {
            max_retries: 15,
            ..Self::installer()
        }
    }

    /// The dry-run policy (Go `maxRetries` in dry-run mode): as [`ClientRetry::installer`] with
    /// 3 retries for the "max" classes.
    pub fn dry_run() -> Self {
        ClientRetry {
            max_retries: 3,
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
}

impl Default for ClientRetry {
    fn default() -> Self {
        Self::installer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl ClientRetry {
        /// Whether a response with `status` to attempt number `attempt` (0-based) is retried.
        fn retry_status(&self, status: u16, attempt: u32) -> bool {
            self.schedule()
                .permits(&self.classify(status, ()), attempt + 1)
        }

        /// Whether a failure without a usable response (connection refused or reset, timeout, a body
        /// cut short) on attempt number `attempt` (0-based) is retried.
        fn retry_transport(&self, attempt: u32) -> bool {
            self.schedule().permits(&Failure::Retry(()), attempt + 1)
        }

        /// Upper bound (exclusive) of the wait after attempt number `attempt`.
        pub(crate) fn delay_bound(&self, attempt: u32) -> Duration {
            self.schedule().delay.bound(attempt + 1)
        }

        /// A random wait in `[0, delay_bound(attempt))`.
        fn delay(&self, attempt: u32) -> Duration {
            self.schedule().delay.after(attempt + 1)
        }
    }

    /// Go's three policies: the retry budget of each status class.
    #[test]
    fn policies_and_retry_classes_match_go() {
        let r = ClientRetry::default();
        assert_eq!(r, ClientRetry::installer());
        assert_eq!(
            (r.delay_base, r.delay_cap),
            (Duration::from_secs(2), Duration::from_secs(10))
        );
        for (policy, min, max) in [
            (r.clone(), 10, 360),
            (ClientRetry::controller(), 10, 15),
            (ClientRetry::dry_run(), 10, 3),
        ] {
            assert_eq!((policy.min_retries, policy.max_retries), (min, max));
            assert_eq!(
                (policy.delay_base, policy.delay_cap),
                (r.delay_base, r.delay_cap)
            );
            // The statuses with a budget of their own, those with the schedule's, the others.
            for (statuses, budget) in [
                (&[404, 423, 425][..], min),
                (&[408, 429, 500, 502, 503, 504, 599], max),
                (&[200, 204, 301, 400, 401, 403, 405, 409, 410, 422, 600], 0),
            ] {
                for &s in statuses {
                    let retried = |attempt| policy.retry_status(s, attempt);
                    assert!(budget == 0 || (retried(0) && retried(budget - 1)), "{s}");
                    assert!(!retried(budget), "{s}");
                }
            }
            assert!(policy.retry_transport(max - 1) && !policy.retry_transport(max));
        }
    }

    #[test]
    fn delay_is_full_jitter_with_cap() {
        let r = ClientRetry::installer();
        assert_eq!(r.delay_bound(0), Duration::from_secs(2));
        assert_eq!(r.delay_bound(1), Duration::from_secs(4));
        assert_eq!(r.delay_bound(2), Duration::from_secs(8));
        assert_eq!(r.delay_bound(3), Duration::from_secs(10));
        assert_eq!(r.delay_bound(40), Duration::from_secs(10));
        let mut distinct = std::collections::HashSet::new();
        for attempt in 0..200 {
            let d = r.delay(attempt % 5);
            assert!(d < r.delay_bound(attempt % 5));
            distinct.insert(d);
        }
        assert!(distinct.len() > 150, "delays should be random");
        let zero = ClientRetry {
            delay_base: Duration::ZERO,
            ..ClientRetry::installer()
        };
        assert_eq!(zero.delay(3), Duration::ZERO);
    }
}
