//! The bootstrap's upload of the controller's logs (Go's `uploadControllerLogs`): the
//! bootstrap reboots soon after the controller is ready, and the controller's first minutes are
//! the part most often needed to triage a failed install.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Flow;
use crate::archive::{tar_gz, Entry};
use crate::kube::ClusterApi;
use crate::openshift::{CONTROLLER_JOB, CONTROLLER_LOGS_ARCHIVE, CONTROLLER_NAMESPACE};
use crate::service::client::{LogsType, LogsUpload};

/// How often the logs are uploaded while the bootstrap waits for the controller (Go: 5 min).
pub(crate) const UPLOAD_EVERY: Duration = Duration::from_secs(5 * 60);
/// How much of the pod's log is uploaded (Go: `ControllerLogsSecondsAgo`, one hour).
const SINCE_SECONDS: i64 = 3600;
/// The one entry of the archive.
const ENTRY_NAME: &str = "assisted-installer-controller.logs";

/// Go's `GetPodInStatus`: the first pod of the controller's Job named after it, if Running.
fn running_controller_pod(kube: &dyn ClusterApi) -> Option<String> {
    let selector = format!("job-name={CONTROLLER_JOB}");
    let pods = match kube.list_pods(CONTROLLER_NAMESPACE, Some(&selector), None) {
        Ok(pods) => pods,
        Err(e) => {
            tracing::warn!("listing the controller pods: {e:#}");
            return None;
        }
    };
    let pod = pods
        .into_iter()
        .find(|p| p.name.starts_with(CONTROLLER_JOB))?;
    tracing::info!("found controller pod {} in phase {}", pod.name, pod.phase);
    (pod.phase == "Running").then_some(pod.name)
}

/// The last hour of the pod's log, or (as Go's upload) a line saying why there is none.
fn pod_log(kube: &dyn ClusterApi, pod: &str) -> Vec<u8> {
    match kube.pod_log(CONTROLLER_NAMESPACE, pod, Some(SINCE_SECONDS)) {
        Ok(log) if !log.is_empty() => log.into_bytes(),
        Ok(_) => format!("The log of pod {pod} is empty\n").into_bytes(),
        Err(e) => {
            tracing::warn!("reading the log of controller pod {pod}: {e:#}");
            format!("Failed to get logs of pod {pod}: {e:#}\n").into_bytes()
        }
    }
}

/// One upload of the controller pod's log (`controller_logs.tar.gz`), when the pod is Running.
/// Failures are logged.
pub(crate) fn upload_controller_logs(f: &Flow, kube: &dyn ClusterApi) {
    let Some(pod) = running_controller_pod(kube) else {
        tracing::info!("no running controller pod: its logs are not uploaded");
        return;
    };
    let log = pod_log(kube, &pod);
    let mtime = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let archive = tar_gz(&[Entry {
        name: ENTRY_NAME,
        mode: 0o644,
        mtime,
        data: &log,
    }]);
    let result = archive.and_then(|data| {
        f.client.upload_logs(&LogsUpload {
            cluster_id: f.cfg.cluster_id.clone(),
            logs_type: LogsType::Controller,
            host: None,
            file_name: CONTROLLER_LOGS_ARCHIVE.into(),
            data,
        })
    });
    match result {
        Ok(()) => tracing::info!("uploaded the logs of controller pod {pod}"),
        Err(e) => tracing::warn!("uploading the logs of controller pod {pod}: {e:#}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::read::entries;
    use crate::flow::testing::TestFlow;
    use crate::kube::testing::FakeCluster;
    use crate::kube::{ApiError, Pod};

    /// The controller Job's pods, each with `log` (`None`: reading it fails).
    fn pods(pods: &[(&str, &str)], log: Option<&str>) -> FakeCluster {
        let kube = FakeCluster::new();
        for (name, phase) in pods {
            let job = [("job-name".to_string(), CONTROLLER_JOB.to_string())];
            let pod = Pod {
                namespace: CONTROLLER_NAMESPACE.into(),
                name: name.to_string(),
                phase: phase.to_string(),
                labels: job.into(),
            };
            kube.add_pod(pod, log.unwrap_or_default());
        }
        if log.is_none() {
            kube.fail_always("pod_log", ApiError::new(500, "", "connection refused"));
        }
        kube
    }

    /// The one entry of each upload: (name, mode, text).
    fn uploaded(t: &TestFlow) -> Vec<(String, u32, String)> {
        t.service
            .uploads
            .lock()
            .unwrap()
            .iter()
            .map(|u| {
                assert_eq!(u.cluster_id, crate::flow::testing::CLUSTER);
                assert_eq!(u.logs_type, LogsType::Controller);
                assert_eq!(u.host, None);
                assert_eq!(u.file_name, "controller_logs.tar.gz");
                let mut all = entries(&u.data);
                assert_eq!(all.len(), 1);
                let (name, mode, _, data) = all.remove(0);
                (name, mode, String::from_utf8(data).unwrap())
            })
            .collect()
    }

    #[test]
    fn the_running_pods_last_hour_is_uploaded_or_a_line_saying_why_not() {
        let t = TestFlow::new("bootstrap");
        let kube = pods(
            &[("assisted-installer-controller-x7k2p", "Running")],
            Some("started\nready\n"),
        );
        upload_controller_logs(&t.flow, &kube);
        let list = "list_pods(assisted-installer, job-name=assisted-installer-controller, -)";
        assert_eq!(kube.calls()[0].to_string(), list);
        assert_eq!(
            kube.log_reads(),
            [(
                "assisted-installer".to_string(),
                "assisted-installer-controller-x7k2p".to_string(),
                Some(3600)
            )]
        );
        assert_eq!(
            uploaded(&t),
            [(
                "assisted-installer-controller.logs".to_string(),
                0o644,
                "started\nready\n".to_string()
            )]
        );
        // An unreadable or empty log uploads a line saying so.
        let pod = [("assisted-installer-controller-x7k2p", "Running")];
        upload_controller_logs(&t.flow, &pods(&pod, None));
        upload_controller_logs(&t.flow, &pods(&pod, Some("")));
        let texts: Vec<String> = uploaded(&t).into_iter().skip(1).map(|u| u.2).collect();
        assert_eq!(
            texts,
            [
                "Failed to get logs of pod assisted-installer-controller-x7k2p: fake pod_log: the \
                 API server answered 500 : connection refused\n",
                "The log of pod assisted-installer-controller-x7k2p is empty\n"
            ]
        );
    }

    #[test]
    fn nothing_is_uploaded_without_a_running_controller_pod() {
        for listed in [
            vec![],
            vec![("assisted-installer-controller-x7k2p", "Pending")],
            vec![("other-pod", "Running")],
            // Go looks at the first pod with the prefix only.
            vec![
                ("assisted-installer-controller-old", "Failed"),
                ("assisted-installer-controller-new", "Running"),
            ],
        ] {
            let t = TestFlow::new("bootstrap");
            let kube = pods(&listed, Some("log"));
            upload_controller_logs(&t.flow, &kube);
            assert!(uploaded(&t).is_empty(), "{listed:?}");
            assert!(kube.log_reads().is_empty());
        }
    }
}
