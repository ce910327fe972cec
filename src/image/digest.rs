//! SHA-256 of the compressed stream (what RHCOS stream metadata publishes as `sha256`) and of the
//! uncompressed image (`uncompressed-sha256`). Parsing and comparison are pure.

use anyhow::{bail, Result};
use std::fmt;

pub use sha2::{Digest as _, Sha256};

/// A SHA-256 value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sha256Sum(pub [u8; 32]);

impl Sha256Sum {
    /// Parse 64 hex digits (either case). `what` names the option for the error message.
    pub fn parse(hex: &str, what: &str) -> Result<Sha256Sum> {
        let hex = hex.trim();
        if hex.len() != 64 {
            bail!(
                "{what} must be 64 hexadecimal digits (a SHA-256), got {} characters: {hex:?}",
                hex.len()
            );
        }
        let mut out = [0u8; 32];
        for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
            let s = std::str::from_utf8(pair).unwrap_or("");
            out[i] = u8::from_str_radix(s, 16).map_err(|_| {
                anyhow::anyhow!("{what} must be hexadecimal, found {s:?} in {hex:?}")
            })?;
        }
        Ok(Sha256Sum(out))
    }

    pub fn of(hasher: Sha256) -> Sha256Sum {
        Sha256Sum(hasher.finalize().into())
    }
}

impl fmt::Display for Sha256Sum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Sha256Sum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{self}")
    }
}

/// Which digest a mismatch concerns; callers branch on mismatches (it is never retryable).
#[derive(Debug, thiserror::Error)]
#[error("sha256 of the {which} image is {actual}, expected {expected}: the image is corrupt or not the one published; nothing bootable was left on the disk")]
pub struct DigestMismatch {
    pub which: &'static str,
    pub expected: Sha256Sum,
    pub actual: Sha256Sum,
}

/// The digests a write must match.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    pub compressed: Option<Sha256Sum>,
    pub uncompressed: Option<Sha256Sum>,
}

impl Expected {
    pub fn is_empty(&self) -> bool {
        self.compressed.is_none() && self.uncompressed.is_none()
    }
}

/// Compare an expected digest with the computed one.
pub fn check(
    which: &'static str,
    expected: Option<Sha256Sum>,
    actual: Option<Sha256Sum>,
) -> Result<(), DigestMismatch> {
    match (expected, actual) {
        (Some(expected), Some(actual)) if expected != actual => Err(DigestMismatch {
            which,
            expected,
            actual,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ABC: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn parse_and_print_round_trip() {
        let s = Sha256Sum::parse(&ABC.to_uppercase(), "--sha256").unwrap();
        assert_eq!(s.to_string(), ABC);
        let mut h = Sha256::new();
        h.update(b"abc");
        assert_eq!(Sha256Sum::of(h), s);
    }

    #[test]
    fn bad_hex_names_the_option() {
        let e = Sha256Sum::parse("abc", "--sha256").unwrap_err().to_string();
        assert!(
            e.contains("--sha256") && e.contains("64 hexadecimal"),
            "{e}"
        );
        let bad = format!("zz{}", &ABC[2..]);
        let e = Sha256Sum::parse(&bad, "--uncompressed-sha256")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--uncompressed-sha256") && e.contains("\"zz\""),
            "{e}"
        );
    }

    #[test]
    fn mismatch_is_reported_with_both_values() {
        let a = Sha256Sum([1; 32]);
        let b = Sha256Sum([2; 32]);
        assert!(check("compressed", Some(a), Some(a)).is_ok());
        assert!(check("compressed", None, Some(a)).is_ok());
        let e = check("compressed", Some(a), Some(b)).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains(&a.to_string()) && msg.contains(&b.to_string()),
            "{msg}"
        );
    }
}
