//! The bootstrap host (HA: it runs the bootstrap control plane, then pivots into a master) and
//! the single-node host (bootstrap-in-place), with the Go installer's steps, stages and info
//! strings. Host effects go through `Flow::host`, the new cluster through `Flow::kube`, files
//! under /opt through `Flow::paths`; every wait ends early when `Flow::stop` fires.
//!
//! The steps, one file each:
//! - `startBootstrap` in `prepare`: everything the bootstrap control plane needs before
//!   bootkube runs (pull secret, bootstrap Ignition, SSH manifest, hostname, controller
//!   manifests, `oc`);
//! - `waitForControlPlane` and the rest of the post-phase in `waits` (nodes, bootkube, etcd,
//!   controller, workers, MachineConfig annotations);
//! - the `updateConfiguringStatus` goroutine, as a thread, in `configuring`;
//! - the controller's log uploads while it is waited for (`uploadControllerLogs`) in
//!   `controller_logs`;
//! - `createSingleNodeMasterIgnition` in `single_node`.
//!
//! Their pure building blocks work on bytes and strings only, so their rules are tested without
//! root:
//! - the assisted-installer-controller manifests (`PrepareController`) come from the
//!   controller's own [`crate::controller::deploy`];
//! - the hostname check and the random replacement name (`checkHostname`) in [`hostname`];
//! - which hosts fetched their Ignition from the machine-config-server, in [`crate::openshift::mcs_logs`];
//! - the `99-assisted-installer-master-ssh` MachineConfig (`CreateOpenshiftSshManifest`) in
//!   [`ssh_manifest`];
//! - the tar.gz archive of a log upload (`WriteToTarGz`) in [`crate::archive`].

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
