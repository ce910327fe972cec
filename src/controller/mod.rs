//! The assisted-installer-controller (issue 13): the second program of the system, a Kubernetes
//! Job that the bootstrap host deploys into the new cluster and that finishes the install once
//! the agents are gone (CSR approval, host stages, operator reports, log upload,
//! `complete-installation`). The behaviour it reproduces is `assisted-installer-controller-
//! behaviour.md` in the shared reference; section numbers (§) below are that file's.
//!
//! The same binary runs it: `assisted-installer controller`, the binary invoked under the name
//! `assisted-installer-controller`, or the binary without any argument (how the Job runs the
//! image's entrypoint), all through `commands::controller::run`.
//!
//! # Layout
//!
//! - `config`: the environment (§2.1), parsed as a pure function; the token masked in output.
//! - `token`: the service token from the mounted Secret file, with its env fallback (§2.2).
//! - `status`: the tasks' shared error state, `ControllerStatus` (§3.3).
//! - `loops`: Go's poll, poll-with-cancel, retry and ticker semantics (§3.2) on the crate's
//!   `Clock` and `Stop` token, so hours of waits run at once on a `FakeClock`.
//! - `startup`: §3.1 steps 1–4 (environment, token, dry-mode hosts and reboot marker, log file)
//!   as a library function that returns the parsed startup state; `log` sets up the log
//!   (stdout and `/tmp/controller_logs.log`, §2.6).
//! - `bootstrap`: §3.1 steps 5–7 (Kubernetes client, proxy environment from the cluster's Proxy,
//!   service client, in that order) as a library function over constructors and an env setter.
//! - `run`: §3.1 steps 5–18, the main sequence over trait objects (clients as constructors,
//!   clock, signal stop token, must-gather runner, reboot counter): the notifier, the DNS fix,
//!   the ready phase, the tasks on threads in Go's order, the completion wait, the shutdown step
//!   and the notifier's finalize; it returns [`run::Outcome`] (`Done`, or `ExitNow` for Go's
//!   `os.Exit(0)`), startup failures as errors (exit 1). The tasks built in other modules enter
//!   through [`run::ExtraTasks`] (OLM step, ABI post-install, BMH, node labels).
//! - `tasks` (`src/controller/tasks/`): one file per task: `ready` (SetReadyState, invoker,
//!   platform, untaint decision), `dns_fix`, `nodes` and `csr`, `reboots`, `operators`,
//!   `completion` (post-install, completion body, both completion waits), `logs` (periodic and
//!   final upload, must-gather), `router_probe`, `olm` (§3.9 and the ABI post-install §3.10),
//!   `bmh` (§3.11), `labels` (§3.13).
//! - `cluster` (`src/controller/cluster/`): the narrow Kubernetes API trait the tasks use, its
//!   kube-rs implementation, an in-memory fake, and dry mode's pretend cluster (§3.16: nodes,
//!   MCS log and Ready nodes from the hosts' reboot markers, every operator available).
//! - `service` (`src/controller/service/`): the assisted-service calls the controller makes.
//! - `hosts` (`src/controller/hosts.rs`): the host map and node matching (§3.4).
//!
//! # Entry points and tests
//!
//! `commands::controller::run` wires [`run::run`] with the real clients (kube-rs with the
//! bootstrap kubeconfig or the pod's service account; the assisted-service REST client), `oc`
//! for must-gather, OLM manifests and reboot counts (with the proxy variables of the start, as
//! Go's executor), and Go's exit codes (startup failure 1; done 0; the completion wait's
//! immediate exit 0). Tested on the in-memory fakes and a fake clock (every task and the whole
//! sequence), on sockets (both clients, request by request), and as a process end to end
//! (`tests/controller_process.rs`). Dry mode (§3.16) runs the same sequence on the pretend
//! cluster of `cluster::dry`.

pub mod bootstrap;
pub mod cluster;
pub mod config;
pub(crate) mod deploy;
pub mod hosts;
pub mod log;

pub mod run;
pub mod service;
pub mod startup;
pub mod status;
pub mod tasks;
#[cfg(test)]
mod testing;
pub mod token;
