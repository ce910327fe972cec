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
    /// Schedules a kexec reboot into the kernel loaded with `kexec_file_load`, `when` as for
    /// [`Rebooter::reboot`]. An error means nothing was scheduled: the caller reboots as usual.
    fn kexec_reboot(&self, when: &str) -> anyhow::Result<()>;
}

/// What the timer of a delayed kexec reboot runs: the kexec reboot, or, should it be refused
/// by then (no kernel loaded any more), the firmware reboot, with the wall message (`$1`). A
/// kexec job once queued is irreversible, so the fallback cannot replace one that started.
const KEXEC_OR_REBOOT: &str =
    "systemctl --message=\"$1\" kexec || systemctl --message=\"$1\" reboot";
/// The transient unit of a delayed kexec reboot (`systemctl list-timers` shows it).
const KEXEC_UNIT: &str = "--unit=assisted-installer-kexec";

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

    fn kexec_reboot(&self, when: &str) -> anyhow::Result<()> {
        tracing::info!("Rebooting node into the installed system with kexec ({when})");
        self.schedule_kexec(when)
            .map(|_| ())
            .context("scheduling the kexec reboot")
    }
}

/// Why not `shutdown -r +1` with a kernel loaded: a scheduled shutdown goes through logind,
/// and what it starts when the minute is up depends on the systemd version (older logind
/// starts reboot.target for anything but halt and poweroff, which reboots through the
/// firmware; newer ones may start kexec.target); `systemctl kexec --when=` needs systemd 254,
/// newer than the live ISO's. Only `systemctl kexec` (kexec.target) starts the loaded kernel on
/// every version. So `now` is `systemctl --message=<msg> kexec`, and `+N` a transient timer
/// (`systemd-run --on-active=Nmin`) running it N minutes later with a firmware reboot should
/// the kexec be refused then: the same delay and message, the message sent when the reboot
/// starts. Either is a clean shutdown of every unit, like a reboot.
impl ShutdownRebooter {
    fn schedule_kexec(&self, when: &str) -> Result<String, ExecError> {
        // Without Go's literal quotes: no shell parses these arguments.
        let message = REBOOT_MESSAGE.trim_matches('\'');
        match when.strip_prefix('+') {
            Some(minutes) => self.0.run(
                "systemd-run",
                &[
                    KEXEC_UNIT,
                    &format!("--on-active={minutes}min"),
                    "--timer-property=AccuracySec=1s",
                    "/bin/sh",
                    "-c",
                    KEXEC_OR_REBOOT,
                    "sh",
                    message,
                ],
            ),
            None => self
                .0
                .run("systemctl", &[&format!("--message={message}"), "kexec"]),
        }
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
        self.touch()
    }

    fn kexec_reboot(&self, when: &str) -> anyhow::Result<()> {
        tracing::info!(
            "dry run: not rebooting with kexec ({when}); touching fake reboot marker {}",
            self.0.display()
        );
        self.touch()
    }
}

impl FakeReboot {
    fn touch(&self) -> anyhow::Result<()> {
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
    fn kexec_reboot_is_systemctl_kexec_now_or_on_a_timer_with_the_firmware_as_fallback() {
        let r = Arc::new(RecordingRunner::new());
        ShutdownRebooter(r.clone()).kexec_reboot("now").unwrap();
        ShutdownRebooter(r.clone()).kexec_reboot("+1").unwrap();
        let msg = "Installation completed, server is going to reboot.";
        let calls = r.calls();
        assert_eq!(calls[0].program, "systemctl");
        assert_eq!(
            calls[0].args,
            vec![format!("--message={msg}"), "kexec".into()]
        );
        assert_eq!(calls[1].program, "systemd-run");
        assert_eq!(
            calls[1].args,
            vec![
                "--unit=assisted-installer-kexec",
                "--on-active=1min",
                "--timer-property=AccuracySec=1s",
                "/bin/sh",
                "-c",
                "systemctl --message=\"$1\" kexec || systemctl --message=\"$1\" reboot",
                "sh",
                msg
            ]
        );
        r.fail(&calls[1].line(), 1, "Failed to start transient timer unit");
        let err = ShutdownRebooter(r).kexec_reboot("+1").unwrap_err();
        assert!(
            format!("{err:#}")
                .starts_with("scheduling the kexec reboot: failed executing systemd-run"),
            "{err:#}"
        );
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
        std::fs::remove_file(&marker).unwrap();
        fake.kexec_reboot("+1").unwrap();
        assert!(marker.exists());
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
