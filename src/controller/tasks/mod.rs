//! The controller's tasks (Go's `SetReadyState` to `waitForInstallation`), one file each, built on the `cluster` and `service`
//! traits, the clock's waits and the shared `status`.

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
