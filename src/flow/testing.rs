//! The one way the tests build a [`Flow`]: [`FlowBuilder`] (defaults: recorded host commands,
//! a `shutdown -r` reboot over them, a fake clock, no Kubernetes API but in dry-run mode the
//! entrypoint's pretend cluster, Go's poll intervals, files under one directory) and
//! [`FakeWriter`], the scripted disk writer; for the unit tests, [`TestFlow`]: such a flow
//! against an in-memory service.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::writer::{DiskWriter, PendingDisk, WriteRequest};
use super::{Flow, Intervals, KubeFactory, Paths};
use crate::clock::{Clock, FakeClock};
use crate::config::{InstallerConfig, Role};
use crate::host::root::HostRoot;
use crate::host::{CommandRunner, HostEffects, Rebooter, RecordingRunner, ShutdownRebooter};
use crate::image::Cancel;
use crate::kexec::testing::{FromBootDir, RecordingLoader};
use crate::kexec::InstalledLoader;
use crate::kube::dry::DryCluster;
use crate::kube::ClusterApi;
use crate::service::client::InventoryClient;
use crate::service::reporter::Reporter;
use crate::write::WriterArgs;

pub const CLUSTER: &str = "5f1a1b2c-3d4e-4f50-8a6b-7c8d9e0f1a2b";
pub const INFRA: &str = "6a2b3c4d-5e6f-4a70-8b9c-0d1e2f3a4b5c";
pub const HOST: &str = "7b3c4d5e-6f70-4a81-9c0d-1e2f3a4b5c6d";

pub struct FlowBuilder {
    cfg: InstallerConfig,
    paths: Paths,
    dir: PathBuf,
    service: Arc<dyn InventoryClient>,
    writer: Arc<dyn DiskWriter>,
    kexec: Arc<dyn InstalledLoader>,
    commands: Arc<dyn CommandRunner>,
    reboot: Option<Arc<dyn Rebooter>>,
    clock: Arc<dyn Clock>,
    kube: Option<Arc<dyn ClusterApi>>,
    intervals: Intervals,
    early_write: bool,
    stop: Cancel,
}

impl FlowBuilder {
    /// `--role role` for host [`HOST`] of cluster [`CLUSTER`], onto /dev/vda, files under `dir`.
    pub fn new(
        role: &str,
        dir: &Path,
        service: Arc<dyn InventoryClient>,
        writer: Arc<dyn DiskWriter>,
    ) -> FlowBuilder {
        let cfg = InstallerConfig {
            role: role.parse::<Role>().expect("a role"),
            cluster_id: CLUSTER.into(),
            infra_env_id: INFRA.into(),
            host_id: HOST.into(),
            boot_device: "/dev/vda".into(),
            url: "http://192.0.2.1:6000".into(),
            openshift_version: "4.17".into(),
            ..InstallerConfig::default()
        };
        let paths = Paths {
            install_dir: dir.join("install-dir"),
            registry_marker: dir.join("no-registry"),
            openshift_dir: dir.join("openshift"),
            extracted_pull_secret: dir.join("extracted_from_ignition.json"),
            resolv_conf: dir.join("resolv.conf"),
            container_logs: dir.join("containers"),
            live_cmdline: dir.join("cmdline"),
            sys: dir.join("sys"),
            dev: dir.join("dev"),
            host_root: Ok(HostRoot::Here),
        };
        FlowBuilder {
            cfg,
            paths,
            dir: dir.to_path_buf(),
            service,
            writer,
            // A /boot that is an empty directory: nothing to load, a firmware reboot.
            kexec: Arc::new(FromBootDir::new(
                &dir.join("boot"),
                Arc::new(RecordingLoader::default()),
            )),
            commands: Arc::new(RecordingRunner::new()),
            reboot: None,
            clock: Arc::new(FakeClock::new()),
            kube: None,
            intervals: Intervals::default(),
            early_write: true,
            stop: Cancel::new(),
        }
    }

    /// Default: `shutdown -r` through the host commands.
    pub fn reboot(mut self, reboot: Arc<dyn Rebooter>) -> Self {
        self.reboot = Some(reboot);
        self
    }
    pub fn installer_args(mut self, args: &[&str]) -> Self {
        self.cfg.installer_args = args.iter().map(|a| a.to_string()).collect();
        self
    }
    /// Sets the Go flags, e.g. `.cfg(|c| c.dry_run = true)`.
    pub fn cfg(mut self, set: impl FnOnce(&mut InstallerConfig)) -> Self {
        set(&mut self.cfg);
        self
    }
    /// Sets where the flow keeps or finds its files.
    pub fn paths(mut self, set: impl FnOnce(&mut Paths)) -> Self {
        set(&mut self.paths);
        self
    }
    /// An appliance host: `/run/media/iso/registry` exists in a host root of its own.
    pub fn registry_marker_on_host(mut self) -> Self {
        let root = self.dir.join("host-root");
        std::fs::create_dir_all(root.join("run/media/iso/registry"))
            .expect("creating the registry marker");
        self.paths.registry_marker = PathBuf::from("/run/media/iso/registry");
        self.paths.host_root = Ok(HostRoot::At(root));
        self
    }
    pub fn build(self) -> Flow {
        let mut cfg = self.cfg;
        cfg.set_defaults();
        let reboot = self
            .reboot
            .unwrap_or_else(|| Arc::new(ShutdownRebooter(self.commands.clone())));
        let kube: KubeFactory = match self.kube {
            Some(api) => Arc::new(move |kubeconfig: &Path| {
                anyhow::ensure!(
                    kubeconfig.is_file(),
                    "no kubeconfig at {}",
                    kubeconfig.display()
                );
                Ok(api.clone())
            }),
            // What the entrypoint builds in dry-run mode.
            None if cfg.dry_run => {
                let api: Arc<dyn ClusterApi> =
                    Arc::new(DryCluster::from_config(&cfg).expect("the cluster hosts"));
                Arc::new(move |_: &Path| Ok(api.clone()))
            }
            None => Arc::new(|_: &Path| bail!("no Kubernetes API in this test")),
        };
        let dry_run = cfg.dry_run;
        let reporter = Arc::new(Reporter::spawn(
            self.service.clone(),
            INFRA.into(),
            HOST.into(),
            &cfg.role,
            cfg.is_single_node(),
        ));
        Flow {
            cfg,
            token: "agent-token".into(),
            reporter,
            client: self.service,
            host: HostEffects::new(self.commands, reboot, self.clock, dry_run),
            writer: self.writer,
            kexec: self.kexec,
            paths: self.paths,
            arch: "x86_64".into(),
            kube,
            intervals: self.intervals,
            early_write: self.early_write,
            stop: self.stop,
        }
    }
}

/// The setters that store their argument as the field of the same name.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $t:ty;)*) => {
        #[allow(clippy::useless_conversion)]
        impl FlowBuilder {
            $($(#[$doc])* pub fn $name(mut self, value: $t) -> Self {
                self.$name = value.into();
                self
            })*
        }
    };
}

setters! {
    /// The assisted-service the flow talks to.
    service: Arc<dyn InventoryClient>;
    commands: Arc<dyn CommandRunner>;
    /// Loads the installed system for `ai.kexec` (default: from an empty directory, which
    /// fails: a firmware reboot).
    kexec: Arc<dyn InstalledLoader>;
    clock: Arc<dyn Clock>;
    /// The API the flow finds behind the kubeconfig bootkube writes (which must exist).
    kube: Arc<dyn ClusterApi>;
    intervals: Intervals;
    /// Whether the bootstrap and single-node disks are streamed early (default: yes).
    early_write: bool;
    /// The flow's stop token (SIGTERM's), for a test to fire.
    stop: Cancel;
}

/// One whole write the flow asked for.
#[derive(Clone, Debug)]
pub struct WriteCall {
    pub device: PathBuf,
    /// None: written without one (a dry run's Ignition config that does not parse).
    pub ignition: Option<PathBuf>,
    pub args: WriterArgs,
    /// Whether the flow asked for a read-back.
    pub verify: bool,
}

/// A scripted disk writer: reports 0..=100%, fails the first N calls on request, checks it gets
/// the expected Ignition, and records what happened.
#[derive(Default)]
pub struct FakeWriter {
    calls: Mutex<Vec<WriteCall>>,
    /// Whole writes that fail before succeeding.
    pub failures: AtomicU32,
    /// Early streams that fail.
    pub stream_failures: AtomicU32,
    /// "stream <device>", "streamed", "finish <ignition>", "write <ignition>", "abandon"; the
    /// Ignition config is "-" when there is none.
    events: Arc<Mutex<Vec<String>>>,
    /// When set, the Ignition the writer gets must hold exactly this.
    pub expected_ignition: Mutex<Option<String>>,
    /// When set, runs at the start of each whole write (what else happens meanwhile).
    #[allow(clippy::type_complexity)]
    pub before_write: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

fn take_one(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

/// As the real writer: an Ignition config must be one (`IgnitionConfig`'s check), and the
/// expected one when set.
fn check_ignition(want: Option<&str>, ignition: Option<&Path>) -> Result<()> {
    let Some(ignition) = ignition else {
        return Ok(());
    };
    crate::ignition::IgnitionConfig::from_file(ignition, None)?;
    if let Some(want) = want {
        let got = std::fs::read_to_string(ignition)?;
        assert_eq!(
            got, want,
            "the writer gets the Ignition config the flow prepared"
        );
    }
    Ok(())
}

fn shown(ignition: Option<&Path>) -> String {
    ignition.map_or("-".into(), |p| p.display().to_string())
}

fn record(events: &Mutex<Vec<String>>, event: String) {
    events.lock().unwrap().push(event);
}

impl FakeWriter {
    pub fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    pub fn calls(&self) -> Vec<WriteCall> {
        self.calls.lock().unwrap().clone()
    }

    fn expected(&self) -> Option<String> {
        self.expected_ignition.lock().unwrap().clone()
    }
}

impl DiskWriter for FakeWriter {
    fn write(
        &self,
        req: &WriteRequest,
        ignition: Option<&Path>,
        percent: &(dyn Fn(u8) + Send + Sync),
    ) -> Result<()> {
        if let Some(before) = &*self.before_write.lock().unwrap() {
            before();
        }
        self.calls.lock().unwrap().push(WriteCall {
            device: req.device.clone(),
            ignition: ignition.map(Path::to_path_buf),
            args: req.args.clone(),
            verify: req.verify,
        });
        record(&self.events, format!("write {}", shown(ignition)));
        if take_one(&self.failures) {
            bail!("writing /dev/vda at offset 1048576: Input/output error (os error 5)");
        }
        check_ignition(self.expected().as_deref(), ignition)?;
        (0..=100).for_each(percent);
        Ok(())
    }

    fn stream(
        &self,
        req: &WriteRequest,
        percent: &(dyn Fn(u8) + Send + Sync),
    ) -> Result<Box<dyn PendingDisk>> {
        record(&self.events, format!("stream {}", req.device.display()));
        if take_one(&self.stream_failures) {
            bail!("the early stream failed: connection reset");
        }
        (0..=99).for_each(percent);
        record(&self.events, "streamed".into());
        Ok(Box::new(FakePending {
            events: self.events.clone(),
            expected: self.expected(),
        }))
    }
}

struct FakePending {
    events: Arc<Mutex<Vec<String>>>,
    expected: Option<String>,
}

impl PendingDisk for FakePending {
    fn finish(self: Box<Self>, ignition: Option<&Path>) -> Result<()> {
        check_ignition(self.expected.as_deref(), ignition)?;
        record(&self.events, format!("finish {}", shown(ignition)));
        Ok(())
    }

    fn abandon(self: Box<Self>, why: anyhow::Error) -> anyhow::Error {
        record(&self.events, "abandon".into());
        why
    }
}

#[cfg(test)]
pub(crate) use unit::TestFlow;

#[cfg(test)]
mod unit {
    use super::*;
    use crate::service::client::LogsUpload;
    use crate::service::models::{Cluster, Host};
    use crate::service::stages::{HostStage, LogsState};
    use std::sync::atomic::AtomicBool;

    pub(crate) struct TestFlow {
        pub flow: Flow,
        pub clock: Arc<FakeClock>,
        pub runner: Arc<RecordingRunner>,
        pub service: Arc<TestService>,
        pub writer: Arc<FakeWriter>,
        /// What `ai.kexec` loads from: `boot` below, through `loader`.
        pub kexec: Arc<FromBootDir>,
        pub loader: Arc<RecordingLoader>,
        pub boot: PathBuf,
        _dir: tempfile::TempDir,
    }

    impl TestFlow {
        /// The flow of `role` (no early write), against [`TestService`].
        pub(crate) fn new(role: &str) -> TestFlow {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let stop = Cancel::new();
            let service = Arc::new(TestService {
                reports: Mutex::default(),
                stop: stop.clone(),
                stop_when_listing_hosts: AtomicBool::new(false),
                uploads: Mutex::default(),
                hosts: Mutex::default(),
                other_reports: Mutex::default(),
            });
            let clock = Arc::new(FakeClock::new());
            let runner = Arc::new(RecordingRunner::new());
            let writer = Arc::new(FakeWriter::default());
            let boot = dir.path().join("boot");
            let loader = Arc::new(RecordingLoader::default());
            let kexec = Arc::new(FromBootDir::new(&boot, loader.clone()));
            let flow = FlowBuilder::new(role, dir.path(), service.clone(), writer.clone())
                .kexec(kexec.clone())
                .installer_args(&["--image-url", "http://mirror.example/rhcos.raw.gz"])
                .commands(runner.clone())
                .clock(clock.clone())
                .early_write(false)
                .stop(stop)
                .build();
            TestFlow {
                flow,
                clock,
                runner,
                service,
                writer,
                kexec,
                loader,
                boot,
                _dir: dir,
            }
        }

        /// This host's reports, as (stage, info), once the reporter has sent them.
        pub(crate) fn reports(&self) -> Vec<(String, String)> {
            self.flow.reporter.drain(std::time::Duration::from_secs(10));
            self.service.reports.lock().unwrap().clone()
        }
    }

    /// The assisted-service in memory: a cluster with no other host, Ignition configs with
    /// nothing in them, and this host's reports recorded.
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
}
