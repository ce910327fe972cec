#![allow(dead_code)]
//! The report of the standalone fake assisted-service (the `fake-assisted-service` example,
//! `testdata/fake_service_main.rs`): what the fake recorded of one host's install, written as
//! JSON when the process stops, and read back by the tests (on the host, or from a guest's
//! disk). One definition for both sides, so that the writer and the readers agree.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct ServiceReport {
    pub host_id: String,
    /// The host's accepted progress reports, (stage, info) in order (`[stage, info]` in JSON).
    pub progress: Vec<(String, String)>,
    /// Accepted host logs-progress updates: (host id, logs state).
    pub host_logs_progress: Vec<(String, String)>,
    /// The requests the service refused (status 400 and above), as `METHOD path status` lines.
    pub refused: Vec<String>,
}

impl ServiceReport {
    pub(crate) fn read(path: &Path) -> Result<ServiceReport> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a fake-service report", path.display()))
    }
}
