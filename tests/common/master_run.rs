//! The entrypoint's dry-run master install as the tests run it, wherever the service is: the
//! ids and Ignition config served, the agent's Go flags, the Go stages the service must see.

use std::path::Path;

use super::fake_service::FakeService;
use super::flow_builder::s;
use super::http_server::TestServer;

pub(crate) const CLUSTER: &str = "1e2f3a4b-5c6d-4e7f-8a9b-0c1d2e3f4a5b";
pub(crate) const INFRA: &str = "2f3a4b5c-6d7e-4f80-9bac-1d2e3f4a5b6c";
/// The pointer config the service serves a master.
pub(crate) const IGNITION: &str = r#"{"ignition":{"version":"3.4.0","config":{"merge":[{"source":"https://api-int.example:22623/config/master"}]}}}"#;

/// A master with a fresh host id, its [`IGNITION`] served by a fake service on a test server:
/// (host id, service, server).
pub(crate) fn served_master() -> (String, FakeService, TestServer) {
    let host = uuid::Uuid::new_v4().to_string();
    let svc = FakeService::new();
    let server = TestServer::with_app(svc.clone());
    svc.set_host_role(&host, "master");
    svc.set_host_ignition(&host, IGNITION);
    (host, svc, server)
}

/// The agent's flags for a dry-run master install of `host` onto `boot_device` (a device or a
/// disk-image file) from the service at `url`; the token goes in `PULL_SECRET_TOKEN`, not here.
pub(crate) fn master_args(
    host: &str,
    boot_device: &Path,
    url: &str,
    installer_args: &str,
    reboot_marker: &Path,
) -> Vec<String> {
    let (boot_device, marker) = (boot_device.display(), reboot_marker.display());
    let flags = [
        ("--role", "master".into()),
        ("--infra-env-id", INFRA.into()),
        ("--cluster-id", CLUSTER.into()),
        ("--host-id", host.into()),
        ("--boot-device", boot_device.to_string()),
        ("--url", url.into()),
        ("--openshift-version", "4.17".into()),
        ("--controller-image", "quay.io/example/controller:1".into()),
        ("--agent-image", "quay.io/example/agent:1".into()),
        ("--installer-args", installer_args.into()),
        ("--fake-reboot-marker-path", marker.to_string()),
    ];
    let mut args: Vec<String> = flags
        .into_iter()
        .flat_map(|(flag, value): (&str, String)| [flag.to_string(), value])
        .collect();
    args.push("--dry-run".into());
    args
}

/// The percentages reported with `stage`, each at least 5 points above the last or 100.
fn percents(reports: &[(String, String)], stage: &str) -> Vec<u32> {
    let percents: Vec<u32> = reports
        .iter()
        .filter(|(st, info)| st == stage && info.ends_with('%'))
        .map(|(_, info)| info.trim_end_matches('%').parse().unwrap())
        .collect();
    assert!(
        percents.windows(2).all(|w| w[1] >= w[0] + 5 || w[1] == 100),
        "{stage}: {percents:?}"
    );
    percents
}

/// The exact Go stage sequence of a master, from the service's accepted reports (stage, info)
/// in order: the write's percentages depend on timing ([`percents`]), the last is 100. An
/// appliance master (`registry_copy`) reports the registry copy between the write and the
/// reboot, with rsync's percentages the same way when the copy is real. A real install (not a
/// dry run) may add warnings about the installed system's first boot after the write's 100%,
/// carried into the info of `Rebooting`: they are returned for the caller to check.
pub(crate) fn assert_master_stages(
    reports: &[(String, String)],
    registry_copy: bool,
) -> Vec<String> {
    let writing = "Writing image to disk";
    let warnings: Vec<String> = reports
        .iter()
        .filter(|(st, info)| st == writing && !info.is_empty() && !info.ends_with('%'))
        .map(|(_, info)| info.clone())
        .collect();
    let mut want = vec![
        s("Starting installation", "master"),
        s("Installing", "master"),
    ];
    let stage_with_percents = |want: &mut Vec<(String, String)>, stage: &str, must_end: bool| {
        let p = percents(reports, stage);
        assert!(
            p.last() == Some(&100) || (!must_end && p.is_empty()),
            "{stage}: {reports:?}"
        );
        want.push(s(stage, ""));
        want.extend(p.iter().map(|p| s(stage, &format!("{p}%"))));
    };
    stage_with_percents(&mut want, writing, true);
    want.extend(warnings.iter().map(|w| s(writing, w)));
    if registry_copy {
        stage_with_percents(&mut want, "Copying registry data to disk", false);
    }
    want.push(s("Rebooting", &warnings.join(". ")));
    assert_eq!(reports, want);
    warnings
}
