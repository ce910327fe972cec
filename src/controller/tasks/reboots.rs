//! The reboots notifier (`NOTIFY_NUM_REBOOTS`): once a host is reported `Done`, count how many
//! times its node rebooted and send the service the `reboots_for_node` event. Each job has its
//! own 6 min limit, not the tasks' stop token: a job outlives the shutdown, as in Go.
//!
//! **How reboots are counted.** Go runs `oc --kubeconfig <file> debug node/<node> -- chroot
//! /host last reboot` and counts the output lines starting with `reboot `. The number comes from
//! the node's wtmp, which no Kubernetes API serves; reading it needs a privileged pod on that node
//! with the host's root mounted, which is what `oc debug node` builds with the admin kubeconfig
//! (debug pod spec, attach protocol, RBAC the controller's ServiceAccount does not have). So we
//! keep the `oc` command.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::OrLog;
use crate::clock::{retry_attempts, Clock, Deadline, RetryError};
use crate::controller::service::{ControllerService, RebootsEvent, KUBECONFIG_NOINGRESS};
use crate::host::commands::CommandRunner;

pub(crate) const JOB_TIMEOUT: Duration = Duration::from_secs(6 * 60);
/// Attempts at counting a node's reboots.
pub(crate) const COUNT_ATTEMPTS: u32 = 10;
/// Wait between two attempts.
pub(crate) const COUNT_INTERVAL: Duration = Duration::from_secs(15);

/// What the node-status task calls once a host is `Done` (in a round of `WaitAndUpdateNodesStatus`).
pub(crate) trait RebootsNotify: Send + Sync {
    fn start(&self, node_name: &str, host_id: &str, infra_env_id: &str, cluster_id: &str);
}

/// The number of lines of `last reboot` output that start with `reboot ` (the trailing `wtmp
/// begins …` line and blank lines do not count).
pub(crate) fn count_reboots(output: &str) -> u32 {
    output
        .lines()
        .filter(|line| line.starts_with("reboot "))
        .count() as u32
}

/// See the module documentation.
pub(crate) struct RebootsNotifier {
    inner: Arc<Inner>,
    jobs: Mutex<Vec<JoinHandle<()>>>,
}

struct Inner {
    enabled: bool,
    service: Arc<dyn ControllerService>,
    /// Runs `oc` (see the module documentation).
    runner: Arc<dyn CommandRunner>,
    clock: Arc<dyn Clock>,
    temp_root: PathBuf,
    kubeconfig: Mutex<Option<PathBuf>>,
}

impl RebootsNotifier {
    /// The notifier, making its `kubedir*` under `temp_root` (the system's temp dir in
    /// production).
    pub(crate) fn new(
        enabled: bool,
        service: Arc<dyn ControllerService>,
        runner: Arc<dyn CommandRunner>,
        clock: Arc<dyn Clock>,
        temp_root: PathBuf,
    ) -> RebootsNotifier {
        RebootsNotifier {
            inner: Arc::new(Inner {
                enabled,
                service,
                runner,
                clock,
                temp_root,
                kubeconfig: Mutex::new(None),
            }),
            jobs: Mutex::new(Vec::new()),
        }
    }

    /// The shared kubeconfig: downloaded on first success, then cached.
    pub(crate) fn kubeconfig(&self) -> Result<PathBuf> {
        self.inner.kubeconfig()
    }

    /// Waits for every job, then deletes the cached kubeconfig file (the dir stays).
    pub(crate) fn finalize(&self) {
        let jobs = std::mem::take(&mut *self.jobs.lock().unwrap_or_else(|p| p.into_inner()));
        for job in jobs {
            if job.join().is_err() {
                tracing::error!("a reboots-notifier job panicked");
            }
        }
        let cached = self
            .inner
            .kubeconfig
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(path) = cached {
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!("failed to remove {}: {e}", path.display());
            }
        }
    }
}

impl Inner {
    fn kubeconfig(&self) -> Result<PathBuf> {
        let mut cached = self.kubeconfig.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(path) = &*cached {
            return Ok(path.clone());
        }
        let dir = tempfile::Builder::new()
            .prefix("kubedir")
            .tempdir_in(&self.temp_root)
            .with_context(|| format!("creating a temp dir in {}", self.temp_root.display()))?;
        let path = dir.path().join(KUBECONFIG_NOINGRESS);
        // On failure `dir` is dropped, which removes it.
        self.service.download_kubeconfig_noingress(&path)?;
        let _kept = dir.keep();
        *cached = Some(path.clone());
        Ok(path)
    }

    /// One node's job; `deadline` is [`JOB_TIMEOUT`] after [`RebootsNotify::start`].
    fn job(&self, event: RebootsEvent, deadline: Instant) {
        let deadline = Deadline {
            clock: &*self.clock,
            at: deadline,
        };
        let node = &event.node_name;
        let what = format_args!("failed to get the kubeconfig to count the reboots of node {node}");
        let Some(kubeconfig) = self.kubeconfig().or_warn(what) else {
            return;
        };
        let kubeconfig = kubeconfig.to_string_lossy();
        // `oc --kubeconfig <kubeconfig> debug node/<node> -- chroot /host last reboot`.
        let target = format!("node/{}", event.node_name);
        let args = [
            "--kubeconfig",
            &kubeconfig,
            "debug",
            &target,
            "--",
            "chroot",
            "/host",
            "last",
            "reboot",
        ];
        let count = || -> Result<u32> {
            let output = self
                .runner
                .run("oc", &args)
                .with_context(|| format!("counting the reboots of node {}", event.node_name))?;
            Ok(count_reboots(&output))
        };
        let counted = retry_attempts(
            &*self.clock,
            &deadline,
            COUNT_ATTEMPTS,
            COUNT_INTERVAL,
            count,
        );
        let reboots = match counted {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(
                    "failed to count the reboots of node {}: {}",
                    event.node_name,
                    match &e {
                        RetryError::Canceled => "context deadline exceeded".to_string(),
                        RetryError::Exhausted { attempts, last } =>
                            format!("failed after {attempts} attempts, last error: {last:#}"),
                    }
                );
                return;
            }
        };
        let event = RebootsEvent { reboots, ..event };
        tracing::info!("{}", event.message());
        let sent = self.service.trigger_reboots_event(&event);
        let what = format_args!(
            "failed to send the reboots event of node {}",
            event.node_name
        );
        sent.or_error(what);
    }
}

impl RebootsNotify for RebootsNotifier {
    fn start(&self, node_name: &str, host_id: &str, infra_env_id: &str, cluster_id: &str) {
        if !self.inner.enabled {
            return;
        }
        let event = RebootsEvent {
            cluster_id: cluster_id.to_string(),
            host_id: host_id.to_string(),
            infra_env_id: infra_env_id.to_string(),
            node_name: node_name.to_string(),
            reboots: 0,
        };
        let inner = self.inner.clone();
        let deadline = inner.clock.now() + JOB_TIMEOUT;
        let job = std::thread::spawn(move || inner.job(event, deadline));
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::controller::service::testing::{MemoryService, ServiceCall};
    use crate::host::commands::{RecordingRunner, Reply};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// An `oc` that fails `fail` times, then answers `reboots` reboot lines.
    fn oc(fail: u32, reboots: usize) -> Arc<RecordingRunner> {
        let fail = AtomicU32::new(fail);
        Arc::new(RecordingRunner::with_script(move |_, _| {
            if fail.load(Ordering::SeqCst) > 0 {
                fail.fetch_sub(1, Ordering::SeqCst);
                return Some(Reply::fail(1, "oc debug failed"));
            }
            Some(Reply::ok("reboot   system boot\n".repeat(reboots)))
        }))
    }

    struct Setup {
        clock: Arc<FakeClock>,
        service: MemoryService,
        dir: tempfile::TempDir,
    }

    fn setup() -> Setup {
        let clock = Arc::new(FakeClock::new());
        let service = MemoryService::new("c1", clock.clone());
        service.set_kubeconfig("apiVersion: v1\n");
        Setup {
            clock,
            service,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn notifier(s: &Setup, enabled: bool, oc: Arc<dyn CommandRunner>) -> RebootsNotifier {
        RebootsNotifier::new(
            enabled,
            Arc::new(s.service.clone()),
            oc,
            s.clock.clone(),
            s.dir.path().to_path_buf(),
        )
    }

    #[test]
    fn counts_lines_starting_with_reboot_and_a_space() {
        let out = "reboot   system boot  5.14.0-284.el9 Mon Nov 23 10:01   still running\n\
                   reboot   system boot  5.14.0-284.el9 Mon Nov 23 09:40 - 10:00  (00:19)\n\
                   rebooted something\n \
                   reboot indented\n\
                   \n\
                   wtmp begins Mon Nov 23 09:38:11 2026";
        assert_eq!(count_reboots(out), 2);
        assert_eq!(count_reboots(""), 0);
    }

    #[test]
    fn kubeconfig_failure_is_not_cached_success_is() {
        let s = setup();
        let n = notifier(&s, true, oc(0, 1));
        s.service.fail("V2DownloadClusterCredentials", 1, 500);
        assert!(n.kubeconfig().is_err());
        // The failed attempt's dir was removed.
        assert_eq!(std::fs::read_dir(s.dir.path()).unwrap().count(), 0);
        let path = n.kubeconfig().unwrap();
        assert!(path.ends_with(KUBECONFIG_NOINGRESS));
        let dir = path.parent().unwrap();
        assert!(dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("kubedir"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "apiVersion: v1\n");
        assert_eq!(n.kubeconfig().unwrap(), path);
        assert_eq!(s.service.count("V2DownloadClusterCredentials"), 2);
        // Finalize deletes the file, not the dir.
        n.finalize();
        assert!(!path.exists());
        assert!(path.parent().unwrap().is_dir());
    }

    #[test]
    fn enabled_happy_path_sends_go_s_event() {
        let s = setup();
        let oc = oc(0, 1);
        let n = notifier(&s, true, oc.clone());
        n.start("node0", "host-0", "ie-0", "c1");
        let kubeconfig = n.kubeconfig().unwrap();
        n.finalize();
        assert_eq!(s.service.count("V2DownloadClusterCredentials"), 1);
        let k = kubeconfig.display();
        let line = format!("oc --kubeconfig {k} debug node/node0 -- chroot /host last reboot");
        assert_eq!(oc.lines(), [line]);
        let events: Vec<RebootsEvent> = s
            .service
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                ServiceCall::TriggerRebootsEvent(e) => Some(e),
                _ => None,
            })
            .collect();
        assert_eq!(events.len(), 1);
        let params = events[0].params(std::time::SystemTime::UNIX_EPOCH);
        assert_eq!(params.cluster_id.as_deref(), Some("c1"));
        assert_eq!(params.host_id.as_deref(), Some("host-0"));
        assert_eq!(params.infra_env_id.as_deref(), Some("ie-0"));
        assert_eq!(params.name, "reboots_for_node");
        assert_eq!(params.category, "user");
        assert_eq!(params.severity, "info");
        assert_eq!(
            params.message,
            "Node node0 has been rebooted 1 times before completing installation"
        );
    }

    /// Counting that hangs: the job gives up at its 6 min limit, before the 10 attempts.
    #[test]
    fn the_job_ends_at_its_six_minute_limit() {
        let s = setup();
        let clock = s.clock.clone();
        let slow = Arc::new(RecordingRunner::with_script(move |_, _| {
            clock.advance(Duration::from_secs(120));
            Some(Reply::fail(1, "oc debug timed out"))
        }));
        let n = notifier(&s, true, slow.clone());
        n.start("node0", "h", "ie", "c1");
        n.finalize();
        // 0 → 2:00, wait → 2:15 → 4:15, wait → 4:30 → 6:30: past the limit, no more waits.
        assert_eq!(slow.calls().len(), 3);
        assert_eq!(s.clock.sleeps(), vec![COUNT_INTERVAL; 2]);
        assert_eq!(s.service.operations(), ["V2DownloadClusterCredentials"]);
    }

    /// (enabled, failed downloads, failed counts) → counts asked, the service's operations
    /// and the waits: no count without a kubeconfig, no event without a count; the count is
    /// retried 15 s apart, 10 times at most, and the one that succeeds is sent.
    #[test]
    fn nothing_is_sent_without_a_count() {
        let download = "V2DownloadClusterCredentials";
        let cases = [
            (false, 0, 0, 0, vec![], 0),
            (true, 1, 0, 0, vec![download], 0),
            (true, 0, 100, 10, vec![download], 9),
            (true, 0, 3, 4, vec![download, "v2TriggerEvent"], 3),
        ];
        for (enabled, downloads_failing, counts_failing, asked, operations, waits) in cases {
            let s = setup();
            let oc = oc(counts_failing, 4);
            let n = notifier(&s, enabled, oc.clone());
            s.service.fail(download, downloads_failing, 500);
            n.start("node0", "h", "ie", "c1");
            n.finalize();
            assert_eq!(oc.calls().len(), asked);
            assert_eq!(s.service.operations(), operations);
            assert_eq!(s.clock.sleeps(), vec![COUNT_INTERVAL; waits]);
            if let Some(ServiceCall::TriggerRebootsEvent(e)) = s.service.calls().last() {
                assert_eq!(e.reboots, 4);
            }
        }
    }
}
