//! Post-install options of `write-image` and `embed` (the ones `coreos-installer install` has)
//! beyond kernel arguments and keyfiles, which `--installer-args` may carry too
//! (`write::KargsAndNetworkArgs`).

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

use super::ignition_url;
use crate::ignition::{IgnitionConfig, IgnitionHash};
use crate::image::source::HttpOptions;
use crate::image::Cancel;
use crate::postinstall::PostInstall;
use crate::write::args::POST;

#[derive(Args, Debug, Clone)]
#[command(group(clap::ArgGroup::new("ignition_source").args(["ignition_file", "ignition_url"])))]
pub struct PostInstallArgs {
    /// Ignition config to embed as /boot/ignition/config.ign (mode 0600).
    #[arg(
        short = 'i',
        long = "ignition-file",
        visible_alias = "ignition",
        value_name = "PATH",
        help_heading = POST
    )]
    pub ignition_file: Option<PathBuf>,
    /// Ignition config to fetch and embed (https; plain http only with --ignition-hash or
    /// --insecure-ignition), fetched before the disk is touched.
    #[arg(short = 'I', long, value_name = "URL", help_heading = POST)]
    pub ignition_url: Option<String>,
    /// Accept an --ignition-url over plain http without --ignition-hash.
    #[arg(long, help_heading = POST)]
    pub insecure_ignition: bool,
    /// Expected digest of the Ignition config, checked before the disk is touched.
    #[arg(long, value_name = "sha256-HEX|sha512-HEX", requires = "ignition_source", help_heading = POST)]
    pub ignition_hash: Option<String>,
    /// Platform ID for ignition.platform.id (and that platform's console defaults).
    #[arg(short = 'p', long, value_name = "ID", help_heading = POST)]
    pub platform: Option<String>,
    /// Kernel and GRUB console, e.g. ttyS0,115200n8 or tty0 (repeatable).
    #[arg(long, value_name = "SPEC", help_heading = POST)]
    pub console: Vec<String>,
    /// Kernel arguments for the first boot only (network settings such as ip=...).
    #[arg(long, value_name = "ARGS", help_heading = POST)]
    pub firstboot_args: Option<String>,
}

impl PostInstallArgs {
    /// Read and check these now: the Ignition config file (JSON with ignition.version, and its
    /// digest), whether --ignition-url may be fetched (see [`Self::fetch_ignition`]), console
    /// specs. Nothing on the disk is touched yet.
    pub fn read(&self) -> Result<PostInstall> {
        let hash = self.ignition_hash()?;
        if let Some(url) = &self.ignition_url {
            ignition_url::check(url, hash.is_some(), self.insecure_ignition)?;
        }
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
        Ok(PostInstall {
            ignition,
            platform: self.platform.clone(),
            consoles,
            firstboot_args: self.firstboot_args.clone(),
            ..PostInstall::default()
        })
    }

    fn ignition_hash(&self) -> Result<Option<IgnitionHash>> {
        let hash = self.ignition_hash.as_deref().map(str::parse).transpose();
        hash.context("--ignition-hash")
    }

    /// The --ignition-url config, fetched with `http`'s retries and CA certificates and checked
    /// (its digest, then its shape); `None` without --ignition-url. [`Self::read`] checked it
    /// may be fetched.
    pub fn fetch_ignition(
        &self,
        http: &HttpOptions,
        cancel: &Cancel,
    ) -> Result<Option<IgnitionConfig>> {
        let Some(url) = &self.ignition_url else {
            return Ok(None);
        };
        Ok(Some(ignition_url::fetch(
            url,
            self.ignition_hash()?.as_ref(),
            http,
            cancel,
        )?))
    }
}
