//! Uploading the host's installation logs before the reboot (the Go `UploadInstallationLogs`):
//! the agent image's `logs_sender` run with podman on the host. Its failure is only logged by the
//! caller.

use super::commands::{CommandRunner, ExecError, SECRET_PLACEHOLDER};

/// What `logs_sender` needs; plain values so this module does not depend on the CLI types.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct LogsUpload {
    pub agent_image: String,
    pub cluster_id: String,
    pub infra_env_id: String,
    pub host_id: String,
    /// The service base URL as given with `--url`.
    pub url: String,
    pub pull_secret_token: String,
    pub insecure: bool,
    /// `--cacert`; mounted into the container and passed on when set.
    pub ca_cert_path: Option<String>,
}

impl std::fmt::Debug for LogsUpload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogsUpload")
            .field("agent_image", &self.agent_image)
            .field("cluster_id", &self.cluster_id)
            .field("infra_env_id", &self.infra_env_id)
            .field("host_id", &self.host_id)
            .field("url", &self.url)
            .field("pull_secret_token", &SECRET_PLACEHOLDER)
            .field("insecure", &self.insecure)
            .field("ca_cert_path", &self.ca_cert_path)
            .finish()
    }
}

impl LogsUpload {
    fn ca(&self) -> Option<&str> {
        self.ca_cert_path.as_deref().filter(|c| !c.is_empty())
    }

    /// The `podman` arguments:
    /// `run --rm --privileged --net=host --pid=host -v <journal socket> -v /var/log:/var/log
    /// [-v CA:CA] <agent-image> logs_sender -cluster-id … -url … -host-id … -infra-env-id …
    /// -pull-secret-token … -insecure=<bool> -bootstrap=<bool> [-cacert=<path>]`.
    fn podman_args(&self, is_bootstrap: bool) -> Vec<String> {
        const FIXED: &str = "run --rm --privileged --net=host --pid=host \
            -v /run/systemd/journal/socket:/run/systemd/journal/socket -v /var/log:/var/log";
        let mut args: Vec<String> = FIXED.split_whitespace().map(String::from).collect();
        if let Some(ca) = self.ca() {
            args.push("-v".into());
            args.push(format!("{ca}:{ca}"));
        }
        args.extend([
            self.agent_image.clone(),
            "logs_sender".into(),
            "-cluster-id".into(),
            self.cluster_id.clone(),
            "-url".into(),
            self.url.clone(),
            "-host-id".into(),
            self.host_id.clone(),
            "-infra-env-id".into(),
            self.infra_env_id.clone(),
            "-pull-secret-token".into(),
            self.pull_secret_token.clone(),
            format!("-insecure={}", self.insecure),
            format!("-bootstrap={is_bootstrap}"),
        ]);
        if let Some(ca) = self.ca() {
            args.push(format!("-cacert={ca}"));
        }
        args
    }
}

/// Runs `logs_sender` on the host. `is_bootstrap` is true on the bootstrap and on a single
/// node (it then also gathers the bootstrap's logs).
pub(crate) fn upload_installation_logs(
    runner: &dyn CommandRunner,
    upload: &LogsUpload,
    is_bootstrap: bool,
) -> Result<String, ExecError> {
    tracing::info!("Uploading logs (bootstrap={is_bootstrap})");
    let args = upload.podman_args(is_bootstrap);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    runner.run("podman", &args)
}

#[cfg(test)]
mod tests {
    use super::super::commands::RecordingRunner;
    use super::*;

    fn upload(ca: Option<&str>) -> LogsUpload {
        LogsUpload {
            agent_image: "quay.io/edge/agent:v1".into(),
            cluster_id: "c1".into(),
            infra_env_id: "ie1".into(),
            host_id: "h1".into(),
            url: "https://service:8090".into(),
            pull_secret_token: "tok".into(),
            insecure: true,
            ca_cert_path: ca.map(str::to_string),
        }
    }

    #[test]
    fn with_ca_mounts_and_passes_it() {
        let r = RecordingRunner::new();
        upload_installation_logs(&r, &upload(Some("test.ca")), true).unwrap();
        assert_eq!(
            r.lines(),
            vec![
                "podman run --rm --privileged --net=host --pid=host \
                 -v /run/systemd/journal/socket:/run/systemd/journal/socket \
                 -v /var/log:/var/log -v test.ca:test.ca quay.io/edge/agent:v1 logs_sender \
                 -cluster-id c1 -url https://service:8090 -host-id h1 -infra-env-id ie1 \
                 -pull-secret-token tok -insecure=true -bootstrap=true -cacert=test.ca"
            ]
        );
    }

    #[test]
    fn without_ca_neither_mount_nor_flag() {
        for ca in [None, Some("")] {
            let r = RecordingRunner::new();
            let mut u = upload(ca);
            u.insecure = false;
            upload_installation_logs(&r, &u, false).unwrap();
            let args = &r.calls()[0].args;
            assert!(!args
                .iter()
                .any(|a| a.contains("test.ca") || a.starts_with("-cacert")));
            assert_eq!(args.iter().filter(|a| *a == "-v").count(), 2);
            assert!(args.contains(&"-insecure=false".to_string()));
            assert_eq!(args.last().unwrap(), "-bootstrap=false");
        }
    }

    #[test]
    fn failure_is_returned_and_debug_hides_token() {
        let r = RecordingRunner::with_script(|p, _| {
            (p == "podman").then(|| super::super::commands::Reply::fail(125, "Error: no image"))
        });
        let err = upload_installation_logs(&r, &upload(None), false).unwrap_err();
        assert_eq!(err.exit_code, Some(125));
        assert!(!format!("{:?}", upload(None)).contains("tok\""));
        assert!(format!("{:?}", upload(None)).contains("<SECRET>"));
    }
}
