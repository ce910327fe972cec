//! The calls the install flows make to the assisted-service (their REST paths are in `calls`).

use std::path::Path;

use anyhow::Result;

use super::models::{Cluster, Host};
use super::stages::{HostStage, LogsState};
use crate::config::Role;
use crate::wire::wire_enum;

/// The calls the install flows make to the assisted-service. Narrow on purpose, so that flows
/// can be tested against a fake.
pub trait InventoryClient: Send + Sync {
    /// `PUT /v2/infra-envs/{infra_env_id}/hosts/{host_id}/progress`; an empty `info` is omitted.
    fn update_host_progress(
        &self,
        infra_env_id: &str,
        host_id: &str,
        stage: HostStage,
        info: &str,
    ) -> Result<()>;
    /// `GET /v2/infra-env/{infra_env_id}/hosts/{host_id}/downloads/ignition` into `dest`.
    fn download_host_ignition(&self, infra_env_id: &str, host_id: &str, dest: &Path) -> Result<()>;
    /// `GET /v2/clusters/{cluster_id}/downloads/files?file_name=…` into `dest`.
    fn download_cluster_file(&self, cluster_id: &str, file_name: &str, dest: &Path) -> Result<()>;
    /// `GET /v2/clusters/{cluster_id}?exclude-hosts=…`.
    fn get_cluster(&self, cluster_id: &str, exclude_hosts: bool) -> Result<Cluster>;
    /// `GET /v2/clusters/{cluster_id}/hosts[?role=…]`.
    fn list_cluster_hosts(&self, cluster_id: &str, role: Option<&Role>) -> Result<Vec<Host>>;
    /// `PUT /v2/infra-envs/{infra_env_id}/hosts/{host_id}/logs-progress`.
    fn update_host_logs_progress(
        &self,
        infra_env_id: &str,
        host_id: &str,
        state: LogsState,
    ) -> Result<()>;
    /// `PUT /v2/clusters/{cluster_id}/logs-progress`.
    fn update_cluster_logs_progress(&self, cluster_id: &str, state: LogsState) -> Result<()>;
    /// `POST /v2/clusters/{cluster_id}/logs?logs_type=…[&infra_env_id=…&host_id=…]` with the
    /// archive as the multipart field `upfile`.
    fn upload_logs(&self, upload: &LogsUpload) -> Result<()>;
}

wire_enum! {
    /// `logs_type` of a log upload.
    pub enum LogsType: "logs type" {
        Host = "host",
        Controller = "controller",
    }
}

/// One log archive to upload.
#[derive(Clone)]
pub struct LogsUpload {
    pub cluster_id: String,
    pub logs_type: LogsType,
    /// `(infra_env_id, host_id)` for host logs.
    pub host: Option<(String, String)>,
    /// File name of the upload (e.g. `controller_logs.tar.gz`).
    pub file_name: String,
    pub data: Vec<u8>,
}
