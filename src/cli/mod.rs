//! Command-line definitions (clap derive) and their conversion to the library's types.
//! `main.rs` parses with these and dispatches to `commands`. The writer's options that
//! `--installer-args` shares are defined with the write (`write::args`).

mod config_file;
pub mod config_sources;
#[cfg(test)]
mod docs_tests;
pub mod embed;
pub(crate) mod go_flags;
pub(crate) mod ignition_url;
mod live_install;
pub(crate) mod postinstall;
pub mod write_image;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "assisted-installer",
    version,
    about = "Install an OpenShift host from the CoreOS live system: write the CoreOS image to disk in-process, verified."
)]
pub struct Cli {
    /// Log debug details too.
    #[arg(long, short = 'v', global = true)]
    pub verbose: bool,
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per run: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Stream a CoreOS metal image (raw, gzip, xz or zstd, or the live system's own) onto a
    /// disk, verified, first MiB last.
    WriteImage(write_image::WriteImageArgs),
    /// Apply the post-install steps (Ignition, kernel arguments, network) to a disk written earlier.
    Embed(embed::EmbedArgs),
    /// Run the assisted-installer-controller (the Job in the new cluster), configured by its
    /// environment as the Go one; also what the binary does when run as
    /// `assisted-installer-controller`.
    Controller,
}
