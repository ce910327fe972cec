//! Install orchestration: the Go installer's role flows, stage by stage, with every host effect
//! behind the narrow traits of `host` (commands, reboot, clock), the assisted-service behind
//! `InventoryClient`, and the disk write behind `DiskWriter`; all chosen by the caller.

pub mod node;
pub mod wait;
pub mod writer;

use std::path::PathBuf;
use std::sync::Arc;

use crate::cli::go_flags::InstallerConfig;
use crate::host::Host;
use crate::service::client::InventoryClient;
use crate::service::reporter::Reporter;
use writer::DiskWriter;

/// Where the flow keeps its files (the container shares /opt with the host).
#[derive(Clone, Debug)]
pub struct Paths {
    /// Downloaded Ignition configs (`/opt/install-dir`).
    pub install_dir: PathBuf,
    /// Present on appliance/agent-based disconnected installs (`/run/media/iso/registry`).
    pub registry_marker: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            install_dir: PathBuf::from("/opt/install-dir"),
            registry_marker: PathBuf::from("/run/media/iso/registry"),
        }
    }
}

/// Everything a flow acts through.
pub struct Flow {
    pub cfg: InstallerConfig,
    pub token: String,
    pub client: Arc<dyn InventoryClient>,
    pub reporter: Reporter,
    pub host: Host,
    pub writer: Arc<dyn DiskWriter>,
    pub paths: Paths,
    /// `uname -m` of the host, for the UEFI loader name.
    pub arch: String,
}
