//! Writing CoreOS to a disk, end to end, for `write-image` and the install flows alike: the
//! options ([`args`], also what `--installer-args` may carry), one checked [`plan`], then the
//! [run](mod@run): the image streamed and verified by `image`, the post-install steps applied
//! to the disk's /boot ([`post_install`]), and the partition table written last, or the disk
//! reset.

pub(crate) mod args;
pub(crate) mod first_boot;
pub(crate) mod installer_args;
pub(crate) mod plan;
pub(crate) mod post_install;
mod reset;
pub(crate) mod run;
pub(crate) mod signed;

pub use args::{KargsAndNetworkArgs, WriterArgs};
pub use first_boot::{first_boot_warnings, FirstBootCheck};
pub use installer_args::parse_installer_args;
pub use plan::{PlanSettings, Signing, Unverified, WritePlan};
pub use run::{run, stream, Streamed};
