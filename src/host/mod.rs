//! Narrow traits for host effects, with real and dry-run/test implementations.
//!
//! A flow picks its implementations once, at the top, in a [`HostEffects`]:
//! - [`commands::CommandRunner`]: host commands (`nsenter` from the container, direct on the
//!   host, or recorded);
//! - [`reboot::Rebooter`]: `shutdown -r`, or the dry-run fake reboot marker;
//! - [`crate::clock::Clock`]: sleeps and time for polls and retries (its own module: the
//!   disk and image layers wait through it too).
//!
//! The helpers on top (`systemd`, `disk_prep`, `boot_order`, `logs`, `existing_root`,
//! `registry_copy`) take the narrow trait they need, not the bundle.

pub(crate) mod boot_order;
pub mod commands;
pub(crate) mod disk_prep;
pub(crate) mod existing_root;
pub(crate) mod free_space;
pub(crate) mod logs;
pub(crate) mod lsblk;
pub mod reboot;
pub(crate) mod registry_copy;
pub mod root;
pub(crate) mod rsync_progress;
pub(crate) mod systemd;

use std::sync::Arc;

use crate::clock::Clock;
pub use commands::{CommandRunner, ExecError, HostRunner, RecordingRunner, Reply};
pub use reboot::{FakeReboot, Rebooter, ShutdownRebooter};
pub(crate) use systemd::Systemd;

/// The host effects of one installation run (not to be confused with the service's host
/// model, `service::models::Host`).
#[derive(Clone)]
pub struct HostEffects {
    pub commands: Arc<dyn CommandRunner>,
    pub reboot: Arc<dyn Rebooter>,
    pub clock: Arc<dyn Clock>,
    /// Dry-run mode: systemctl actions are no-ops (queries still run).
    pub dry_run: bool,
}

impl HostEffects {
    pub fn new(
        commands: Arc<dyn CommandRunner>,
        reboot: Arc<dyn Rebooter>,
        clock: Arc<dyn Clock>,
        dry_run: bool,
    ) -> Self {
        HostEffects {
            commands,
            reboot,
            clock,
            dry_run,
        }
    }

    /// systemd helpers over this host's runner (actions are no-ops in dry-run mode).
    pub(crate) fn systemd(&self) -> Systemd<'_> {
        Systemd::new(&*self.commands, self.dry_run)
    }
}

impl std::fmt::Debug for HostEffects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostEffects")
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}
