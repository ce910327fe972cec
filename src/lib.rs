//! The on-host OpenShift assisted-installer: a streaming CoreOS disk writer (`image`, `disk`,
//! and `write` from plan to partition table) and, on top of it, the install flows. `main.rs` only parses arguments and dispatches here.

mod archive;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod config;
pub mod controller;
pub mod disk;
pub mod flow;
#[cfg(test)]
mod fuzz;
pub mod host;
pub mod ignition;
pub mod image;
pub mod kexec;
pub mod kube;
pub mod logging;
pub mod openshift;
pub(crate) mod postinstall;
pub mod service;
pub mod signals;
mod wire;
pub mod write;
