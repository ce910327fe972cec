//! `assisted-installer embed DEVICE -i … [--append-karg …] [-n]`.

use clap::Args;
use std::path::PathBuf;

use super::postinstall::PostInstallArgs;

#[derive(Args, Debug, Clone)]
pub struct EmbedArgs {
    #[command(flatten)]
    pub post: PostInstallArgs,
    /// On failure, leave the disk as the failed step left it instead of resetting its partition table.
    #[arg(long)]
    pub preserve_on_error: bool,
    /// A disk (or disk-image file) written earlier with write-image.
    #[arg(value_name = "DEVICE")]
    pub device: PathBuf,
}
