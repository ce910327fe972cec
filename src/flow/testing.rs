//! A [`Flow`] for the flows' unit tests: an in-memory service, recorded host commands, the
//! fake clock, a disk writer that succeeds, and a stop token the test can fire.

use anyhow::Result;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::writer::{DiskWriter, PendingDisk, WriteRequest};
use super::{Flow, Intervals, Paths};
use crate::clock::FakeClock;
use crate::config::{InstallerConfig, Role};
use crate::host::{FakeReboot, HostEffects, RecordingRunner};
use crate::image::Cancel;
use crate::service::client::{InventoryClient, LogsUpload};
use crate::service::models::{Cluster, Host};
use crate::service::reporter::Reporter;
use crate::service::stages::{HostStage, LogsState};
use crate::write::WriterArgs;

pub(crate) const CLUSTER: &str = "cluster";
pub(crate) const HOST: &str = "host";

pub(crate) struct TestFlow {
    pub flow: Flow,
    pub clock: Arc<FakeClock>,
    pub runner: Arc<RecordingRunner>,
    pub service: Arc<TestService>,
    /// Disk writes so far.
    pub writes: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
}

impl TestFlow {
    pub(super) fn new(role: &str) -> TestFlow {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let d = dir.path();
        let stop = Cancel::new();
        let service = Arc::new(TestService {
            reports: Mutex::default(),
            stop: stop.clone(),
            stop_when_listing_hosts: AtomicBool::new(false),
            uploads: Mutex::default(),
            hosts: Mutex::default(),
            other_reports: Mutex::default(),
        });
        let client: Arc<dyn InventoryClient> = service.clone();
        let clock = Arc::new(FakeClock::new());
        let runner = Arc::new(RecordingRunner::new());
        let writes = Arc::new(AtomicUsize::new(0));
        let mut cfg = InstallerConfig {
            role: role.into(),
            cluster_id: CLUSTER.into(),
            host_id: HOST.into(),
            boot_device: "/dev/vda".into(),
            installer_args: vec![
                "--image-url".into(),
                "http://mirror.example/rhcos.raw.gz".into(),
            ],
            ..InstallerConfig::default()
        };
        cfg.set_defaults();
        let flow = Flow {
            cfg,
            token: String::new(),
            reporter: Arc::new(Reporter::spawn(client.clone(), CLUSTER.into(), HOST.into())),
            client,
            host: HostEffects::new(
                runner.clone(),
                Arc::new(FakeReboot(d.join("rebooted"))),
                clock.clone(),
                false,
            ),
            writer: Arc::new(SucceedingWriter(writes.clone())),
            paths: Paths {
                install_dir: d.join("install-dir"),
                registry_marker: d.join("no-registry"),
                openshift_dir: d.join("openshift"),
                extracted_pull_secret: d.join("extracted_from_ignition.json"),
                resolv_conf: d.join("resolv.conf"),
                container_logs: d.join("containers"),
                live_cmdline: d.join("cmdline"),
                ..Paths::default()
            },
            arch: "x86_64".into(),
            kube: Arc::new(|_: &Path| anyhow::bail!("no Kubernetes API in these tests")),
            intervals: Intervals::default(),
            early_write: false,
            stop,
        };
        TestFlow {
            flow,
            clock,
            runner,
            service,
            writes,
            _dir: dir,
        }
    }

    /// This host's reports, as (stage, info), once the reporter has sent them.
    pub(super) fn reports(&self) -> Vec<(String, String)> {
        self.flow.reporter.drain(std::time::Duration::from_secs(10));
        self.service.reports.lock().unwrap().clone()
    }
}

/// The assisted-service in memory: a cluster with no other host, Ignition configs with nothing
/// in them, and this host's reports recorded.
pub(crate) struct TestService {
    reports: Mutex<Vec<(String, String)>>,
    stop: Cancel,
    /// Fires the stop token on the next `list_cluster_hosts` (a signal during a wait).
    pub stop_when_listing_hosts: AtomicBool,
    /// Log uploads, in order.
    pub uploads: Mutex<Vec<LogsUpload>>,
    /// The cluster's hosts.
    pub hosts: Mutex<Vec<Host>>,
    /// Reports about other hosts, as (host, stage).
    pub other_reports: Mutex<Vec<(String, String)>>,
}

impl InventoryClient for TestService {
    fn update_host_progress(
        &self,
        _: &str,
        host: &str,
        stage: HostStage,
        info: &str,
    ) -> Result<()> {
        if host == HOST {
            let report = (stage.to_string(), info.to_string());
            self.reports.lock().unwrap().push(report);
        } else {
            let report = (host.to_string(), stage.to_string());
            self.other_reports.lock().unwrap().push(report);
        }
        Ok(())
    }
    fn download_host_ignition(&self, _: &str, _: &str, dest: &Path) -> Result<()> {
        Ok(std::fs::write(dest, r#"{"ignition":{"version":"3.2.0"}}"#)?)
    }
    fn download_cluster_file(&self, _: &str, _: &str, dest: &Path) -> Result<()> {
        Ok(std::fs::write(dest, r#"{"ignition":{"version":"3.2.0"}}"#)?)
    }
    fn get_cluster(&self, _: &str, _: bool) -> Result<Cluster> {
        Ok(Cluster {
            id: CLUSTER.into(),
            kind: "Cluster".into(),
            hosts: self.hosts.lock().unwrap().clone(),
            ..Cluster::default()
        })
    }
    fn list_cluster_hosts(&self, _: &str, _: Option<&Role>) -> Result<Vec<Host>> {
        if self.stop_when_listing_hosts.load(Ordering::SeqCst) {
            self.stop.cancel();
        }
        Ok(vec![])
    }
    fn update_host_logs_progress(&self, _: &str, _: &str, _: LogsState) -> Result<()> {
        Ok(())
    }
    fn update_cluster_logs_progress(&self, _: &str, _: LogsState) -> Result<()> {
        Ok(())
    }
    fn upload_logs(&self, upload: &LogsUpload) -> Result<()> {
        self.uploads.lock().unwrap().push(upload.clone());
        Ok(())
    }
}

/// A disk writer whose writes succeed at once, counted.
struct SucceedingWriter(Arc<AtomicUsize>);

impl DiskWriter for SucceedingWriter {
    fn preflight(&self, _: &WriterArgs, _: Option<&crate::host::root::HostRoot>) -> Result<()> {
        Ok(())
    }
    fn write(&self, _: &WriteRequest, _: &Path, _: &(dyn Fn(u8) + Send + Sync)) -> Result<()> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn stream(
        &self,
        _: &WriteRequest,
        _: &(dyn Fn(u8) + Send + Sync),
    ) -> Result<Box<dyn PendingDisk>> {
        anyhow::bail!("no early write in these tests")
    }
}
