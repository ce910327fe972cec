//! The controller's tasks (Go's `SetReadyState` to `waitForInstallation`), one file each, built on the `cluster` and `service`
//! traits, the `loops` helpers and the shared `status`.

pub mod bmh;
pub mod completion;
pub mod csr;
pub mod dns_fix;
pub mod labels;
pub mod logs;
pub mod nodes;
pub mod olm;
pub mod operators;
pub mod ready;
pub mod reboots;
pub mod router_probe;
