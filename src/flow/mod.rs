//! Install orchestration: the Go installer's role flows, stage by stage, with every host effect
//! behind the narrow traits of `host` (commands, reboot, clock), the assisted-service behind
//! `InventoryClient`, and the disk write behind `DiskWriter`; all chosen by the caller. Every
//! wait and retry sleeps through the host's clock and ends early when [`Flow::stop`] fires.

pub(crate) mod bootstrap;
pub(crate) mod early;
mod existing_root;
pub mod node;
pub(crate) mod skip_mco;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub(crate) mod wait;
pub mod writer;

use anyhow::Result;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::config::InstallerConfig;
use crate::host::root::{HostRoot, Unreachable};
use crate::host::HostEffects;
use crate::image::Cancel;
use crate::kube::ClusterApi;
use crate::service::client::InventoryClient;
use crate::service::reporter::Reporter;
use writer::DiskWriter;

/// Where the flow keeps its files (the container shares /opt with the host).
#[derive(Clone, Debug)]
pub struct Paths {
    /// Downloaded Ignition configs (`/opt/install-dir`).
    pub install_dir: PathBuf,
    /// Present on appliance/agent-based disconnected installs (`/run/media/iso/registry`, a
    /// host path: read through `host_root`).
    pub registry_marker: PathBuf,
    /// What bootkube writes: `auth/kubeconfig`, `.bootkube.done`, `master.ign`, `manifests/`.
    pub openshift_dir: PathBuf,
    /// Shared with the host: the pull secret is written here before it is moved into place.
    pub extracted_pull_secret: PathBuf,
    /// This process's resolver config, refreshed from the host's (to resolve api-int).
    pub resolv_conf: PathBuf,
    /// Container logs, where the machine-config-server's shows who fetched Ignition.
    pub container_logs: PathBuf,
    /// The live system's kernel command line (`/proc/cmdline`: the container shares the host's
    /// kernel), whose `ignition.platform.id=` skip-MCO keeps for the deployed image.
    pub live_cmdline: PathBuf,
    /// Where the host's own files are (network keyfiles, the live image, the registry marker):
    /// the installer container does not mount them. Decided once by the entrypoint; a flow
    /// that cannot reach them fails before touching the disk.
    pub host_root: Result<HostRoot, Unreachable>,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            install_dir: PathBuf::from("/opt/install-dir"),
            registry_marker: PathBuf::from("/run/media/iso/registry"),
            openshift_dir: PathBuf::from("/opt/openshift"),
            extracted_pull_secret: PathBuf::from("/opt/extracted_from_ignition.json"),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            container_logs: PathBuf::from("/var/log/containers"),
            live_cmdline: PathBuf::from("/proc/cmdline"),
            host_root: Ok(HostRoot::Here),
        }
    }
}

/// How often the waits poll (the Go installer's values by default; tests shrink them).
#[derive(Clone, Copy, Debug)]
pub struct Intervals {
    /// Node, bootkube, etcd, controller, annotation and worker control-plane waits, and the
    /// skip-MCO fetch's tries (Go: 5 s).
    pub poll: Duration,
    /// Other hosts' Configuring status from the MCS log, and the ABI worker wait (Go: 30 s).
    pub slow_poll: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Intervals {
            poll: Duration::from_secs(5),
            slow_poll: Duration::from_secs(30),
        }
    }
}

/// Builds a Kubernetes client from a kubeconfig (the one bootkube writes).
pub type KubeFactory = Arc<dyn Fn(&Path) -> Result<Arc<dyn ClusterApi>> + Send + Sync>;

/// Everything a flow acts through.
pub struct Flow {
    pub cfg: InstallerConfig,
    pub token: String,
    pub client: Arc<dyn InventoryClient>,
    pub reporter: Arc<Reporter>,
    pub host: HostEffects,
    pub writer: Arc<dyn DiskWriter>,
    /// Loads the written disk's system for a kexec reboot (`ai.kexec`).
    pub kexec: Arc<dyn crate::kexec::InstalledLoader>,
    pub paths: Paths,
    /// `uname -m` of the host, for the UEFI loader name.
    pub arch: String,
    pub kube: KubeFactory,
    pub intervals: Intervals,
    /// Stream the image during the control-plane wait on bootstrap and single-node hosts
    /// (see `early`); off only to measure what it saves.
    pub early_write: bool,
    /// Fired on SIGINT/SIGTERM (the writer's token too): a wait or retry then ends at once with
    /// [`crate::clock::Stopped`], which the flow reports as `Failed` like any other error.
    pub stop: Cancel,
}
