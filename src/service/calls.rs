//! [`InventoryClient`] over the REST client: each call's path on the API.

use std::path::Path;

use anyhow::Result;
use reqwest::Method;
use tracing::debug;

use super::client::{encode, ServiceClient, MAX_PROGRESS_INFO_CHARS};
use super::inventory::{InventoryClient, LogsUpload};
use super::models::{Cluster, Host, HostProgress, LogsProgressParams};
use super::stages::{HostStage, LogsState};
use crate::config::Role;

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
        let query = role.map(|r| format!("?role={}", encode(r.as_str())));
        let path = format!("/v2/clusters/{}/hosts", encode(cluster_id));
        self.get_json("ListClusterHosts", path + &query.unwrap_or_default())
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
        self.upload("V2UploadLogs", path, &upload.file_name, &upload.data)
    }
}
