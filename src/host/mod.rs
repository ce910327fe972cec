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

use std::path::PathBuf;
use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
pub use commands::{CommandRunner, ExecError, HostRunner, RecordingRunner, Reply};
pub use reboot::{FakeReboot, Rebooter, ShutdownRebooter};
pub use systemd::Systemd;

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

    /// The usual set-up: `commands` run host commands (a [`HostRunner`], through nsenter from the
    /// installer container), the real clock, and a real reboot, or in
    /// dry-run mode a fake one touching `fake_reboot_marker` through a host `touch`.
    pub fn with_runner(
        commands: Arc<dyn CommandRunner>,
        dry_run: bool,
        fake_reboot_marker: Option<PathBuf>,
    ) -> Self {
        let reboot: Arc<dyn Rebooter> = if dry_run {
            Arc::new(FakeReboot::with_runner(
                fake_reboot_marker.unwrap_or_default(),
                commands.clone(),
            ))
        } else {
            Arc::new(ShutdownRebooter::new(commands.clone()))
        };
        HostEffects::new(commands, reboot, Arc::new(SystemClock), dry_run)
    }

    /// systemd helpers over this host's runner (actions are no-ops in dry-run mode).
    pub fn systemd(&self) -> Systemd<'_> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_host_reboots_with_shutdown() {
        let r = Arc::new(RecordingRunner::new());
        let host = HostEffects::with_runner(r.clone(), false, None);
        host.reboot.reboot("+1").unwrap();
        host.systemd().systemctl("daemon-reload", &[]).unwrap();
        assert_eq!(
            r.lines(),
            vec![
                "shutdown -r +1 'Installation completed, server is going to reboot.'",
                "systemctl daemon-reload"
            ]
        );
    }

    #[test]
    fn dry_host_touches_marker_and_skips_systemctl_actions() {
        let r = Arc::new(RecordingRunner::new());
        let host = HostEffects::with_runner(r.clone(), true, Some("/tmp/fake-reboot".into()));
        host.systemd()
            .systemctl("stop", &["agent.service"])
            .unwrap();
        host.reboot.reboot("now").unwrap();
        assert_eq!(r.lines(), vec!["touch /tmp/fake-reboot"]);
        assert!(format!("{host:?}").contains("dry_run: true"));
    }
}
