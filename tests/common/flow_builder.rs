#![allow(dead_code)]
//! The `Flow` of a scenario, built in one place: the Go flags the agent would pass, the
//! effects the flow acts through, and where it keeps its files (all under one directory).
//! Defaults: recorded host commands, a real-looking reboot over them, a fake clock, no
//! Kubernetes API (in dry-run mode: the entrypoint's pretend cluster), the Go poll intervals.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use assisted_installer::clock::{Clock, FakeClock};
use assisted_installer::commands::install::dry_run_kube;
use assisted_installer::config::{InstallerConfig, Role};
use assisted_installer::flow::writer::DiskWriter;
use assisted_installer::flow::{Flow, Intervals, KubeFactory, Paths};
use assisted_installer::host::commands::{CommandRunner, RecordingRunner};
use assisted_installer::host::reboot::{Rebooter, ShutdownRebooter};
use assisted_installer::host::root::HostRoot;
use assisted_installer::host::HostEffects;
use assisted_installer::image::Cancel;
use assisted_installer::kube::dry::DryCluster;
use assisted_installer::kube::ClusterApi;
use assisted_installer::service::client::InventoryClient;
use assisted_installer::service::reporter::Reporter;

use super::fake_service::{host_json, DEFAULT_TOKEN};

pub(crate) const CLUSTER: &str = "5f1a1b2c-3d4e-4f50-8a6b-7c8d9e0f1a2b";
pub(crate) const INFRA: &str = "6a2b3c4d-5e6f-4a70-8b9c-0d1e2f3a4b5c";
pub(crate) const HOST: &str = "7b3c4d5e-6f70-4a81-9c0d-1e2f3a4b5c6d";

pub(crate) struct FlowBuilder {
    cfg: InstallerConfig,
    paths: Paths,
    dir: PathBuf,
    service: Arc<dyn InventoryClient>,
    token: String,
    writer: Arc<dyn DiskWriter>,
    commands: Arc<dyn CommandRunner>,
    reboot: Option<Arc<dyn Rebooter>>,
    clock: Arc<dyn Clock>,
    kube: Option<Arc<dyn ClusterApi>>,
    intervals: Intervals,
    early_write: bool,
    arch: String,
    stop: Cancel,
}

impl FlowBuilder {
    /// `--role role` for host [`HOST`] of cluster [`CLUSTER`], installing onto /dev/vda through
    /// `writer`, talking to `service`, with its files under `dir`.
    pub(crate) fn new(
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
            host_root: Ok(HostRoot::Here),
        };
        FlowBuilder {
            cfg,
            paths,
            dir: dir.to_path_buf(),
            service,
            token: DEFAULT_TOKEN.into(),
            writer,
            commands: Arc::new(RecordingRunner::new()),
            reboot: None,
            clock: Arc::new(FakeClock::new()),
            kube: None,
            intervals: Intervals::default(),
            early_write: true,
            arch: "x86_64".into(),
            stop: Cancel::new(),
        }
    }

    /// Default: `shutdown -r` through the host commands.
    pub(crate) fn reboot(mut self, reboot: Arc<dyn Rebooter>) -> Self {
        self.reboot = Some(reboot);
        self
    }
    pub(crate) fn installer_args(mut self, args: &[&str]) -> Self {
        self.cfg.installer_args = args.iter().map(|a| a.to_string()).collect();
        self
    }
    /// Sets the Go flags, e.g. `.cfg(|c| c.dry_run = true)`.
    pub(crate) fn cfg(mut self, set: impl FnOnce(&mut InstallerConfig)) -> Self {
        set(&mut self.cfg);
        self
    }
    /// Sets where the flow keeps or finds its files (by default under the directory, which
    /// has no registry marker; the host root is this system).
    pub(crate) fn paths(mut self, set: impl FnOnce(&mut Paths)) -> Self {
        set(&mut self.paths);
        self
    }
    /// An appliance host: `/run/media/iso/registry` exists in a host root of its own (under
    /// the directory), which the flow reads the host's files through.
    pub(crate) fn registry_marker_on_host(mut self) -> Self {
        let root = self.dir.join("host-root");
        std::fs::create_dir_all(root.join("run/media/iso/registry"))
            .expect("creating the registry marker");
        self.paths.registry_marker = PathBuf::from("/run/media/iso/registry");
        self.paths.host_root = Ok(HostRoot::At(root));
        self
    }
    pub(crate) fn build(self) -> Flow {
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
            None if cfg.dry_run => dry_run_kube(Arc::new(
                DryCluster::from_config(&cfg).expect("the cluster hosts"),
            )),
            None => Arc::new(|_: &Path| anyhow::bail!("no Kubernetes API in this scenario")),
        };
        let dry_run = cfg.dry_run;
        Flow {
            cfg,
            token: self.token,
            reporter: Arc::new(Reporter::spawn(
                self.service.clone(),
                INFRA.into(),
                HOST.into(),
            )),
            client: self.service,
            host: HostEffects::new(self.commands, reboot, self.clock, dry_run),
            writer: self.writer,
            paths: self.paths,
            arch: self.arch,
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
            $($(#[$doc])* pub(crate) fn $name(mut self, value: $t) -> Self {
                self.$name = value.into();
                self
            })*
        }
    };
}

setters! {
    commands: Arc<dyn CommandRunner>;
    clock: Arc<dyn Clock>;
    /// The API the flow finds behind the kubeconfig bootkube writes (which must exist).
    kube: Arc<dyn ClusterApi>;
    intervals: Intervals;
    /// Whether the bootstrap and single-node disks are streamed early (default: yes).
    early_write: bool;
    /// The flow's stop token (SIGTERM's), for a test to fire.
    stop: Cancel;
}

/// Builds the flow and runs the installer's flow for its role.
pub(crate) fn run(flow: FlowBuilder) -> anyhow::Result<()> {
    assisted_installer::flow::node::run_installer(&flow.build())
}

/// A progress report: (stage, info).
pub(crate) type Report = (String, String);

pub(crate) fn s(stage: &str, info: &str) -> Report {
    (stage.to_string(), info.to_string())
}

/// The reports of a stage that runs to completion: "" then 5%, 10%, … 100%.
pub(crate) fn with_percents(stage: &str) -> Vec<Report> {
    let percents = (5..=100).step_by(5).map(|p| format!("{p}%"));
    let infos = std::iter::once(String::new()).chain(percents);
    infos.map(|info| s(stage, &info)).collect()
}

/// The reports of a successful write.
pub(crate) fn writing() -> Vec<Report> {
    with_percents("Writing image to disk")
}

/// The reports of a host that installs as `role` like a master: started, written, rebooting.
pub(crate) fn installed_as(role: &str) -> Vec<Report> {
    installed_with(role, vec![])
}

/// The reports of a host installing as `role`, with `then` between the write and the reboot.
pub(crate) fn installed_with(role: &str, then: Vec<Report>) -> Vec<Report> {
    let mut v = vec![s("Starting installation", role), s("Installing", role)];
    v.extend(writing());
    v.extend(then);
    v.push(s("Rebooting", ""));
    v
}

/// Two masters of the cluster, at `stage`, as the service lists them.
pub(crate) fn two_masters(stage: &str) -> Vec<serde_json::Value> {
    let masters = [
        "8c4d5e6f-7081-4b92-8d1e-2f3a4b5c6d7e",
        "9d5e6f70-8192-4ca3-9e2f-3a4b5c6d7e8f",
    ];
    masters
        .map(|id| host_json(id, INFRA, "master", Some(stage)))
        .to_vec()
}

/// The info of the last report, which must be `Failed`.
pub(crate) fn failed_info(reports: &[Report]) -> String {
    let (stage, info) = reports.last().expect("a report");
    assert_eq!(stage, "Failed", "{reports:#?}");
    info.clone()
}

/// `lsblk --bytes --json /dev/vda` on Go's fixture: a 100 GB disk with the CoreOS partitions as
/// written (1 MiB, 127 MiB, 384 MiB, 3.05 GiB).
pub(crate) const LSBLK_VDA: &str = r#"{"blockdevices":[{"name":"vda","size":100000000000,"type":"disk","children":[
    {"name":"vda1","size":1048576,"type":"part"},{"name":"vda2","size":133169152,"type":"part"},
    {"name":"vda3","size":402653184,"type":"part"},{"name":"vda4","size":3272588800,"type":"part"}]}]}"#;
