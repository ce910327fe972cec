//! Background progress reporter: the install flows enqueue stage changes and return at once; one
//! thread posts them to the service in order. A failed report (after the client's own retries)
//! is logged and dropped, never failing or blocking the install.
//!
//! Every report is checked against the host's [`StageOrder`] when it is enqueued: a stage the
//! service would refuse with 409 (not in the host's order, or before its current stage) is
//! skipped with a debug line. The current stage is the furthest one enqueued for the host, and
//! for another host also the one the service listed it at.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use std::collections::HashMap;

use tracing::{debug, warn};

use super::client::InventoryClient;
use super::models::Host;
use super::stages::{check_stage, HostStage, StageOrder};
use crate::config::Role;

/// How long dropping a [`Reporter`] waits for queued reports before giving up on them.
const DROP_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Minimum growth, in points, between two percentage reports of one stage.
const PERCENT_STEP: u8 = 5;

struct Job {
    infra_env_id: String,
    host_id: String,
    stage: HostStage,
    info: String,
}

#[derive(Default)]
struct Counts {
    /// Reports handed to the worker so far.
    queued: u64,
    /// Reports the worker has finished with (sent, failed or discarded).
    finished: u64,
}

struct Shared {
    counts: Mutex<Counts>,
    changed: Condvar,
    /// Set when the owner gave up waiting: the worker discards what is still queued.
    abandoned: AtomicBool,
}

impl Shared {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Posts host stage reports in order from a background thread. See the module docs.
pub struct Reporter {
    infra_env_id: String,
    host_id: String,
    shared: Arc<Shared>,
    /// `None` once dropped.
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    /// Last percentage of the disk write enqueued. Held while enqueueing, so that percentage
    /// reports from several threads keep their order.
    last_percent: Mutex<u8>,
    /// This host's stage order at the service, and whether the cluster is single-node (which
    /// picks a bootstrap host's order).
    order: Option<StageOrder>,
    single_node: bool,
    /// The furthest stage enqueued for this host. Held while enqueueing, so that the check and
    /// the queue agree.
    current: Mutex<Option<HostStage>>,
    /// The furthest stage enqueued for each other host, by host id.
    others: Mutex<HashMap<String, HostStage>>,
    drop_timeout: Duration,
}

impl Reporter {
    /// Starts the reporter thread for this host, installing as `role` (`--role`) on a cluster
    /// that is `single_node` or not (`--control-plane-count 1`): they pick the host's
    /// [`StageOrder`]. With an empty `host_id` every report about this host is skipped (as the
    /// Go installer does), with a debug log.
    pub fn spawn(
        client: Arc<dyn InventoryClient>,
        infra_env_id: String,
        host_id: String,
        role: &Role,
        single_node: bool,
    ) -> Reporter {
        let shared = Arc::new(Shared {
            counts: Mutex::new(Counts::default()),
            changed: Condvar::new(),
            abandoned: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel();
        let worker_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("progress-reporter".into())
            .spawn(move || run_worker(client, rx, worker_shared))
            .expect("spawning the progress reporter thread");
        Reporter {
            infra_env_id,
            host_id,
            shared,
            tx: Some(tx),
            thread: Some(thread),
            last_percent: Mutex::new(0),
            order: StageOrder::for_installer(role, single_node),
            single_node,
            current: Mutex::new(None),
            others: Mutex::new(HashMap::new()),
            drop_timeout: DROP_DRAIN_TIMEOUT,
        }
    }

    /// Enqueues `stage` / `info` for this host; returns at once. A stage the service would
    /// refuse (see the module docs) is skipped.
    pub fn stage(&self, stage: HostStage, info: impl Into<String>) {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(skip) = check_stage(self.order, *current, stage) {
            debug!(stage = %stage, host_id = %self.host_id, "progress report skipped: {skip}");
            return;
        }
        *current = Some(self.furthest(self.order, *current, stage));
        self.enqueue(&self.infra_env_id, &self.host_id, stage, info.into());
    }

    /// Of `current` and `next`, the stage further on in `order` (`next` without an order);
    /// `Failed` does not move a host on.
    fn furthest(
        &self,
        order: Option<StageOrder>,
        current: Option<HostStage>,
        next: HostStage,
    ) -> HostStage {
        match (order, current) {
            (_, Some(current)) if next == HostStage::Failed => current,
            (Some(order), Some(current)) => order.later(current, next),
            _ => next,
        }
    }

    /// `Writing image to disk` / `"<N>%"` for this host, only when N grew by at least 5 points
    /// since the last percentage enqueued (so the first once N ≥ 5), or N is 100 and the last
    /// was not. Values above 100 count as 100. Coalescing happens here, at enqueue time.
    pub fn write_percent(&self, percent: u8) {
        let percent = percent.min(100);
        let mut last = self.last_percent.lock().unwrap_or_else(|p| p.into_inner());
        if percent >= last.saturating_add(PERCENT_STEP) || (percent == 100 && *last != 100) {
            *last = percent;
            self.stage(HostStage::WritingImageToDisk, format!("{percent}%"));
        }
    }

    /// Enqueues a report about another host, as the service listed it (e.g. `Configuring`,
    /// `Joined` seen from the bootstrap); it shares the queue, so the order with this host's
    /// reports is kept. Checked against that host's order and the further on of its listed
    /// stage and the last one enqueued for it.
    pub fn other_host(&self, host: &Host, stage: HostStage, info: &str) {
        let order = StageOrder::for_host(host.role.as_ref(), host.bootstrap, self.single_node);
        let mut others = self.others.lock().unwrap_or_else(|p| p.into_inner());
        let listed = host.stage();
        let current = match (listed, others.get(&host.id).copied()) {
            (Some(listed), Some(sent)) => Some(self.furthest(order, Some(listed), sent)),
            (listed, sent) => sent.or(listed),
        };
        if let Err(skip) = check_stage(order, current, stage) {
            debug!(stage = %stage, host_id = %host.id, "progress report skipped: {skip}");
            return;
        }
        if !host.id.is_empty() {
            others.insert(host.id.clone(), self.furthest(order, current, stage));
        }
        self.enqueue(&host.infra_env_id, &host.id, stage, info.to_string());
    }

    /// Waits until every report enqueued before this call was sent or given up on. Returns
    /// whether that happened within `timeout`.
    pub fn drain(&self, timeout: Duration) -> bool {
        let counts = self.shared.counts();
        let target = counts.queued;
        let waited = self
            .shared
            .changed
            .wait_timeout_while(counts, timeout, |c| c.finished < target)
            .unwrap_or_else(|p| p.into_inner())
            .1;
        !waited.timed_out()
    }

    fn enqueue(&self, infra_env_id: &str, host_id: &str, stage: HostStage, info: String) {
        if host_id.is_empty() {
            debug!(stage = %stage, info = %info, "no host id: progress report skipped");
            return;
        }
        let Some(tx) = &self.tx else { return };
        let mut counts = self.shared.counts();
        let job = Job {
            infra_env_id: infra_env_id.to_string(),
            host_id: host_id.to_string(),
            stage,
            info,
        };
        match tx.send(job) {
            Ok(()) => counts.queued += 1,
            Err(mpsc::SendError(job)) => {
                warn!(stage = %job.stage, host_id = %job.host_id, "progress reporter thread is gone: report dropped");
            }
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        let drained = self.drain(self.drop_timeout);
        if !drained {
            let counts = self.shared.counts();
            warn!(
                pending = counts.queued - counts.finished,
                timeout_s = self.drop_timeout.as_secs(),
                "progress reports still pending; giving up on them"
            );
            drop(counts);
            self.shared.abandoned.store(true, Ordering::SeqCst);
        }
        // Closing the channel ends the worker's loop.
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            if drained {
                let _ = thread.join();
            }
            // Otherwise the worker is stuck in a call; leave it detached rather than block.
        }
    }
}

fn run_worker(client: Arc<dyn InventoryClient>, rx: Receiver<Job>, shared: Arc<Shared>) {
    for job in rx {
        if shared.abandoned.load(Ordering::SeqCst) {
            debug!(stage = %job.stage, host_id = %job.host_id, "progress report discarded at shutdown");
        } else {
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                client.update_host_progress(&job.infra_env_id, &job.host_id, job.stage, &job.info)
            }));
            match outcome {
                Ok(Ok(())) => {
                    debug!(stage = %job.stage, info = %job.info, host_id = %job.host_id, "progress reported")
                }
                Ok(Err(e)) => warn!(
                    stage = %job.stage,
                    info = %job.info,
                    host_id = %job.host_id,
                    error = %format!("{e:#}"),
                    "failed to report progress; continuing"
                ),
                Err(_) => {
                    warn!(stage = %job.stage, host_id = %job.host_id, "progress report panicked; continuing")
                }
            }
        }
        let mut counts = shared.counts();
        counts.finished += 1;
        shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::super::models::Cluster;
    use super::super::stages::LogsState;
    use super::*;
    use std::path::Path;

    type Report = (String, String, String, String);

    /// Records progress calls; can block (until released), fail or panic on chosen calls.
    #[derive(Default)]
    struct FakeClient {
        reports: Mutex<Vec<Report>>,
        attempts: Mutex<u32>,
        /// While set, calls wait until [`FakeClient::release`].
        closed: Mutex<bool>,
        gate: Condvar,
        fail_every_other: AtomicBool,
        panic_on_first: AtomicBool,
        delay: Mutex<Duration>,
    }

    impl FakeClient {
        fn reports(&self) -> Vec<Report> {
            self.reports.lock().unwrap().clone()
        }
        fn release(&self) {
            *self.closed.lock().unwrap() = false;
            self.gate.notify_all();
        }
    }

    impl InventoryClient for FakeClient {
        fn update_host_progress(
            &self,
            infra_env_id: &str,
            host_id: &str,
            stage: HostStage,
            info: &str,
        ) -> anyhow::Result<()> {
            let closed = self.closed.lock().unwrap();
            drop(self.gate.wait_while(closed, |closed| *closed).unwrap());
            std::thread::sleep(*self.delay.lock().unwrap());
            let attempt = {
                let mut a = self.attempts.lock().unwrap();
                *a += 1;
                *a
            };
            if attempt == 1 && self.panic_on_first.load(Ordering::SeqCst) {
                panic!("client blew up");
            }
            self.reports.lock().unwrap().push((
                infra_env_id.into(),
                host_id.into(),
                stage.to_string(),
                info.into(),
            ));
            if self.fail_every_other.load(Ordering::SeqCst) && attempt % 2 == 0 {
                anyhow::bail!("409 Conflict: simulated");
            }
            Ok(())
        }
        fn download_host_ignition(&self, _: &str, _: &str, _: &Path) -> anyhow::Result<()> {
            unimplemented!()
        }
        fn download_cluster_file(&self, _: &str, _: &str, _: &Path) -> anyhow::Result<()> {
            unimplemented!()
        }
        fn get_cluster(&self, _: &str, _: bool) -> anyhow::Result<Cluster> {
            unimplemented!()
        }
        fn list_cluster_hosts(
            &self,
            _: &str,
            _: Option<&crate::config::Role>,
        ) -> anyhow::Result<Vec<Host>> {
            unimplemented!()
        }
        fn update_host_logs_progress(&self, _: &str, _: &str, _: LogsState) -> anyhow::Result<()> {
            unimplemented!()
        }
        fn update_cluster_logs_progress(&self, _: &str, _: LogsState) -> anyhow::Result<()> {
            unimplemented!()
        }
        fn upload_logs(&self, _: &super::super::client::LogsUpload) -> anyhow::Result<()> {
            unimplemented!()
        }
    }

    fn spawn(client: &Arc<FakeClient>, host: &str) -> Reporter {
        Reporter::spawn(
            client.clone(),
            "ie-1".into(),
            host.into(),
            &Role::Bootstrap,
            false,
        )
    }

    /// Another host as the service lists it.
    fn listed(infra_env_id: &str, id: &str, role: Role, stage: Option<HostStage>) -> Host {
        let progress = stage.map(|s| super::super::models::HostProgressInfo {
            current_stage: Some(s.to_string()),
            ..Default::default()
        });
        Host {
            id: id.into(),
            infra_env_id: infra_env_id.into(),
            role: Some(role),
            progress,
            ..Host::default()
        }
    }

    fn sent(client: &FakeClient) -> Vec<(String, String, String)> {
        let reports = client.reports().into_iter();
        reports.map(|(_, h, s, i)| (h, s, i)).collect()
    }

    #[test]
    fn reports_go_out_in_order_under_a_slow_failing_client_and_on_drop() {
        let client = Arc::new(FakeClient::default());
        *client.delay.lock().unwrap() = Duration::from_millis(3);
        client.fail_every_other.store(true, Ordering::SeqCst);
        let r = spawn(&client, "h-1");
        r.stage(HostStage::StartingInstallation, "master");
        r.stage(HostStage::Installing, "master");
        r.stage(HostStage::WritingImageToDisk, "");
        for p in [10, 20, 30] {
            r.write_percent(p);
        }
        r.other_host(
            &listed("ie-2", "h-2", Role::Master, Some(HostStage::Rebooting)),
            HostStage::Configuring,
            "",
        );
        r.stage(HostStage::Rebooting, "");
        assert!(r.drain(Duration::from_secs(10)));
        let got = client.reports();
        let stages: Vec<(&str, &str, &str)> = got
            .iter()
            .map(|(_, h, s, i)| (h.as_str(), s.as_str(), i.as_str()))
            .collect();
        assert_eq!(
            stages,
            [
                ("h-1", "Starting installation", "master"),
                ("h-1", "Installing", "master"),
                ("h-1", "Writing image to disk", ""),
                ("h-1", "Writing image to disk", "10%"),
                ("h-1", "Writing image to disk", "20%"),
                ("h-1", "Writing image to disk", "30%"),
                ("h-2", "Configuring", ""),
                ("h-1", "Rebooting", ""),
            ]
        );
        assert_eq!(got[6].0, "ie-2");
        assert_eq!(got[7].0, "ie-1");
        // Dropping the reporter sends everything queued.
        for i in 0..20 {
            r.stage(HostStage::Rebooting, format!("poll {i}"));
        }
        drop(r);
        assert_eq!(client.reports().len(), 8 + 20);
        assert_eq!(client.reports()[27].3, "poll 19");
    }

    #[test]
    fn enqueueing_never_blocks_and_drain_waits() {
        let client = Arc::new(FakeClient::default());
        *client.closed.lock().unwrap() = true;
        let r = spawn(&client, "h-1");
        // The client is blocked: all of these must still return.
        for stage in [
            HostStage::StartingInstallation,
            HostStage::Installing,
            HostStage::WritingImageToDisk,
        ] {
            r.stage(stage, "x");
        }
        assert!(!r.drain(Duration::from_millis(50)));
        assert!(client.reports().is_empty());
        client.release();
        assert!(r.drain(Duration::from_secs(10)));
        assert_eq!(client.reports().len(), 3);
        // Nothing queued: drains at once.
        assert!(r.drain(Duration::ZERO));
    }

    /// Percentages: the first once at least 5, then every 5 points, 100 always and once.
    #[test]
    fn percentages_are_throttled() {
        const W: &str = "Writing image to disk";
        let every_five: Vec<String> = (1..=20).map(|i| format!("{W} {}%", i * 5)).collect();
        let cases: [(Vec<u8>, Vec<String>); 3] = [
            // Go's own example.
            (
                vec![55, 60, 62, 56, 66, 98, 99, 100, 100],
                ["55", "60", "66", "98", "100"]
                    .map(|p| format!("{W} {p}%"))
                    .to_vec(),
            ),
            ((0..=100).chain([100, 250]).collect(), every_five),
            (
                vec![4, 96, 97, 100, 100, 99],
                vec![format!("{W} 96%"), format!("{W} 100%")],
            ),
        ];
        for (writes, want) in cases {
            let client = Arc::new(FakeClient::default());
            let r = spawn(&client, "h-1");
            writes.iter().for_each(|&p| r.write_percent(p));
            assert!(r.drain(Duration::from_secs(10)));
            let got: Vec<String> = client
                .reports()
                .into_iter()
                .map(|(_, _, s, i)| format!("{s} {i}"))
                .collect();
            assert_eq!(got, want, "{writes:?}");
        }
    }

    #[test]
    fn empty_host_id_skips_own_reports() {
        let client = Arc::new(FakeClient::default());
        let r = spawn(&client, "");
        r.stage(HostStage::StartingInstallation, "master");
        r.write_percent(50);
        r.other_host(
            &listed("ie-1", "", Role::Master, None),
            HostStage::Joined,
            "",
        );
        assert!(r.drain(Duration::ZERO));
        // Reports about other, identified hosts still go out.
        let h9 = listed("ie-1", "h-9", Role::Master, None);
        r.other_host(&h9, HostStage::Joined, "");
        assert!(r.drain(Duration::from_secs(10)));
        drop(r);
        assert_eq!(client.reports().len(), 1);
        assert_eq!(client.reports()[0].1, "h-9");
    }

    /// A real single-node service answered our `Configuring` with 409 ("Stages Configuring isn't
    /// available for host role master bootstrap true"); a stage before the current one gets
    /// "Can't assign lower stage". Neither is sent; `Failed` always is.
    #[test]
    fn stages_the_service_would_refuse_are_not_sent() {
        use HostStage::*;
        let client = Arc::new(FakeClient::default());
        let r = Reporter::spawn(
            client.clone(),
            "ie-1".into(),
            "h-1".into(),
            &Role::Master,
            true,
        );
        r.stage(StartingInstallation, "master");
        r.stage(Installing, "master");
        r.stage(WaitingForBootkube, "");
        r.stage(WritingImageToDisk, "");
        r.write_percent(50);
        r.stage(WaitingForBootkube, "again");
        r.stage(Configuring, "");
        r.stage(Rebooting, "");
        r.stage(Installing, "late");
        r.stage(Failed, "boom");
        assert!(r.drain(Duration::from_secs(10)));
        let stages: Vec<String> = sent(&client)
            .into_iter()
            .map(|(_, s, i)| format!("{s} {i}"))
            .collect();
        assert_eq!(
            stages,
            [
                "Starting installation master",
                "Installing master",
                "Waiting for bootkube ",
                "Writing image to disk ",
                "Writing image to disk 50%",
                "Rebooting ",
                "Failed boom",
            ]
        );
    }

    /// Other hosts: checked against their own role's order, from the stage the service listed
    /// them at or the last one enqueued for them, whichever is further on.
    #[test]
    fn other_hosts_get_only_stages_their_order_takes_from_where_they_are() {
        use HostStage::*;
        let client = Arc::new(FakeClient::default());
        let r = spawn(&client, "h-1");
        let master = listed("ie-1", "m-1", Role::Master, Some(Rebooting));
        let done = listed("ie-1", "m-2", Role::Master, Some(Joined));
        let worker = listed("ie-1", "w-1", Role::Worker, Some(Rebooting));
        r.other_host(&master, Configuring, "");
        r.other_host(&master, Joined, "");
        // The list it came from is older than what was sent since.
        r.other_host(&master, Configuring, "");
        r.other_host(&done, Configuring, "");
        r.other_host(&done, Joined, "");
        r.other_host(&worker, WaitingForIgnition, "");
        r.other_host(&worker, Configuring, "");
        r.other_host(&worker, WaitingForControlPlane, "");
        assert!(r.drain(Duration::from_secs(10)));
        let got: Vec<String> = sent(&client)
            .into_iter()
            .map(|(h, s, _)| format!("{h} {s}"))
            .collect();
        assert_eq!(
            got,
            [
                "m-1 Configuring",
                "m-1 Joined",
                "m-2 Joined",
                "w-1 Waiting for ignition",
                "w-1 Configuring",
            ]
        );
    }

    #[test]
    fn drop_is_bounded_when_the_client_hangs() {
        let client = Arc::new(FakeClient::default());
        *client.closed.lock().unwrap() = true;
        let mut r = spawn(&client, "h-1");
        r.drop_timeout = Duration::from_millis(50);
        r.stage(HostStage::Installing, "master");
        r.stage(HostStage::Rebooting, "");
        drop(r); // must return although the client never answers
        client.release();
        // The stuck call may complete; the abandoned one behind it is discarded.
        std::thread::sleep(Duration::from_millis(100));
        assert!(client.reports().len() <= 1);
    }

    #[test]
    fn a_panicking_client_does_not_stop_later_reports() {
        let client = Arc::new(FakeClient::default());
        client.panic_on_first.store(true, Ordering::SeqCst);
        let r = spawn(&client, "h-1");
        r.stage(HostStage::StartingInstallation, "master");
        r.stage(HostStage::Installing, "master");
        assert!(r.drain(Duration::from_secs(10)));
        assert_eq!(client.reports().len(), 1);
        assert_eq!(client.reports()[0].2, "Installing");
    }
}
