//! Post-install options shared by `write-image` and `embed` (the ones `coreos-installer
//! install` has and the assisted-service passes through `--installer-args`).

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

use crate::postinstall::ignition::{IgnitionConfig, IgnitionHash};
use crate::postinstall::PostInstall;

pub const DEFAULT_NETWORK_DIR: &str = "/etc/NetworkManager/system-connections";

#[derive(Args, Debug, Clone)]
pub struct PostInstallArgs {
    /// Ignition config to embed as /boot/ignition/config.ign (mode 0600).
    #[arg(
        short = 'i',
        long = "ignition-file",
        visible_alias = "ignition",
        value_name = "PATH"
    )]
    pub ignition_file: Option<PathBuf>,
    /// Expected digest of the Ignition config, checked before the disk is touched.
    #[arg(long, value_name = "sha256-HEX|sha512-HEX", requires = "ignition_file")]
    pub ignition_hash: Option<String>,
    /// Kernel argument to add to the boot entry (repeatable).
    #[arg(long = "append-karg", value_name = "ARG")]
    pub append_karg: Vec<String>,
    /// Default kernel argument to remove from the boot entry (repeatable).
    #[arg(long = "delete-karg", value_name = "ARG")]
    pub delete_karg: Vec<String>,
    /// Copy the NetworkManager keyfiles of --network-dir into the installed system's first boot.
    #[arg(short = 'n', long)]
    pub copy_network: bool,
    /// Where --copy-network takes the keyfiles from.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_NETWORK_DIR)]
    pub network_dir: PathBuf,
    /// Platform ID for ignition.platform.id (and that platform's console defaults).
    #[arg(long, value_name = "ID")]
    pub platform: Option<String>,
    /// Kernel and GRUB console, e.g. ttyS0,115200n8 or tty0 (repeatable).
    #[arg(long, value_name = "SPEC")]
    pub console: Vec<String>,
    /// Kernel arguments for the first boot only (network settings such as ip=...).
    #[arg(long, value_name = "ARGS")]
    pub firstboot_args: Option<String>,
}

impl PostInstallArgs {
    /// Read and check everything now: the Ignition config (JSON with ignition.version, and its
    /// digest), console specs, the network directory. Nothing on the disk is touched yet.
    pub fn to_post_install(&self) -> Result<PostInstall> {
        let hash = self
            .ignition_hash
            .as_deref()
            .map(|h| h.parse::<IgnitionHash>())
            .transpose()
            .context("--ignition-hash")?;
        let ignition = self
            .ignition_file
            .as_deref()
            .map(|p| IgnitionConfig::from_file(p, hash.as_ref()))
            .transpose()?;
        let consoles = self
            .console
            .iter()
            .map(|c| c.parse().with_context(|| format!("--console {c:?}")))
            .collect::<Result<Vec<_>>>()?;
        let post = PostInstall {
            ignition,
            append_kargs: self.append_karg.clone(),
            delete_kargs: self.delete_karg.clone(),
            platform: self.platform.clone(),
            consoles,
            firstboot_args: self.firstboot_args.clone(),
            network_dir: self.copy_network.then(|| self.network_dir.clone()),
        };
        post.validate()?;
        Ok(post)
    }
}
