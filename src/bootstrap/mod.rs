//! Pure building blocks of the bootstrap (HA) and single-node (bootstrap-in-place) flows
//! (behaviour spec §3.4 and §3.5). Nothing here touches the host: every function works on bytes
//! or strings so that the flows stay thin and these rules can be tested without root.
//!
//! - [`ignition_merge`]: Ignition v3 config merging, used to fold the host ignition into the SNO
//!   `master.ign` (§3.5 step 2.5).
//! - [`data_url`]: RFC 2397 `data:` URL decoding with Ignition's optional gzip compression.
//! - [`pull_secret`]: the pull secret taken out of `bootstrap.ign` (§3.4 A3).
//! - [`ssh_manifest`]: the `99-assisted-installer-master-ssh` MachineConfig (§3.4 A5).
//! - [`mcs_logs`]: which hosts fetched their ignition from the machine-config-server (§3.4 A12).
//! - [`hostname`]: the hostname check and the random replacement name (§3.4 A7).

pub mod controller;
pub mod data_url;
pub mod hostname;
pub mod ignition_merge;
pub mod mcs_logs;
pub mod pull_secret;
pub mod ssh_manifest;
