//! systemd helpers over a [`CommandRunner`].
//!
//! Actions (`start`, `stop`, `restart`, `daemon-reload`…) go through [`Systemd::systemctl`],
//! which does nothing in dry-run mode (Go's `SystemctlAction`). Queries (`is-active`, `show`,
//! `list-units`, `status`) always run, in dry-run mode too, as in the Go installer.

use anyhow::Context;

use super::commands::{CommandRunner, ExecError};

#[derive(Clone, Copy)]
pub(crate) struct Systemd<'a> {
    runner: &'a dyn CommandRunner,
    dry_run: bool,
}

impl<'a> Systemd<'a> {
    pub(crate) fn new(runner: &'a dyn CommandRunner, dry_run: bool) -> Self {
        Systemd { runner, dry_run }
    }

    /// `systemctl <action> <args…>`; a no-op in dry-run mode.
    pub(crate) fn systemctl(&self, action: &str, args: &[&str]) -> anyhow::Result<()> {
        if self.dry_run {
            tracing::info!("dry run: skipping systemctl {action} {}", args.join(" "));
            return Ok(());
        }
        tracing::info!("Running systemctl {action} {}", args.join(" "));
        self.runner
            .run("systemctl", &[&[action], args].concat())
            .map(|_| ())
            .with_context(|| format!("Failed executing systemctl {action} [{}]", args.join(" ")))
    }

    /// `systemctl is-active <unit>`: the state word it prints (`active`, `inactive`, `failed`,
    /// `activating`…). A non-zero exit is not an error here, since systemctl exits 3 for any
    /// state but `active`; only a command that did not run (or printed nothing) is.
    pub(crate) fn is_active(&self, unit: &str) -> Result<String, ExecError> {
        match self.runner.run("systemctl", &["is-active", unit]) {
            Ok(out) => Ok(out),
            Err(e) if e.exited() && !e.output.is_empty() => Ok(e.output),
            Err(e) => Err(e),
        }
    }

    /// `systemctl show -P ActiveState <unit>`.
    pub(crate) fn show_active_state(&self, unit: &str) -> Result<String, ExecError> {
        self.runner
            .run("systemctl", &["show", "-P", "ActiveState", unit])
    }

    /// `systemctl status <unit>` output for the log, whatever its exit code.
    pub(crate) fn status(&self, unit: &str) -> String {
        match self.runner.run("systemctl", &["status", unit]) {
            Ok(out) => out,
            Err(e) => e.output,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::commands::RecordingRunner;
    use super::*;

    #[test]
    fn systemctl_runs_actions_except_in_dry_run_and_fails_with_context() {
        let r = RecordingRunner::new();
        let args = ["--no-block", "a.service", "b.service"];
        Systemd::new(&r, false).systemctl("start", &args).unwrap();
        Systemd::new(&r, true).systemctl("stop", &args).unwrap();
        assert_eq!(
            r.lines(),
            vec!["systemctl start --no-block a.service b.service"]
        );
        // A failure has the action as context over the command's error.
        r.fail("systemctl restart NetworkManager.service", 1, "Job failed");
        let err = Systemd::new(&r, false)
            .systemctl("restart", &["NetworkManager.service"])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Failed executing systemctl restart [NetworkManager.service]"
        );
        assert!(format!("{err:#}").contains("LastOutput \"Job failed\""));
    }

    #[test]
    fn queries_run_in_dry_run_too() {
        let r = RecordingRunner::new();
        r.fail("systemctl is-active progress.service", 3, "inactive")
            .ok("systemctl is-active a.service", "active")
            .fail("systemctl is-active b.service", 1, "")
            .ok(
                "systemctl show -P ActiveState node-image-pull.service",
                "active",
            )
            .fail("systemctl status bootkube.service", 3, "inactive (dead)");
        let s = Systemd::new(&r, true);
        assert_eq!(s.is_active("progress.service").unwrap(), "inactive");
        assert_eq!(s.is_active("a.service").unwrap(), "active");
        // Nothing printed: the exit status is the error.
        assert!(s.is_active("b.service").is_err());
        assert_eq!(
            s.show_active_state("node-image-pull.service").unwrap(),
            "active"
        );
        assert_eq!(s.status("bootkube.service"), "inactive (dead)");
        assert_eq!(r.lines().len(), 5);
    }
}
