//! How a given or stream image is verified, decided before the disk is written: its OpenPGP
//! signature (`<url>.sig`, `<file>.sig`, or the stream's) when there is one, else a digest the
//! user gave (or the stream's, when its metadata came over https), else `--insecure`.
//!
//! A signature that is present is always checked (unparseable or by an unknown key: refused
//! here; not matching the image: the write fails before its partition table is written), even
//! with `--insecure`, which allows only a *missing* one, as coreos-installer's does.

use anyhow::{bail, Context, Result};

use super::plan::{Signing, Unverified, WritePlan};
use crate::disk::Device;
use crate::image::digest::Expected;
use crate::image::signing::ImageSignature;
use crate::image::source::{self, fetch_document, shown_url, HttpOptions, ImageLocation};
use crate::image::stream::{metal_image, StreamSpec};
use crate::image::{Cancel, Input, WriteOptions};

/// A signature is a few hundred bytes; a stream's metadata some KiB.
const SIGNATURE_LIMIT: u64 = 64 << 10;
const METADATA_LIMIT: u64 = 16 << 20;

/// Where the detached signature of an image is: the URL with `.sig` appended to its path
/// (before any query or fragment), or the file's path with `.sig` appended.
pub(crate) fn signature_location(image: &ImageLocation) -> ImageLocation {
    match image {
        ImageLocation::Url(u) => {
            let end = u.find(['?', '#']).unwrap_or(u.len());
            ImageLocation::Url(format!("{}.sig{}", &u[..end], &u[end..]))
        }
        ImageLocation::File(p) => {
            let mut s = p.clone().into_os_string();
            s.push(".sig");
            ImageLocation::File(s.into())
        }
    }
}

/// For messages and logs: a URL without credentials or query (see [`shown_url`]).
fn describe(l: &ImageLocation) -> String {
    match l {
        ImageLocation::Url(u) => shown_url(u),
        ImageLocation::File(p) => p.display().to_string(),
    }
}

/// The signature's bytes; `None` when there is none (not found, or not fetched, over http).
fn read_signature(
    at: &ImageLocation,
    http: &HttpOptions,
    stop: &Cancel,
) -> Result<Option<Vec<u8>>> {
    match at {
        // As coreos-installer: a signature that cannot be fetched (a 403 from a bucket that
        // hides missing objects, a server error after the retries) counts as missing. That
        // weakens nothing: a missing signature still needs a digest or --insecure.
        ImageLocation::Url(u) => {
            match fetch_document(u, "image signature", SIGNATURE_LIMIT, http, stop) {
                Err(e) if !stop.is_cancelled() => {
                    tracing::warn!("{e:#}: treating the signature as missing");
                    Ok(None)
                }
                r => r,
            }
        }
        ImageLocation::File(p) => match std::fs::read(p) {
            Ok(data) => Ok(Some(data)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading the signature {}", p.display())),
        },
    }
}

/// Where an image's digests come from, and so whether they count as verification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Digests {
    /// `--sha256`, `--uncompressed-sha256`: the user's.
    Given,
    /// The stream metadata's: they count only over https (over plain http whoever forges the
    /// image can forge them too).
    Stream { https: bool },
}

/// The policy: the signature to check while streaming, or none when the image may be written
/// without one.
pub(crate) fn decide(
    image: &str,
    sig_source: &str,
    sig: Option<&[u8]>,
    expected: &Expected,
    digests: Digests,
    signing: &Signing,
) -> Result<Option<ImageSignature>> {
    if let Some(data) = sig {
        let sig = ImageSignature::parse(data, &signing.keys, image, sig_source)?;
        tracing::info!(
            "{image}: checking its signature {sig_source} ({}) as it streams",
            sig.key()
        );
        return Ok(Some(sig));
    }
    if digests != (Digests::Stream { https: false }) && !expected.is_empty() {
        tracing::info!("{image}: no signature ({sig_source} is missing); checking its sha256");
        return Ok(None);
    }
    let (why, remedy) = match (digests, expected.is_empty()) {
        (Digests::Given, _) => (
            "no digest to check it",
            "pass --sha256 (of the download) or --uncompressed-sha256",
        ),
        (Digests::Stream { .. }, true) => ("the stream gives no digest", "pass --signing-key if it is signed by another key"),
        (Digests::Stream { .. }, false) => (
            "the stream's digests came over plain http, where whoever forges the image can forge them too",
            "use an https --stream-base-url",
        ),
    };
    match signing.unverified {
        Unverified::Refuse => bail!(
            "refusing to write {image}: it has no signature ({sig_source} is missing) and {why}; \
             {remedy}, or --insecure to write it unchecked"
        ),
        Unverified::Allow => tracing::warn!(
            "--insecure: writing {image} without verification: no signature ({sig_source} is missing) and {why}"
        ),
        Unverified::Warn => tracing::warn!(
            "no signature ({sig_source} is missing) and no --sha256 in --installer-args: {image} will be written without verification"
        ),
    }
    Ok(None)
}

/// `--image-url`/`--image-file`: its signature looked for and the policy applied (before the
/// disk is opened); then the source and the device.
pub(super) fn open_given(
    plan: &WritePlan,
    location: &ImageLocation,
    opts: &mut WriteOptions,
    stop: &Cancel,
) -> Result<(Input, Device)> {
    let at = signature_location(location);
    let sig = read_signature(&at, &plan.http, stop)?;
    let (image, sig_source) = (describe(location), describe(&at));
    opts.signature = decide(
        &image,
        &sig_source,
        sig.as_deref(),
        &opts.expected,
        Digests::Given,
        &plan.signing,
    )?;
    // The source first: a wrong URL or an unreachable server fails before the disk is opened.
    let src = source::open(location, &plan.http, stop)?;
    Ok((src.into(), Device::open_for_write(&plan.device)?))
}

/// `--stream`: the metadata fetched, the device opened (its sector size chooses the format),
/// the image's digests and signature from the metadata; nothing written yet.
pub(super) fn open_stream(
    plan: &WritePlan,
    spec: &StreamSpec,
    opts: &mut WriteOptions,
    stop: &Cancel,
) -> Result<(Input, Device)> {
    let url = spec.url();
    let what = format!("metadata of stream {:?}", spec.name);
    let Some(json) = fetch_document(&url, &what, METADATA_LIMIT, &plan.http, stop)? else {
        bail!(
            "there is no stream {:?}: {} does not exist (404); check --stream (e.g. stable, testing, next) and --stream-base-url",
            spec.name,
            shown_url(&url)
        );
    };
    let dev = Device::open_for_write(&plan.device)?;
    let format = StreamSpec::format(dev.sector_size());
    let img = metal_image(&json, &spec.name, &spec.arch, format)?;
    tracing::info!(
        "stream {:?} ({}, {format}): {}",
        spec.name,
        spec.arch,
        shown_url(&img.location)
    );
    let location = ImageLocation::Url(img.location.clone());
    let at = match &img.signature {
        Some(u) => ImageLocation::Url(u.clone()),
        None => signature_location(&location),
    };
    let sig = read_signature(&at, &plan.http, stop)?;
    // Over plain http a man in the middle could change the image and its digests together.
    let https = url.starts_with("https://");
    opts.expected = img.expected;
    opts.signature = decide(
        &shown_url(&img.location),
        &describe(&at),
        sig.as_deref(),
        &img.expected,
        Digests::Stream { https },
        &plan.signing,
    )?;
    let src = source::open(&location, &plan.http, stop)?;
    Ok((src.into(), dev))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::digest::Sha256Sum;
    use crate::image::signing::Keyring;

    #[test]
    fn the_signature_is_next_to_the_image() {
        let url = |u: &str| match signature_location(&ImageLocation::Url(u.into())) {
            ImageLocation::Url(sig) => sig,
            other => panic!("{other:?}"),
        };
        assert_eq!(url("https://h/a/i.raw.xz"), "https://h/a/i.raw.xz.sig");
        assert_eq!(url("https://h/i.xz?t=1&u=2"), "https://h/i.xz.sig?t=1&u=2");
        assert_eq!(url("http://h/i.xz#x"), "http://h/i.xz.sig#x");
        let f = signature_location(&ImageLocation::File("/v/i.raw.gz".into()));
        assert_eq!(f, ImageLocation::File("/v/i.raw.gz.sig".into()));
        // Messages name it without the query (it may hold a token).
        let sig = signature_location(&ImageLocation::Url("https://u:p@h/i.xz?t=1".into()));
        assert_eq!(describe(&sig), "https://h/i.xz.sig");
    }

    #[test]
    fn a_missing_signature_needs_a_trusted_digest_or_insecure() {
        let signing = |unverified| Signing {
            keys: Keyring::builtin(),
            unverified,
        };
        let d = Expected {
            compressed: Some(Sha256Sum([1; 32])),
            uncompressed: None,
        };
        let none = Expected::default();
        let refuse = signing(Unverified::Refuse);
        let (given, http, https) = (
            Digests::Given,
            Digests::Stream { https: false },
            Digests::Stream { https: true },
        );
        for digests in [given, https] {
            assert!(decide("i", "i.sig", None, &d, digests, &refuse)
                .unwrap()
                .is_none());
        }
        let e = decide("i", "i.sig", None, &none, given, &refuse).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("refusing to write i: it has no signature (i.sig is missing)"),
            "{e}"
        );
        assert!(e.contains("--insecure"), "{e}");
        // Digests from plain http do not count.
        let e = decide("i", "i.sig", None, &d, http, &refuse).unwrap_err();
        assert!(e.to_string().contains("came over plain http"), "{e}");
        assert!(
            e.to_string().contains("use an https --stream-base-url"),
            "{e}"
        );
        for u in [Unverified::Allow, Unverified::Warn] {
            assert!(decide("i", "i.sig", None, &none, http, &signing(u))
                .unwrap()
                .is_none());
        }
        // A signature that is there is parsed and refused, even with --insecure.
        let e = decide(
            "i",
            "i.sig",
            Some(b"junk"),
            &d,
            given,
            &signing(Unverified::Allow),
        );
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("not a valid OpenPGP signature"));
    }
}
