//! The controller's tasks (Go's `SetReadyState` to `waitForInstallation`), one file each, built on the `cluster` and `service`
//! traits, the clock's waits and the shared `status`.

/// Go's general wait interval: the node-status, BMH and label rounds, CSR approval, waiting
/// for `finalizing` and the stage-report retries.
pub(crate) const GENERAL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

pub(crate) mod bmh;
pub(crate) mod completion;
pub(crate) mod csr;
pub(crate) mod dns_fix;
pub(crate) mod labels;
pub mod logs;
pub(crate) mod nodes;
pub mod olm;
pub(crate) mod operators;
pub(crate) mod ready;
pub mod reboots;
pub mod router_probe;
