//! RFC 2397 `data:` URLs, the form Ignition configs use to embed file contents
//! (`data:,text%20here`, `data:;base64,…`, `data:text/plain;charset=utf-8;base64,…`), plus the
//! optional gzip layer that an Ignition resource's `compression: "gzip"` field announces.
//!
//! Decoded bytes are often secrets (the pull secret, keys), so errors say what is wrong and where
//! (an offset), never what the data is.

use anyhow::{anyhow, bail, Context, Result};
use flate2::read::MultiGzDecoder;
use std::io::Read;

/// True when `url` uses the `data:` scheme (compared case-insensitively, as URL schemes are).
pub(crate) fn is_data_url(url: &str) -> bool {
    url.get(..5)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("data:"))
}

/// The payload of `data:[<mediatype>][;base64],<data>`, parsed with the `data-url` crate (the
/// WHATWG Fetch algorithm): the payload is percent-decoded, then, with `;base64`, decoded with the standard
/// alphabet, ASCII whitespace skipped and padding optional. `+` is a literal `+`.
///
/// Two differences from the WHATWG algorithm keep what Ignition's Go decoder does: a `%` that
/// does not start a two-hex-digit escape is an error (not a literal `%`), and a `#` is data (not
/// the start of a fragment).
pub(crate) fn decode(url: &str) -> Result<Vec<u8>> {
    if !is_data_url(url) {
        bail!("not a data URL: it does not start with \"data:\"");
    }
    // `#` would end the payload at a URL fragment; Ignition's decoder keeps it as data.
    let escaped = url.replace('#', "%23");
    let parsed =
        data_url::DataUrl::process(&escaped).map_err(|e| anyhow!("malformed data URL: {e}"))?;
    let payload = &url[url.find(',').map_or(url.len(), |comma| comma + 1)..];
    check_escapes(payload).context("malformed data URL payload")?;
    let (data, _fragment) = parsed.decode_to_vec().map_err(|e| {
        // The crate's message names the offending byte; an offset says where without
        // showing the (often secret) data.
        let why = match first_non_base64(payload) {
            Some(offset) => format!("invalid base64 character at offset {offset}"),
            None => e.to_string(),
        };
        anyhow!(why).context("malformed base64 payload in data URL")
    })?;
    Ok(data)
}

/// The payload of a `data:` URL, decompressed as an Ignition resource's `compression` field says.
pub(crate) fn decode_with_compression(url: &str, compression: Option<&str>) -> Result<Vec<u8>> {
    decompress(decode(url)?, compression)
}

/// Apply an Ignition `compression` value: absent or `""` means none, `"gzip"` means gzip
/// (concatenated gzip members are accepted, as Go's gzip reader does). Anything else is an error.
pub(crate) fn decompress(data: Vec<u8>, compression: Option<&str>) -> Result<Vec<u8>> {
    match compression {
        None | Some("") => Ok(data),
        Some("gzip") => {
            let mut out = Vec::with_capacity(data.len().saturating_mul(4));
            MultiGzDecoder::new(data.as_slice())
                .read_to_end(&mut out)
                .context("gzip-compressed contents do not decompress")?;
            Ok(out)
        }
        Some(other) => bail!("unsupported compression {other:?}: only \"gzip\" is known"),
    }
}

/// Every `%` must start a `%XX` escape (hex digits in either case).
fn check_escapes(payload: &str) -> Result<()> {
    let bytes = payload.as_bytes();
    for (i, _) in payload.match_indices('%') {
        match bytes.get(i + 1..i + 3) {
            None => bail!("truncated %-escape at offset {i}"),
            Some(hex) if !hex.iter().all(u8::is_ascii_hexdigit) => {
                bail!("invalid %-escape at offset {i}: two hex digits expected")
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The offset in `payload` of the first character that cannot appear in base64 (escaped or
/// not), if any.
fn first_non_base64(payload: &str) -> Option<usize> {
    let bytes = payload.as_bytes();
    let valid = |b: u8| b.is_ascii_alphanumeric() || b"+/=".contains(&b) || b.is_ascii_whitespace();
    let mut i = 0;
    while i < bytes.len() {
        let (b, len) = match bytes[i] {
            b'%' => (u8::from_str_radix(payload.get(i + 1..i + 3)?, 16).ok()?, 3),
            b => (b, 1),
        };
        if !valid(b) {
            return Some(i);
        }
        i += len;
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    /// Standard base64 with padding; a test helper shared with the sibling modules' tests.
    pub(crate) fn encode_base64(data: &[u8]) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(data)
    }

    pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn payloads() {
        for (url, data) in [
            (
                "data:,text%20here%0A%23!%2Fbin%2Fbash+x",
                "text here\n#!/bin/bash+x",
            ),
            ("data:,a#b%23c", "a#b#c"), // `#` is data
            ("data:,", ""),
            ("data:;base64,", ""),
            ("data:;base64,aGVsbG8gd29ybGQ=", "hello world"),
            (
                "data:text/plain;charset=utf-8;base64,bWFzdGVyLTAK",
                "master-0\n",
            ),
            ("DATA:application/json;BASE64,e30", "{}"),
            ("data:;charset=utf-8,caf%C3%A9", "café"),
            // "??>" encodes to "Pz8+": the '+' may arrive as %2B, and lines may be wrapped.
            ("data:;base64,Pz8%2B", "??>"),
            ("data:;base64,aGVs%0AbG8g%0D%0Ad29y bGQ=", "hello world"),
        ] {
            assert_eq!(decode(url).unwrap(), data.as_bytes(), "{url}");
        }
        assert!(is_data_url("Data:,x"));
        for url in [
            "https://api-int.example.com:22623/config/master",
            "dat",
            "dat\u{e9}:",
        ] {
            assert!(!is_data_url(url), "{url}");
        }
    }

    /// The payload of a base64 data URL.
    fn b64(payload: &str) -> Result<Vec<u8>> {
        decode(&format!("data:;base64,{payload}"))
    }

    #[test]
    fn base64_round_trips_all_byte_values_and_errors() {
        let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        for len in [0, 1, 2, 3, 4, 5, 999, 1000] {
            let encoded = encode_base64(&data[..len]);
            assert_eq!(b64(&encoded).unwrap(), &data[..len]);
            let unpadded = encoded.trim_end_matches('=');
            assert_eq!(b64(unpadded).unwrap(), &data[..len]);
        }
        for bad in [
            "Zg=a",
            "Z",
            "Zm9vY",
            "Zg=",
            "Zm8==",
            "Zm9v=",
            "Zm9v-_",
            "Zm\u{e9}9v",
            "=Zg",
        ] {
            let err = b64(bad).unwrap_err();
            assert!(!format!("{err:#}").is_empty(), "{bad}");
        }
        let err = b64("Zm9v!abc").unwrap_err();
        assert_eq!(
            err.root_cause().to_string(),
            "invalid base64 character at offset 4"
        );
        let err = b64("Zm9v%21abc").unwrap_err();
        assert_eq!(
            err.root_cause().to_string(),
            "invalid base64 character at offset 4",
            "an escaped invalid character is found too"
        );
    }

    #[test]
    fn malformed_urls_are_rejected_without_echoing_the_payload() {
        let secret = "s3cr3t-token";
        for url in [
            format!("https://example.com/{secret}"),
            format!("data:text/plain;base64{secret}"),
            format!("data:;base64,{secret}!"),
            format!("data:,{secret}%zz"),
            format!("data:,{secret}%4"),
        ] {
            let err = decode(&url).unwrap_err();
            let text = format!("{err:#}");
            assert!(!text.contains(secret), "{text}");
        }
    }

    #[test]
    fn gzip_compression() {
        let original = b"{\"auths\":{}}\n".repeat(20);
        let url = format!("data:;base64,{}", encode_base64(&gzip(&original)));
        let decoded = |url: &str, compression| decode_with_compression(url, compression);
        assert_eq!(decoded(&url, Some("gzip")).unwrap(), original);
        // Without the compression field the caller gets the compressed bytes back.
        assert_eq!(decoded(&url, None).unwrap(), gzip(&original));
        assert_eq!(decoded("data:,abc", Some("")).unwrap(), b"abc");
        // Concatenated members, as Go's gzip reader reads them.
        let mut both = gzip(b"first,");
        both.extend(gzip(b"second"));
        assert_eq!(decompress(both, Some("gzip")).unwrap(), b"first,second");
        let err = decoded("data:,not-gzip", Some("gzip")).unwrap_err();
        assert!(format!("{err:#}").contains("do not decompress"), "{err:#}");
        let err = decoded("data:,x", Some("xz")).unwrap_err();
        assert!(err.to_string().contains("unsupported compression \"xz\""));
    }
}
