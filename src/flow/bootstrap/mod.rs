//! The bootstrap host (HA: it runs the bootstrap control plane, then pivots into a master) and
//! the single-node host (bootstrap-in-place), with the Go installer's steps, stages and info
//! strings: `startBootstrap` and `createSingleNodeMasterIgnition` (`prepare`),
//! `waitForControlPlane` and the rest of the post-phase (`waits`), the
//! `updateConfiguringStatus` goroutine (`configuring`), `uploadControllerLogs`
//! (`controller_logs`).

mod configuring;
mod controller_logs;
mod prepare;
mod waits;

pub(crate) use configuring::ConfiguringStatus;
pub(crate) use prepare::{single_node_master_ignition, start_bootstrap};
pub(crate) use waits::{bootstrap_post_phase, wait_for_bootkube};

use super::Flow;
