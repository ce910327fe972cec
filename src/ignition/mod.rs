//! Ignition: the configs both the installer and the controller read or write (`data:` URLs,
//! the pull secret in `bootstrap.ign`, the single-node merge, the config `write-image` embeds).

pub(crate) mod config;
pub(crate) mod data_url;
pub mod merge;
pub(crate) mod pull_secret;

pub use config::{IgnitionConfig, IgnitionHash};
