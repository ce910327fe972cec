//! The write plan: everything a write will do, checked before anything is opened. One builder
//! for `write-image` and the install flows; what differs between them is a [`PlanSettings`].

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

use super::args::{on_host, WriterArgs};
use crate::disk::saved::{index_filters, label_filters, PartitionFilter};
use crate::host::root::HostRoot;
use crate::image::digest::{Expected, Sha256Sum};
use crate::image::format::XzSettings;
use crate::image::osmet::LiveImage;
use crate::image::proxy::DownloadProxy;
use crate::image::retry::{Retries, RetryPolicy};
use crate::image::signing::Keyring;
use crate::image::source::{HttpOptions, ImageLocation};
use crate::image::{Origin, WriteOptions};
use crate::postinstall::PostInstall;

/// Everything a write will do, validated before anything is opened.
#[derive(Debug, Clone)]
pub struct WritePlan {
    pub origin: Origin,
    pub http: HttpOptions,
    pub write: WriteOptions,
    pub device: PathBuf,
    /// Which partitions of the old table to keep; read from the disk once it is open.
    pub save: Vec<PartitionFilter>,
    pub post: PostInstall,
    /// The keys an image signature may be made with, and what an unverifiable image gets.
    pub signing: Signing,
}

/// How an image is verified (see `write::signed`): decided once its signature is fetched.
#[derive(Debug, Clone)]
pub struct Signing {
    pub keys: Keyring,
    pub unverified: Unverified,
}

/// What an image without a digest to check gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unverified {
    /// Refused (`write-image` without `--insecure`).
    #[default]
    Refuse,
    /// Written (`write-image --insecure`).
    Allow,
    /// Written with a warning: the Go installer runs coreos-installer with `--insecure`, so an
    /// unverified image is what the service expects of the flows today.
    Warn,
}

/// How the callers of [`WritePlan::build`] differ.
#[derive(Clone, Debug)]
pub struct PlanSettings {
    /// Retries of a failed or broken-off download.
    pub fetch_retries: Retries,
    pub unverified: Unverified,
    /// Where the host paths are (`--image-file`, `--network-dir` and its default, the live
    /// image): the flows read them through the host's root, as the Go installer's
    /// coreos-installer runs in the host's mount namespace. `None`: local paths (else
    /// /proc/1/root for the live image's defaults).
    pub host_root: Option<HostRoot>,
    /// Extra CA certificates (PEM) trusted for https.
    pub cacert: Option<PathBuf>,
    /// The downloads' proxies; `None`: the environment's (`HTTP_PROXY`, …).
    pub proxy: Option<DownloadProxy>,
    /// The live image's osmet directory and OSTree repository, when not the defaults.
    pub osmet_dir: Option<PathBuf>,
    pub ostree_repo: Option<PathBuf>,
    /// On failure, leave the disk as the failed write left it.
    pub preserve_on_error: bool,
    /// Threads for xz decoding; `None`: one per CPU.
    pub xz_threads: Option<u32>,
    /// Read the image back after the write and check it.
    pub verify: bool,
    /// Runs of zeros zeroed by the kernel instead of written (off: `--write-zeros`).
    pub zeroing: bool,
    /// Threads reading the live image's objects; `None`: the default (8).
    pub read_threads: Option<usize>,
    /// Read the live image's objects through the mounted filesystem (`--read-through-mount`).
    pub read_through_mount: bool,
    /// Public key files trusted for image signatures beyond the built-in ones (`--signing-key`).
    pub signing_keys: Vec<PathBuf>,
}

impl Default for PlanSettings {
    /// `write-image`'s defaults.
    fn default() -> Self {
        PlanSettings {
            fetch_retries: RetryPolicy::default().retries,
            unverified: Unverified::Refuse,
            host_root: None,
            cacert: None,
            proxy: None,
            osmet_dir: None,
            ostree_repo: None,
            preserve_on_error: false,
            xz_threads: None,
            verify: false,
            zeroing: true,
            read_threads: None,
            read_through_mount: false,
            signing_keys: Vec::new(),
        }
    }
}

impl PlanSettings {
    /// The install flows': ten download retries, an unverified image written with a warning,
    /// host paths read through `host_root`.
    pub fn for_flows(host_root: Option<HostRoot>, cacert: Option<PathBuf>) -> PlanSettings {
        PlanSettings {
            fetch_retries: Retries::Count(10),
            unverified: Unverified::Warn,
            host_root,
            cacert,
            ..PlanSettings::default()
        }
    }
}

/// The image source and its checks, as [`WritePlan::build`] makes them.
struct Image {
    origin: Origin,
    expected: Expected,
    save: Vec<PartitionFilter>,
}

/// Everything about the image in `args` that can be wrong, checked without touching anything
/// (the flows call this before they clean the disk); the image's origin.
pub(crate) fn check(args: &WriterArgs, settings: &PlanSettings) -> Result<Origin> {
    Ok(image(args, settings)?.origin)
}

fn image(a: &WriterArgs, settings: &PlanSettings) -> Result<Image> {
    let digest =
        |v: &Option<String>, what| v.as_deref().map(|h| Sha256Sum::parse(h, what)).transpose();
    let expected = Expected {
        compressed: digest(&a.sha256, "--sha256")?,
        uncompressed: digest(&a.uncompressed_sha256, "--uncompressed-sha256")?,
    };
    let host_root = settings.host_root.as_ref();
    // As coreos-installer: --image-url or --image-file, else the live system's own image.
    let origin = match (&a.image_url, &a.image_file) {
        (Some(u), None) => Origin::Given(ImageLocation::Url(u.clone())),
        (None, Some(f)) => Origin::Given(ImageLocation::File(on_host(host_root, f)?)),
        (None, None) => Origin::Live(LiveImage {
            osmet_dir: settings.osmet_dir.clone(),
            ostree_repo: settings.ostree_repo.clone(),
            host_root: settings.host_root.clone(),
            read_threads: settings.read_threads,
            read_through_mount: settings.read_through_mount,
        }),
        (Some(_), Some(_)) => bail!("pass at most one of --image-url and --image-file"),
    };
    let mut save = label_filters(&a.save_partlabel);
    save.extend(index_filters(&a.save_partindex)?);
    Ok(Image {
        origin,
        expected,
        save,
    })
}

impl WritePlan {
    /// The plan for writing `args` onto `device`, with the post-install steps of `args`
    /// (kernel arguments, keyfiles) on top of `rest` (the Ignition config, platform,
    /// consoles, first-boot arguments). Reads nothing but the host paths it checks.
    pub fn build(
        device: &Path,
        args: &WriterArgs,
        rest: PostInstall,
        settings: &PlanSettings,
    ) -> Result<WritePlan> {
        let Image {
            origin,
            expected,
            save,
        } = image(args, settings)?;
        // Whether an image needs --insecure is decided once its signature was looked for.
        let keys = Keyring::with_files(&settings.signing_keys)?;
        let post = args
            .kargs_network
            .post_install(rest, settings.host_root.as_ref())?;
        let mut xz = XzSettings::default();
        if let Some(t) = settings.xz_threads {
            xz.threads = t.max(1);
        }
        Ok(WritePlan {
            origin,
            http: HttpOptions {
                retry: RetryPolicy {
                    retries: settings.fetch_retries,
                    ..RetryPolicy::default()
                },
                cacert: settings.cacert.clone(),
                proxy: settings.proxy.clone(),
                ..HttpOptions::default()
            },
            write: WriteOptions {
                expected,
                xz,
                preserve_on_error: settings.preserve_on_error,
                verify: settings.verify,
                zeroing: settings.zeroing,
                ..WriteOptions::default()
            },
            device: device.to_path_buf(),
            save,
            post,
            signing: Signing {
                keys,
                unverified: settings.unverified,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::args::KargsAndNetworkArgs;

    const H: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn the_flows_differ_from_write_image_in_their_settings() {
        let build = |a: &WriterArgs, settings: &PlanSettings| {
            WritePlan::build(Path::new("/d"), a, PostInstall::default(), settings)
        };
        let unverified = WriterArgs {
            image_url: Some("http://x/i.gz".into()),
            ..WriterArgs::default()
        };
        let flows = PlanSettings::for_flows(Some(HostRoot::Here), Some("/ca.pem".into()));
        // write-image refuses an image without a signature or digest (see write::signed);
        // the flows write it, as the Go installer's coreos-installer --insecure does.
        let p = build(&unverified, &PlanSettings::default()).unwrap();
        assert_eq!(p.signing.unverified, Unverified::Refuse);
        let p = build(&unverified, &flows).unwrap();
        assert_eq!(p.signing.unverified, Unverified::Warn);
        assert!(p.write.expected.is_empty());
        assert_eq!(p.http.retry.retries, Retries::Count(10));
        assert_eq!(p.http.cacert.as_deref(), Some(Path::new("/ca.pem")));
        let verified = WriterArgs {
            sha256: Some(H.into()),
            ..unverified
        };
        let p = build(&verified, &PlanSettings::default()).unwrap();
        assert_eq!(p.http.retry.retries, Retries::Count(5));
        assert_eq!(p.write.expected.compressed.unwrap().to_string(), H);
    }

    #[test]
    fn host_paths_are_read_through_the_host_root() {
        let host = tempfile::tempdir().unwrap();
        let nm = host.path().join("etc/NetworkManager/system-connections");
        std::fs::create_dir_all(&nm).unwrap();
        std::fs::create_dir_all(host.path().join("srv/nm")).unwrap();
        let root = HostRoot::At(host.path().to_path_buf());
        let settings = PlanSettings::for_flows(Some(root.clone()), None);
        let plan = |a: &WriterArgs, settings: &PlanSettings| {
            WritePlan::build(Path::new("/dev/sda"), a, PostInstall::default(), settings)
        };
        let args = WriterArgs {
            kargs_network: KargsAndNetworkArgs {
                copy_network: true,
                ..KargsAndNetworkArgs::default()
            },
            ..WriterArgs::default()
        };
        // The default keyfile directory is the host's, not this container's.
        let p = plan(&args, &settings).unwrap();
        assert_eq!(p.post.network_dir.as_deref(), Some(nm.as_path()));
        assert_eq!(
            p.origin,
            Origin::Live(LiveImage {
                host_root: Some(root.clone()),
                ..LiveImage::default()
            })
        );
        // So are --network-dir and --image-file given in --installer-args.
        let args = WriterArgs {
            kargs_network: KargsAndNetworkArgs {
                network_dir: Some("/srv/nm".into()),
                ..args.kargs_network
            },
            image_file: Some("/var/images/rhcos.raw.gz".into()),
            sha256: Some("ab".repeat(32)),
            ..args
        };
        let p = plan(&args, &settings).unwrap();
        assert_eq!(
            p.post.network_dir.as_deref(),
            Some(host.path().join("srv/nm").as_path())
        );
        assert_eq!(
            p.origin,
            Origin::Given(ImageLocation::File(
                host.path().join("var/images/rhcos.raw.gz")
            ))
        );
        // Without a host root (write-image on the host itself): local paths.
        let e = plan(&args, &PlanSettings::default()).unwrap_err();
        assert!(format!("{e:#}").contains("/srv/nm"), "{e:#}");
    }
}
