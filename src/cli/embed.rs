//! `assisted-installer embed DEVICE -i … [--append-karg …] [-n]`.

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

use super::postinstall::PostInstallArgs;
use crate::image::source::HttpOptions;
use crate::image::Cancel;
use crate::postinstall::PostInstall;
use crate::write::KargsAndNetworkArgs;

#[derive(Args, Debug, Clone)]
pub struct EmbedArgs {
    #[command(flatten)]
    pub post: PostInstallArgs,
    #[command(flatten)]
    pub kargs_network: KargsAndNetworkArgs,
    /// On failure, leave the disk as the failed step left it instead of resetting its partition table.
    #[arg(long)]
    pub preserve_on_error: bool,
    /// A disk (or disk-image file) written earlier with write-image.
    #[arg(value_name = "DEVICE")]
    pub device: PathBuf,
}

impl EmbedArgs {
    /// The post-install steps to apply, read and checked; at least one.
    pub(crate) fn post_install(&self) -> Result<PostInstall> {
        let mut rest = self.post.read()?;
        // No signal handler runs during `embed`: Ctrl-C ends a fetch that keeps retrying.
        let fetched = self
            .post
            .fetch_ignition(&HttpOptions::default(), &Cancel::new())?;
        rest.ignition = fetched.or(rest.ignition);
        let post = self.kargs_network.post_install(rest, None)?;
        if post.is_empty() {
            bail!("nothing to embed: pass -i/--ignition-file, -I/--ignition-url, --append-karg, --delete-karg, -n, --platform, --console or --firstboot-args");
        }
        Ok(post)
    }
}
