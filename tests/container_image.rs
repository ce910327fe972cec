//! The container image (`make image`) run by podman with the agent's exact `podman run` line
//! (tests/common/podman.rs: its options, the host the test makes), against the fake
//! assisted-service on 127.0.0.1: installs in dry run onto loop devices, a stop mid-write, the
//! controller as its Job starts it, and the lines that lack an option the installer needs.
//! The tests may add `--env` options and the dry-run flags; they never drop or change the
//! agent's. Root and podman (skipped with one line without podman; CI sets AI_REQUIRE_PODMAN=1).

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;

use std::path::Path;
use std::time::{Duration, Instant};

use common::fake_service::{host_json, FakeService};
use common::flow_builder::s;
use common::http_server::{Fault, Route, TestServer};
use common::master_run::{assert_master_stages, CLUSTER, IGNITION, INFRA};
use common::podman::{Host, Podman, NAME};
use common::root::{assert_empty_gpt, sgdisk_verify, text, Ext4, LoopDev};
use common::tls_server::Pki;
use coreos_image::{cached_image_set, ImageSet, ImageSpec, BOOT_LABEL};
use serde_json::json;

const MIB: u64 = 1 << 20;

/// One install's pieces: the service (over HTTPS, trusted through the host's /etc/pki only),
/// the image server, the host, the disk and a directory under /tmp (which the agent mounts).
struct Install {
    podman: Podman,
    svc: FakeService,
    service: TestServer,
    images: TestServer,
    set: ImageSet,
    host: Host,
    dev: LoopDev,
    tmp: tempfile::TempDir,
    id: String,
}

impl Install {
    fn new(test: &str, role: &str) -> Option<Install> {
        let podman = Podman::available(test)?;
        let set = cached_image_set(&ImageSpec::test(512)).unwrap();
        let tmp = tempfile::Builder::new()
            .prefix("container-test")
            .tempdir_in("/tmp")
            .unwrap();
        let pki = Pki::new(tmp.path(), "service");
        let svc = FakeService::new();
        let service = TestServer::with_app_tls(svc.clone(), &pki.cert, &pki.key);
        let id = uuid::Uuid::new_v4().to_string();
        svc.set_host_role(&id, role);
        svc.set_host_ignition(&id, IGNITION);
        let images = TestServer::start();
        images.route("/rhcos.raw.gz", Route::file(&set.gz.path));
        let dev = LoopDev::new(set.raw.size + 64 * MIB, 512);
        Some(Install {
            podman,
            svc,
            service,
            images,
            host: Host::new(Some(&pki.ca_pem)),
            dev,
            set,
            tmp,
            id,
        })
    }

    fn marker(&self) -> String {
        self.tmp.path().join("rebooted").display().to_string()
    }

    /// The installer's flags as the service sends them for `role` (`extra` after them), then
    /// the dry-run ones.
    fn flags(&self, role: &str, extra: &[&str]) -> Vec<String> {
        let installer_args = json!([
            "--image-url",
            self.images.url("/rhcos.raw.gz"),
            "--append-karg",
            "ip=52-54-00-6b-3c-01:dhcp"
        ]);
        let mut flags: Vec<String> = [
            "--role",
            role,
            "--infra-env-id",
            INFRA,
            "--cluster-id",
            CLUSTER,
            "--host-id",
            &self.id,
            "--boot-device",
            &self.dev.path.display().to_string(),
            "--url",
            &self.service.base_url(),
            "--controller-image",
            "quay.io/example/controller:1",
            "--agent-image",
            "quay.io/example/agent:1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if role != "worker" {
            flags.extend(["--control-plane-count".into(), "3".into()]);
        }
        flags.extend(
            [
                "--mco-image",
                "quay.io/example/mco:1",
                "--must-gather-image",
                "quay.io/example/must-gather:1",
                "--openshift-version",
                "4.22.9",
                "--installer-args",
                &installer_args.to_string(),
                "--enable-skip-mco-reboot",
                "--notify-num-reboots",
            ]
            .map(String::from),
        );
        flags.extend(extra.iter().map(|s| s.to_string()));
        flags.extend([
            "--dry-run".into(),
            "--fake-reboot-marker-path".into(),
            self.marker(),
        ]);
        flags
    }

    /// The agent's line without `dropped`, run to its end.
    fn run(&self, role: &str, dropped: Option<&str>, extra: &[&str]) -> std::process::Output {
        self.podman
            .agent_run(
                &self.host,
                dropped,
                &self.flags(role, extra),
                &self.svc.token(),
            )
            .output()
            .unwrap()
    }

    /// Everything the container printed, the host's log file and journal: none may hold the
    /// token.
    fn assert_no_token(&self, out: &std::process::Output) {
        let log = std::fs::read_to_string(self.host.var_log().join("assisted-installer.log"))
            .expect("the installer's log in the host's /var/log");
        let journal = self.host.journal_text();
        assert!(journal.contains("TAG=installer"), "the host's journal");
        for (what, text) in [("output", text(out)), ("log", log), ("journal", journal)] {
            assert!(
                !text.contains(&self.svc.token()),
                "the token is in the {what}"
            );
        }
    }

    /// A dry run that ended well: reported as `role` (installing as `installing_as`), through
    /// `stages`, then `Rebooting`; the reboot marker, the disk and no token anywhere.
    fn assert_installed(
        &self,
        out: &std::process::Output,
        (role, installing_as): (&str, &str),
        stages: &[(String, String)],
    ) {
        assert!(out.status.success(), "{}", text(out));
        let reports = self.svc.progress_reports(&self.id);
        let first = [
            s("Starting installation", role),
            s("Installing", installing_as),
        ];
        assert_eq!(reports[..2], first, "{reports:?}");
        for stage in stages {
            assert!(reports.contains(stage), "{stage:?}: {reports:?}");
        }
        assert_eq!(reports.last(), Some(&s("Rebooting", "")), "{reports:?}");
        assert!(
            Path::new(&self.marker()).exists(),
            "the dry-run reboot marker"
        );
        self.assert_disk(IGNITION);
        self.assert_no_token(out);
    }

    /// The disk holds the image with the served Ignition and the service's karg.
    fn assert_disk(&self, ignition: &str) {
        sgdisk_verify(&self.dev.path);
        let boot = Ext4::on(&self.dev.path, 512, BOOT_LABEL);
        assert_eq!(boot.text("/ignition/config.ign"), ignition);
        let options = boot.bls_options("/loader/entries/ostree-1-rhcos.conf");
        assert!(options.ends_with(" ip=52-54-00-6b-3c-01:dhcp"), "{options}");
        // The root partition is the image's, byte for byte.
        let root = self.set.spec.partitions()[3].clone();
        let raw = std::fs::read(&self.set.raw.path).unwrap();
        let want = &raw[root.offset as usize..][..(4 * MIB) as usize];
        assert!(
            self.dev.read(root.offset, want.len()) == want,
            "the root partition"
        );
    }
}

#[test]
fn a_master_installs_from_the_agents_line() {
    let Some(i) = Install::new("a_master_installs_from_the_agents_line", "master") else {
        return;
    };
    let out = i.run("master", None, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_master_stages(&i.svc.progress_reports(&i.id), false);
    // Through `-v /tmp:/tmp` and `-v /opt:/opt`.
    assert!(Path::new(&i.marker()).exists(), "the dry-run reboot marker");
    let ign = i
        .host
        .opt()
        .join(format!("install-dir/master-{}.ign", i.id));
    assert_eq!(std::fs::read_to_string(ign).unwrap(), IGNITION);
    i.assert_disk(IGNITION);
    i.assert_no_token(&out);
}

#[test]
fn a_worker_installs_from_the_agents_line() {
    let Some(i) = Install::new("a_worker_installs_from_the_agents_line", "worker") else {
        return;
    };
    let masters = [
        "8c4d5e6f-7081-4b92-8d1e-2f3a4b5c6d7e",
        "9d5e6f70-8192-4ca3-9e2f-3a4b5c6d7e8f",
    ];
    i.svc.set_hosts(
        masters
            .map(|id| host_json(id, INFRA, "master", Some("Done")))
            .to_vec(),
    );
    let hosts = i.tmp.path().join("cluster-hosts.json");
    let list = json!([
        {"hostname": "master-1", "ip": "192.0.2.11", "rebootMarkerPath": i.tmp.path().join("m1")},
        {"hostname": "worker-1", "ip": "192.0.2.21", "rebootMarkerPath": i.marker()},
    ]);
    std::fs::write(&hosts, list.to_string()).unwrap();
    let hosts = hosts.display().to_string();
    let out = i.run("worker", None, &["--dry-run-cluster-hosts-path", &hosts]);
    i.assert_installed(
        &out,
        ("worker", "worker"),
        &[s("Waiting for control plane", "")],
    );
}

#[test]
fn a_bootstrap_installs_from_the_agents_line_with_the_hosts_opt() {
    let test = "a_bootstrap_installs_from_the_agents_line_with_the_hosts_opt";
    let Some(i) = Install::new(test, "bootstrap") else {
        return;
    };
    // The service's view: this host and three masters, two of which rebooted (dry run's
    // pretend cluster: their markers exist).
    let masters = [
        (
            "a1b2c3d4-0000-4000-8000-000000000001",
            "master-1",
            "192.0.2.11",
            true,
        ),
        (
            "a1b2c3d4-0000-4000-8000-000000000002",
            "master-2",
            "192.0.2.12",
            true,
        ),
        (
            "a1b2c3d4-0000-4000-8000-000000000003",
            "master-3",
            "192.0.2.13",
            false,
        ),
    ];
    let host = |id: &str, role: &str, name: &str, ip: &str| {
        let mut h = host_json(id, INFRA, role, None);
        h["requested_hostname"] = json!(name);
        let inventory =
            json!({"interfaces": [{"name": "eno1", "ipv4_addresses": [format!("{ip}/24")]}]});
        h["inventory"] = json!(inventory.to_string());
        h
    };
    let mut hosts = vec![host(&i.id, "bootstrap", "master-0", "192.0.2.10")];
    let mut cluster_hosts = Vec::new();
    for (id, name, ip, rebooted) in masters {
        i.svc.set_host_role(id, "master");
        hosts.push(host(id, "master", name, ip));
        let marker = i.tmp.path().join(format!("{name}.rebooted"));
        if rebooted {
            std::fs::write(&marker, "").unwrap();
        }
        cluster_hosts.push(json!({"hostname": name, "ip": ip, "rebootMarkerPath": marker}));
    }
    i.svc.set_hosts(hosts);
    i.svc
        .set_cluster(json!({"platform": {"type": "baremetal"}}));
    let bootstrap_ign = r#"{"ignition":{"version":"3.2.0"},"storage":{}}"#;
    i.svc.set_cluster_file("bootstrap.ign", bootstrap_ign);
    let hosts_file = i.tmp.path().join("cluster-hosts.json");
    std::fs::write(&hosts_file, json!(cluster_hosts).to_string()).unwrap();
    // bootkube's done marker, in the host's /opt: the container sees it only through -v /opt.
    std::fs::create_dir_all(i.host.opt().join("openshift")).unwrap();
    std::fs::write(i.host.opt().join("openshift/.bootkube.done"), "").unwrap();
    let hosts_file = hosts_file.display().to_string();
    let out = i.run(
        "bootstrap",
        None,
        &["--dry-run-cluster-hosts-path", &hosts_file],
    );
    i.assert_installed(
        &out,
        ("bootstrap", "master"),
        &[
            s("Waiting for bootkube", ""),
            s(
                "Waiting for controller",
                "waiting for controller pod ready event",
            ),
        ],
    );
    // The cluster's file, downloaded into the host's /opt/install-dir.
    let downloaded = i.host.opt().join("install-dir/bootstrap.ign");
    assert_eq!(std::fs::read_to_string(downloaded).unwrap(), bootstrap_ign);
}

#[test]
fn podman_stop_mid_write_leaves_an_empty_gpt_and_exits_143() {
    let test = "podman_stop_mid_write_leaves_an_empty_gpt_and_exits_143";
    let Some(i) = Install::new(test, "master") else {
        return;
    };
    // About 8 s of download: long enough to be stopped in the middle.
    let slow = Route::file(&i.set.gz.path).with_sticky(vec![Fault::Throttle(i.set.gz.size / 8)]);
    i.images.route("/rhcos.raw.gz", slow);
    let mut run = i
        .podman
        .agent_run(&i.host, None, &i.flags("master", &[]), &i.svc.token());
    let mut child = run
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let writing = |r: &(String, String)| r.0 == "Writing image to disk" && !r.1.is_empty();
    let started = Instant::now();
    while !i.svc.progress_reports(&i.id).iter().any(writing) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no write progress"
        );
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            panic!("the container ended before the write: {}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let stop = i.podman.stop_in(&child, NAME);
    // `podman stop` runs in the host's PID namespace, which ends (its members killed) as soon
    // as the container has ended and `podman run`, its PID 1, exits: SIGKILL may be how the
    // stop itself ends, once its work is done.
    use std::os::unix::process::ExitStatusExt;
    let stop_ended = stop.status.success() || stop.status.signal() == Some(9);
    assert!(stop_ended, "{}", text(&stop));
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", text(&out));
    assert_empty_gpt(&i.dev.path, 512);
    let reports = i.svc.progress_reports(&i.id);
    let last = reports.last().unwrap();
    assert_eq!(last.0, "Failed", "{reports:?}");
    assert!(!Path::new(&i.marker()).exists(), "no reboot");
}

#[test]
fn a_line_without_an_option_the_installer_needs_fails_naming_it() {
    let test = "a_line_without_an_option_the_installer_needs_fails_naming_it";
    for (dropped, named) in [
        ("--privileged", "started without --privileged"),
        ("--pid=host", "started without --pid=host"),
        ("-v /dev:/dev:rw", "started without -v /dev:/dev"),
    ] {
        // A host of its own each time: the service takes one `Failed` from a host.
        let Some(i) = Install::new(test, "master") else {
            return;
        };
        // Data that any write would change.
        i.dev.fill(8 * MIB, 0xa5);
        let before = i.dev.sha256();
        let out = i.run("master", Some(dropped), &[]);
        assert!(!out.status.success(), "{dropped}: {}", text(&out));
        let reports = i.svc.progress_reports(&i.id);
        assert_eq!(reports.len(), 1, "{dropped}: {reports:?}\n{}", text(&out));
        let (stage, reason) = &reports[0];
        assert_eq!(stage, "Failed", "{dropped}");
        assert!(reason.contains(named), "{dropped}: {reason}");
        // How the agent starts it.
        assert!(
            reason.contains("podman run --privileged --pid=host --net=host -v /dev:/dev:rw"),
            "{dropped}: {reason}"
        );
        assert_eq!(i.dev.sha256(), before, "{dropped}: the disk was touched");
    }
}

#[test]
fn the_controller_starts_as_its_job_starts_it_and_calls_the_service() {
    let test = "the_controller_starts_as_its_job_starts_it_and_calls_the_service";
    let Some(podman) = Podman::available(test) else {
        return;
    };
    let svc = FakeService::new();
    let service = TestServer::with_app(svc.clone());
    let dir = tempfile::Builder::new()
        .prefix("controller")
        .tempdir_in("/tmp")
        .unwrap();
    let hosts = dir.path().join("cluster-hosts.json");
    let marker = dir.path().join("rebooted");
    std::fs::write(&hosts, "[]").unwrap();
    std::fs::write(&marker, "").unwrap();
    // The Job's pod: the image's entrypoint without arguments, on the host network, with the
    // ConfigMap's settings and the token in its environment (the token file is absent).
    let name = "assisted-installer-controller";
    podman.remove(name);
    let env = [
        ("CLUSTER_ID", CLUSTER.to_string()),
        ("INVENTORY_URL", service.base_url()),
        ("OPENSHIFT_VERSION", "4.22.9".into()),
        ("NOTIFY_NUM_REBOOTS", "true".into()),
        ("DRY_ENABLE", "true".into()),
        ("DRY_CLUSTER_HOSTS_PATH", hosts.display().to_string()),
        ("DRY_FAKE_REBOOT_MARKER_PATH", marker.display().to_string()),
        ("PULL_SECRET_TOKEN", svc.token()),
    ];
    let mut run = podman.command();
    run.args(["run", "--detach", "--name", name, "--net=host", "-v"])
        .arg(format!("{0}:{0}", dir.path().display()));
    for (k, v) in &env {
        run.arg(format!("--env={k}={v}"));
    }
    let started = run.arg(&podman.image).output().unwrap();
    assert!(started.status.success(), "{}", text(&started));
    let since = Instant::now();
    while service.requests().is_empty() && since.elapsed() < Duration::from_secs(150) {
        std::thread::sleep(Duration::from_millis(200));
    }
    let logs = podman.command().args(["logs", name]).output().unwrap();
    podman.remove(name);
    let requests = service.requests();
    let first = (requests.first())
        .unwrap_or_else(|| panic!("no call reached the service: {}", text(&logs)));
    assert!(first.path.contains(CLUSTER), "{first:?}");
    assert!(
        text(&logs).contains("Start running the assisted-installer-controller"),
        "{}",
        text(&logs)
    );
    assert!(
        !text(&logs).contains(&svc.token()),
        "the token is in the controller's output"
    );
}
