//! Ignition: the configs both the installer and the controller read or write.
//!
//! - RFC 2397 `data:` URLs, with Ignition's optional gzip compression, in [`data_url`];
//! - the pull secret taken out of `bootstrap.ign` (the Go `ExtractFromIgnition`) in
//!   [`pull_secret`];
//! - Ignition v3 config merging, to fold the host Ignition into the single-node `master.ign`
//!   (the Go `updateSingleNodeIgnition`), in [`merge`];
//! - the config embedded by `write-image`, with its `--ignition-hash` check, in [`config`].

pub(crate) mod config;
pub(crate) mod data_url;
pub mod merge;
pub(crate) mod pull_secret;

pub use config::{IgnitionConfig, IgnitionHash};
