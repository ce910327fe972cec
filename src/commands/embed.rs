//! `embed`: the post-install steps on a disk written earlier.

use anyhow::Result;

use crate::cli::embed::EmbedArgs;
use crate::write::post_install::apply_to_written_disk;

pub fn run(args: &EmbedArgs) -> Result<()> {
    apply_to_written_disk(&args.device, &args.post_install()?, args.preserve_on_error)
}
