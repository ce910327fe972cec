//! The Go installer's `updateConfiguringStatus` goroutine, as a thread: while the bootstrap
//! control plane forms, other hosts are reported `Configuring` (or `Waiting for ignition` for
//! workers) once the machine-config-server log shows them fetching their Ignition. In dry-run
//! mode the log is made up from the cluster-hosts file (see `mcs_logs::dry_run_mcs_log`).

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Flow;
use crate::clock::SYSTEM_CLOCK;
use crate::config::cluster_hosts;
use crate::image::Cancel;
use crate::openshift::mcs_logs::{
    dry_run_mcs_log, host_ips, hosts_that_fetched_ignition, is_past_ignition_fetch, status_for,
    McsHost,
};
use crate::service::client::InventoryClient;
use crate::service::models::Host;
use crate::service::reporter::Reporter;
use crate::service::stages::HostStage;

/// The running watcher; dropping it stops the thread (the Go installer cancels the goroutine's
/// context when `InstallNode` returns) and waits for it.
pub(crate) struct ConfiguringStatus {
    stop: Cancel,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl ConfiguringStatus {
    /// Starts watching, every `Flow::intervals.slow_poll` (Go: 30 s), until every other host is
    /// past its Ignition fetch or the watcher is dropped.
    pub(crate) fn spawn(f: &Flow) -> ConfiguringStatus {
        let stop = Cancel::new();
        let mut watch = Watch::of(f);
        let (every, thread_stop) = (f.intervals.slow_poll, stop.clone());
        let handle = std::thread::Builder::new()
            .name("configuring".into())
            // On the real clock: the thread runs beside the flow, whose (in tests, fake) clock
            // records the flow's own waits only. A stop is the normal end (the flow went on).
            .spawn(move || {
                let _ = SYSTEM_CLOCK.poll_until(&thread_stop, every, || watch.poll().then_some(()));
            })
            .expect("spawning the configuring-status thread");
        ConfiguringStatus {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for ConfiguringStatus {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Another host being watched: where it is matched in the log, the service's record of it
/// (which the reporter checks a stage against), its last stage.
type Watched = (McsHost, Host, Option<HostStage>);

struct Watch {
    client: Arc<dyn InventoryClient>,
    reporter: Arc<Reporter>,
    cluster: String,
    /// This host, never watched.
    me: String,
    logs: Box<dyn Fn() -> String + Send>,
    /// The other enabled hosts, fetched once.
    hosts: Option<Vec<Watched>>,
}

impl Watch {
    fn of(f: &Flow) -> Watch {
        Watch {
            client: f.client.clone(),
            reporter: f.reporter.clone(),
            cluster: f.cfg.cluster_id.clone(),
            me: f.cfg.host_id.clone(),
            logs: mcs_log(f),
            hosts: None,
        }
    }

    /// One look at the log; whether every host is past its Ignition fetch.
    fn poll(&mut self) -> bool {
        if self.hosts.is_none() {
            match self.client.get_cluster(&self.cluster, false) {
                Ok(c) => {
                    self.hosts = Some(
                        c.hosts
                            .iter()
                            .filter(|h| h.id != self.me && !h.is_disabled())
                            .map(|h| {
                                let ips = h.inventory.as_deref().map(host_ips).unwrap_or_default();
                                let host = McsHost {
                                    id: h.id.clone(),
                                    role: h.role.clone(),
                                    ips,
                                };
                                (host, h.clone(), h.stage())
                            })
                            .collect(),
                    )
                }
                Err(e) => tracing::warn!("getting the hosts of cluster {}: {e:#}", self.cluster),
            }
        }
        let Some(list) = self.hosts.as_mut() else {
            return false;
        };
        list.retain(|(_, _, stage)| !is_past_ignition_fetch(*stage));
        if list.is_empty() {
            return true;
        }
        let log = (self.logs)();
        let mcs: Vec<McsHost> = list.iter().map(|(h, _, _)| h.clone()).collect();
        let fetched: BTreeSet<String> = hosts_that_fetched_ignition(&log, &mcs)
            .into_iter()
            .map(|h| h.id.clone())
            .collect();
        for (h, listed, stage) in list.iter_mut() {
            if fetched.contains(&h.id) {
                let new = status_for(h.role.as_ref());
                self.reporter.other_host(listed, new, "");
                *stage = Some(new);
            }
        }
        false
    }
}

/// The machine-config-server's log: every one in the container logs directory, concatenated,
/// or in dry-run mode made up from the cluster-hosts file.
fn mcs_log(f: &Flow) -> Box<dyn Fn() -> String + Send> {
    if !f.cfg.dry_run {
        let dir = f.paths.container_logs.clone();
        return Box::new(move || {
            let mut out = String::new();
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.contains("machine-config-server") && name.ends_with(".log") {
                    out.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
                    out.push('\n');
                }
            }
            out
        });
    }
    let path = f.cfg.dry_run_cluster_hosts_path.as_deref();
    let hosts = cluster_hosts::load_optional(path).unwrap_or_else(|e| {
        // The entrypoint read it at start; it can only have gone since.
        tracing::warn!("dry run: no host will be seen fetching its Ignition: {e:#}");
        Vec::new()
    });
    Box::new(move || dry_run_mcs_log(&hosts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Role;
    use crate::flow::testing::TestFlow;

    #[test]
    fn in_dry_run_the_hosts_are_seen_fetching_their_ignition_once_rebooted() {
        let mut t = TestFlow::new("bootstrap");
        let dir = tempfile::tempdir().unwrap();
        let rebooted = |name: &str| dir.path().join(format!("{name}.rebooted"));
        let hosts = [
            ("m1", Role::Master, "master-1", "192.0.2.11"),
            ("m2", Role::Master, "master-2", "192.0.2.12"),
            // Its log line has the address in brackets.
            ("w1", Role::Worker, "worker-1", "fd00::21"),
        ];
        let list: Vec<_> = hosts
            .iter()
            .map(|(_, _, name, ip)| {
                serde_json::json!({"hostname": name, "ip": ip, "rebootMarkerPath": rebooted(name)})
            })
            .collect();
        let path = dir.path().join("cluster-hosts.json");
        std::fs::write(&path, serde_json::Value::from(list).to_string()).unwrap();
        for name in ["master-1", "worker-1"] {
            std::fs::write(rebooted(name), "").unwrap();
        }
        *t.service.hosts.lock().unwrap() = hosts
            .iter()
            .map(|(id, role, _, ip)| Host {
                id: id.to_string(),
                infra_env_id: "infra".into(),
                role: Some(role.clone()),
                inventory: Some(format!(
                    r#"{{"interfaces": [{{"ipv{}_addresses": ["{ip}/64"]}}]}}"#,
                    if ip.contains(':') { 6 } else { 4 }
                )),
                ..Host::default()
            })
            .collect();
        // A real machine-config-server log naming master-2 is not read in dry run.
        let logs = &t.flow.paths.container_logs;
        std::fs::create_dir_all(logs).unwrap();
        std::fs::write(
            logs.join("machine-config-server-abc.log"),
            "I1121 api.go:117] Pool master requested by address:\"192.0.2.12:52428\" \
             User-Agent:\"Ignition/2.16.2\"\n",
        )
        .unwrap();
        t.flow.cfg.dry_run = true;
        t.flow.cfg.dry_run_cluster_hosts_path = Some(path);
        let mut watch = Watch::of(&t.flow);
        let reports = || {
            t.flow.reporter.drain(std::time::Duration::from_secs(10));
            t.service.other_reports.lock().unwrap().clone()
        };
        let report = |id: &str, stage: &str| (id.to_string(), stage.to_string());

        assert!(!watch.poll());
        let first = [
            report("m1", "Configuring"),
            report("w1", "Waiting for ignition"),
        ];
        assert_eq!(reports(), first, "master-2 has not rebooted");
        // master-2 reboots later: seen on a later look, then no host is left to watch.
        std::fs::write(rebooted("master-2"), "").unwrap();
        assert!(!watch.poll());
        assert!(watch.poll());
        let [m1, w1] = first;
        assert_eq!(reports(), [m1, w1, report("m2", "Configuring")]);
    }
}
