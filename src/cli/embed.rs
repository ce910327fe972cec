//! `assisted-installer embed DEVICE -i … [--append-karg …] [-n]`.

use anyhow::{bail, Result};
use clap::Args;
use std::path::PathBuf;

use super::postinstall::PostInstallArgs;
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
        let post = self.kargs_network.post_install(self.post.read()?, None)?;
        if post.is_empty() {
            bail!("nothing to embed: pass -i/--ignition-file, --append-karg, --delete-karg, -n, --platform, --console or --firstboot-args");
        }
        Ok(post)
    }
}
