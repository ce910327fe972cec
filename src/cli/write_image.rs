//! `assisted-installer write-image`: options, and their translation into a checked plan.

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

use super::postinstall::PostInstallArgs;
use crate::disk::saved::{index_filters, label_filters, PartitionFilter};
use crate::image::digest::{Expected, Sha256Sum};
use crate::image::format::XzSettings;
use crate::image::osmet::LiveImage;
use crate::image::retry::{Retries, RetryPolicy};
use crate::image::source::{HttpOptions, ImageLocation};
use crate::image::{Origin, WriteOptions};
use crate::postinstall::PostInstall;

#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("image").args(["image_url", "image_file"])))]
pub struct WriteImageArgs {
    /// Image to download (http or https). Without it or --image-file, the live system's own
    /// image is installed.
    #[arg(long, value_name = "URL")]
    pub image_url: Option<String>,
    /// Local image file.
    #[arg(long, value_name = "PATH")]
    pub image_file: Option<PathBuf>,
    /// Install the live system's own image (the default without --image-url or --image-file;
    /// accepted for coreos-installer compatibility: nothing is ever downloaded without a URL).
    #[arg(long, conflicts_with = "image")]
    pub offline: bool,
    /// Where the live image's osmet files are [default: /run/coreos-installer/osmet, else the
    /// host's, through /proc/1/root].
    #[arg(long, value_name = "DIR", conflicts_with = "image")]
    pub osmet_dir: Option<PathBuf>,
    /// The OSTree repository holding the live image's objects [default: /sysroot/ostree/repo,
    /// else the host's, through /proc/1/root].
    #[arg(long, value_name = "DIR", conflicts_with = "image")]
    pub ostree_repo: Option<PathBuf>,
    /// SHA-256 of the image as downloaded (compressed), as RHCOS stream metadata publishes it.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// SHA-256 of the uncompressed image.
    #[arg(long, value_name = "HEX")]
    pub uncompressed_sha256: Option<String>,
    /// Write without any digest to check (otherwise refused).
    #[arg(long)]
    pub insecure: bool,
    /// Extra CA certificates (PEM) to trust for https, on top of the system roots.
    #[arg(long, value_name = "PEM")]
    pub cacert: Option<PathBuf>,
    /// Retries for a failed or broken-off download (exponential backoff from 1 s, capped at 60 s), or "infinite".
    #[arg(long, value_name = "N|infinite", default_value = "5")]
    pub fetch_retries: Retries,
    /// On failure, leave the disk as the failed write left it instead of resetting it to an empty partition table.
    #[arg(long)]
    pub preserve_on_error: bool,
    /// Keep partitions whose GPT name matches this glob (repeatable, comma-separated).
    #[arg(long = "save-partlabel", value_name = "GLOB")]
    pub save_partlabel: Vec<String>,
    /// Keep partitions by number: N, N-M, N- or -M (repeatable, comma-separated).
    #[arg(long = "save-partindex", value_name = "N|N-M|N-|-M")]
    pub save_partindex: Vec<String>,
    #[command(flatten)]
    pub post: PostInstallArgs,
    /// Threads for xz decoding (multi-block images); default: one per CPU.
    #[arg(long, value_name = "N", hide_short_help = true)]
    pub xz_threads: Option<u32>,
    /// Target: a block device, or an existing regular file used as a disk image.
    #[arg(value_name = "DEVICE")]
    pub device: PathBuf,
}

/// Everything `write-image` will do, validated before anything is opened.
#[derive(Debug, Clone)]
pub struct WritePlan {
    pub origin: Origin,
    pub http: HttpOptions,
    pub write: WriteOptions,
    pub device: PathBuf,
    /// Which partitions of the old table to keep; read from the disk once it is open.
    pub save: Vec<PartitionFilter>,
    pub post: PostInstall,
}

impl WriteImageArgs {
    pub fn plan(&self) -> Result<WritePlan> {
        let expected = Expected {
            compressed: self
                .sha256
                .as_deref()
                .map(|h| Sha256Sum::parse(h, "--sha256"))
                .transpose()?,
            uncompressed: self
                .uncompressed_sha256
                .as_deref()
                .map(|h| Sha256Sum::parse(h, "--uncompressed-sha256"))
                .transpose()?,
        };
        let origin = match (&self.image_url, &self.image_file) {
            (Some(u), None) => Origin::Given(ImageLocation::Url(u.clone())),
            (None, Some(p)) => Origin::Given(ImageLocation::File(p.clone())),
            (None, None) => Origin::Live(LiveImage {
                osmet_dir: self.osmet_dir.clone(),
                ostree_repo: self.ostree_repo.clone(),
                // Run directly on a host: local paths (else /proc/1/root for the defaults).
                host_root: None,
            }),
            (Some(_), Some(_)) => bail!("pass at most one of --image-url and --image-file"),
        };
        // The live image carries its own checksum, always verified; anything else needs a
        // digest from its publisher, or an explicit --insecure.
        if expected.is_empty() && !self.insecure && matches!(origin, Origin::Given(_)) {
            bail!(
                "refusing to write an image that cannot be verified: pass --sha256 (of the download) \
                 or --uncompressed-sha256, or --insecure to write it unchecked"
            );
        }
        let mut save = label_filters(&self.save_partlabel);
        save.extend(index_filters(&self.save_partindex)?);
        let post = self.post.to_post_install()?;
        let mut xz = XzSettings::default();
        if let Some(t) = self.xz_threads {
            xz.threads = t.max(1);
        }
        Ok(WritePlan {
            origin,
            http: HttpOptions {
                retry: RetryPolicy {
                    retries: self.fetch_retries,
                    ..RetryPolicy::default()
                },
                cacert: self.cacert.clone(),
                ..HttpOptions::default()
            },
            write: WriteOptions {
                expected,
                xz,
                preserve_on_error: self.preserve_on_error,
                ..WriteOptions::default()
            },
            device: self.device.clone(),
            save,
            post,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: WriteImageArgs,
    }

    fn parse(args: &[&str]) -> Result<WritePlan> {
        let t = T::try_parse_from(std::iter::once("x").chain(args.iter().copied()))?;
        t.a.plan()
    }

    const H: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn a_digest_or_insecure_is_required() {
        let e = parse(&["--image-url", "http://x/i.gz", "/dev/sda"]).unwrap_err();
        assert!(e.to_string().contains("--insecure"), "{e}");
        let p = parse(&["--image-url", "http://x/i.gz", "--insecure", "/dev/sda"]).unwrap();
        assert!(p.write.expected.is_empty());
        let p = parse(&["--image-file", "/i.gz", "--sha256", H, "/dev/sda"]).unwrap();
        assert_eq!(p.origin, Origin::Given(ImageLocation::File("/i.gz".into())));
        assert_eq!(p.write.expected.compressed.unwrap().to_string(), H);
    }

    #[test]
    fn at_most_one_source_and_the_live_image_by_default() {
        let p = parse(&["/dev/sda"]).unwrap();
        assert_eq!(p.origin, Origin::Live(LiveImage::default()));
        let p = parse(&[
            "--offline",
            "--osmet-dir",
            "/o",
            "--ostree-repo",
            "/r",
            "/dev/sda",
        ])
        .unwrap();
        assert_eq!(
            p.origin,
            Origin::Live(LiveImage {
                osmet_dir: Some("/o".into()),
                ostree_repo: Some("/r".into()),
                host_root: None,
            })
        );
        for a in [
            &["--offline", "--image-url", "http://x", "--insecure", "/d"][..],
            &[
                "--osmet-dir",
                "/o",
                "--image-file",
                "/f",
                "--insecure",
                "/d",
            ],
            &[
                "--ostree-repo",
                "/r",
                "--image-url",
                "http://x",
                "--insecure",
                "/d",
            ],
        ] {
            assert!(parse(a).is_err(), "{a:?}");
        }
        assert!(parse(&[
            "--image-url",
            "http://x",
            "--image-file",
            "/y",
            "--insecure",
            "/dev/sda"
        ])
        .is_err());
    }

    #[test]
    fn retries_and_bad_digests() {
        let p = parse(&[
            "--image-url",
            "http://x",
            "--insecure",
            "--fetch-retries",
            "infinite",
            "/d",
        ])
        .unwrap();
        assert_eq!(p.http.retry.retries, Retries::Infinite);
        let e = parse(&[
            "--image-url",
            "http://x",
            "--uncompressed-sha256",
            "12",
            "/d",
        ])
        .unwrap_err();
        assert!(e.to_string().contains("--uncompressed-sha256"), "{e}");
        assert!(parse(&[
            "--image-url",
            "http://x",
            "--insecure",
            "--fetch-retries",
            "many",
            "/d"
        ])
        .is_err());
    }
}
