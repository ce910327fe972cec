//! Log upload (`UploadLogs`): the periodic upload of the controller's own log, and the final summary
//! upload with must-gather when errors were flagged. Must-gather is `oc adm must-gather` run
//! through `bash` as in Go.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use super::OrLog;
use crate::archive::{tar_gz, Entry};
use crate::clock::{poll, ticker};
use crate::clock::{Clock, NeverStop, Stop};
use crate::controller::service::{ControllerService, KUBECONFIG_NOINGRESS};
use crate::controller::status::ControllerStatus;
use crate::controller::tasks::router_probe::{
    run_router_probe, HttpProbe, ROUTER_PROBE_PERIOD, ROUTER_PROBE_WINDOW,
};
use crate::host::commands::CommandRunner;
use crate::image::Cancel;
use crate::kube::ClusterApi;
use crate::service::LogsState;

pub(crate) const LOGS_UPLOAD_PERIOD: Duration = Duration::from_secs(5 * 60);
/// Retry period of the final summary upload.
pub(crate) const SUMMARY_LOGS_PERIOD: Duration = Duration::from_secs(30);
/// How long the final summary upload is retried.
pub(crate) const SUMMARY_LOGS_WINDOW: Duration = Duration::from_secs(70 * 60);
/// The tar entry of the controller's own log.
pub(crate) const CONTROLLER_LOG_ENTRY: &str = "assisted-installer-controller.logs";
/// The tar entry (and file name) of the must-gather tarball.
pub(crate) const MUST_GATHER_ENTRY: &str = "must-gather.tar.gz";
/// Must-gather's work directory.
pub(crate) const MUST_GATHER_DIR: &str = "/tmp/must-gather-logs";
/// The resolv.conf files logged on failure.
pub(crate) const RESOLV_CONF_FILES: [&str; 3] = [
    "/etc/resolv.conf",
    "/tmp/var-run-resolv.conf",
    "/tmp/host-resolv.conf",
];
/// The selectors that find the controller's own pod.
pub(crate) const OWN_POD_LABELS: &str = "job-name=assisted-installer-controller";
pub(crate) const RUNNING_PODS: &str = "status.phase=Running";

/// The must-gather images from `MUST_GATHER_IMAGE`. Empty → none (oc's
/// default); not JSON → that string; a JSON object → the `ocp` entry when the error flag is set
/// (empty when missing, as Go's map read), then each operator in error with a non-empty entry.
pub(crate) fn must_gather_images(
    setting: &str,
    has_error: bool,
    operators_in_error: &[String],
) -> Vec<String> {
    if setting.is_empty() {
        return Vec::new();
    }
    let Ok(map) = serde_json::from_str::<std::collections::HashMap<String, String>>(setting) else {
        return vec![setting.to_string()];
    };
    let mut images = Vec::new();
    if has_error {
        images.push(map.get("ocp").cloned().unwrap_or_default());
    }
    for name in operators_in_error {
        if let Some(img) = map.get(name).filter(|i| !i.is_empty()) {
            images.push(img.clone());
        }
    }
    images
}

/// The first directory named `must-gather*` under `dir` (depth-first, names sorted).
pub(crate) fn find_must_gather_dir(dir: &Path) -> Option<PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir).ok()?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        if !path.is_dir() {
            continue;
        }
        if e.file_name().to_string_lossy().starts_with("must-gather") {
            return Some(path);
        }
        if let Some(found) = find_must_gather_dir(&path) {
            return Some(found);
        }
    }
    None
}

/// What the log upload needs.
pub(crate) struct LogUploader<'a> {
    pub(crate) cluster: &'a dyn ClusterApi,
    pub(crate) service: &'a dyn ControllerService,
    pub(crate) status: &'a ControllerStatus,
    /// Runs must-gather's commands (the startup's executor: its proxy variables are Go's).
    pub(crate) oc: &'a dyn CommandRunner,
    pub(crate) namespace: String,
    pub(crate) must_gather_image: String,
    /// `/tmp/controller_logs.log` in production.
    pub(crate) log_file: PathBuf,
    /// Must-gather's work directory, `/tmp/must-gather-logs` in production.
    pub(crate) must_gather_dir: PathBuf,
    /// The resolv.conf files logged on failure ([`RESOLV_CONF_FILES`] in production).
    pub(crate) resolv_conf_files: Vec<PathBuf>,
    /// The own pod's name once found.
    pub(crate) pod_name: Option<String>,
    /// `CONTROL_PLANE_COUNT` (the SNO router probe runs when it is 1 and the error flag is set).
    pub(crate) control_plane_count: i64,
    /// The router probe's HTTP client; `None`: no probe.
    pub(crate) router_probe: Option<&'a dyn HttpProbe>,
}

impl LogUploader<'_> {
    /// Learn the own pod's name from the running Job pods.
    pub(crate) fn find_pod_name(&mut self) {
        if self.pod_name.is_some() {
            return;
        }
        let (labels, running) = (Some(OWN_POD_LABELS), Some(RUNNING_PODS));
        let pods = self.cluster.list_pods(&self.namespace, labels, running);
        let Some(pods) = pods.or_warn("listing the controller's pods") else {
            return;
        };
        match pods.into_iter().next() {
            Some(p) => self.pod_name = Some(p.name),
            None => tracing::warn!("no running controller pod in {}", self.namespace),
        }
    }

    /// The own log: the pod's full log, else the log file, else a placeholder naming both
    /// errors.
    pub(crate) fn controller_log(&self) -> Vec<u8> {
        let pod_err = match &self.pod_name {
            None => "the controller's pod name is unknown".to_string(),
            Some(name) => match self.cluster.pod_log(&self.namespace, name, None) {
                Ok(log) if !log.is_empty() => return log.into_bytes(),
                Ok(_) => format!("pod {name} has an empty log"),
                Err(err) => format!("{err:#}"),
            },
        };
        match std::fs::read(&self.log_file) {
            Ok(bytes) => bytes,
            Err(err) => format!(
                "Failed to get logs from pod ({pod_err}) and from {} ({err})",
                self.log_file.display()
            )
            .into_bytes(),
        }
    }

    fn log_entry_archive(&self, must_gather: Option<&[u8]>) -> Result<Vec<u8>> {
        let log = self.controller_log();
        let mtime = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut entries = Vec::new();
        if let Some(mg) = must_gather {
            entries.push(Entry {
                name: MUST_GATHER_ENTRY,
                mode: 0o644,
                mtime,
                data: mg,
            });
        }
        entries.push(Entry {
            name: CONTROLLER_LOG_ENTRY,
            mode: 0o644,
            mtime,
            data: &log,
        });
        tar_gz(&entries)
    }

    /// Upload the own log on its own (the periodic upload).
    pub(crate) fn upload_controller_logs(&self) -> Result<()> {
        let archive = self.log_entry_archive(None)?;
        self.service.upload_controller_logs(archive)
    }

    /// `UploadLogs` periodic upload: every `period` (first after one), until `stop` fires; errors are
    /// only logged.
    pub(crate) fn periodic(&mut self, clock: &dyn Clock, stop: &dyn Stop, period: Duration) {
        ticker(clock, stop, period, || {
            self.find_pod_name();
            let uploaded = self.upload_controller_logs();
            uploaded.or_warn("uploading the controller's logs");
            ControlFlow::Continue(())
        });
    }

    /// The summary's must-gather tarball, reused when one is already there.
    pub(crate) fn collect_must_gather(&self, images: &[String]) -> Result<Vec<u8>> {
        let existing = self.must_gather_dir.join(MUST_GATHER_ENTRY);
        if existing.exists() {
            return std::fs::read(&existing)
                .with_context(|| format!("reading {}", existing.display()));
        }
        let dir = &self.must_gather_dir;
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(dir)
                .with_context(|| format!("creating {}", dir.display()))?;
        }
        let kubeconfig = dir.join(KUBECONFIG_NOINGRESS);
        self.service.download_kubeconfig_noingress(&kubeconfig)?;
        // Go's commands: `oc adm must-gather` in the work dir, then the tarball of the first
        // must-gather directory it left there.
        let (d, k) = (dir.display(), kubeconfig.display());
        let mut cmd = format!("cd {d} && oc --kubeconfig={k} adm must-gather");
        for img in images {
            cmd.push_str(&format!(" --image={img}"));
        }
        self.oc.run("bash", &["-c", &cmd])?;
        let found = find_must_gather_dir(dir)
            .with_context(|| format!("no must-gather directory in {d}"))?;
        let base = found.file_name().unwrap_or_default().to_string_lossy();
        let tar = format!("cd {d} && tar zcf {MUST_GATHER_ENTRY} {base}");
        self.oc.run("bash", &["-c", &tar])?;
        std::fs::read(&existing).with_context(|| format!("reading {}", existing.display()))
    }

    /// One summary upload attempt (`UploadLogs`).
    pub(crate) fn summary_upload(&self) -> Result<()> {
        let mut must_gather = None;
        let mut collected = true;
        if self.status.has_error() || self.status.has_operator_error() {
            for path in &self.resolv_conf_files {
                match std::fs::read_to_string(path) {
                    Ok(text) => tracing::info!("{}:\n{text}", path.display()),
                    Err(err) => tracing::warn!("reading {}: {err}", path.display()),
                }
            }
            let uploaded = self.upload_controller_logs();
            uploaded.or_warn("uploading the controller's logs");
            let images = must_gather_images(
                &self.must_gather_image,
                self.status.has_error(),
                &self.status.operators_in_error(),
            );
            let collecting = self.collect_must_gather(&images);
            must_gather = collecting.or_warn("collecting must-gather");
            collected = must_gather.is_some();
        }
        let archive = self.log_entry_archive(must_gather.as_deref())?;
        self.service.upload_controller_logs(archive)?;
        if !collected {
            bail!("Some Logs were not collected in summary");
        }
        Ok(())
    }

    /// `UploadLogs` final upload (assisted-service invoker; ABI skips it): `requested`, the summary
    /// retried every `period` for `window` starting at once, then `completed` whatever the
    /// result. Runs after the main stop fired, so it has no stop of its own.
    pub(crate) fn final_upload(
        &self,
        clock: &dyn Clock,
        period: Duration,
        window: Duration,
    ) -> bool {
        let requested = self.service.update_logs_progress(LogsState::Requested);
        requested.or_warn("reporting logs requested");
        let summary = || {
            poll(clock, &NeverStop, period, Some(window), || {
                let uploaded = self.summary_upload();
                uploaded.or_warn("uploading the summary logs").is_some()
            })
            .is_ok()
        };
        let probe = self
            .router_probe
            // Only on a failed single-control-plane cluster.
            .filter(|_| self.status.has_error() && self.control_plane_count == 1);
        let ok = match probe {
            None => summary(),
            Some(probe) => {
                let done = Cancel::new();
                std::thread::scope(|scope| {
                    let service = self.service;
                    let done_probe = &done;
                    scope.spawn(move || {
                        run_router_probe(
                            clock,
                            done_probe,
                            service,
                            probe,
                            ROUTER_PROBE_PERIOD,
                            ROUTER_PROBE_WINDOW,
                        )
                    });
                    let ok = summary();
                    done.cancel();
                    ok
                })
            }
        };
        let completed = self.service.update_logs_progress(LogsState::Completed);
        completed.or_warn("reporting logs completed");
        ok
    }
}

#[cfg(test)]
mod tests;
