//! The calls the install flows make to the assisted-service, and their paths on the REST API.

use std::path::Path;

use anyhow::Result;
use reqwest::Method;
use tracing::debug;

use super::client::{encode, ServiceClient, MAX_PROGRESS_INFO_CHARS};
use super::models::{Cluster, Host, HostProgress, LogsProgressParams};
use super::stages::{HostStage, LogsState};
use crate::config::Role;

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

/// `logs_type` of a log upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogsType {
    Host,
    Controller,
}

impl LogsType {
    pub fn as_str(self) -> &'static str {
        match self {
            LogsType::Host => "host",
            LogsType::Controller => "controller",
        }
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

impl std::fmt::Debug for LogsUpload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogsUpload")
            .field("cluster_id", &self.cluster_id)
            .field("logs_type", &self.logs_type)
            .field("host", &self.host)
            .field("file_name", &self.file_name)
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl InventoryClient for ServiceClient {
    fn update_host_progress(
        &self,
        infra_env_id: &str,
        host_id: &str,
        stage: HostStage,
        info: &str,
    ) -> Result<()> {
        let info = if info.chars().count() > MAX_PROGRESS_INFO_CHARS {
            debug!(stage = %stage, "progress info longer than {MAX_PROGRESS_INFO_CHARS} characters, cut");
            info.chars().take(MAX_PROGRESS_INFO_CHARS).collect()
        } else {
            info.to_string()
        };
        let body = HostProgress {
            current_stage: Some(stage),
            progress_info: info,
        };
        let path = format!(
            "/v2/infra-envs/{}/hosts/{}/progress",
            encode(infra_env_id),
            encode(host_id)
        );
        self.send_json("UpdateHostInstallProgress", Method::PUT, path, &body)
    }

    fn download_host_ignition(&self, infra_env_id: &str, host_id: &str, dest: &Path) -> Result<()> {
        // Singular `infra-env`: that is how the API defines this one path.
        let path = format!(
            "/v2/infra-env/{}/hosts/{}/downloads/ignition",
            encode(infra_env_id),
            encode(host_id)
        );
        self.download("DownloadHostIgnition", path, dest)
    }

    fn download_cluster_file(&self, cluster_id: &str, file_name: &str, dest: &Path) -> Result<()> {
        let path = format!(
            "/v2/clusters/{}/downloads/files?file_name={}",
            encode(cluster_id),
            encode(file_name)
        );
        self.download("DownloadClusterFiles", path, dest)
    }

    fn get_cluster(&self, cluster_id: &str, exclude_hosts: bool) -> Result<Cluster> {
        let path = format!(
            "/v2/clusters/{}?exclude-hosts={exclude_hosts}",
            encode(cluster_id)
        );
        self.get_json("GetCluster", path)
    }

    fn list_cluster_hosts(&self, cluster_id: &str, role: Option<&Role>) -> Result<Vec<Host>> {
        let mut path = format!("/v2/clusters/{}/hosts", encode(cluster_id));
        if let Some(role) = role {
            path.push_str("?role=");
            path.push_str(&encode(role.as_str()));
        }
        self.get_json("ListClusterHosts", path)
    }

    fn update_host_logs_progress(
        &self,
        infra_env_id: &str,
        host_id: &str,
        state: LogsState,
    ) -> Result<()> {
        let path = format!(
            "/v2/infra-envs/{}/hosts/{}/logs-progress",
            encode(infra_env_id),
            encode(host_id)
        );
        let body = LogsProgressParams { logs_state: state };
        self.send_json("UpdateHostLogsProgress", Method::PUT, path, &body)
    }

    fn update_cluster_logs_progress(&self, cluster_id: &str, state: LogsState) -> Result<()> {
        let path = format!("/v2/clusters/{}/logs-progress", encode(cluster_id));
        let body = LogsProgressParams { logs_state: state };
        self.send_json("UpdateClusterLogsProgress", Method::PUT, path, &body)
    }

    fn upload_logs(&self, upload: &LogsUpload) -> Result<()> {
        let mut path = format!(
            "/v2/clusters/{}/logs?logs_type={}",
            encode(&upload.cluster_id),
            upload.logs_type.as_str()
        );
        if let Some((infra_env_id, host_id)) = &upload.host {
            path.push_str(&format!(
                "&infra_env_id={}&host_id={}",
                encode(infra_env_id),
                encode(host_id)
            ));
        }
        self.upload(
            "V2UploadLogs",
            path,
            "upfile",
            &upload.file_name,
            &upload.data,
        )
    }
}
