//! What each subcommand does, given its parsed arguments.

pub mod write_image;
