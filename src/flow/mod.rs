//! The Go installer's role flows, stage by stage, acting through [`Flow`]; every wait and retry
//! sleeps through the host's clock and ends early when [`Flow::stop`] fires.

pub(crate) mod bootstrap;
pub(crate) mod early;
mod existing_root;
mod first_boot;
pub mod node;
pub(crate) mod skip_mco;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod writer;

use anyhow::{Context, Result};
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
    /// Present on appliance installs (`/run/media/iso/registry`, read through `host_root`).
    pub registry_marker: PathBuf,
    /// What bootkube writes: `auth/kubeconfig`, `.bootkube.done`, `master.ign`, `manifests/`.
    pub openshift_dir: PathBuf,
    /// Shared with the host: the pull secret is written here before it is moved into place.
    pub extracted_pull_secret: PathBuf,
    /// This process's resolver config, refreshed from the host's (to resolve api-int).
    pub resolv_conf: PathBuf,
    /// Container logs, where the machine-config-server's shows who fetched Ignition.
    pub container_logs: PathBuf,
    /// The live system's kernel command line (the container shares the host's kernel).
    pub live_cmdline: PathBuf,
    /// sysfs and the device nodes, where the written disk's transport and the other disks are
    /// looked at (`/sys`, `/dev`: the container has the host's).
    pub sys: PathBuf,
    pub dev: PathBuf,
    /// Where the host's own files are (keyfiles, the live image, the registry marker), which
    /// the container does not mount; a flow that cannot reach them fails before any write.
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
            sys: PathBuf::from("/sys"),
            dev: PathBuf::from("/dev"),
            host_root: Ok(HostRoot::Here),
        }
    }
}

/// How often the waits poll (Go's values by default).
#[derive(Clone, Copy, Debug)]
pub struct Intervals {
    /// Most waits, and the skip-MCO fetch's tries (Go: 5 s).
    pub poll: Duration,
    /// The MCS log watch and the agent-based installs' worker wait (Go: 30 s).
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
    /// Stream the image early on bootstrap and single-node hosts (see `early`).
    pub early_write: bool,
    /// Fired on SIGINT/SIGTERM (the writer's token too): a wait then ends at once with
    /// [`crate::clock::Stopped`], reported as `Failed`.
    pub stop: Cancel,
}

impl Flow {
    /// `check` every `every` on the host's clock until it gives a value; only the stop token
    /// ends it otherwise, with [`crate::clock::Stopped`] under `what`.
    pub(crate) fn poll<T>(
        &self,
        every: Duration,
        what: impl std::fmt::Display + Send + Sync + 'static,
        check: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        let polled = self.host.clock.poll_until(&self.stop, every, check);
        polled.context(what)
    }

    /// Whether the file at `path` is an Ignition config the flow can use. One that does not
    /// parse fails a real install (before the disk is written); a dry run goes on, with a
    /// warning that names the file and says what the flow does without it (`instead`): the
    /// assisted-service's test mode (`DUMMY_IGNITION=true`, used for its subsystem tests and
    /// for load tests of many dry-run hosts) serves the four bytes `data` as every host's
    /// Ignition config, and the Go installer's dry run passes through it. A file that cannot be
    /// read fails either way.
    pub(crate) fn usable_ignition(&self, path: &Path, instead: &str) -> Result<bool> {
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading the Ignition config {}", path.display()))?;
        let what = path.display().to_string();
        match crate::ignition::IgnitionConfig::check(bytes, None, &what) {
            Ok(_) => Ok(true),
            Err(e) if self.cfg.dry_run => {
                tracing::warn!(
                    "{e:#}; accepted only because of --dry-run (the assisted-service's test mode \
                     serves such configs): {instead}"
                );
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}
