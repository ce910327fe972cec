//! The coreos-installer options of a write, as clap groups. `write-image` flattens them all;
//! `--installer-args` (what the assisted-service passes through to coreos-installer) parses
//! exactly [`WriterArgs`] (see `installer_args`); `embed` takes [`KargsAndNetworkArgs`]. One
//! definition each, so a new writer option is added in one place.
//!
//! They live with the write, not in `cli`: the install flows parse `--installer-args` while
//! they run (a refusal is reported to the service as the failed stage), below the command line.

use anyhow::Result;
use clap::builder::{NonEmptyStringValueParser, TypedValueParser};
use clap::Args;
use std::path::{Path, PathBuf};

use crate::host::root::HostRoot;
use crate::postinstall::PostInstall;

/// Where `--copy-network` takes the keyfiles from when `--network-dir` is not given (a host
/// path: the flows read it through the host's root).
pub(crate) const DEFAULT_NETWORK_DIR: &str = "/etc/NetworkManager/system-connections";

/// The help heading of the post-install options (`write-image` has many).
pub(crate) const POST: &str = "Post-install";

/// What the install flows take from `--installer-args`; `write-image` has all of it, and more.
/// The field order is the order `--installer-args` lists the supported options in.
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
#[command(group(clap::ArgGroup::new("image").args(["image_url", "image_file"])))]
pub struct WriterArgs {
    #[command(flatten)]
    pub kargs_network: KargsAndNetworkArgs,
    /// Keep partitions whose GPT name matches this glob (repeatable, comma-separated).
    #[arg(
        long = "save-partlabel",
        value_name = "GLOB",
        allow_hyphen_values = true,
        value_parser = value()
    )]
    pub save_partlabel: Vec<String>,
    /// Keep partitions by number: N, N-M, N- or -M (repeatable, comma-separated).
    #[arg(
        long = "save-partindex",
        value_name = "N|N-M|N-|-M",
        allow_hyphen_values = true,
        value_parser = value()
    )]
    pub save_partindex: Vec<String>,
    /// Image to download (http or https). Without it or --image-file, the live system's own
    /// image is installed.
    #[arg(short = 'u', long, value_name = "URL", allow_hyphen_values = true, value_parser = value())]
    pub image_url: Option<String>,
    /// Local image file.
    #[arg(short = 'f', long, value_name = "PATH", allow_hyphen_values = true, value_parser = path())]
    pub image_file: Option<PathBuf>,
    /// SHA-256 of the image as downloaded (compressed), as RHCOS stream metadata publishes it.
    #[arg(long, value_name = "HEX", allow_hyphen_values = true, value_parser = value())]
    pub sha256: Option<String>,
    /// SHA-256 of the uncompressed image.
    #[arg(long, value_name = "HEX", allow_hyphen_values = true, value_parser = value())]
    pub uncompressed_sha256: Option<String>,
}

/// The post-install options that `write-image`, `embed` and `--installer-args` all have.
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct KargsAndNetworkArgs {
    /// Kernel argument to add to the boot entry (repeatable).
    #[arg(
        long = "append-karg",
        value_name = "ARG",
        help_heading = POST,
        allow_hyphen_values = true,
        value_parser = value()
    )]
    pub append_kargs: Vec<String>,
    /// Default kernel argument to remove from the boot entry (repeatable).
    #[arg(
        long = "delete-karg",
        value_name = "ARG",
        help_heading = POST,
        allow_hyphen_values = true,
        value_parser = value()
    )]
    pub delete_kargs: Vec<String>,
    /// Copy the NetworkManager keyfiles of --network-dir into the installed system's first boot.
    #[arg(short = 'n', long, overrides_with = "copy_network", help_heading = POST)]
    pub copy_network: bool,
    /// Where --copy-network takes the keyfiles from [default:
    /// /etc/NetworkManager/system-connections].
    #[arg(
        long,
        value_name = "DIR",
        help_heading = POST,
        allow_hyphen_values = true,
        value_parser = path()
    )]
    pub network_dir: Option<PathBuf>,
}

/// A value: not empty, and not an option. Values may start with one hyphen (`--delete-karg
/// -x`), so clap hands over whatever follows the option; a `--…` there means the value is
/// missing (`--append-karg --copy-network`): a value never starts with `--`.
fn value() -> impl TypedValueParser<Value = String> {
    NonEmptyStringValueParser::new().try_map(|v| {
        if v.starts_with("--") {
            Err(MissingValue)
        } else {
            Ok(v)
        }
    })
}

fn path() -> impl TypedValueParser<Value = PathBuf> {
    value().map(PathBuf::from)
}

/// What [`value`] refuses: the option's value is missing.
#[derive(Debug, thiserror::Error)]
#[error("a value is required")]
pub(super) struct MissingValue;

impl KargsAndNetworkArgs {
    /// The post-install steps: these options on top of `rest` (the Ignition config, platform,
    /// consoles, first-boot arguments), with the keyfile directory (given or default) read
    /// through `host_root` when there is one; checked before the disk is touched.
    pub fn post_install(
        &self,
        rest: PostInstall,
        host_root: Option<&HostRoot>,
    ) -> Result<PostInstall> {
        let network_dir = self
            .copy_network
            .then(|| {
                let dir = self
                    .network_dir
                    .as_deref()
                    .unwrap_or(Path::new(DEFAULT_NETWORK_DIR));
                on_host(host_root, dir)
            })
            .transpose()?;
        let post = PostInstall {
            append_kargs: self.append_kargs.clone(),
            delete_kargs: self.delete_kargs.clone(),
            network_dir,
            ..rest
        };
        post.validate()?;
        Ok(post)
    }
}

/// A path of the host as this process reaches it (see `host::root`); without a host root,
/// the path itself.
pub(super) fn on_host(host_root: Option<&HostRoot>, host_path: &Path) -> Result<PathBuf> {
    host_root.map_or_else(|| Ok(host_path.to_path_buf()), |root| root.local(host_path))
}
