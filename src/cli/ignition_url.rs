//! `-I/--ignition-url`: the Ignition config fetched over http(s) before the disk is touched,
//! checked like `--ignition-file` (its `--ignition-hash` as soon as it arrives, then its shape).
//!
//! Such URLs may carry credentials (`user:password@`) or tokens (a signed query): only
//! [`shown_url`] (scheme, host, port, path) ever reaches a message.

use anyhow::{anyhow, bail, Result};

use crate::ignition::{IgnitionConfig, IgnitionHash};
use crate::image::source::{fetch_document, shown_url, HttpOptions};
use crate::image::Cancel;

/// The largest config fetched: configs embed files as data URLs, but a URL naming a disk image
/// by mistake must not fill the memory.
const LIMIT: u64 = 64 << 20;

/// Refuse a URL that cannot be fetched safely: https, or plain http only when its content is
/// checked (`hash`) or accepted unchecked (`insecure`). No network access.
pub(crate) fn check(url: &str, hash: bool, insecure: bool) -> Result<()> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| anyhow!("--ignition-url {} is not a URL ({e})", shown_url(url)))?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if hash || insecure => Ok(()),
        "http" => bail!(
            "refusing to fetch the Ignition config {} over plain http: pass --ignition-hash to \
             check it, or --insecure-ignition to accept it unchecked, or use https",
            shown_url(url)
        ),
        other => bail!(
            "--ignition-url {}: unsupported scheme {other:?}; use https (or http with \
             --ignition-hash or --insecure-ignition)",
            shown_url(url)
        ),
    }
}

/// Fetch the config at `url` with the image's retries and CA certificates, and check it.
pub(crate) fn fetch(
    url: &str,
    hash: Option<&IgnitionHash>,
    http: &HttpOptions,
    cancel: &Cancel,
) -> Result<IgnitionConfig> {
    let what = format!("Ignition config {}", shown_url(url));
    // The download's own messages show the URL only as `shown_url` does.
    let body = fetch_document(url, "Ignition config", LIMIT, http, cancel)?.ok_or_else(|| {
        anyhow!("the {what} does not exist (the server answered 404); check --ignition-url")
    })?;
    tracing::info!("fetched the {what} ({} bytes)", body.len());
    IgnitionConfig::check(body, hash, &what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_urls_drop_credentials_query_and_fragment() {
        assert_eq!(
            shown_url("https://user:pw@example.com:8443/a/b.ign?token=s3cret#frag"),
            "https://example.com:8443/a/b.ign"
        );
        assert_eq!(shown_url("http://h/x.ign"), "http://h/x.ign");
        assert_eq!(shown_url("s3cret"), "<not a URL>");
    }

    #[test]
    fn plain_http_needs_a_hash_or_insecure_and_other_schemes_are_refused() {
        assert!(check("https://h/c.ign", false, false).is_ok());
        assert!(check("http://h/c.ign", true, false).is_ok());
        assert!(check("http://h/c.ign", false, true).is_ok());
        let e = check("http://u:pw@h/c.ign?t=1", false, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--ignition-hash") && e.contains("--insecure-ignition"),
            "{e}"
        );
        assert!(
            e.contains("http://h/c.ign") && !e.contains("pw") && !e.contains("t=1"),
            "{e}"
        );
        let e = check("ftp://h/c.ign", true, true).unwrap_err().to_string();
        assert!(e.contains("unsupported scheme \"ftp\""), "{e}");
        let e = check("/tmp/c.ign", false, true).unwrap_err().to_string();
        assert!(e.contains("not a URL"), "{e}");
    }
}
