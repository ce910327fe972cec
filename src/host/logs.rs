//! Uploading the host's installation logs before the reboot (the Go `UploadInstallationLogs`):
//! the agent image's `logs_sender` run with podman on the host. Its failure is only logged by the
//! caller.

use super::commands::{CommandRunner, ExecError};
use crate::config::InstallerConfig;

/// Runs `logs_sender` on the host: `podman run --rm --privileged --net=host --pid=host
/// -v <journal socket> -v /var/log:/var/log [-v CA:CA] <agent-image> logs_sender -cluster-id …
/// -url … -host-id … -infra-env-id … -pull-secret-token … -insecure=<bool> -bootstrap=<bool>
/// [-cacert=<path>]`. `is_bootstrap` is true on the bootstrap and on a single node (it then
/// also gathers the bootstrap's logs).
pub(crate) fn upload_installation_logs(
    runner: &dyn CommandRunner,
    cfg: &InstallerConfig,
    token: &str,
    is_bootstrap: bool,
) -> Result<String, ExecError> {
    tracing::info!("Uploading logs (bootstrap={is_bootstrap})");
    const FIXED: &str = "run --rm --privileged --net=host --pid=host \
        -v /run/systemd/journal/socket:/run/systemd/journal/socket -v /var/log:/var/log";
    let mut args: Vec<String> = FIXED.split_whitespace().map(String::from).collect();
    let ca = cfg.cacert.as_ref().map(|p| p.display().to_string());
    let ca = ca.filter(|c| !c.is_empty());
    if let Some(ca) = &ca {
        args.push("-v".into());
        args.push(format!("{ca}:{ca}"));
    }
    args.extend([
        cfg.agent_image.clone(),
        "logs_sender".into(),
        "-cluster-id".into(),
        cfg.cluster_id.clone(),
        "-url".into(),
        cfg.url.clone(),
        "-host-id".into(),
        cfg.host_id.clone(),
        "-infra-env-id".into(),
        cfg.infra_env_id.clone(),
        "-pull-secret-token".into(),
        token.to_string(),
        format!("-insecure={}", cfg.insecure),
        format!("-bootstrap={is_bootstrap}"),
    ]);
    if let Some(ca) = ca {
        args.push(format!("-cacert={ca}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    runner.run("podman", &args)
}

#[cfg(test)]
mod tests {
    use super::super::commands::RecordingRunner;
    use super::*;

    fn upload(ca: Option<&str>) -> InstallerConfig {
        InstallerConfig {
            agent_image: "quay.io/edge/agent:v1".into(),
            cluster_id: "c1".into(),
            infra_env_id: "ie1".into(),
            host_id: "h1".into(),
            url: "https://service:8090".into(),
            insecure: true,
            cacert: ca.map(Into::into),
            ..InstallerConfig::default()
        }
    }

    #[test]
    fn with_ca_mounts_and_passes_it() {
        let r = RecordingRunner::new();
        upload_installation_logs(&r, &upload(Some("test.ca")), "tok", true).unwrap();
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
    fn without_ca_neither_mount_nor_flag_and_a_failure_is_returned() {
        for ca in [None, Some("")] {
            let r = RecordingRunner::new();
            let mut u = upload(ca);
            u.insecure = false;
            upload_installation_logs(&r, &u, "tok", false).unwrap();
            let args = &r.calls()[0].args;
            assert!(!args
                .iter()
                .any(|a| a.contains("test.ca") || a.starts_with("-cacert")));
            assert_eq!(args.iter().filter(|a| *a == "-v").count(), 2);
            assert!(args.contains(&"-insecure=false".to_string()));
            assert_eq!(args.last().unwrap(), "-bootstrap=false");
        }
        // A failure is returned.
        let r = RecordingRunner::with_script(|p, _| {
            (p == "podman").then(|| super::super::commands::Reply::fail(125, "Error: no image"))
        });
        let err = upload_installation_logs(&r, &upload(None), "tok", false).unwrap_err();
        assert_eq!(err.exit_code, Some(125));
    }
}
