//! The flows' disk write, behind a narrow trait so scenario tests can script failures. The real
//! one runs the in-process writer with the image source, digests and post-install options the
//! service passed in `--installer-args`, and the Ignition config the flow downloaded.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

use crate::cli::installer_args::WriterArgs;
use crate::cli::postinstall::DEFAULT_NETWORK_DIR;
use crate::cli::write_image::WritePlan;
use crate::commands::write_image::run_plan;
use crate::disk::saved::{index_filters, label_filters};
use crate::image::digest::{Expected, Sha256Sum};
use crate::image::format::XzSettings;
use crate::image::progress::PercentCallback;
use crate::image::retry::{Retries, RetryPolicy};
use crate::image::source::{HttpOptions, ImageLocation};
use crate::image::{Cancel, WriteOptions};
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
    /// Write the image and embed the Ignition config; `percent` sees the progress.
    fn write(&self, req: &WriteRequest, percent: &(dyn Fn(u8) + Send + Sync)) -> Result<()>;
}

/// The in-process writer (what `write-image` runs).
pub struct InProcessWriter {
    pub stop: Cancel,
    pub cacert: Option<PathBuf>,
}

/// The write plan for a flow: image source and digests from `--installer-args`, Ignition from
/// the flow. Pure apart from reading the Ignition file.
pub fn plan_for(req: &WriteRequest, cacert: Option<&Path>) -> Result<WritePlan> {
    let a = &req.args;
    let location = match (&a.image_url, &a.image_file) {
        (Some(u), None) => ImageLocation::Url(u.clone()),
        (None, Some(f)) => ImageLocation::File(f.clone()),
        (Some(_), Some(_)) => {
            bail!("--installer-args gives both --image-url and --image-file; pass one")
        }
        (None, None) => bail!(
            "no image to write: the offline install from the live ISO is not supported yet; \
             pass --image-url URL (with --sha256 HEX) or --image-file PATH in --installer-args"
        ),
    };
    let digest =
        |v: &Option<String>, what| v.as_deref().map(|h| Sha256Sum::parse(h, what)).transpose();
    let expected = Expected {
        compressed: digest(&a.sha256, "--sha256")?,
        uncompressed: digest(&a.uncompressed_sha256, "--uncompressed-sha256")?,
    };
    if expected.is_empty() {
        // The Go installer runs coreos-installer with --insecure (no signature check), so an
        // unverified image is what the service expects today; say so loudly.
        tracing::warn!(
            "no --sha256 in --installer-args: the image will be written without verification"
        );
    }
    let mut save = label_filters(&a.save_partlabel);
    save.extend(index_filters(&a.save_partindex)?);
    let ignition = IgnitionConfig::from_file(&req.ignition, None)
        .with_context(|| format!("the Ignition config {}", req.ignition.display()))?;
    let post = PostInstall {
        ignition: Some(ignition),
        append_kargs: a.append_kargs.clone(),
        delete_kargs: a.delete_kargs.clone(),
        network_dir: a.copy_network.then(|| {
            a.network_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_NETWORK_DIR))
        }),
        ..PostInstall::default()
    };
    post.validate()?;
    Ok(WritePlan {
        location,
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
        device: req.device.clone(),
        save,
        post,
    })
}

impl DiskWriter for InProcessWriter {
    fn write(&self, req: &WriteRequest, percent: &(dyn Fn(u8) + Send + Sync)) -> Result<()> {
        let plan = plan_for(req, self.cacert.as_deref())?;
        let progress = PercentCallback::new(percent);
        let summary = run_plan(&plan, &progress, &self.stop)?;
        tracing::info!("{summary}");
        Ok(())
    }
}
