//! Retry policy for image downloads, pure: which answers are worth another try, and how long to
//! wait before it.

use anyhow::{bail, Result};
use std::str::FromStr;
use std::time::Duration;

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
    /// Whether failure number `failures` (1 for the first) may be retried.
    pub fn allows(&self, failures: u32) -> bool {
        match self.retries {
            Retries::Infinite => true,
            Retries::Count(n) => failures <= n,
        }
    }

    /// How long to wait after failure number `failures` (1, 2, ...): exponential, capped.
    pub fn delay(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(30);
        self.initial_backoff
            .saturating_mul(1u32 << exp)
            .min(self.max_backoff)
    }

    /// What to print for the retry budget in logs.
    pub fn describe_attempt(&self, failures: u32) -> String {
        match self.retries {
            Retries::Infinite => format!("retry {failures}"),
            Retries::Count(n) => format!("retry {failures} of {n}"),
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

    #[test]
    fn backoff_doubles_and_is_capped() {
        let p = RetryPolicy {
            retries: Retries::Count(3),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
        };
        let d: Vec<u64> = (1..=6).map(|f| p.delay(f).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 8, 10, 10]);
        assert_eq!(p.delay(1000), Duration::from_secs(10), "no overflow");
        assert!(p.allows(3) && !p.allows(4));
        let inf = RetryPolicy {
            retries: Retries::Infinite,
            ..p
        };
        assert!(inf.allows(u32::MAX));
        assert_eq!(p.describe_attempt(2), "retry 2 of 3");
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
