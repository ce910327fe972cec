//! The master and worker flows against the fake assisted-service (which enforces the
//! stage order: 409 on going backwards), with recorded host commands, a fake clock and a
//! scripted disk writer: the Go installer test suite's master and worker scenarios. Two of them
//! reach the fake over HTTP through the REST client, whose retries they are about.

mod common;

use assisted_installer::commands::install::dry_run_commands;
use assisted_installer::flow::testing::{FlowBuilder, HOST, INFRA};
use assisted_installer::host::commands::RecordingRunner;
use assisted_installer::host::reboot::FakeReboot;
use assisted_installer::host::root::Unreachable;
use assisted_installer::kexec::testing::{coreos_boot, FromBootDir, RecordingLoader};
use assisted_installer::service::client::{ClientConfig, ClientRetry, ServiceClient};
use common::fake_service::host_json;
use common::flow_builder::{
    failed_info, installed_as, installed_with, run, s, two_masters, with_percents, Harness, Report,
    LSBLK_VDA,
};
use common::http_server::TestServer;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const IGNITION: &str = r#"{"ignition":{"version":"3.4.0","config":{"merge":[{"source":"https://api-int.example:22623/config/master"}]}}}"#;
/// A third master, still rebooting when the first two are done.
const THIRD: &str = "ae6f7081-92a3-4db4-8f3a-4b5c6d7e8f90";
const CLEAN_FAILED: &str = "Could not clean install device /dev/vda. The installation will continue. If the installation fails, clean the disk and try again";

/// What the service sends: no image (the live one is installed), only what users and the
/// service add.
const ARGS: &[&str] = &["--append-karg", "nameserver=8.8.8.8", "-n"];

/// A host of `role` served [`IGNITION`], which the writer must get.
fn harness(role: &str) -> Harness {
    let h = Harness::new(role, ARGS);
    h.svc.set_host_ignition(HOST, IGNITION);
    *h.writer.expected_ignition.lock().unwrap() = Some(IGNITION.to_string());
    h
}

/// Where the flow keeps the host's Ignition config when installing as `role`.
fn ignition(h: &Harness, role: &str) -> PathBuf {
    h.path(&format!("install-dir/{role}-{HOST}.ign"))
}

#[test]
fn master_happy_path_reports_the_go_stage_sequence_and_reboots_in_a_minute() {
    let h = harness("master");
    run(h.flow("master")).unwrap();
    assert_eq!(h.reports(), installed_as("master"));
    // The write got the device, the downloaded Ignition and the installer args: no image
    // source, so the live image.
    let calls = h.writer.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].device.display().to_string(), "/dev/vda");
    assert_eq!(calls[0].ignition, Some(ignition(&h, "master")));
    let args = &calls[0].args;
    assert_eq!(args.kargs_network.append_kargs, vec!["nameserver=8.8.8.8"]);
    assert!(args.kargs_network.copy_network);
    assert_eq!((&args.image_url, &args.image_file), (&None, &None));
    let lines = h.runner.lines();
    assert!(
        lines.contains(&"wipefs --all --force /dev/vda".to_string()),
        "{lines:#?}"
    );
    let logs = lines
        .iter()
        .find(|l| l.starts_with("podman run"))
        .expect("logs_sender ran");
    assert!(
        logs.contains("logs_sender") && logs.contains("-bootstrap=false"),
        "{logs}"
    );
    assert_eq!(
        lines.last().unwrap(),
        "shutdown -r +1 'Installation completed, server is going to reboot.'"
    );
    assert_eq!(
        h.svc.state().host_logs_reports,
        vec![(HOST.to_string(), "requested".to_string())]
    );
    // Every call went through the flow's InventoryClient, which sends each with the token and
    // its own request id (service_client.rs checks that for every operation).
    let calls = h.svc.calls();
    let count = |suffix: &str| calls.iter().filter(|c| c.ends_with(suffix)).count();
    assert_eq!(count("/downloads/ignition"), 1, "{calls:#?}");
    assert_eq!(count("/logs-progress"), 1, "{calls:#?}");
    assert_eq!(
        count("/progress"),
        installed_as("master").len(),
        "{calls:#?}"
    );
    assert_eq!(calls.len(), installed_as("master").len() + 2, "{calls:#?}");
}

#[test]
fn worker_waits_for_two_done_masters_after_the_write() {
    // A master and an arbiter are enough too.
    let h = harness("worker");
    h.svc.set_hosts_script(|_| {
        let mut hosts = two_masters("Done");
        hosts[1]["role"] = json!("arbiter");
        hosts
    });
    run(h.flow("worker")).unwrap();
    assert_eq!(h.reports().last().unwrap(), &s("Rebooting", ""));
    let h = harness("worker");
    h.svc.set_hosts_script(|poll| {
        let mut hosts = two_masters(if poll >= 3 { "Done" } else { "Rebooting" });
        hosts.push(host_json(THIRD, INFRA, "master", Some("Rebooting")));
        hosts
    });
    run(h.flow("worker")).unwrap();
    let want = installed_with("worker", vec![s("Waiting for control plane", "")]);
    assert_eq!(h.reports(), want);
    let master_polls = h
        .svc
        .calls()
        .iter()
        .filter(|c| c.starts_with("GET ") && c.ends_with("/hosts?role=master"))
        .count();
    assert!(master_polls >= 3, "polled {master_polls} times");
    assert!(
        h.clock.sleeps().contains(&Duration::from_secs(5)),
        "polls 5 s apart"
    );
    let ign = h.writer.calls()[0].ignition.clone().unwrap();
    assert!(ign.ends_with(format!("worker-{HOST}.ign")), "{ign:?}");
}

#[test]
fn a_failed_ignition_download_reports_failed_with_the_reason() {
    let h = harness("master");
    h.svc.fail_path("downloads/ignition", 404);
    let err = run(h.flow("master")).unwrap_err();
    let info = failed_info(&h.reports());
    assert!(
        info.contains("downloading the host Ignition config") && info.contains("404"),
        "{info}"
    );
    assert_eq!(info, format!("{err:#}"));
    assert!(h.writer.calls().is_empty(), "nothing written");
    assert!(
        !h.runner.lines().iter().any(|l| l.starts_with("shutdown")),
        "no reboot"
    );
}

#[test]
fn the_write_is_tried_three_times_a_second_apart() {
    for failures in [2, 3] {
        let h = harness("master");
        h.writer.failures.store(failures, Ordering::SeqCst);
        let result = run(h.flow("master"));
        assert_eq!(h.writer.calls().len(), 3);
        let sleeps = h.clock.sleeps();
        let one_second = sleeps.iter().filter(|d| **d == Duration::from_secs(1));
        assert_eq!(one_second.count(), 2, "{sleeps:?}");
        if failures == 2 {
            result.unwrap();
            assert_eq!(h.reports(), installed_as("master"));
            continue;
        }
        result.unwrap_err();
        let info = failed_info(&h.reports());
        assert!(
            info.starts_with("failed after 3 attempts, last error: "),
            "{info}"
        );
        assert!(info.contains("Input/output error"), "{info}");
    }
}

#[test]
fn a_failed_disk_cleanup_is_reported_and_the_install_continues_and_a_skipped_one_runs_nothing() {
    let h = harness("master");
    for line in ["wipefs --all --force /dev/vda", "wipefs --all /dev/vda"] {
        let failed = "wipefs: error: /dev/vda: probing initialization failed";
        h.runner.fail(line, 1, failed);
    }
    run(h.flow("master")).unwrap();
    let mut want = installed_as("master");
    want.insert(1, s("Starting installation", CLEAN_FAILED));
    assert_eq!(h.reports(), want);
    // With --skip-installation-disk-cleanup, no cleanup command runs.
    let h = harness("master");
    run(h
        .flow("master")
        .cfg(|c| c.skip_installation_disk_cleanup = true))
    .unwrap();
    assert!(!h
        .runner
        .lines()
        .iter()
        .any(|l| l.starts_with("wipefs") || l.starts_with("vgs")));
    // Partitions to keep: the cleanup's wipefs would erase the table they are read from, so
    // none of it runs, even without --skip-installation-disk-cleanup.
    for keep in [["--save-partlabel", "data*"], ["--save-partindex", "5-"]] {
        let h = harness("master");
        let args: Vec<String> = keep.iter().map(|a| a.to_string()).collect();
        run(h.flow("master").cfg(|c| c.installer_args = args)).unwrap();
        let lines = h.runner.lines();
        assert!(
            !lines
                .iter()
                .any(|l| l.starts_with("wipefs") || l.starts_with("vgs")),
            "{keep:?}: {lines:?}"
        );
        assert_eq!(h.reports(), installed_as("master"), "{keep:?}");
    }
}

#[test]
fn a_service_unreachable_for_a_while_loses_no_stage_and_keeps_the_order() {
    let h = harness("master");
    let srv = TestServer::with_app(h.svc.clone());
    srv.unavailable_for(Duration::from_millis(1500));
    let retry = ClientRetry {
        min_retries: 3,
        max_retries: 400,
        delay_base: Duration::from_millis(5),
        delay_cap: Duration::from_millis(50),
    };
    let client = ServiceClient::new(ClientConfig {
        url: srv.base_url(),
        token: h.svc.token(),
        insecure: false,
        cacert: None,
        retry,
    })
    .unwrap();
    run(h.flow("master").service(Arc::new(client))).unwrap();
    assert_eq!(h.reports(), installed_as("master"));
}

#[test]
fn ironic_stops_the_agent_instead_of_rebooting_and_a_failed_reboot_is_fatal() {
    let h = harness("master");
    h.runner.ok(
        "systemctl list-units --no-legend ironic-agent.service",
        "ironic-agent.service loaded active running Ironic agent",
    );
    run(h.flow("master")).unwrap();
    assert_eq!(
        h.reports().last().unwrap(),
        &s("Rebooting", "Ironic will reboot the node shortly")
    );
    let lines = h.runner.lines();
    assert!(
        lines.contains(&"systemctl stop agent.service".to_string()),
        "{lines:#?}"
    );
    assert!(!lines.iter().any(|l| l.starts_with("shutdown")));
    // Without ironic, a failed reboot is fatal.
    let h = harness("master");
    h.runner.fail(
        "shutdown -r +1 'Installation completed, server is going to reboot.'",
        1,
        "Failed to set wall message",
    );
    run(h.flow("master")).unwrap_err();
    failed_info(&h.reports());
}

/// What the installer says when the host's files cannot be read.
const UNREACHABLE: &str = "this is a container (/run/.containerenv exists) whose PID 1 shares its mount namespace: it was started without --pid=host";

#[test]
fn bad_input_fails_before_any_disk_is_touched() {
    type Change = fn(FlowBuilder) -> FlowBuilder;
    let cases: [(Change, &[&str]); 3] = [
        (
            |f| f.installer_args(&["--platform", "aws"]),
            &["--platform"],
        ),
        (
            |f| f.installer_args(&["--image-url", "http://m.example/a.raw.gz", "--sha256", "x"]),
            &["--sha256"],
        ),
        // E.g. the installer container started without --pid=host: the host's keyfiles and
        // live image cannot be read, and installing without them would lose its network.
        (
            |f| {
                let unreachable = Err(Unreachable(UNREACHABLE.into()));
                f.cfg(|c| c.format_disks = vec!["/dev/sdb".into()])
                    .paths(|p| p.host_root = unreachable)
            },
            &["started without --pid=host", "--privileged --pid=host"],
        ),
    ];
    for (change, needles) in cases {
        let h = harness("master");
        run(change(h.flow("master"))).unwrap_err();
        let info = failed_info(&h.reports());
        for needle in needles {
            assert!(info.contains(needle), "{info}");
        }
        let lines = h.runner.lines();
        assert!(
            lines
                .iter()
                .all(|l| !l.starts_with("wipefs") && !l.contains("/dev/sdb")),
            "no disk touched, the --format-disk one included: {lines:?}"
        );
        assert!(h.writer.calls().is_empty());
    }
}

#[test]
fn any_other_role_takes_the_master_path_under_its_own_name() {
    // Go: only bootstrap and worker are special; another role (arbiter, or one it does not
    // know) installs like a master, but is reported and names its Ignition file by its own
    // name, and skips the registry copy, which needs role master.
    for role in ["arbiter", "observer"] {
        let h = harness(role);
        run(h.flow(role).registry_marker_on_host()).unwrap();
        assert_eq!(h.reports(), installed_as(role), "{role}");
        let want = Some(ignition(&h, role));
        assert_eq!(h.writer.calls()[0].ignition, want, "{role}");
        assert!(
            h.svc.calls().iter().all(|c| !c.contains("role=")),
            "{role}: no control-plane wait"
        );
    }
}

/// The dry run of `role`: two Done masters at the service, a cluster-hosts file of a master
/// and a worker, the dry-run host commands (`runner`) and the fake reboot touching `marker`.
fn dry_run_flow(
    h: &Harness,
    role: &str,
    runner: Arc<RecordingRunner>,
    marker: &Path,
) -> FlowBuilder {
    h.svc.set_hosts(two_masters("Done"));
    let hosts = h.path("cluster-hosts.json");
    let list = json!([
        {"hostname": "master-1", "ip": "192.0.2.11", "rebootMarkerPath": h.path("m1")},
        {"hostname": "worker-1", "ip": "192.0.2.21", "rebootMarkerPath": h.path("w1")},
    ]);
    std::fs::write(&hosts, list.to_string()).unwrap();
    h.flow(role)
        .cfg(|c| c.dry_run = true)
        .cfg(|c| c.dry_run_cluster_hosts_path = Some(hosts))
        .commands(runner)
        .reboot(Arc::new(FakeReboot(marker.to_path_buf())))
}

#[test]
fn dry_run_worker_completes_with_a_cluster_hosts_file() {
    let h = harness("worker");
    let runner = Arc::new(dry_run_commands());
    let marker = h.path("w1");
    run(dry_run_flow(&h, "worker", runner.clone(), &marker)).unwrap();
    let want = installed_with("worker", vec![s("Waiting for control plane", "")]);
    assert_eq!(h.reports(), want);
    assert!(marker.exists(), "the fake reboot touched its marker");
    let lines = runner.lines();
    for absent in ["wipefs", "efibootmgr", "shutdown", "systemctl stop"] {
        assert!(
            !lines.iter().any(|l| l.starts_with(absent)),
            "{absent}: {lines:#?}"
        );
    }
}

/// What the assisted-service's test mode (`DUMMY_IGNITION=true`) serves as every host's
/// Ignition config.
const DUMMY_IGNITION: &str = "data";

/// A dry run of `role` against a service in its test mode: the dry-run host commands, the
/// fake reboot, the pretend cluster of two masters.
fn dummy_ignition_dry_run(role: &str) -> (Harness, Vec<String>) {
    let h = Harness::new(role, ARGS);
    h.svc.set_host_ignition(HOST, DUMMY_IGNITION);
    let marker = h.path("rebooted");
    let runner = Arc::new(dry_run_commands());
    run(dry_run_flow(&h, role, runner, &marker)).unwrap();
    assert!(marker.exists(), "{role}: the fake reboot");
    let events = h.writer.events();
    (h, events)
}

/// The Go installer's dry run passes through the service's test mode; ours writes the disk
/// without the Ignition config that does not parse, with a warning, and goes on to Rebooting.
#[test]
fn a_dry_run_goes_on_past_an_ignition_config_that_does_not_parse() {
    let (h, events) = dummy_ignition_dry_run("master");
    assert_eq!(h.reports(), installed_as("master"));
    assert_eq!(events, ["write -"], "written without an Ignition config");
    assert_eq!(h.writer.calls()[0].ignition, None);
    let (h, events) = dummy_ignition_dry_run("worker");
    let want = installed_with("worker", vec![s("Waiting for control plane", "")]);
    assert_eq!(h.reports(), want);
    assert_eq!(events, ["write -"]);
}

/// A real install refuses it: `Failed` naming the file, before anything is written.
#[test]
fn a_real_install_refuses_an_ignition_config_that_does_not_parse_before_writing() {
    for role in ["master", "worker"] {
        let h = Harness::new(role, ARGS);
        h.svc.set_host_ignition(HOST, DUMMY_IGNITION);
        h.svc.set_hosts(two_masters("Done"));
        run(h.flow(role)).unwrap_err();
        let info = failed_info(&h.reports());
        let path = ignition(&h, role);
        assert_eq!(
            info,
            format!(
                "{} is not an Ignition config: not valid JSON (expected value at line 1 column 1)",
                path.display()
            )
        );
        assert!(h.writer.calls().is_empty(), "{role}: nothing written");
        let reports = h.reports();
        let stages: Vec<&str> = reports.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(
            stages,
            ["Starting installation", "Installing", "Failed"],
            "{role}"
        );
    }
}

/// `ai.kexec` in dry-run mode: nothing is loaded and the fake reboot stands for the kexec one
/// (the real run: node's ai_kexec_loads_the_written_system_and_reboots_into_it_after_every_other_step).
#[test]
fn ai_kexec_in_a_dry_run_loads_nothing() {
    let h = harness("master");
    std::fs::write(h.path("cmdline"), "ai.kexec").unwrap();
    // A /boot it could load.
    let boot = h.path("boot");
    coreos_boot(&boot, Some(""));
    let loader = Arc::new(RecordingLoader::default());
    let kexec = Arc::new(FromBootDir::new(&boot, loader.clone()));
    let runner = Arc::new(dry_run_commands());
    let marker = h.path("rebooted");
    run(h
        .flow("master")
        .cfg(|c| c.dry_run = true)
        .commands(runner.clone())
        .kexec(kexec.clone())
        .reboot(Arc::new(FakeReboot(marker.clone()))))
    .unwrap();
    assert!(marker.exists(), "the fake reboot touched its marker");
    assert!(kexec.devices().is_empty() && loader.calls().is_empty());
    let lines = runner.lines();
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with("systemd-run") || l.starts_with("shutdown")),
        "{lines:#?}"
    );
}

const GIB: u64 = 1 << 30;
const COREOS_IMAGE: &str = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:d21f2ed754a66d18b0a13a59434fa4dc36abd4320e78f3be83a3e29e21e3c2f9";
const RSYNC: &str = "sh -c rsync -ah --info=progress2 /mnt/agentdata/ /mnt/root/ostree/deploy/rhcos/var/lib/iri-registry/";

/// /dev/vda as written (the Go test's layout: 100 GB, 3.5 GiB of partitions) and `data`
/// bytes of registry data in /mnt/agentdata; rsync rewrites its status line with \r from 0 %
/// to 100 %.
fn appliance_disk(runner: &RecordingRunner, data: u64) {
    runner.ok("du -sb /mnt/agentdata", &format!("{data}\t/mnt/agentdata"));
    runner.ok("lsblk --bytes --json /dev/vda", LSBLK_VDA);
    let status: String = (0..=100)
        .chain([100])
        .map(|p| {
            format!(
                "  {}M  {p}%  85.21MB/s  0:00:{:02} (xfr#{p}, to-chk=0/4137)\r",
                p * 10,
                p % 60
            )
        })
        .collect();
    runner.ok(RSYNC, &format!("sending incremental file list\n{status}\n"));
}

#[test]
fn registry_data_is_copied_after_the_write_with_its_progress() {
    let h = harness("master");
    // 20 GiB of data need 50 GiB: 42 % of the disk stays free, as in Go's test. The copy's
    // exact command sequence is checked in host::registry_copy; here, where the flow runs it.
    appliance_disk(&h.runner, 20 * GIB);
    run(h.flow("master").registry_marker_on_host()).unwrap();
    assert_eq!(
        h.reports(),
        installed_with("master", with_percents("Copying registry data to disk"))
    );
    let lines = h.runner.lines();
    let at = |line: &str| lines.iter().position(|l| l == line).expect(line);
    let (du, rsync) = (at("du -sb /mnt/agentdata"), at(RSYNC));
    // After the boot entry, before the logs.
    assert_eq!(lines[du - 1], "test -d /sys/firmware/efi", "{lines:#?}");
    assert!(lines.contains(&"growpart --free-percent=42 /dev/vda 4".to_string()));
    assert_eq!(
        lines[rsync + 1..rsync + 3],
        ["fsfreeze --freeze /mnt/root", "umount /mnt/root"]
    );
    assert!(lines[rsync + 3].starts_with("podman run"), "{lines:#?}");
    assert_eq!(h.writer.calls().len(), 1);
}

/// A failed copy fails the install under its context, before any reboot. The copy's own
/// errors (the sizes and advice, the three tries 5 s apart) are checked in
/// host::registry_copy.
#[test]
fn a_failed_registry_copy_fails_the_install() {
    let cases = [
        (
            40 * GIB,
            None,
            "copying the registry data to /dev/vda: device /dev/vda is not large enough for the \
             registry data",
        ),
        (
            GIB,
            Some("xfs_growfs /mnt/root"),
            "copying the registry data to /dev/vda: failed after 3 attempts, last error: failed \
             executing xfs_growfs [/mnt/root], Error exit status 1",
        ),
    ];
    for (data, failing, want) in cases {
        let h = harness("master");
        appliance_disk(&h.runner, data);
        if let Some(line) = failing {
            h.runner.fail(line, 1, "xfs_growfs: not a mounted XFS");
        }
        run(h.flow("master").registry_marker_on_host()).unwrap_err();
        let reports = h.reports();
        let n = reports.len();
        assert_eq!(reports[n - 2], s("Copying registry data to disk", ""));
        let info = failed_info(&reports);
        assert!(info.starts_with(want), "{info}");
        let lines = h.runner.lines();
        assert!(
            !lines
                .iter()
                .any(|l| l.starts_with("shutdown") || l == RSYNC),
            "{lines:#?}"
        );
    }
}

#[test]
fn a_day_two_worker_on_an_appliance_neither_waits_nor_copies_registry_data() {
    let h = harness("worker");
    appliance_disk(&h.runner, GIB);
    h.svc.set_cluster(json!({"kind": "AddHostsCluster"}));
    run(h.flow("worker").registry_marker_on_host()).unwrap();
    let want = installed_with("worker", vec![s("Waiting for control plane", "")]);
    assert_eq!(h.reports(), want);
    assert!(!h.runner.lines().iter().any(|l| l.starts_with("du ")));
    let calls = h.svc.calls();
    let mut polls = calls.iter().filter(|c| c.contains("/hosts"));
    assert!(polls.all(|c| !c.contains("role=")), "{calls:#?}");
}

#[test]
fn a_dry_run_reports_the_registry_copy_without_running_it() {
    let h = harness("master");
    run(h
        .flow("master")
        .cfg(|c| c.dry_run = true)
        .registry_marker_on_host())
    .unwrap();
    let copy = vec![s("Copying registry data to disk", "")];
    assert_eq!(h.reports(), installed_with("master", copy));
    assert!(!h.runner.lines().iter().any(|l| l.starts_with("du ")));
}

/// What `--coreos-image` runs on the host (Go's `WriteImageToExistingRoot` test sequence,
/// `mkdir -p` for `mkdir`), without the node-image ref, with two appended kernel arguments, a
/// deleted one and the keyfiles.
fn existing_root_sequence(ignition: &Path) -> Vec<String> {
    vec![
        "mount /sysroot -o remount,rw".into(),
        "mount /boot -o remount,rw".into(),
        "stat /ostree/repo/refs/heads/coreos/node-image".into(),
        "ostree admin stateroot-init install".into(),
        format!(
            "ostree container image deploy --stateroot install --sysroot / --authfile \
             /root/.docker/config.json --karg $ignition_firstboot --karg \
             ignition.platform.id=metal --image {COREOS_IMAGE}"
        ),
        "ostree admin finalize-staged".into(),
        "rpm-ostree kargs --os install --append nameserver=8.8.8.8 --append ip=dhcp6 \
         --delete-if-present rhgb"
            .into(),
        "ostree admin finalize-staged".into(),
        "mkdir -p /boot/coreos-firstboot-network".into(),
        "rsync -av /etc/NetworkManager/system-connections/ /boot/coreos-firstboot-network/".into(),
        "mkdir -p /boot/ignition".into(),
        format!("cp {} /boot/ignition/config.ign", ignition.display()),
        "touch /boot/ignition.firstboot".into(),
    ]
}

fn coreos_image_flow(h: &Harness) -> FlowBuilder {
    h.runner.fail(
        "stat /ostree/repo/refs/heads/coreos/node-image",
        1,
        "stat: cannot statx '/ostree/repo/refs/heads/coreos/node-image': No such file or directory",
    );
    h.flow("master")
        .cfg(|c| c.coreos_image = Some(COREOS_IMAGE.into()))
        // The image options only a disk write uses are ignored, not refused.
        .installer_args(&[
            "--image-url",
            "http://mirror.example/rhcos-metal.x86_64.raw.gz",
            "--append-karg",
            "nameserver=8.8.8.8",
            "--delete-karg",
            "rhgb",
            "--append-karg",
            "ip=dhcp6",
            "--copy-network",
        ])
        // Not copied with --coreos-image, even on an appliance.
        .registry_marker_on_host()
}

/// A master's reports without the write's percentages (the image is deployed, not streamed).
fn existing_root_reports() -> Vec<Report> {
    let mut v = installed_as("master");
    v.retain(|(_, info)| !info.ends_with('%'));
    v
}

#[test]
fn coreos_image_deploys_onto_the_running_root_and_skips_the_disk_steps() {
    for dry_run in [false, true] {
        let h = harness("master");
        run(coreos_image_flow(&h).cfg(|c| c.dry_run = dry_run)).unwrap();
        assert_eq!(h.reports(), existing_root_reports(), "dry run: {dry_run}");
        assert!(h.writer.calls().is_empty(), "no disk write");
        let lines = h.runner.lines();
        if dry_run {
            // No host command for it.
            let deploying =
                |l: &String| ["mount", "ostree", "stat"].iter().any(|p| l.starts_with(p));
            assert!(!lines.iter().any(deploying), "{lines:#?}");
            continue;
        }
        let expected = existing_root_sequence(&ignition(&h, "master"));
        assert_eq!(lines[..expected.len()], expected[..], "{lines:#?}");
        // Then only the logs and the reboot: no disk cleanup, boot entry or registry copy.
        let rest = &lines[expected.len()..];
        assert!(rest[0].starts_with("podman run"), "{rest:#?}");
        assert_eq!(
            rest[1..],
            [
                "systemctl list-units --no-legend ironic-agent.service".to_string(),
                "shutdown -r +1 'Installation completed, server is going to reboot.'".to_string(),
            ]
        );
    }
}

#[test]
fn a_coreos_image_deploy_failing_three_times_fails_the_install() {
    let h = harness("master");
    let flow = coreos_image_flow(&h);
    let deploy = existing_root_sequence(&ignition(&h, "master"))[4].clone();
    h.runner
        .fail(&deploy, 1, "error: Error: pulling image: unauthorized");
    run(flow).unwrap_err();
    let info = failed_info(&h.reports());
    assert!(
        info.starts_with(&format!(
            "failed after 3 attempts, last error: deploying {COREOS_IMAGE} with ostree: failed executing ostree [container image deploy"
        )),
        "{info}"
    );
    assert!(
        info.ends_with("LastOutput \"Error: pulling image: unauthorized\""),
        "{info}"
    );
    assert_eq!(h.clock.sleeps(), vec![Duration::from_secs(1); 2]);
    let lines = h.runner.lines();
    assert_eq!(lines.iter().filter(|l| **l == deploy).count(), 3);
    assert!(!lines.iter().any(|l| l.starts_with("shutdown")));
}

/// The host as the flow sees it through `sys` and `dev` below `h`'s directory: the install
/// disk `vda` reached over iSCSI session 1, and another disk `sdb` whose partition 3 (the
/// kernel lists it) holds an ext4 filesystem labelled `boot`, left by an earlier install.
fn iscsi_disk_and_a_stale_boot(h: &Harness) {
    let sys = h.path("sys");
    let session = sys.join("devices/platform/host2/session1");
    std::fs::create_dir_all(session.join("iscsi_session/session1")).unwrap();
    let vda = session.join("target2:0:0/2:0:0:0/block/vda");
    std::fs::create_dir_all(&vda).unwrap();
    std::fs::create_dir_all(sys.join("block/sdb/sdb3")).unwrap();
    std::os::unix::fs::symlink(&vda, sys.join("block/vda")).unwrap();
    for (k, v) in [("partition", "3"), ("start", "2048"), ("size", "4096")] {
        std::fs::write(sys.join("block/sdb/sdb3").join(k), v).unwrap();
    }
    let mut disk = vec![0u8; 4 << 20];
    let ext4 = (1 << 20) + 1024;
    disk[ext4 + 0x38..ext4 + 0x3a].copy_from_slice(&[0x53, 0xef]);
    disk[ext4 + 0x78..ext4 + 0x7c].copy_from_slice(b"boot");
    std::fs::create_dir_all(h.path("dev")).unwrap();
    std::fs::write(h.path("dev/sdb"), disk).unwrap();
}

/// After the write, what would stop the first boot reaches the service: the keyfiles copied
/// (`-n`) onto an iSCSI disk, and another disk's `boot` filesystem, each as the info of
/// `Writing image to disk`, naming the disk and what to do, and again in the info of the stage
/// the host then waits in (`Waiting for control plane`, `Rebooting`).
#[test]
fn first_boot_hazards_are_reported_after_the_write_and_kept_until_the_reboot() {
    let h = harness("master");
    iscsi_disk_and_a_stale_boot(&h);
    run(h.flow("master")).unwrap();
    let reports = h.reports();
    let after_write: Vec<&Report> = reports
        .iter()
        .skip_while(|r| r.1 != "100%")
        .skip(1)
        .collect();
    assert_eq!(after_write.len(), 3, "{reports:#?}");
    let (iscsi, boot) = (&after_write[0].1, &after_write[1].1);
    assert_eq!(after_write[0].0, "Writing image to disk");
    assert!(
        iscsi.starts_with("--copy-network onto /dev/vda, an iSCSI disk (vda is on iSCSI session1)"),
        "{iscsi}"
    );
    assert!(iscsi.contains("first boot hangs") && iscsi.contains("drop --copy-network"));
    assert_eq!(after_write[1].0, "Writing image to disk");
    let sdb = h.path("dev/sdb").display().to_string();
    assert!(
        boot.contains(&format!("labelled \"boot\": {sdb} partition 3. ")),
        "{boot}"
    );
    assert!(boot.contains("Before the host reboots"), "{boot}");
    assert!(
        boot.contains(&format!(
            "wipefs -a {sdb}3 (or, to keep its data, e2label {sdb}3 old-boot)"
        )),
        "{boot}"
    );
    assert_eq!(after_write[2], &s("Rebooting", &format!("{iscsi}. {boot}")));

    // A worker keeps them in its wait for the control plane too; the cmdline's rd.iscsi.*
    // says iSCSI as well.
    let h = harness("worker");
    iscsi_disk_and_a_stale_boot(&h);
    std::fs::write(h.path("cmdline"), "ro rd.iscsi.firmware=1\n").unwrap();
    h.svc.set_hosts_script(|_| two_masters("Done"));
    run(h.flow("worker")).unwrap();
    let reports = h.reports();
    let wait = reports.iter().find(|r| r.0 == "Waiting for control plane");
    let wait = &wait.expect("the wait").1;
    assert!(
        wait.contains("(vda is on iSCSI session1; kernel arguments rd.iscsi.firmware=1)"),
        "{wait}"
    );
    assert!(wait.contains("partition 3"), "{wait}");
    assert_eq!(reports.last().unwrap(), &s("Rebooting", wait));
}
