//! The assisted-installer-controller (issue 13): the second program of the system, a Kubernetes
//! Job that the bootstrap host deploys into the new cluster and that finishes the install once
//! the agents are gone (CSR approval, host stages, operator reports, log upload,
//! `complete-installation`). The behaviour it reproduces is `assisted-installer-controller-
//! behaviour.md` in the shared reference; section numbers (§) below are that file's.
//!
//! The same binary runs it: `assisted-installer controller`, or the binary invoked under the
//! name `assisted-installer-controller` (what the Job's image entrypoint runs), both through
//! `commands::controller::run`.
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
//! - `tasks` (`src/controller/tasks/`): one file per task; `ready` (SetReadyState, invoker,
//!   install-config platform, the untaint decision: §3.5, §3.5.1, §3.1 steps 11–12) and
//!   `dns_fix` (§3.6) exist.
//! - `cluster` (`src/controller/cluster/`): the narrow Kubernetes API trait the tasks use, its
//!   kube-rs implementation and an in-memory fake.
//! - `service` (`src/controller/service/`): the assisted-service calls the controller makes.
//! - `hosts` (`src/controller/hosts.rs`): the host map and node matching (§3.4).
//!
//! # Status
//!
//! Exists: configuration, token, shared status, loop helpers, startup steps 1–4, logging, both
//! entry points (subcommand and argv\[0\] name), the Kubernetes API trait with its client, fake
//! and RBAC proof, the service calls with their fake, and the host map. `run` stops after step 4 with an error
//! that says the remaining steps are not built, so the process exits 1 (the Job would retry);
//! nothing pretends to work.
//!
//! Also built as library functions, not yet called by `run`: steps 5–7 (`bootstrap`), the DNS
//! fix (step 10) and the ready phase (steps 11–14, `tasks::ready`).
//!
//! Next: the reboots notifier (step 8), wiring steps 5–14 into `run`, then the
//! tasks of §3.7–§3.15 on the `cluster` and `service` traits, the completion wait and its exit
//! codes, and the end-to-end tests of issue 13.

pub mod bootstrap;
pub mod cluster;
pub mod config;
pub mod hosts;
pub mod log;
pub mod loops;
pub mod run;
pub mod service;
pub mod startup;
pub mod status;
pub mod tasks;
pub mod token;
