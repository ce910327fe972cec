//! The assisted-installer-controller (issue 13). This branch's slice: the service calls
//! (`service`) and the host map (`hosts`). The merge replaces this file with the full module.

pub mod hosts;
pub mod service;
