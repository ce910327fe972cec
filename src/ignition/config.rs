//! The Ignition config to embed: the `--ignition-hash` digest check and a sanity check that it
//! is an Ignition config.
//!
//! The config holds secrets (pull secret, SSH keys, certificates): its contents never reach a log
//! or an error message, only its length, its spec version and its digest.

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256, Sha512};
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// A `--ignition-hash` value: `sha256-<64 hex>` or `sha512-<128 hex>`, the form Ignition itself
/// uses for `verification.hash`. Hex digits may be upper or lower case.
#[derive(Clone, PartialEq, Eq)]
pub enum IgnitionHash {
    Sha256([u8; 32]),
    Sha512([u8; 64]),
}

impl IgnitionHash {
    fn algorithm(&self) -> &'static str {
        match self {
            IgnitionHash::Sha256(_) => "sha256",
            IgnitionHash::Sha512(_) => "sha512",
        }
    }

    fn expected(&self) -> &[u8] {
        match self {
            IgnitionHash::Sha256(d) => d,
            IgnitionHash::Sha512(d) => d,
        }
    }

    /// Check `bytes` against this digest. `what` names the config in the error.
    pub(crate) fn verify(&self, bytes: &[u8], what: &str) -> Result<()> {
        let actual: Vec<u8> = match self {
            IgnitionHash::Sha256(_) => Sha256::digest(bytes).to_vec(),
            IgnitionHash::Sha512(_) => Sha512::digest(bytes).to_vec(),
        };
        if actual != self.expected() {
            bail!(
                "{what} does not match --ignition-hash: its {} is {}, expected {}",
                self.algorithm(),
                to_hex(&actual),
                to_hex(self.expected())
            );
        }
        Ok(())
    }
}

impl fmt::Display for IgnitionHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.algorithm(), to_hex(self.expected()))
    }
}

impl fmt::Debug for IgnitionHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for IgnitionHash {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        const FORM: &str = "expected sha256-<64 hex digits> or sha512-<128 hex digits>";
        let Some((algorithm, hex)) = s.split_once('-') else {
            bail!("invalid Ignition hash {s:?}: {FORM}");
        };
        let hash = match algorithm {
            "sha256" => parse_hex(hex).map(IgnitionHash::Sha256),
            "sha512" => parse_hex(hex).map(IgnitionHash::Sha512),
            _ => bail!("invalid Ignition hash {s:?}: unknown algorithm {algorithm:?}, {FORM}"),
        };
        hash.with_context(|| format!("invalid Ignition hash {s:?}: {FORM}"))
    }
}

fn parse_hex<const N: usize>(hex: &str) -> Result<[u8; N]> {
    if hex.len() != 2 * N {
        bail!("the digest has {} characters, not {}", hex.len(), 2 * N);
    }
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok();
        *byte = pair
            .filter(|p| p.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|p| u8::from_str_radix(p, 16).ok())
            .context("the digest is not hexadecimal")?;
    }
    Ok(out)
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An Ignition config that passed the digest check (if one was given) and looks like an Ignition
/// config: a JSON object whose `ignition.version` is a string.
///
/// That shape check is stricter than coreos-installer (which embeds any bytes) on purpose: an
/// HTML error page from a proxy or a Butane YAML file must fail now, not on first boot. The
/// bytes are embedded verbatim, never re-serialised.
#[derive(Clone)]
pub struct IgnitionConfig {
    bytes: Vec<u8>,
    version: String,
}

impl IgnitionConfig {
    /// Read and check a config file. The digest is checked before anything else.
    pub(crate) fn from_file(path: &Path, hash: Option<&IgnitionHash>) -> Result<Self> {
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading the Ignition config {}", path.display()))?;
        Self::check(bytes, hash, &path.display().to_string())
    }

    /// Check a config read from elsewhere (`what` names it): digest first, then its shape.
    pub(crate) fn check(bytes: Vec<u8>, hash: Option<&IgnitionHash>, what: &str) -> Result<Self> {
        if let Some(hash) = hash {
            hash.verify(&bytes, what)?;
        }
        let config = parse(&bytes).with_context(|| format!("{what} is not an Ignition config"))?;
        let version = version(&config)?.to_owned();
        Ok(IgnitionConfig { bytes, version })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The config's `ignition.version`, e.g. `3.2.0` (not secret; useful in logs).
    pub fn version(&self) -> &str {
        &self.version
    }
}

impl fmt::Debug for IgnitionConfig {
    /// Never the bytes: they hold secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IgnitionConfig")
            .field("len", &self.bytes.len())
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// Parse an Ignition config of any spec version: a JSON object with a string `ignition.version`,
/// the one shape check every reader shares (the SNO merge also limits the version, see
/// `merge::spec_version`). Errors describe the shape only: serde_json's messages carry a
/// position, never the input text, and configs hold secrets.
pub(crate) fn parse(bytes: &[u8]) -> Result<serde_json::Value> {
    let config: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| anyhow::anyhow!("not valid JSON ({e})"))?;
    if !config.is_object() {
        bail!("the JSON document is not an object");
    }
    version(&config)?;
    Ok(config)
}

/// The config's `ignition.version`.
pub(crate) fn version(config: &serde_json::Value) -> Result<&str> {
    match config.pointer("/ignition/version") {
        Some(serde_json::Value::String(version)) => Ok(version),
        Some(_) => bail!("its ignition.version is not a string"),
        None => bail!("it has no ignition.version"),
    }
}

#[cfg(test)]
impl IgnitionConfig {
    /// Check a config already in memory.
    pub(crate) fn from_bytes(bytes: Vec<u8>, hash: Option<&IgnitionHash>) -> Result<Self> {
        Self::check(bytes, hash, "the Ignition config")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &[u8] = br#"{"ignition":{"version":"3.2.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-ed25519 SECRET"]}]}}"#;
    // Digests of "abc".
    const ABC_SHA256: &str =
        "sha256-ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    const ABC_SHA512: &str = "sha512-ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f";

    #[test]
    fn hash_forms() {
        // Upper-case hex is accepted and normalised.
        let upper = ABC_SHA256.to_uppercase().replace("SHA", "sha");
        for (text, shown) in [
            (ABC_SHA256, ABC_SHA256),
            (ABC_SHA512, ABC_SHA512),
            (upper.as_str(), ABC_SHA256),
        ] {
            let h: IgnitionHash = text.parse().unwrap();
            h.verify(b"abc", "x").unwrap();
            assert_eq!(h.to_string(), shown);
        }
    }

    #[test]
    fn hash_parse_errors() {
        let cases = [
            ("", "invalid Ignition hash \"\": expected sha256-"),
            ("sha512", "invalid Ignition hash \"sha512\": expected"),
            (
                "md5-d41d8cd98f00b204e9800998ecf8427e",
                "unknown algorithm \"md5\"",
            ),
            ("SHA256-00", "unknown algorithm \"SHA256\""),
            ("sha256:ba78", "invalid Ignition hash"),
            ("sha512-", "the digest has 0 characters, not 128"),
            ("sha512-00", "the digest has 2 characters, not 128"),
            (
                &ABC_SHA256[..ABC_SHA256.len() - 2],
                "the digest has 62 characters, not 64",
            ),
            (
                &ABC_SHA512.replace("sha512", "sha256"),
                "the digest has 128 characters, not 64",
            ),
            (
                &ABC_SHA256.replace("ba", "zz"),
                "the digest is not hexadecimal",
            ),
            (
                &ABC_SHA256.replace("ba", "+b"),
                "the digest is not hexadecimal",
            ),
        ];
        for (input, expected) in cases {
            let err = format!("{:#}", input.parse::<IgnitionHash>().unwrap_err());
            assert!(err.contains(expected), "{input}: {err}");
            assert!(err.contains("sha256-<64 hex digits>"), "{input}: {err}");
        }
    }

    #[test]
    fn hash_mismatch_is_checked_before_the_shape_and_a_valid_config_is_kept() {
        let h: IgnitionHash = ABC_SHA256.parse().unwrap();
        let err = h.verify(b"abd", "the config").unwrap_err().to_string();
        assert!(
            err.starts_with("the config does not match --ignition-hash: its sha256 is "),
            "{err}"
        );
        assert!(
            err.ends_with(&format!("expected {}", &ABC_SHA256[7..])),
            "{err}"
        );
        // Not JSON and the wrong digest: the digest error wins.
        let h: IgnitionHash = ABC_SHA512.parse().unwrap();
        let err = IgnitionConfig::from_bytes(b"<html>".to_vec(), Some(&h)).unwrap_err();
        assert!(
            err.to_string().contains("does not match --ignition-hash"),
            "{err}"
        );
        // A valid config, with and without its digest.
        let cfg = IgnitionConfig::from_bytes(CONFIG.to_vec(), None).unwrap();
        assert_eq!(cfg.bytes(), CONFIG);
        assert_eq!(cfg.version(), "3.2.0");
        let sha = format!("sha256-{}", to_hex(&Sha256::digest(CONFIG)));
        let cfg = IgnitionConfig::from_bytes(CONFIG.to_vec(), Some(&sha.parse().unwrap())).unwrap();
        assert_eq!(cfg.bytes(), CONFIG);
    }

    #[test]
    fn not_an_ignition_config() {
        let cases: [(&[u8], &str); 7] = [
            (b"", "not valid JSON"),
            (
                b"<html><body>502 Bad Gateway</body></html>",
                "not valid JSON",
            ),
            (b"variant: fcos\nversion: 1.5.0\n", "not valid JSON"),
            (b"[1, 2]", "not an object"),
            (br#"{"passwd":{}}"#, "no ignition.version"),
            (br#"{"ignition":{"config":{}}}"#, "no ignition.version"),
            (
                br#"{"ignition":{"version":3}}"#,
                "ignition.version is not a string",
            ),
        ];
        for (bytes, reason) in cases {
            let err = format!(
                "{:#}",
                IgnitionConfig::from_bytes(bytes.to_vec(), None).unwrap_err()
            );
            assert!(
                err.starts_with("the Ignition config is not an Ignition config: "),
                "{err}"
            );
            assert!(err.contains(reason), "{err}");
        }
    }

    #[test]
    fn from_file_names_the_file_and_never_the_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.ign");
        std::fs::write(&path, b"{\"secret\": \"hunter2\"").unwrap();
        let err = format!("{:#}", IgnitionConfig::from_file(&path, None).unwrap_err());
        assert!(err.starts_with(&format!("{} is not an Ignition config", path.display())));
        assert!(!err.contains("hunter2"), "{err}");

        let err = IgnitionConfig::from_file(&dir.path().join("missing.ign"), None).unwrap_err();
        assert!(
            err.to_string().starts_with("reading the Ignition config "),
            "{err}"
        );

        std::fs::write(&path, CONFIG).unwrap();
        let cfg = IgnitionConfig::from_file(&path, None).unwrap();
        let debug = format!("{cfg:?}");
        assert!(debug.contains(&format!("len: {}", CONFIG.len())), "{debug}");
        assert!(!debug.contains("SECRET"), "{debug}");
    }
}
