//! The bootstrap hostname check (the Go installer's `checkHostname`).
//!
//! A hostname that is not a plain lower-case DNS label-ish name, or that is `localhost`, makes
//! NetworkManager's hostname handling rewrite `/etc/resolv.conf`. That undoes the local DNS
//! prepender and breaks bootkube, so the bootstrap replaces such a name with a random valid one
//! (`hostnamectl set-hostname random-hostname-<uuid4>`) before starting bootkube.

use uuid::Uuid;

/// Prefix of the replacement hostname, as the Go installer spells it.
const RANDOM_HOSTNAME_PREFIX: &str = "random-hostname-";

/// True when `hostname` must be replaced: it is `localhost`, or it does not match
/// `^[a-z0-9][a-z0-9\-.]{0,61}[a-z0-9]$` (checked by hand: 2 to 63 bytes, the first and last a
/// lower-case letter or digit, the ones between may also be `-` or `.`).
///
/// The name is taken exactly as given: a trailing newline (from `cat /etc/hostname`) or upper-case
/// letters make it invalid, as they do for the Go regex. Callers that read a file should trim it.
/// A one-character name does not match the pattern (it needs a first and a last character) and is
/// therefore replaced too, exactly like the Go installer does.
pub(crate) fn needs_random_hostname(hostname: &str) -> bool {
    let bytes = hostname.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let middle = |b: &u8| edge(b) || *b == b'-' || *b == b'.';
    let valid = (2..=63).contains(&bytes.len())
        && edge(&bytes[0])
        && edge(&bytes[bytes.len() - 1])
        && bytes[1..bytes.len() - 1].iter().all(middle);
    hostname == "localhost" || !valid
}

/// `random-hostname-<uuid4>`: 52 characters, all of them allowed by the pattern above.
pub(crate) fn random_hostname() -> String {
    format!("{RANDOM_HOSTNAME_PREFIX}{}", Uuid::new_v4())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names_are_kept_and_invalid_ones_replaced() {
        let kept = [
            "master-0",
            "master-0.ocp.example.com",
            "ab",
            "a1",
            "00",
            "node.with-dashes-and.dots9",
            &"a".repeat(63),
            // Only the exact name localhost is replaced: a longer one that starts with it is fine.
            "localhost2",
            "localhost.localdomain",
        ];
        let replaced = [
            "localhost",
            "",
            "a",
            "-master",
            "master-",
            ".master",
            "master.",
            "Master-0",
            "master_0",
            "master 0",
            "master-0\n",
            "mäster",
            &"a".repeat(64),
        ];
        for (names, replace) in [(&kept[..], false), (&replaced[..], true)] {
            for name in names {
                assert_eq!(needs_random_hostname(name), replace, "{name:?}");
            }
        }
    }

    #[test]
    fn random_hostname_is_valid_and_random() {
        let first = random_hostname();
        let second = random_hostname();
        assert_ne!(first, second);
        for name in [&first, &second] {
            assert!(name.starts_with(RANDOM_HOSTNAME_PREFIX), "{name}");
            let uuid = Uuid::parse_str(&name[RANDOM_HOSTNAME_PREFIX.len()..]).unwrap();
            assert_eq!(uuid.get_version_num(), 4);
            assert_eq!(name.len(), 52);
            assert!(!needs_random_hostname(name), "{name}");
        }
    }
}
