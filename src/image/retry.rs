//! Retry policy for image downloads, pure: which answers are worth another try, and how long to
//! wait before it.

use anyhow::{bail, Result};
use std::str::FromStr;
use std::time::Duration;

use crate::clock::{Delay, Schedule};

/// `--fetch-retries`: a count, or `infinite` (what the CoreOS live service passes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retries {
    Count(u32),
    Infinite,
}

impl FromStr for Retries {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Retries> {
        if s.eq_ignore_ascii_case("infinite") {
            return Ok(Retries::Infinite);
        }
        match s.parse::<u32>() {
            Ok(n) => Ok(Retries::Count(n)),
            Err(_) => bail!("expected a number of retries or \"infinite\", got {s:?}"),
        }
    }
}

/// The download's retries as the command line gives them; [`RetryPolicy::schedule`] is what
/// the retry loop (`Clock::retry`) runs on.
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    pub retries: Retries,
    /// Wait before the first retry; doubled each time.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: Retries::Count(5),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// Exponential backoff, capped; no overall deadline (a slow mirror may take hours).
    pub fn schedule(&self) -> Schedule {
        Schedule {
            retries: match self.retries {
                Retries::Count(n) => Some(n),
                Retries::Infinite => None,
            },
            timeout: None,
            delay: Delay::Doubling {
                first: self.initial_backoff,
                cap: self.max_backoff,
            },
        }
    }
}

/// HTTP answers that may succeed when asked again: request timeout, too many requests, and
/// server errors (curl's `--retry` classes, which coreos-installer follows too).
pub fn is_retryable_status(code: u16) -> bool {
    code == 408 || code == 429 || (500..600).contains(&code)
}

/// `Content-Range: bytes FIRST-LAST/TOTAL` (TOTAL may be `*`).
pub fn parse_content_range(v: &str) -> Option<(u64, u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes")?.trim_start();
    let (range, total) = rest.split_once('/')?;
    let (first, last) = range.split_once('-')?;
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    Some((first.trim().parse().ok()?, last.trim().parse().ok()?, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_parse() {
        assert_eq!("3".parse::<Retries>().unwrap(), Retries::Count(3));
        assert_eq!("infinite".parse::<Retries>().unwrap(), Retries::Infinite);
        assert_eq!("INFINITE".parse::<Retries>().unwrap(), Retries::Infinite);
        let e = "-1".parse::<Retries>().unwrap_err().to_string();
        assert!(e.contains("infinite"), "{e}");
    }

    /// The doubling, its cap and the retry count at work are the clock's (`clock::tests`).
    #[test]
    fn the_schedule_doubles_the_backoff_for_the_retries_given() {
        let p = RetryPolicy {
            retries: Retries::Count(3),
            ..RetryPolicy::default()
        };
        let first = Duration::from_secs(1);
        let cap = Duration::from_secs(60);
        let doubling = Delay::Doubling { first, cap };
        let s = p.schedule();
        assert_eq!((s.retries, s.timeout, s.delay), (Some(3), None, doubling));
        let inf = RetryPolicy {
            retries: Retries::Infinite,
            ..p
        };
        assert_eq!(inf.schedule().retries, None);
    }

    #[test]
    fn retryable_statuses() {
        for c in [408, 429, 500, 502, 503, 504, 599] {
            assert!(is_retryable_status(c), "{c}");
        }
        for c in [200, 206, 301, 400, 401, 403, 404, 416] {
            assert!(!is_retryable_status(c), "{c}");
        }
    }

    #[test]
    fn content_range_parses() {
        assert_eq!(
            parse_content_range("bytes 100-199/1000"),
            Some((100, 199, Some(1000)))
        );
        assert_eq!(parse_content_range("bytes 0-0/*"), Some((0, 0, None)));
        assert_eq!(parse_content_range("bytes */1000"), None);
        assert_eq!(parse_content_range("items 1-2/3"), None);
    }
}
