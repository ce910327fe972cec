//! What each subcommand does, given its parsed arguments.

pub mod controller;
pub mod embed;
pub mod install;
pub mod write_image;
