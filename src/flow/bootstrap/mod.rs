//! The bootstrap host (HA: it runs the bootstrap control plane, then pivots into a master) and
//! the single-node host (bootstrap-in-place), with the Go installer's steps, stages and info
//! strings. Host effects go through `Flow::host`, the new cluster through `Flow::kube`, files
//! under /opt through `Flow::paths`; every wait ends early when `Flow::stop` fires.
//!
//! One file per Go step: `startBootstrap` (`prepare`), `waitForControlPlane` and the rest of
//! the post-phase (`waits`), the `updateConfiguringStatus` goroutine (`configuring`),
//! `uploadControllerLogs` (`controller_logs`), `createSingleNodeMasterIgnition`
//! (`single_node`); the pure rules of `checkHostname` and `CreateOpenshiftSshManifest` in
//! [`hostname`] and [`ssh_manifest`].

pub(crate) mod hostname;
pub(crate) mod ssh_manifest;

mod configuring;
mod controller_logs;
mod prepare;
mod single_node;
mod waits;

pub(crate) use configuring::ConfiguringStatus;
pub(crate) use prepare::start_bootstrap;
pub(crate) use single_node::single_node_master_ignition;
pub(crate) use waits::{bootstrap_post_phase, wait_for_bootkube};

use super::Flow;
