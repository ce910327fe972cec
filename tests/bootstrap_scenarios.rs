//! The bootstrap and single-node flows against the fakes of the assisted-service and
//! of the Kubernetes API, with recorded host commands and a scripted disk writer: the Go
//! installer test suite's bootstrap and single-node scenarios.

mod common;

use assisted_installer::commands::install::dry_run_commands;
use assisted_installer::flow::testing::{FlowBuilder, CLUSTER, HOST, INFRA};
use assisted_installer::host::reboot::FakeReboot;
use assisted_installer::kube::testing::FakeCluster;
use assisted_installer::kube::{ClusterApi, Condition, NewEvent, Node, NodeAddress, Pod, Taint};
use assisted_installer::openshift::{CURRENT_CONFIG_ANNOTATION, UNINITIALIZED_TAINT};
use assisted_installer::service::client::LogsUpload;
use common::flow_builder::{failed_info, run, s, with_percents, Harness, Report, LSBLK_VDA};
use common::untar_gz;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MASTER1: &str = "8c4d5e6f-7081-4b92-8d1e-2f3a4b5c6d7e";
const MASTER2: &str = "9d5e6f70-8192-4ca3-9e2f-3a4b5c6d7e8f";
const ARBITER: &str = "ae6f7081-92a3-4db4-8f3a-4b5c6d7e8f90";
const MCO: &str = "quay.io/openshift/mco@sha256:1234";
const CONTROLLER_POD: &str = "assisted-installer-controller-x7k2p";
const CONTROLLER_LOG: &str = "controller started\ncontroller ready\n";
const PUB_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBootstrapKey root@bootstrap";

/// Reports from (stage, info) pairs.
fn reports(pairs: &[(&str, &str)]) -> Vec<Report> {
    pairs.iter().map(|(stage, info)| s(stage, info)).collect()
}

fn pull_secret_ign() -> String {
    // {"auths":{"quay.io":{"auth":"dXNlcjpwYXNz"}}} as a base64 data URL.
    json!({
        "ignition": {"version": "3.2.0"},
        "storage": {"files": [
            {"path": "/etc/motd", "contents": {"source": "data:,hello"}},
            {"path": "/root/.docker/config.json", "mode": 384, "contents": {
                "source": "data:;base64,eyJhdXRocyI6eyJxdWF5LmlvIjp7ImF1dGgiOiJkWE5sY2pwd1lYTnoifX19"
            }}
        ]}
    })
    .to_string()
}

fn host_ign(hostname: &str) -> String {
    json!({
        "ignition": {"version": "3.4.0", "config": {"merge": [{"source": "https://api-int.example:22623/config/master"}]}},
        "storage": {"files": [{"path": "/etc/hostname", "mode": 420, "overwrite": true,
            "contents": {"source": format!("data:,{hostname}")}}]}
    })
    .to_string()
}

fn host(id: &str, role: &str, name: &str, ip: &str) -> serde_json::Value {
    let mut h = common::fake_service::host_json(id, INFRA, role, None);
    h["requested_hostname"] = json!(name);
    let inventory =
        json!({"interfaces": [{"name": "eno1", "ipv4_addresses": [format!("{ip}/24")]}]});
    h["inventory"] = json!(inventory.to_string());
    h
}

/// The cluster's `install-config` (in `kube-system/cluster-config-v1`).
fn set_install_config(kube: &FakeCluster, yaml: &str) {
    kube.set_config_map(
        "kube-system",
        "cluster-config-v1",
        &[("install-config", yaml)],
    );
}

/// The common harness, and the in-memory Kubernetes API of the cluster the bootstrap forms.
struct Bootstrap {
    h: Harness,
    kube: FakeCluster,
}

impl std::ops::Deref for Bootstrap {
    type Target = Harness;
    fn deref(&self) -> &Harness {
        &self.h
    }
}

impl Bootstrap {
    /// The host's `hostname` is `localhost`: the bootstrap replaces it with a random one.
    fn new(service_role: &str) -> Bootstrap {
        let h = Harness::new(
            service_role,
            &["--image-url", "http://mirror.example/rhcos.raw.gz"],
        );
        for id in [MASTER1, MASTER2, ARBITER] {
            h.svc.set_host_role(id, "master");
        }
        h.svc.set_host_ignition(HOST, host_ign("master-0"));
        h.svc.set_cluster_file("bootstrap.ign", pull_secret_ign());
        h.svc
            .set_cluster(json!({"platform": {"type": "baremetal"}}));
        h.svc.set_hosts(vec![
            host(HOST, "bootstrap", "master-0", "192.0.2.10"),
            host(MASTER1, "master", "master-1", "192.0.2.11"),
            host(MASTER2, "master", "master-2", "192.0.2.12"),
        ]);
        let kube = FakeCluster::new();
        set_install_config(&kube, "controlPlane:\n  replicas: 3\n");
        kube.set_node(node("master-1", "master", "192.0.2.11"));
        kube.set_node(node("master-2", "master", "192.0.2.12"));
        kube.add_machine_config("rendered-master-1");
        add_ready_event(&kube);
        kube.add_pod(controller_pod(), CONTROLLER_LOG);
        // What bootkube leaves; the flow gets the in-memory API through its kubeconfig.
        std::fs::create_dir_all(h.path("openshift/auth")).unwrap();
        std::fs::write(h.path("openshift/auth/kubeconfig"), "").unwrap();
        std::fs::write(h.path("openshift/.bootkube.done"), "").unwrap();
        h.runner.ok("cat /root/.ssh/id_rsa.pub", PUB_KEY);
        h.runner.ok("hostname", "localhost");
        h.runner
            .ok("systemctl is-active progress.service", "inactive");
        h.runner.ok("cat /etc/resolv.conf", "nameserver 192.0.2.53");
        Bootstrap { h, kube }
    }

    /// The flow of the host, with the in-memory API behind the kubeconfig.
    fn flow(&self, role: &str, control_plane_count: i64) -> FlowBuilder {
        self.builder(role)
            .kube(Arc::new(self.kube.clone()))
            .cfg(|c| c.control_plane_count = control_plane_count)
    }

    /// What every flow of these scenarios shares.
    fn builder(&self, role: &str) -> FlowBuilder {
        self.h.flow(role).cfg(|c| c.mco_image = MCO.into())
    }

    /// Before each call to the in-memory API, `change` may change the cluster, given the method
    /// called and the fake time since the first call. Returns the fake times of the log reads
    /// since the first call.
    fn on_the_clock(
        &self,
        change: impl Fn(&FakeCluster, &str, Duration) + Send + Sync + 'static,
    ) -> Arc<Mutex<Vec<Duration>>> {
        let log_reads_at = Arc::new(Mutex::new(Vec::new()));
        let (now, reads) = (self.clock.clone(), log_reads_at.clone());
        let started = Mutex::new(None);
        self.kube.before_each_call(move |cluster, method| {
            let now = now.elapsed();
            let since_start = now - *started.lock().unwrap().get_or_insert(now);
            change(cluster, method, since_start);
            if method == "pod_log" {
                reads.lock().unwrap().push(since_start);
            }
        });
        log_reads_at
    }
}

/// A Ready node of `role` at `ip`, on the rendered config `rendered-master-1`.
fn node(name: &str, role: &str, ip: &str) -> Node {
    let rendered = "rendered-master-1".to_string();
    let configs = [
        CURRENT_CONFIG_ANNOTATION,
        "machineconfiguration.openshift.io/desiredConfig",
    ];
    let ready = Condition {
        type_: "Ready".into(),
        status: "True".into(),
        ..Condition::default()
    };
    let (type_, address) = ("InternalIP".into(), ip.into());
    Node {
        name: name.into(),
        labels: [(format!("node-role.kubernetes.io/{role}"), String::new())].into(),
        annotations: configs.map(|k| (k.to_string(), rendered.clone())).into(),
        conditions: vec![ready],
        addresses: vec![NodeAddress { type_, address }],
        ..Node::default()
    }
}

fn add_ready_event(kube: &FakeCluster) {
    let name = "AssistedControllerIsReady".to_string();
    let event = NewEvent {
        name: name.clone(),
        reason: name.clone(),
        type_: "Normal".into(),
        message: String::new(),
        involved_namespace: "assisted-installer".into(),
        involved_name: name,
        time: std::time::UNIX_EPOCH,
    };
    kube.create_event("assisted-installer", &event).unwrap();
}

/// The controller Job's Running pod.
fn controller_pod() -> Pod {
    let job = (
        "job-name".to_string(),
        "assisted-installer-controller".to_string(),
    );
    Pod {
        namespace: "assisted-installer".into(),
        name: CONTROLLER_POD.into(),
        phase: "Running".into(),
        labels: [job].into(),
    }
}

/// The controller log of each upload the service accepted, in order (what an upload holds
/// besides: controller_logs' the_running_pods_last_hour_is_uploaded_or_a_line_saying_why_not).
fn controller_logs_uploaded(h: &Bootstrap) -> Vec<String> {
    let log = |u: &LogsUpload| String::from_utf8(untar_gz(&u.data).remove(0).1).unwrap();
    h.svc.state().uploads.iter().map(log).collect()
}

/// The machine-config-daemon run that lays the bootstrap Ignition down.
fn mco_line(h: &Harness) -> String {
    format!(
        "podman run --net host --pid=host --volume /:/rootfs:rw --volume /usr/bin/rpm-ostree:/usr/bin/rpm-ostree \
         --privileged --entrypoint /usr/bin/machine-config-daemon {MCO} start --node-name localhost --root-mount /rootfs \
         --once-from {} --skip-reboot",
        h.path("install-dir/bootstrap.ign").display()
    )
}

fn bootstrap_sequence() -> Vec<Report> {
    let mut v = reports(&[
        ("Starting installation", "bootstrap"),
        ("Installing", "master"),
    ]);
    v.extend(with_percents("Writing image to disk"));
    let (control_plane, bootkube) = ("Waiting for control plane", "Waiting for bootkube");
    v.extend(reports(&[
        (control_plane, "Waiting for bootstrap node preparation"),
        (
            control_plane,
            "Waiting for masters to join bootstrap control plane",
        ),
        (bootkube, ""),
        (bootkube, "waiting for ETCD bootstrap to be complete"),
        (
            "Waiting for controller",
            "waiting for controller pod ready event",
        ),
        ("Rebooting", ""),
    ]));
    v
}

#[test]
fn bootstrap_happy_path() {
    let h = Bootstrap::new("bootstrap");
    run(h.flow("bootstrap", 3)).unwrap();
    assert_eq!(h.reports(), bootstrap_sequence());
    assert_eq!(h.svc.progress_reports(MASTER1), vec![s("Joined", "")]);
    assert_eq!(h.svc.progress_reports(MASTER2), vec![s("Joined", "")]);
    let lines = h.runner.lines();
    assert!(lines.contains(&mco_line(&h)), "{lines:#?}");
    for want in [
        "ssh-keygen -q -f /root/.ssh/id_rsa -N ",
        "systemctl daemon-reload",
        "systemctl restart NetworkManager.service",
        "systemctl start bootkube.service",
        "systemctl start approve-csr.service",
        "systemctl start progress.service",
        "mv",
        "bash -c hostnamectl set-hostname random-hostname-",
    ] {
        let ran = lines.iter().any(|l| l.starts_with(want));
        assert!(ran, "{want}: {lines:#?}");
    }
    let order = |p: &str| lines.iter().position(|l| l.starts_with(p)).unwrap();
    assert!(order("systemctl start bootkube") < order("systemctl start approve-csr"));
    assert!(order("systemctl start approve-csr") < order("systemctl start progress"));
    let logs_sender = |l: &String| l.contains("logs_sender") && l.contains("-bootstrap=true");
    assert!(lines.iter().any(logs_sender));
    assert_eq!(
        lines.last().unwrap(),
        "shutdown -r +1 'Installation completed, server is going to reboot.'"
    );
    // What the bootstrap leaves for bootkube.
    let openshift = h.path("openshift");
    let ssh = "openshift/99_openshift-machineconfig_99-assisted-installer-master-ssh.yaml";
    let manifest = std::fs::read_to_string(openshift.join(ssh)).unwrap();
    assert!(manifest.contains(PUB_KEY), "{manifest}");
    let manifests = "nm sa role role-binding network-policy cm secret pod";
    for manifest in manifests.split(' ') {
        let name = format!("manifests/assisted-installer-controller-{manifest}.yaml");
        assert!(openshift.join(&name).exists(), "{name}");
    }
    // The controller's logs, once it is ready.
    assert_eq!(controller_logs_uploaded(&h), [CONTROLLER_LOG]);
    let pull_secret = std::fs::read_to_string(h.path("extracted_from_ignition.json"));
    assert_eq!(
        pull_secret.unwrap(),
        r#"{"auths":{"quay.io":{"auth":"dXNlcjpwYXNz"}}}"#
    );
    // The early write: streamed at the start, finished with master-<host>.ign, never rewritten.
    let events = h.writer.events();
    assert_eq!(events[0], "stream /dev/vda");
    assert!(events.contains(&"streamed".to_string()));
    let ignition = h.path(&format!("install-dir/master-{HOST}.ign"));
    let finish = format!("finish {}", ignition.display());
    assert_eq!(events.last(), Some(&finish));
    assert!(!events.iter().any(|e| e.starts_with("write")), "{events:?}");
}

#[test]
fn bootstrap_with_an_arbiter_reports_it_joined() {
    let h = Bootstrap::new("bootstrap");
    set_install_config(
        &h.kube,
        "controlPlane:\n  replicas: 2\narbiter:\n  replicas: 1\n",
    );
    h.kube.set_node(node("arbiter-0", "arbiter", "192.0.2.13"));
    h.svc.set_hosts(vec![
        host(MASTER1, "master", "master-1", "192.0.2.11"),
        host(ARBITER, "arbiter", "arbiter-0", "192.0.2.13"),
    ]);
    run(h.flow("bootstrap", 2)).unwrap();
    assert_eq!(h.reports(), bootstrap_sequence());
    assert_eq!(h.svc.progress_reports(ARBITER), vec![s("Joined", "")]);
    assert_eq!(h.svc.progress_reports(MASTER1), vec![s("Joined", "")]);
}

/// Go tries the extraction three times: once failed, it is retried; failed thrice, the install
/// fails and the early-written disk is reset, not left half-installed.
#[test]
fn mco_extraction_is_tried_three_times() {
    for then_ok in [true, false] {
        let h = Bootstrap::new("bootstrap");
        let line = mco_line(&h);
        h.runner.fail(&line, 1, "Error: extract failed");
        if then_ok {
            h.runner.ok(&line, "");
        }
        let result = run(h.flow("bootstrap", 3));
        let runs = h.runner.lines().iter().filter(|l| **l == line).count();
        if then_ok {
            result.unwrap();
            assert_eq!(runs, 2);
            continue;
        }
        result.unwrap_err();
        let info = failed_info(&h.reports());
        assert!(info.contains("extract failed"), "{info}");
        assert_eq!(runs, 3);
        assert!(h.writer.events().contains(&"abandon".to_string()));
    }
}

/// Without `oc`, the node-image overlay is started and waited for; its failure fails the
/// install.
#[test]
fn the_node_image_overlay_is_waited_for_when_oc_is_missing() {
    for pull_fails in [false, true] {
        let h = Bootstrap::new("bootstrap");
        h.runner.fail("stat /usr/bin/oc", 1, "no such file");
        h.runner.ok("stat /usr/bin/oc", "");
        let state = "systemctl show -P ActiveState";
        let pull = [
            ("pull", "inactive"),
            ("pull", "active"),
            ("overlay", "active"),
        ];
        let answers: &[_] = if pull_fails {
            &[("pull", "failed")]
        } else {
            &pull
        };
        for (unit, answer) in answers {
            h.runner
                .ok(&format!("{state} node-image-{unit}.service"), answer);
        }
        let result = run(h.flow("bootstrap", 3));
        assert!(h.runner.lines().contains(
            &"systemctl start --no-block node-image-pull.service node-image-overlay.service"
                .to_string()
        ));
        if !pull_fails {
            result.unwrap();
            assert_eq!(h.reports(), bootstrap_sequence());
            continue;
        }
        result.unwrap_err();
        let info = failed_info(&h.reports());
        assert!(info.contains("node-image-pull.service failed"), "{info}");
    }
}

#[test]
fn other_hosts_are_reported_configuring_from_the_mcs_log() {
    let h = Bootstrap::new("bootstrap");
    let logs = h.path("containers");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(
        logs.join("machine-config-server-abc_openshift-machine-config-operator_machine-config-server-123.log"),
        "I1121 10:00:00.000000 1 api.go:117] Pool master requested by address:\"192.0.2.11:52428\" User-Agent:\"Ignition/2.16.2\"\n",
    )
    .unwrap();
    // The masters join only once master-1's Configuring is in (or after a fake day, to fail
    // rather than hang): the watcher's first pass and the node wait race otherwise, and the
    // service refuses Configuring after Joined.
    for node in ["master-1", "master-2"] {
        h.kube.set_node_ready(node, false);
    }
    let svc = h.svc.clone();
    h.on_the_clock(move |cluster, _, since_start| {
        if svc
            .progress_reports(MASTER1)
            .contains(&s("Configuring", ""))
            || since_start > Duration::from_secs(86_400)
        {
            for node in ["master-1", "master-2"] {
                cluster.set_node_ready(node, true);
            }
        }
    });
    run(h.flow("bootstrap", 3)).unwrap();
    let m1 = h.svc.progress_reports(MASTER1);
    assert_eq!(m1.first(), Some(&s("Configuring", "")), "{m1:?}");
    assert_eq!(m1.last(), Some(&s("Joined", "")));
    assert!(!h
        .svc
        .progress_reports(MASTER2)
        .contains(&s("Configuring", "")));
}

fn sno_sequence() -> Vec<Report> {
    let mut v = reports(&[
        ("Starting installation", "master"),
        ("Installing", "master"),
        ("Waiting for bootkube", ""),
    ]);
    v.extend(with_percents("Writing image to disk"));
    v.push(s("Rebooting", ""));
    v
}

fn sno_master_ign() -> String {
    json!({
        "ignition": {"version": "3.2.0"},
        "storage": {"files": [
            {"path": "/etc/hostname", "contents": {"source": "data:,localhost"}},
            {"path": "/etc/kubernetes/manifests/kube-apiserver-pod.yaml", "contents": {"source": "data:,apiserver"}}
        ]},
        "systemd": {"units": [{"name": "kubelet.service", "enabled": true}]}
    })
    .to_string()
}

/// `ai.kexec` on a single node: the same stages, the write loaded off /dev/vda, and the kexec
/// reboot at once where Go reboots `now`.
#[test]
fn single_node_with_ai_kexec_reboots_into_the_written_system_now() {
    use assisted_installer::kexec::testing::{coreos_boot, FromBootDir, RecordingLoader};
    let h = Bootstrap::new("sno");
    std::fs::write(h.path("openshift/master.ign"), sno_master_ign()).unwrap();
    std::fs::write(h.path("cmdline"), "ro ai.kexec=1").unwrap();
    let boot = h.path("boot");
    coreos_boot(&boot, Some("ip=dhcp"));
    let loader = Arc::new(RecordingLoader::default());
    let kexec = Arc::new(FromBootDir::new(&boot, loader.clone()));
    run(h.flow("master", 1).kexec(kexec.clone())).unwrap();
    assert_eq!(h.reports(), sno_sequence());
    assert_eq!(kexec.devices(), [PathBuf::from("/dev/vda")]);
    assert_eq!(loader.calls().len(), 1);
    let lines = h.runner.lines();
    assert_eq!(
        lines.last().unwrap(),
        "systemctl --message=Installation completed, server is going to reboot. kexec"
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("shutdown")),
        "{lines:#?}"
    );
}

#[test]
fn single_node_happy_path_merges_the_host_ignition_and_reboots_now() {
    let h = Bootstrap::new("sno");
    std::fs::write(h.path("openshift/master.ign"), sno_master_ign()).unwrap();
    let expected = assisted_installer::ignition::merge::merge_host_into_sno(
        sno_master_ign().as_bytes(),
        host_ign("master-0").as_bytes(),
    )
    .unwrap();
    let expected = String::from_utf8(expected).unwrap();
    *h.writer.expected_ignition.lock().unwrap() = Some(expected.clone());
    run(h.flow("master", 1)).unwrap();
    assert_eq!(h.reports(), sno_sequence());
    // The merge itself (the host's overrides win, its pointer cleared): ignition::merge's tests.
    let merged = std::fs::read_to_string(h.path("openshift/master.ign"));
    assert_eq!(merged.unwrap(), expected);
    let lines = h.runner.lines();
    assert!(
        !lines.iter().any(|l| l.starts_with("ssh-keygen")),
        "no SSH key on single node"
    );
    assert!(
        !lines.iter().any(|l| l.contains("NetworkManager")),
        "no NetworkManager restart"
    );
    assert_eq!(
        lines.last().unwrap(),
        "shutdown -r now 'Installation completed, server is going to reboot.'"
    );
    let events = h.writer.events();
    assert_eq!(events.first().unwrap(), "stream /dev/vda");
    assert!(events.last().unwrap().starts_with("finish "), "{events:?}");
}

#[test]
fn single_node_without_master_ign_resets_the_early_write_and_a_failed_one_is_written_again() {
    let h = Bootstrap::new("sno");
    run(h.flow("master", 1)).unwrap_err();
    let info = failed_info(&h.reports());
    assert!(
        info.contains("master.ign was not created by bootkube"),
        "{info}"
    );
    assert_eq!(h.writer.events().last().unwrap(), "abandon");
    // A failed early write is written again in the normal place.
    let h = Bootstrap::new("sno");
    std::fs::write(h.path("openshift/master.ign"), sno_master_ign()).unwrap();
    h.writer.stream_failures.store(1, Ordering::SeqCst);
    run(h.flow("master", 1)).unwrap();
    assert_eq!(h.reports(), sno_sequence());
    let events = h.writer.events();
    assert_eq!(events[0], "stream /dev/vda");
    assert!(events[1].starts_with("write "), "{events:?}");
}

/// A not-Ready master with the cloud provider's uninitialized taint; it becomes Ready a minute
/// into the node wait.
fn tainted_master(h: &Bootstrap) {
    let mut master = h.kube.node("master-2").unwrap();
    master.taints.push(Taint {
        key: UNINITIALIZED_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Taint::default()
    });
    h.kube.set_node(master);
    h.kube.set_node_ready("master-2", false);
    h.on_the_clock(|cluster, _, since_start| {
        if since_start >= Duration::from_secs(60) {
            cluster.set_node_ready("master-2", true);
        }
    });
}

#[test]
fn the_uninitialized_taint_is_removed_on_nutanix_and_vsphere_only() {
    for (platform, removed) in [
        ("nutanix", true),
        ("vsphere", true),
        ("baremetal", false),
        ("none", false),
    ] {
        let h = Bootstrap::new("bootstrap");
        h.svc.set_cluster(json!({"platform": {"type": platform}}));
        tainted_master(&h);
        run(h.flow("bootstrap", 3)).unwrap();
        let taints = h.kube.node("master-2").unwrap().taints;
        let kept = taints.iter().any(|t| t.key == UNINITIALIZED_TAINT);
        assert_eq!(kept, !removed, "{platform}: {taints:?}");
        assert_eq!(h.reports(), bootstrap_sequence(), "{platform}");
    }
}

#[test]
fn controller_logs_are_uploaded_every_five_minutes_while_waiting_and_once_ready() {
    let h = Bootstrap::new("bootstrap");
    h.kube.clear_events("assisted-installer");
    // The controller's ready event appears 12 min 30 s into the controller wait (its first
    // event listing): uploads at 5 and 10 min, then once ready.
    let wait_started = Arc::new(Mutex::new(None));
    let started = wait_started.clone();
    let log_reads_at = h.on_the_clock(move |cluster, method, since_start| {
        if method != "list_events" {
            return;
        }
        let started = *started.lock().unwrap().get_or_insert(since_start);
        if since_start - started >= Duration::from_secs(750) && cluster.events().is_empty() {
            add_ready_event(cluster);
        }
    });
    run(h.flow("bootstrap", 3)).unwrap();
    assert_eq!(h.reports(), bootstrap_sequence());
    let started = wait_started.lock().unwrap().unwrap();
    let secs: Vec<u64> = log_reads_at
        .lock()
        .unwrap()
        .iter()
        .map(|at| (*at - started).as_secs())
        .collect();
    assert_eq!(secs, [300, 600, 750]);
    assert_eq!(controller_logs_uploaded(&h), [CONTROLLER_LOG; 3]);
    assert_eq!(
        h.svc.state().cluster_logs_reports.len(),
        1,
        "the cluster's logs are requested once, when the controller is ready"
    );
    // The controller wait polled every 5 s on the flow's clock, 150 times.
    let polls = h
        .clock
        .sleeps()
        .iter()
        .filter(|d| **d == Duration::from_secs(5))
        .count();
    assert_eq!(polls, 150);
}

#[test]
fn failed_controller_log_uploads_do_not_stop_the_install() {
    let h = Bootstrap::new("bootstrap");
    // The upload and the cluster logs-progress both fail, every time.
    h.svc.fail_path(&format!("/clusters/{}/logs", CLUSTER), 500);
    run(h.flow("bootstrap", 3)).unwrap();
    assert_eq!(h.reports(), bootstrap_sequence());
    assert!(h.svc.state().uploads.is_empty());
    assert_eq!(h.kube.log_reads().len(), 1, "the upload was tried");
}

/// A cluster-hosts file: each (hostname, ip) with its reboot marker under `dir`, created when
/// `rebooted`.
fn cluster_hosts(dir: &Path, hosts: &[(&str, &str, bool)]) -> PathBuf {
    let list: Vec<serde_json::Value> = hosts
        .iter()
        .map(|(name, ip, rebooted)| {
            let marker = dir.join(format!("{name}.rebooted"));
            if *rebooted {
                std::fs::write(&marker, "").unwrap();
            }
            json!({"hostname": name, "ip": ip, "rebootMarkerPath": marker})
        })
        .collect();
    let path = dir.join("cluster-hosts.json");
    std::fs::write(&path, serde_json::Value::from(list).to_string()).unwrap();
    path
}

const MASTER3: &str = "bf708192-a3b4-4ec5-9a4b-5c6d7e8f90a1";

#[test]
fn dry_run_bootstrap_completes_against_the_pretend_cluster() {
    let h = Bootstrap::new("bootstrap");
    h.svc.set_host_role(MASTER3, "master");
    h.svc.set_hosts(vec![
        host(HOST, "bootstrap", "master-0", "192.0.2.10"),
        host(MASTER1, "master", "master-1", "192.0.2.11"),
        host(MASTER2, "master", "master-2", "192.0.2.12"),
        host(MASTER3, "master", "master-3", "192.0.2.13"),
    ]);
    let (rebooted, not_yet) = (true, false);
    let hosts = [
        ("master-1", "192.0.2.11", rebooted),
        ("master-2", "192.0.2.12", rebooted),
        ("master-3", "192.0.2.13", not_yet),
    ];
    let hosts = cluster_hosts(h.dir.path(), &hosts);
    // No kubeconfig: bootkube never runs in dry run. Its done marker is the harness's to
    // create, as in Go's dry run (the harness above did).
    std::fs::remove_file(h.path("openshift/auth/kubeconfig")).unwrap();
    let runner = Arc::new(dry_run_commands());
    let marker = h.path("bootstrap.rebooted");
    let flow = h
        .builder("bootstrap")
        .cfg(|c| c.dry_run = true)
        .cfg(|c| c.dry_run_cluster_hosts_path = Some(hosts.clone()))
        .commands(runner.clone())
        .reboot(Arc::new(FakeReboot(marker.clone())))
        .cfg(|c| c.control_plane_count = 3);
    run(flow).unwrap();
    assert_eq!(h.reports(), bootstrap_sequence());
    assert!(marker.exists(), "the fake reboot");
    // The rebooted masters joined (the Configuring watcher, which runs in dry run too, may
    // have reported them first); master-3 has not rebooted.
    let joined_or_configuring = |r: &Report| *r == s("Joined", "") || *r == s("Configuring", "");
    for id in [MASTER1, MASTER2] {
        let reports = h.svc.progress_reports(id);
        assert_eq!(reports.last(), Some(&s("Joined", "")), "{reports:?}");
        assert!(reports.iter().all(joined_or_configuring), "{reports:?}");
    }
    assert!(h.svc.progress_reports(MASTER3).is_empty());
    // The host list was fetched twice: by the node wait and by the Configuring watcher.
    let calls = h.svc.calls();
    let host_fetches = calls.iter().filter(|c| c.ends_with("?exclude-hosts=false"));
    assert_eq!(host_fetches.count(), 2, "{calls:#?}");
    // The pretend controller's canned log, once it is ready.
    let logs = controller_logs_uploaded(&h);
    assert_eq!(logs.len(), 1);
    assert!(logs[0].starts_with("Dry run"), "{logs:?}");
    // Nothing ran that changes the host.
    let lines = runner.lines();
    for absent in [
        "podman run --net host",
        "ssh-keygen",
        "hostname",
        "shutdown",
    ] {
        let ran = lines.iter().any(|l| l.starts_with(absent));
        assert!(!ran, "{absent}: {lines:#?}");
    }
    let pod = "openshift/manifests/assisted-installer-controller-pod.yaml";
    assert!(!h.path(pod).exists());
}

/// What the assisted-service's test mode (`DUMMY_IGNITION=true`) serves as every Ignition
/// config: the hosts' and the cluster files (bootstrap.ign).
const DUMMY_IGNITION: &str = "data";

/// The Go installer's dry run passes through the service's test mode; ours goes on to
/// Rebooting with the Go stage sequence, the disk written without the config that does not
/// parse.
#[test]
fn a_dry_run_bootstrap_goes_on_past_ignition_configs_that_do_not_parse() {
    let h = Bootstrap::new("bootstrap");
    h.svc.set_host_ignition(HOST, DUMMY_IGNITION);
    h.svc.set_cluster_file("bootstrap.ign", DUMMY_IGNITION);
    let hosts = [
        ("master-1", "192.0.2.11", true),
        ("master-2", "192.0.2.12", true),
    ];
    let hosts = cluster_hosts(h.dir.path(), &hosts);
    std::fs::remove_file(h.path("openshift/auth/kubeconfig")).unwrap();
    let marker = h.path("bootstrap.rebooted");
    let flow = h
        .builder("bootstrap")
        .cfg(|c| c.dry_run = true)
        .cfg(|c| c.dry_run_cluster_hosts_path = Some(hosts.clone()))
        .commands(Arc::new(dry_run_commands()))
        .reboot(Arc::new(FakeReboot(marker.clone())))
        .cfg(|c| c.control_plane_count = 3);
    run(flow).unwrap();
    assert_eq!(h.reports(), bootstrap_sequence());
    assert!(marker.exists(), "the fake reboot");
    let events = h.writer.events();
    assert_eq!(events.first().unwrap(), "stream /dev/vda");
    assert_eq!(events.last().unwrap(), "finish -", "{events:?}");
}

/// Single node: the host's config that does not parse is not merged; master.ign, as bootkube
/// left it, is written. A real install fails at the merge, and the early write is reset.
#[test]
fn a_dry_run_single_node_goes_on_past_a_host_ignition_that_does_not_parse() {
    let h = Bootstrap::new("sno");
    h.svc.set_host_ignition(HOST, DUMMY_IGNITION);
    h.svc.set_cluster_file("bootstrap.ign", DUMMY_IGNITION);
    std::fs::write(h.path("openshift/master.ign"), sno_master_ign()).unwrap();
    *h.writer.expected_ignition.lock().unwrap() = Some(sno_master_ign());
    let marker = h.path("sno.rebooted");
    let flow = h
        .flow("master", 1)
        .cfg(|c| c.dry_run = true)
        .commands(Arc::new(dry_run_commands()))
        .reboot(Arc::new(FakeReboot(marker.clone())));
    run(flow).unwrap();
    assert_eq!(h.reports(), sno_sequence());
    assert!(marker.exists(), "the fake reboot");
    let master = h.path("openshift/master.ign");
    assert_eq!(std::fs::read_to_string(&master).unwrap(), sno_master_ign());
    let finish = format!("finish {}", master.display());
    assert_eq!(h.writer.events().last(), Some(&finish));

    let h = Bootstrap::new("sno");
    h.svc.set_host_ignition(HOST, DUMMY_IGNITION);
    std::fs::write(h.path("openshift/master.ign"), sno_master_ign()).unwrap();
    run(h.flow("master", 1)).unwrap_err();
    let info = failed_info(&h.reports());
    let host_ign = h.path(&format!("install-dir/master-{HOST}.ign"));
    assert_eq!(
        info,
        format!(
            "{} is not an Ignition config: not valid JSON (expected value at line 1 column 1)",
            host_ign.display()
        )
    );
    assert_eq!(h.writer.events().last().unwrap(), "abandon");
    let reports = h.reports();
    assert!(
        !reports.iter().any(|(s, _)| s == "Writing image to disk"),
        "{reports:?}"
    );
}

#[test]
fn a_single_node_appliance_copies_the_registry_data_as_a_master() {
    // Go installs the single node as a master once bootkube is done, whatever --role said;
    // the registry copy needs that role.
    let h = Bootstrap::new("sno");
    std::fs::write(h.path("openshift/master.ign"), sno_master_ign()).unwrap();
    h.runner
        .ok("du -sb /mnt/agentdata", "1073741824\t/mnt/agentdata");
    h.runner.ok("lsblk --bytes --json /dev/vda", LSBLK_VDA);
    run(h.flow("bootstrap", 1).registry_marker_on_host()).unwrap();
    let mut expected = vec![
        s("Starting installation", "bootstrap"),
        s("Installing", "bootstrap"),
        s("Waiting for bootkube", ""),
    ];
    expected.extend(with_percents("Writing image to disk"));
    expected.push(s("Copying registry data to disk", ""));
    expected.push(s("Rebooting", ""));
    assert_eq!(h.reports(), expected);
    let lines = h.runner.lines();
    // 1 GiB of data needs 2.5 GiB: 93 % of the disk stays free.
    assert!(
        lines.contains(&"growpart --free-percent=93 /dev/vda 4".to_string()),
        "{lines:#?}"
    );
    assert!(lines
        .iter()
        .any(|l| l.contains("rsync -ah --info=progress2")));
    assert_eq!(
        lines.last().unwrap(),
        "shutdown -r now 'Installation completed, server is going to reboot.'"
    );
}
