//! Rebooting the host at the end of the installation (the Go installer's `finalize`), or
//! pretending to in dry-run mode.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use super::commands::{CommandRunner, ExecError};

/// The wall message given to `shutdown`. It is ONE argument and includes the single quotes,
/// exactly as the Go installer passes it.
const REBOOT_MESSAGE: &str = "'Installation completed, server is going to reboot.'";

pub trait Rebooter: Send + Sync {
    /// Schedules the reboot. `when` is `now` (single node) or `+1` (everything else).
    fn reboot(&self, when: &str) -> anyhow::Result<()>;
}

/// The real reboot: `shutdown -r <when> 'Installation completed, server is going to reboot.'`.
pub struct ShutdownRebooter(pub Arc<dyn CommandRunner>);

impl Rebooter for ShutdownRebooter {
    fn reboot(&self, when: &str) -> anyhow::Result<()> {
        tracing::info!("Rebooting node");
        self.0
            .run("shutdown", &["-r", when, REBOOT_MESSAGE])
            .map(|_| ())
            .map_err(|e| {
                tracing::error!("Failed to reboot node, err: {e}");
                // No added context: the Failed report carries the command error as Go does.
                anyhow::Error::new(e)
            })
    }
}

/// Dry-run reboot: touch this fake reboot marker file instead.
pub struct FakeReboot(pub PathBuf);

impl Rebooter for FakeReboot {
    fn reboot(&self, when: &str) -> anyhow::Result<()> {
        tracing::info!(
            "dry run: not rebooting ({when}); touching fake reboot marker {}",
            self.0.display()
        );
        if self.0.as_os_str().is_empty() {
            anyhow::bail!("dry run: no fake reboot marker path given (--fake-reboot-marker-path)");
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.0);
        file.and_then(|f| f.set_modified(std::time::SystemTime::now()))
            .with_context(|| format!("touching fake reboot marker {}", self.0.display()))
    }
}

/// Whether the ironic agent (converged flow) runs on this host: the output of
/// `systemctl list-units --no-legend ironic-agent.service` names the unit. Then Ironic, not the
/// installer, reboots the host.
pub(crate) fn ironic_agent_present(runner: &dyn CommandRunner) -> Result<bool, ExecError> {
    let out = runner.run(
        "systemctl",
        &["list-units", "--no-legend", "ironic-agent.service"],
    )?;
    Ok(out.contains("ironic-agent.service"))
}

#[cfg(test)]
mod tests {
    use super::super::commands::RecordingRunner;
    use super::*;

    #[test]
    fn reboot_runs_shutdown_with_quoted_message_as_one_argument_and_fails_with_it() {
        let r = Arc::new(RecordingRunner::new());
        ShutdownRebooter(r.clone()).reboot("+1").unwrap();
        ShutdownRebooter(r.clone()).reboot("now").unwrap();
        let calls = r.calls();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].program, "shutdown");
        assert_eq!(
            calls[0].args,
            vec![
                "-r",
                "+1",
                "'Installation completed, server is going to reboot.'"
            ]
        );
        assert_eq!(calls[1].args[1], "now");
        // A failure is the command's error.
        r.fail(
            "shutdown -r +1 'Installation completed, server is going to reboot.'",
            1,
            "Failed to talk to init daemon",
        );
        let err = ShutdownRebooter(r).reboot("+1").unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed executing shutdown [-r +1 'Installation completed, server is going to \
             reboot.'], Error exit status 1, LastOutput \"Failed to talk to init daemon\""
        );
        assert!(err.downcast_ref::<ExecError>().is_some());
    }

    #[test]
    fn fake_reboot_touches_marker_or_fails() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("rebooted");
        assert!(!marker.exists());
        let fake = FakeReboot(marker.clone());
        fake.reboot("+1").unwrap();
        assert!(marker.exists());
        fake.reboot("now").unwrap();
        // Without a marker, or where it cannot be created, it fails.
        assert!(FakeReboot("".into()).reboot("+1").is_err());
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("missing-dir").join("marker");
        let err = FakeReboot(bad).reboot("+1").unwrap_err();
        assert!(err.to_string().contains("fake reboot marker"));
    }

    #[test]
    fn ironic_detection() {
        let r = RecordingRunner::new();
        r.ok(
            "systemctl list-units --no-legend ironic-agent.service",
            "ironic-agent.service loaded active running Ironic Python Agent",
        );
        assert!(ironic_agent_present(&r).unwrap());

        let r = RecordingRunner::new();
        assert!(!ironic_agent_present(&r).unwrap());

        let r = RecordingRunner::new();
        r.fail(
            "systemctl list-units --no-legend ironic-agent.service",
            1,
            "",
        );
        assert!(ironic_agent_present(&r).is_err());
    }
}
