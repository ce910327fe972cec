#![allow(dead_code)]
//! The report of the standalone fake assisted-service (the `fake-assisted-service` example,
//! `testdata/fake_service_main.rs`): what the fake recorded of one host's install, written as
//! JSON when the process stops, and read back by the tests (on the host, or from a guest's
//! disk). One definition for both sides, so that the writer and the readers agree.
//!
//! Include it next to `fake_service` and `http_server` (it names them through `super`).

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::fake_service::FakeService;
use super::http_server::TestServer;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ServiceReport {
    pub host_id: String,
    /// The host's accepted progress reports, (stage, info) in order (`[stage, info]` in JSON).
    pub progress: Vec<(String, String)>,
    /// The host's last accepted stage (`null` before the first).
    pub current_stage: Option<String>,
    /// Accepted host logs-progress updates: (host id, logs state).
    pub host_logs_progress: Vec<(String, String)>,
    /// Accepted cluster logs-progress updates: (cluster id, logs state).
    pub cluster_logs_progress: Vec<(String, String)>,
    /// Accepted log uploads, in order.
    pub uploads: Vec<UploadReport>,
    /// Accepted events (the bodies), in order.
    pub events: Vec<Value>,
    /// Every request the server received, in arrival order, with the status answered.
    pub requests: Vec<RequestReport>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UploadReport {
    pub cluster_id: String,
    /// `host` or `controller`.
    pub logs_type: String,
    pub infra_env_id: Option<String>,
    pub host_id: Option<String>,
    pub file_name: String,
    /// The uploaded file's size.
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RequestReport {
    pub method: String,
    /// Without the query string.
    pub path: String,
    /// Raw, without the `?`.
    pub query: String,
    pub status: u16,
}

impl ServiceReport {
    /// What `svc`, served by `server`, recorded of `host_id`.
    pub(crate) fn of(svc: &FakeService, server: &TestServer, host_id: &str) -> ServiceReport {
        let progress = svc.progress_reports(host_id);
        ServiceReport {
            host_id: host_id.to_string(),
            current_stage: progress.last().map(|(stage, _)| stage.clone()),
            progress,
            host_logs_progress: svc.host_logs_reports(),
            cluster_logs_progress: svc.cluster_logs_reports(),
            uploads: svc
                .uploads()
                .into_iter()
                .map(|u| UploadReport {
                    cluster_id: u.cluster_id,
                    logs_type: u.logs_type.as_str().to_string(),
                    infra_env_id: u.host.as_ref().map(|(infra_env, _)| infra_env.clone()),
                    host_id: u.host.map(|(_, host)| host),
                    file_name: u.file_name,
                    bytes: u.data.len() as u64,
                })
                .collect(),
            events: svc.events(),
            requests: server
                .requests()
                .into_iter()
                .map(|r| RequestReport {
                    method: r.request.method,
                    path: r.request.path,
                    query: r.request.query,
                    status: r.status,
                })
                .collect(),
        }
    }

    pub(crate) fn read(path: &Path) -> Result<ServiceReport> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a fake-service report", path.display()))
    }

    /// The requests the service refused (status 400 and above), as `METHOD path status` lines.
    pub(crate) fn refused(&self) -> Vec<String> {
        self.requests
            .iter()
            .filter(|r| r.status >= 400)
            .map(|r| format!("{} {} {}", r.method, r.path, r.status))
            .collect()
    }
}
