//! The assisted-installer-controller: the second program of the system, a Kubernetes Job that
//! the bootstrap host deploys into the new cluster (its manifests are in `deploy`) and that
//! finishes the install once the agents are gone: CSR approval, host stages, operator reports,
//! log upload, `complete-installation`. It replaces Go's `assisted-installer-controller`.
//!
//! The same binary runs it: `assisted-installer controller`, the binary invoked under the name
//! `assisted-installer-controller`, or the binary without any argument (how the Job runs the
//! image's entrypoint), all through `commands::controller::run`, which wires [`run::run`] with
//! the real clients and `oc`, and keeps Go's exit codes.
//!
//! - `config`, `startup`, `log`: what the process knows before it touches an API (the
//!   environment, the token file, dry mode's hosts and reboot marker, the log file);
//! - `bootstrap`: the Kubernetes client, the proxy environment from the cluster's Proxy, then
//!   the service client, in that order;
//! - `run`: Go's `main` sequence over trait objects, with the `tasks` (one file each) on
//!   threads under one stop token;
//! - `oc`: the runner of the `oc` commands, which says so when the image has no `oc`;
//! - `status`: the tasks' shared error state; `hosts`: the host map and node matching;
//! - `service`: the assisted-service calls; the Kubernetes API the tasks use is `crate::kube`.
//!
//! Tested on the in-memory fakes and a fake clock (every task and the whole sequence), on
//! sockets (both clients), and as a process end to end (`tests/controller_process.rs`). Dry
//! mode (Go's load-testing mode) runs the same sequence on the pretend cluster of `kube::dry`.

pub(crate) mod bootstrap;
pub(crate) mod config;
pub(crate) mod deploy;
pub(crate) mod hosts;
pub(crate) mod log;
pub(crate) mod oc;
pub(crate) mod run;
pub mod service;
pub(crate) mod startup;
pub(crate) mod status;
pub(crate) mod tasks;
#[cfg(test)]
mod testing;
