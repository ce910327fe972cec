//! CoreOS stream metadata (`--stream`): where a stream's metal disk image is, with its digests
//! and signature. The document is `<base>/<stream>.json`; the image of an architecture is at
//! `architectures[ARCH].artifacts.metal.formats[FORMAT].disk`. Parsing is pure.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::BTreeMap;

use super::digest::{Expected, Sha256Sum};

/// The stream metadata's default location, as coreos-installer's.
pub const DEFAULT_BASE_URL: &str = "https://builds.coreos.fedoraproject.org/streams/";

/// `--stream`, `--stream-base-url`, `--architecture`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamSpec {
    pub name: String,
    pub base_url: String,
    pub arch: String,
}

impl StreamSpec {
    /// The metadata document's URL.
    pub fn url(&self) -> String {
        format!("{}/{}.json", self.base_url.trim_end_matches('/'), self.name)
    }

    /// The metal image's format for a disk of `sector_size`-byte sectors (`None`: a disk-image
    /// file, which gets the usual 512-byte image). Another size gets a warning and the 512 image
    /// (whose partition table the write then refuses for that disk, naming the mismatch).
    pub fn format(sector_size: Option<u64>) -> &'static str {
        match sector_size {
            Some(4096) => "4k.raw.xz",
            None | Some(512) => "raw.xz",
            Some(other) => {
                tracing::warn!("the disk has {other}-byte sectors: no stream image is made for them; trying raw.xz (512-byte sectors)");
                "raw.xz"
            }
        }
    }
}

/// This machine's architecture as CoreOS names it.
pub fn this_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "powerpc64" => "ppc64le",
        a => a,
    }
}

/// A stream's metal disk image for one architecture and format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamImage {
    pub location: String,
    /// The detached signature's URL, when the stream names one.
    pub signature: Option<String>,
    pub expected: Expected,
}

#[derive(Deserialize)]
struct Doc {
    architectures: BTreeMap<String, Arch>,
}

#[derive(Deserialize)]
struct Arch {
    /// Other artifacts (ISO, PXE, clouds) have other shapes: only `metal` is read.
    artifacts: BTreeMap<String, serde_json::Value>,
}

#[derive(Deserialize)]
struct Metal {
    formats: BTreeMap<String, BTreeMap<String, Disk>>,
}

#[derive(Deserialize)]
struct Disk {
    location: String,
    signature: Option<String>,
    sha256: Option<String>,
    #[serde(rename = "uncompressed-sha256")]
    uncompressed_sha256: Option<String>,
}

fn listed<V>(m: &BTreeMap<String, V>) -> String {
    match m.is_empty() {
        true => "none".into(),
        false => m.keys().cloned().collect::<Vec<_>>().join(", "),
    }
}

/// The metal disk image of `arch` in `format` from the metadata `json` of stream `stream`.
pub fn metal_image(json: &[u8], stream: &str, arch: &str, format: &str) -> Result<StreamImage> {
    let doc: Doc = serde_json::from_slice(json)
        .with_context(|| format!("the metadata of stream {stream:?} is not stream JSON"))?;
    let Some(a) = doc.architectures.get(arch) else {
        bail!(
            "stream {stream:?} has no image for architecture {arch:?} (it has: {}); choose one with --architecture",
            listed(&doc.architectures)
        );
    };
    let Some(metal) = a.artifacts.get("metal") else {
        bail!(
            "stream {stream:?} has no metal artifact for architecture {arch:?} (it has: {})",
            listed(&a.artifacts)
        );
    };
    let metal: Metal = serde_json::from_value(metal.clone()).with_context(|| {
        format!("the metal artifact of stream {stream:?}, architecture {arch:?}, is malformed")
    })?;
    let disk = metal.formats.get(format).and_then(|f| f.get("disk"));
    let Some(disk) = disk else {
        bail!(
            "stream {stream:?}, architecture {arch:?}, has no metal disk image in format {format:?} (it has: {})",
            listed(&metal.formats)
        );
    };
    let what = |field| format!("the {field} of stream {stream:?}'s {arch} {format} image");
    let digest = |v: &Option<String>, field| {
        v.as_deref()
            .map(|h| Sha256Sum::parse(h, &what(field)))
            .transpose()
    };
    Ok(StreamImage {
        location: disk.location.clone(),
        signature: disk.signature.clone(),
        expected: Expected {
            compressed: digest(&disk.sha256, "sha256")?,
            uncompressed: digest(&disk.uncompressed_sha256, "uncompressed-sha256")?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    fn doc() -> String {
        format!(
            r#"{{"stream":"stable","architectures":{{
              "x86_64":{{"artifacts":{{
                "qemu":{{"formats":{{"qcow2.xz":{{"disk":{{"location":"q"}}}}}}}},
                "pxe":{{"release":"1","formats":{{"pxe":{{"kernel":{{"location":"k"}}}}}}}},
                "metal":{{"release":"40","formats":{{
                  "raw.xz":{{"disk":{{"location":"https://h/m.raw.xz","signature":"https://h/m.raw.xz.sig",
                    "sha256":"{H}","uncompressed-sha256":"{H}"}}}},
                  "iso":{{"disk":{{"location":"https://h/m.iso"}}}}}}}}}}}},
              "aarch64":{{"artifacts":{{"aws":{{}}}}}}}}}}"#
        )
    }

    #[test]
    fn the_metal_image_of_an_architecture_and_format() {
        let i = metal_image(doc().as_bytes(), "stable", "x86_64", "raw.xz").unwrap();
        assert_eq!(i.location, "https://h/m.raw.xz");
        assert_eq!(i.signature.as_deref(), Some("https://h/m.raw.xz.sig"));
        assert_eq!(i.expected.compressed.unwrap().to_string(), H);
        assert_eq!(i.expected.uncompressed.unwrap().to_string(), H);
        let iso = metal_image(doc().as_bytes(), "stable", "x86_64", "iso").unwrap();
        assert_eq!((iso.signature, iso.expected), (None, Expected::default()));
    }

    #[test]
    fn what_is_missing_is_named_with_what_is_there() {
        let e = |arch, format| {
            metal_image(doc().as_bytes(), "stable", arch, format)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            e("s390x", "raw.xz"),
            r#"stream "stable" has no image for architecture "s390x" (it has: aarch64, x86_64); choose one with --architecture"#
        );
        assert_eq!(
            e("aarch64", "raw.xz"),
            r#"stream "stable" has no metal artifact for architecture "aarch64" (it has: aws)"#
        );
        assert_eq!(
            e("x86_64", "4k.raw.xz"),
            r#"stream "stable", architecture "x86_64", has no metal disk image in format "4k.raw.xz" (it has: iso, raw.xz)"#
        );
        let bad = doc().replace(&H[..4], "zz");
        let e = metal_image(bad.as_bytes(), "stable", "x86_64", "raw.xz").unwrap_err();
        assert!(
            e.to_string()
                .contains("the sha256 of stream \"stable\"'s x86_64 raw.xz image"),
            "{e}"
        );
        let e = metal_image(b"<html>", "next", "x86_64", "raw.xz").unwrap_err();
        assert!(
            e.to_string().contains("stream \"next\" is not stream JSON"),
            "{e}"
        );
    }

    #[test]
    fn formats_by_sector_size_and_the_url() {
        assert_eq!(StreamSpec::format(Some(4096)), "4k.raw.xz");
        assert_eq!(StreamSpec::format(Some(512)), "raw.xz");
        assert_eq!(StreamSpec::format(None), "raw.xz");
        assert_eq!(StreamSpec::format(Some(2048)), "raw.xz");
        let s = StreamSpec {
            name: "next".into(),
            base_url: "http://127.0.0.1:1/s/".into(),
            arch: "x86_64".into(),
        };
        assert_eq!(s.url(), "http://127.0.0.1:1/s/next.json");
    }
}
