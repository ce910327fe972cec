//! RFC 2397 `data:` URLs, the form Ignition configs use to embed file contents
//! (`data:,text%20here`, `data:;base64,…`, `data:text/plain;charset=utf-8;base64,…`), plus the
//! optional gzip layer that an Ignition resource's `compression: "gzip"` field announces.
//!
//! Decoded bytes are often secrets (the pull secret, keys), so errors say what is wrong and where
//! (an offset), never what the data is.

use anyhow::{bail, Context, Result};
use flate2::read::MultiGzDecoder;
use std::io::Read;

/// The media type RFC 2397 implies when the URL names none (`data:,…` or `data:;base64,…`).
pub const DEFAULT_MEDIA_TYPE: &str = "text/plain;charset=US-ASCII";

/// A parsed `data:` URL.
#[derive(Clone, PartialEq, Eq)]
pub struct DataUrl {
    /// The media type with its parameters as written (without `;base64`), or
    /// [`DEFAULT_MEDIA_TYPE`] when the URL gives none.
    pub media_type: String,
    /// Whether the payload was base64-encoded (it has been decoded in `data`).
    pub base64: bool,
    /// The payload after percent- and base64-decoding.
    pub data: Vec<u8>,
}

// Hand-written so that a `{:?}` of a parsed URL can never print a secret payload.
impl std::fmt::Debug for DataUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataUrl")
            .field("media_type", &self.media_type)
            .field("base64", &self.base64)
            .field("data", &format_args!("<{} bytes>", self.data.len()))
            .finish()
    }
}

/// True when `url` uses the `data:` scheme (compared case-insensitively, as URL schemes are).
pub fn is_data_url(url: &str) -> bool {
    url.get(..5)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("data:"))
}

/// Parse `data:[<mediatype>][;base64],<data>`.
///
/// The payload is percent-decoded first (RFC 2397 payloads are URL-encoded, and base64 payloads may
/// contain `%2B`-style escapes); then, with `;base64`, ASCII whitespace is skipped and the rest is
/// decoded with the standard alphabet, padding optional. `+` is a literal `+`, not a space.
pub fn parse(url: &str) -> Result<DataUrl> {
    if !is_data_url(url) {
        bail!("not a data URL: it does not start with \"data:\"");
    }
    let rest = &url[5..];
    let comma = rest
        .find(',')
        .context("malformed data URL: no ',' separates the media type from the data")?;
    let (header, payload) = (&rest[..comma], &rest[comma + 1..]);

    // `;base64` is only meaningful as the last header parameter (RFC 2397 grammar).
    let (media_type, base64) = match header.rsplit_once(';') {
        Some((before, last)) if last.trim().eq_ignore_ascii_case("base64") => (before, true),
        _ => (header, false),
    };
    let media_type = media_type.trim();
    let media_type = if media_type.is_empty() || media_type.starts_with(';') {
        // `data:;charset=utf-8,…` names parameters but no type: RFC 2397 implies text/plain.
        format!(
            "text/plain{}",
            if media_type.is_empty() {
                ";charset=US-ASCII"
            } else {
                media_type
            }
        )
    } else {
        media_type.to_string()
    };

    let unescaped = percent_decode(payload).context("malformed data URL payload")?;
    let data = if base64 {
        decode_base64(&unescaped).context("malformed base64 payload in data URL")?
    } else {
        unescaped
    };
    Ok(DataUrl {
        media_type,
        base64,
        data,
    })
}

/// The payload of a `data:` URL.
pub fn decode(url: &str) -> Result<Vec<u8>> {
    Ok(parse(url)?.data)
}

/// The payload of a `data:` URL, decompressed as an Ignition resource's `compression` field says.
pub fn decode_with_compression(url: &str, compression: Option<&str>) -> Result<Vec<u8>> {
    decompress(decode(url)?, compression)
}

/// Apply an Ignition `compression` value: absent or `""` means none, `"gzip"` means gzip
/// (concatenated gzip members are accepted, as Go's gzip reader does). Anything else is an error.
pub fn decompress(data: Vec<u8>, compression: Option<&str>) -> Result<Vec<u8>> {
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

/// Decode `%XX` escapes (hex digits in either case); every other byte is kept as is.
pub fn percent_decode(input: &str) -> Result<Vec<u8>> {
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .with_context(|| format!("truncated %-escape at offset {i}"))?;
            match (hex_value(hex[0]), hex_value(hex[1])) {
                (Some(high), Some(low)) => out.push(high << 4 | low),
                _ => bail!("invalid %-escape at offset {i}: two hex digits expected"),
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Standard-alphabet base64 (RFC 4648 §4). ASCII whitespace is ignored (configs written by hand
/// or by tools that wrap lines), padding is optional, but `=` may only end the input, and a final
/// group of a single character (which cannot encode a byte) is an error. Unused trailing bits are
/// not checked, like Go's non-strict `base64.StdEncoding`.
pub fn decode_base64(input: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len() / 4 * 3 + 2);
    let mut group: u32 = 0;
    let mut group_len = 0usize;
    let mut padding = 0usize;
    for (offset, &b) in input.iter().enumerate() {
        if b.is_ascii_whitespace() {
            continue;
        }
        if b == b'=' {
            padding += 1;
            continue;
        }
        if padding > 0 {
            bail!("base64 data continues after '=' padding (offset {offset})");
        }
        let value = base64_value(b)
            .with_context(|| format!("invalid base64 character at offset {offset}"))?;
        group = group << 6 | u32::from(value);
        group_len += 1;
        if group_len == 4 {
            out.extend_from_slice(&[(group >> 16) as u8, (group >> 8) as u8, group as u8]);
            group = 0;
            group_len = 0;
        }
    }
    // The last, partial group: 2 characters carry 1 byte, 3 carry 2. Padding, when present,
    // must complete exactly that group to 4 characters.
    match group_len {
        0 if padding == 0 => {}
        2 if padding == 0 || padding == 2 => out.push((group >> 4) as u8),
        3 if padding == 0 || padding == 1 => {
            out.extend_from_slice(&[(group >> 10) as u8, (group >> 2) as u8]);
        }
        1 => bail!("base64 data ends with a lone character: truncated input"),
        _ => bail!("base64 data has misplaced '=' padding"),
    }
    Ok(out)
}

fn base64_value(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    /// Standard base64 with padding; a test helper shared with the sibling modules' tests.
    pub(crate) fn encode_base64(data: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in data.chunks(3) {
            let n = chunk.len();
            let v = u32::from(chunk[0]) << 16
                | u32::from(*chunk.get(1).unwrap_or(&0)) << 8
                | u32::from(*chunk.get(2).unwrap_or(&0));
            for i in 0..4 {
                if i <= n {
                    out.push(ALPHABET[(v >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn plain_percent_encoded_payload() {
        let url = parse("data:,text%20here%0A%23!%2Fbin%2Fbash+x").unwrap();
        assert_eq!(url.data, b"text here\n#!/bin/bash+x");
        assert!(!url.base64);
        assert_eq!(url.media_type, DEFAULT_MEDIA_TYPE);
    }

    #[test]
    fn empty_payload_is_an_empty_file() {
        assert_eq!(decode("data:,").unwrap(), b"");
        assert_eq!(decode("data:;base64,").unwrap(), b"");
    }

    #[test]
    fn base64_without_media_type() {
        let url = parse("data:;base64,aGVsbG8gd29ybGQ=").unwrap();
        assert_eq!(url.data, b"hello world");
        assert!(url.base64);
        assert_eq!(url.media_type, DEFAULT_MEDIA_TYPE);
    }

    #[test]
    fn base64_with_media_type_and_charset() {
        let url = parse("data:text/plain;charset=utf-8;base64,bWFzdGVyLTAK").unwrap();
        assert_eq!(url.data, b"master-0\n");
        assert_eq!(url.media_type, "text/plain;charset=utf-8");
        let url = parse("DATA:application/json;BASE64,e30").unwrap();
        assert_eq!(url.data, b"{}");
        assert_eq!(url.media_type, "application/json");
    }

    #[test]
    fn parameters_without_type_imply_text_plain() {
        let url = parse("data:;charset=utf-8,caf%C3%A9").unwrap();
        assert_eq!(url.media_type, "text/plain;charset=utf-8");
        assert_eq!(String::from_utf8(url.data).unwrap(), "café");
    }

    #[test]
    fn base64_payload_may_be_percent_escaped_and_wrapped() {
        // "??>" encodes to "Pz8+": the '+' may arrive as %2B, and lines may be wrapped.
        assert_eq!(decode("data:;base64,Pz8%2B").unwrap(), b"??>");
        assert_eq!(
            decode("data:;base64,aGVs%0AbG8g%0D%0Ad29y bGQ=").unwrap(),
            b"hello world"
        );
    }

    #[test]
    fn base64_padding_is_optional() {
        for (encoded, decoded) in [
            ("", &b""[..]),
            ("Zg", b"f"),
            ("Zg==", b"f"),
            ("Zm8", b"fo"),
            ("Zm8=", b"fo"),
            ("Zm9v", b"foo"),
            ("Zm9vYg", b"foob"),
            ("Zm9vYmE=", b"fooba"),
            ("Zm9vYmFy", b"foobar"),
        ] {
            assert_eq!(
                decode_base64(encoded.as_bytes()).unwrap(),
                decoded,
                "{encoded}"
            );
        }
    }

    #[test]
    fn base64_round_trips_all_byte_values() {
        let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        for len in [0, 1, 2, 3, 4, 5, 999, 1000] {
            let encoded = encode_base64(&data[..len]);
            assert_eq!(decode_base64(encoded.as_bytes()).unwrap(), &data[..len]);
            let unpadded = encoded.trim_end_matches('=');
            assert_eq!(decode_base64(unpadded.as_bytes()).unwrap(), &data[..len]);
        }
    }

    #[test]
    fn base64_errors() {
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
            let err = decode_base64(bad.as_bytes()).unwrap_err();
            assert!(!format!("{err:#}").is_empty(), "{bad}");
        }
        let err = decode_base64(b"Zm9v!abc").unwrap_err();
        assert_eq!(err.to_string(), "invalid base64 character at offset 4");
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
            let err = parse(&url).unwrap_err();
            let text = format!("{err:#}");
            assert!(!text.contains(secret), "{text}");
        }
    }

    #[test]
    fn debug_does_not_show_the_payload() {
        let url = parse("data:,top-secret").unwrap();
        let text = format!("{url:?}");
        assert!(!text.contains("top-secret"), "{text}");
        assert!(text.contains("10 bytes"), "{text}");
    }

    #[test]
    fn gzip_compression() {
        let original = b"{\"auths\":{}}\n".repeat(20);
        let url = format!("data:;base64,{}", encode_base64(&gzip(&original)));
        assert_eq!(
            decode_with_compression(&url, Some("gzip")).unwrap(),
            original
        );
        // Without the compression field the caller gets the compressed bytes back.
        assert_eq!(
            decode_with_compression(&url, None).unwrap(),
            gzip(&original)
        );
        assert_eq!(
            decode_with_compression("data:,abc", Some("")).unwrap(),
            b"abc"
        );
    }

    #[test]
    fn concatenated_gzip_members() {
        let mut both = gzip(b"first,");
        both.extend(gzip(b"second"));
        assert_eq!(decompress(both, Some("gzip")).unwrap(), b"first,second");
    }

    #[test]
    fn compression_errors() {
        let err = decode_with_compression("data:,not-gzip", Some("gzip")).unwrap_err();
        assert!(format!("{err:#}").contains("do not decompress"), "{err:#}");
        let err = decode_with_compression("data:,x", Some("xz")).unwrap_err();
        assert!(
            err.to_string().contains("unsupported compression \"xz\""),
            "{err}"
        );
    }

    #[test]
    fn scheme_check() {
        assert!(is_data_url("data:,x"));
        assert!(is_data_url("Data:,x"));
        assert!(!is_data_url(
            "https://api-int.example.com:22623/config/master"
        ));
        assert!(!is_data_url("dat"));
        assert!(!is_data_url("dat\u{e9}:"));
    }
}
