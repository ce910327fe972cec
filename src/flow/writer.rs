//! The flows' disk write, behind a narrow trait so scenario tests can script failures. The real
//! one runs the in-process writer with the image source, digests and post-install options the
//! service passed in `--installer-args`, and the Ignition config the flow downloaded.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

use crate::cli::installer_args::WriterArgs;
use crate::cli::postinstall::DEFAULT_NETWORK_DIR;
use crate::cli::write_image::WritePlan;
use crate::commands::write_image::{run_plan, stream_plan, Streamed};
use crate::disk::saved::{index_filters, label_filters};
use crate::image::digest::{Expected, Sha256Sum};
use crate::image::format::XzSettings;
use crate::image::osmet::LiveImage;
use crate::image::progress::PercentCallback;
use crate::image::retry::{Retries, RetryPolicy};
use crate::image::source::{HttpOptions, ImageLocation};
use crate::image::{Cancel, Origin, WriteOptions};
use crate::postinstall::ignition::IgnitionConfig;
use crate::postinstall::PostInstall;

/// What one disk write needs.
#[derive(Clone, Debug)]
pub struct WriteRequest {
    pub device: PathBuf,
    pub ignition: PathBuf,
    pub args: WriterArgs,
}

pub trait DiskWriter: Send + Sync {
    /// Everything that can be checked before the disk is touched (the flows call it first).
    fn preflight(&self, args: &WriterArgs) -> Result<()> {
        check_writer_args(args)
    }
    /// Write the image and embed the Ignition config; `percent` sees the progress.
    fn write(&self, req: &WriteRequest, percent: &(dyn Fn(u8) + Send + Sync)) -> Result<()>;
    /// Stream and verify the image onto `device` without making the disk bootable (the
    /// Ignition config is not known yet); `finish` on the result completes the write.
    fn stream(
        &self,
        device: &Path,
        args: &WriterArgs,
        percent: &(dyn Fn(u8) + Send + Sync),
    ) -> Result<Box<dyn PendingDisk>>;
}

/// A streamed, verified, not yet bootable disk.
pub trait PendingDisk: Send {
    /// Embed `ignition` and the post-install options, then write the partition table.
    fn finish(self: Box<Self>, ignition: &Path) -> Result<()>;
    /// Reset the disk (it must not boot a half-configured image); returns the error to report.
    fn abandon(self: Box<Self>, why: anyhow::Error) -> anyhow::Error;
}

/// The in-process writer (what `write-image` runs).
pub struct InProcessWriter {
    pub stop: Cancel,
    pub cacert: Option<PathBuf>,
}

/// Everything in `--installer-args` that can be wrong, checked up front so a flow fails before
/// it touches the disk rather than after three write attempts.
pub fn check_writer_args(a: &WriterArgs) -> Result<()> {
    image_origin(a)?;
    expected_digests(a)?;
    save_filters(a)?;
    Ok(())
}

/// The image source: `--image-url` or `--image-file` when the service passed one, else (as
/// coreos-installer does) the live system's own image, found through the host's root when the
/// container does not see it.
fn image_origin(a: &WriterArgs) -> Result<Origin> {
    Ok(match (&a.image_url, &a.image_file) {
        (Some(u), None) => Origin::Given(ImageLocation::Url(u.clone())),
        (None, Some(f)) => Origin::Given(ImageLocation::File(on_host(a, f)?)),
        (Some(_), Some(_)) => {
            bail!("--installer-args gives both --image-url and --image-file; pass one")
        }
        (None, None) => Origin::Live(LiveImage {
            host_root: a.host_root.clone(),
            ..LiveImage::default()
        }),
    })
}

/// A path of the host as this process reaches it (see `host::root`).
fn on_host(a: &WriterArgs, host_path: &Path) -> Result<PathBuf> {
    a.host_root
        .as_ref()
        .map_or_else(|| Ok(host_path.to_path_buf()), |root| root.local(host_path))
}

fn expected_digests(a: &WriterArgs) -> Result<Expected> {
    let digest =
        |v: &Option<String>, what| v.as_deref().map(|h| Sha256Sum::parse(h, what)).transpose();
    Ok(Expected {
        compressed: digest(&a.sha256, "--sha256")?,
        uncompressed: digest(&a.uncompressed_sha256, "--uncompressed-sha256")?,
    })
}

fn save_filters(a: &WriterArgs) -> Result<Vec<crate::disk::saved::PartitionFilter>> {
    let mut save = label_filters(&a.save_partlabel);
    save.extend(index_filters(&a.save_partindex)?);
    Ok(save)
}

/// The write plan for a flow: image source and digests from `--installer-args`, Ignition from
/// the flow (when known). Pure apart from reading the Ignition file.
pub fn plan_for(
    device: &Path,
    a: &WriterArgs,
    ignition: Option<&Path>,
    cacert: Option<&Path>,
) -> Result<WritePlan> {
    let origin = image_origin(a)?;
    let expected = expected_digests(a)?;
    if expected.is_empty() && matches!(origin, Origin::Given(_)) {
        // The Go installer runs coreos-installer with --insecure (no signature check), so an
        // unverified image is what the service expects today; say so loudly.
        tracing::warn!(
            "no --sha256 in --installer-args: the image will be written without verification"
        );
    }
    let save = save_filters(a)?;
    let post = post_install(a, ignition)?;
    Ok(WritePlan {
        origin,
        http: HttpOptions {
            retry: RetryPolicy {
                retries: Retries::Count(10),
                ..RetryPolicy::default()
            },
            cacert: cacert.map(Path::to_path_buf),
            ..HttpOptions::default()
        },
        write: WriteOptions {
            expected,
            xz: XzSettings::default(),
            ..WriteOptions::default()
        },
        device: device.to_path_buf(),
        save,
        post,
    })
}

/// The post-install options of `--installer-args` with the flow's Ignition config.
fn post_install(a: &WriterArgs, ignition: Option<&Path>) -> Result<PostInstall> {
    let ignition = ignition
        .map(|p| {
            IgnitionConfig::from_file(p, None)
                .with_context(|| format!("the Ignition config {}", p.display()))
        })
        .transpose()?;
    let post = PostInstall {
        ignition,
        append_kargs: a.append_kargs.clone(),
        delete_kargs: a.delete_kargs.clone(),
        network_dir: a
            .copy_network
            .then(|| {
                let dir = a
                    .network_dir
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(DEFAULT_NETWORK_DIR));
                on_host(a, &dir)
            })
            .transpose()?,
        ..PostInstall::default()
    };
    post.validate()?;
    Ok(post)
}

impl DiskWriter for InProcessWriter {
    /// Also: without an image in `--installer-args`, the live image must be reachable (here or
    /// through the host's root), so a host that is not a live system fails before its disk is
    /// cleaned, not after three write attempts.
    fn preflight(&self, args: &WriterArgs) -> Result<()> {
        check_writer_args(args)?;
        if let Origin::Live(live) = image_origin(args)? {
            live.locate()?;
        }
        Ok(())
    }

    fn write(&self, req: &WriteRequest, percent: &(dyn Fn(u8) + Send + Sync)) -> Result<()> {
        let plan = plan_for(
            &req.device,
            &req.args,
            Some(&req.ignition),
            self.cacert.as_deref(),
        )?;
        let progress = PercentCallback::new(percent);
        let summary = run_plan(&plan, &progress, &self.stop)?;
        tracing::info!("{summary}");
        Ok(())
    }

    fn stream(
        &self,
        device: &Path,
        args: &WriterArgs,
        percent: &(dyn Fn(u8) + Send + Sync),
    ) -> Result<Box<dyn PendingDisk>> {
        let plan = plan_for(device, args, None, self.cacert.as_deref())?;
        let progress = PercentCallback::new(percent);
        let streamed = stream_plan(&plan, &progress, &self.stop)?;
        Ok(Box::new(InProcessPending {
            streamed,
            args: args.clone(),
            stop: self.stop.clone(),
        }))
    }
}

struct InProcessPending {
    streamed: Streamed,
    args: WriterArgs,
    stop: Cancel,
}

impl PendingDisk for InProcessPending {
    fn finish(self: Box<Self>, ignition: &Path) -> Result<()> {
        let post = match post_install(&self.args, Some(ignition)) {
            Ok(p) => p,
            Err(e) => return Err(self.streamed.abandon(e)),
        };
        let summary = self.streamed.finish(&post, &self.stop)?;
        tracing::info!("{summary}");
        Ok(())
    }

    fn abandon(self: Box<Self>, why: anyhow::Error) -> anyhow::Error {
        self.streamed.abandon(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::root::PID1_ROOT;
    use crate::image::osmet::DEFAULT_OSMET_DIR;

    #[test]
    fn without_an_image_the_live_image_must_be_reachable_before_the_disk_is_touched() {
        let on_host = Path::new(PID1_ROOT).join(DEFAULT_OSMET_DIR.trim_start_matches('/'));
        if Path::new(DEFAULT_OSMET_DIR).exists() || on_host.exists() {
            eprintln!("SKIPPED: this machine is a live system ({DEFAULT_OSMET_DIR} exists)");
            return;
        }
        let w = InProcessWriter {
            stop: Cancel::new(),
            cacert: None,
        };
        let args = WriterArgs {
            copy_network: true,
            ..WriterArgs::default()
        };
        let e = format!("{:#}", w.preflight(&args).unwrap_err());
        assert!(e.contains("no live image to install"), "{e}");
        assert!(e.contains(DEFAULT_OSMET_DIR), "{e}");
        assert!(e.contains("--pid=host"), "{e}");
        assert!(e.contains("--image-url"), "{e}");
        // With an image given, nothing about the live system is needed.
        let args = WriterArgs {
            image_url: Some("http://mirror.example/rhcos.raw.gz".into()),
            ..WriterArgs::default()
        };
        w.preflight(&args).unwrap();
    }

    #[test]
    fn host_paths_are_read_through_the_host_root() {
        use crate::host::root::HostRoot;
        let host = tempfile::tempdir().unwrap();
        let nm = host.path().join("etc/NetworkManager/system-connections");
        std::fs::create_dir_all(&nm).unwrap();
        std::fs::create_dir_all(host.path().join("srv/nm")).unwrap();
        let root = HostRoot::At(host.path().to_path_buf());
        let args = WriterArgs {
            copy_network: true,
            host_root: Some(root.clone()),
            ..WriterArgs::default()
        };
        // The default keyfile directory is the host's, not this container's.
        let plan = plan_for(Path::new("/dev/sda"), &args, None, None).unwrap();
        assert_eq!(plan.post.network_dir.as_deref(), Some(nm.as_path()));
        assert_eq!(
            plan.origin,
            Origin::Live(LiveImage {
                host_root: Some(root.clone()),
                ..LiveImage::default()
            })
        );
        // So are --network-dir and --image-file given in --installer-args.
        let args = WriterArgs {
            network_dir: Some("/srv/nm".into()),
            image_file: Some("/var/images/rhcos.raw.gz".into()),
            sha256: Some("ab".repeat(32)),
            ..args
        };
        let plan = plan_for(Path::new("/dev/sda"), &args, None, None).unwrap();
        assert_eq!(
            plan.post.network_dir.as_deref(),
            Some(host.path().join("srv/nm").as_path())
        );
        assert_eq!(
            plan.origin,
            Origin::Given(ImageLocation::File(
                host.path().join("var/images/rhcos.raw.gz")
            ))
        );
        // Without a host root (write-image on the host itself): local paths.
        let args = WriterArgs {
            host_root: None,
            ..args
        };
        let plan = plan_for(Path::new("/dev/sda"), &args, None, None).unwrap_err();
        assert!(format!("{plan:#}").contains("/srv/nm"), "{plan:#}");
    }
}
