//! The controller's tasks (§3.5–§3.15), one file each, built on the `cluster` and `service`
//! traits, the `loops` helpers and the shared `status`.

pub mod completion;
pub mod csr;
pub mod nodes;
pub mod ready;
pub mod reboots;
