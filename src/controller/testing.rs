//! Builders the controller's tests share.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::clock::{Deadline, FakeClock};
use crate::controller::tasks::logs::MUST_GATHER_ENTRY;
use crate::controller::tasks::olm::OLM_MANIFESTS_CONFIG_MAP;
use crate::controller::tasks::router_probe::HttpProbe;
use crate::host::commands::{RecordingRunner, Reply};
use crate::kube::testing::FakeCluster;
use crate::kube::{ApiError, ClusterVersion, Condition, Csv, Node, NodeAddress, Subscription};
use crate::service::MonitoredOperator;

/// `oc` run through `bash -c` as the controller runs it, on a [`RecordingRunner`]: the content of
/// each manifest applied goes to the returned list (its temporary file is gone afterwards), the
/// applies failing with `fail_apply`; the first `mg_failures` must-gathers fail, the others leave
/// a `must-gather.local.1` directory whose `tar` writes "MG". Any other command (the reboots
/// count) succeeds with no output.
pub(crate) fn fake_oc(fail_apply: bool, mg_failures: usize) -> (RecordingRunner, Applied) {
    let applied = Applied::default();
    let contents = applied.clone();
    let must_gathers = AtomicUsize::new(0);
    let oc = RecordingRunner::with_script(move |program, args| {
        let failed = Some(Reply::fail(1, "failed"));
        if program != "bash" {
            return None;
        }
        let script = &args[1];
        if let Some(rest) = script.strip_prefix("oc --kubeconfig=") {
            let (_, manifest) = rest.split_once(" apply -f ").expect("oc apply");
            let content = std::fs::read_to_string(manifest).unwrap();
            contents.lock().unwrap().push(content);
            return if fail_apply { failed } else { None };
        }
        let (dir, command) = script
            .strip_prefix("cd ")
            .and_then(|s| s.split_once(" && "))
            .expect("must-gather runs in its work dir");
        let dir = Path::new(dir);
        if let Some(rest) = command.strip_prefix("oc --kubeconfig=") {
            let (kubeconfig, _) = rest.split_once(" adm must-gather").unwrap();
            assert!(
                Path::new(kubeconfig).exists(),
                "credentials downloaded first"
            );
            if must_gathers.fetch_add(1, Ordering::SeqCst) < mg_failures {
                return failed;
            }
            std::fs::create_dir_all(dir.join("must-gather.local.1")).unwrap();
        } else {
            assert_eq!(command, "tar zcf must-gather.tar.gz must-gather.local.1");
            std::fs::write(dir.join(MUST_GATHER_ENTRY), "MG").unwrap();
        }
        None
    });
    (oc, applied)
}

/// The contents of the manifests [`fake_oc`] applied.
pub(crate) type Applied = Arc<Mutex<Vec<String>>>;

/// The kubeconfig of each manifest `oc` applied.
pub(crate) fn apply_kubeconfigs(oc: &RecordingRunner) -> Vec<PathBuf> {
    let lines = oc.lines();
    let applies = lines.iter().filter_map(|l| {
        let rest = l.strip_prefix("bash -c oc --kubeconfig=")?;
        Some(PathBuf::from(rest.split_once(" apply -f ")?.0))
    });
    applies.collect()
}

/// The images of each `oc adm must-gather` run.
pub(crate) fn mg_images(oc: &RecordingRunner) -> Vec<Vec<String>> {
    let lines = oc.lines();
    let runs = lines
        .iter()
        .filter_map(|l| l.split_once(" adm must-gather"));
    runs.map(|(_, images)| {
        images
            .split(" --image=")
            .skip(1)
            .map(String::from)
            .collect()
    })
    .collect()
}

/// An HTTP probe that records the URLs it is asked and answers 200 "ok".
#[derive(Default)]
pub(crate) struct Urls(pub(crate) Mutex<Vec<String>>);

impl HttpProbe for Urls {
    fn get(&self, url: &str) -> anyhow::Result<(u16, String)> {
        self.0.lock().unwrap().push(url.to_string());
        Ok((200, "ok".into()))
    }
}

pub(crate) fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The two operators of the ABI tests, initialized: subscription and CSV.
pub(crate) const ABI_OPERATORS: [(&str, &str); 2] = [
    ("kube-descheduler", "openshift-kube-descheduler-operator"),
    ("nmstate", "openshift-nmstate"),
];

pub(crate) fn abi_operators_initialized(cluster: &FakeCluster) {
    for (op, ns) in ABI_OPERATORS {
        cluster.set_subscription(Subscription {
            namespace: ns.into(),
            name: format!("{op}-sub"),
            current_csv: format!("{op}.v1"),
        });
        cluster.set_csv(Csv {
            namespace: ns.into(),
            name: format!("{op}.v1"),
            ..Default::default()
        });
    }
}

/// The `olm-operator-manifests` ConfigMap in `namespace` describing [`ABI_OPERATORS`], one
/// manifest each; without `with_files`, the descheduler's manifest is missing.
pub(crate) fn abi_config_map(cluster: &FakeCluster, namespace: &str, with_files: bool) {
    let meta = |ns: &str, op: &str| {
        format!("namespace: {ns}\nsubscriptionName: {op}-sub\nmanifests:\n  - {op}-1.yaml\n")
    };
    let d = meta(ABI_OPERATORS[0].1, ABI_OPERATORS[0].0);
    let n = meta(ABI_OPERATORS[1].1, ABI_OPERATORS[1].0);
    let (dc, nc) = (b64("kind: KubeDescheduler"), b64("kind: NMState"));
    let mut data = vec![
        ("kube-descheduler.metadata.yaml", d.as_str()),
        ("nmstate.metadata.yaml", n.as_str()),
        ("nmstate-1.yaml", nc.as_str()),
    ];
    if with_files {
        data.push(("kube-descheduler-1.yaml", dc.as_str()));
    }
    cluster.set_config_map(namespace, OLM_MANIFESTS_CONFIG_MAP, &data);
}

/// The IP of host and node number `i`.
pub(crate) fn ip(i: usize) -> String {
    format!("192.168.126.{}", 10 + i)
}

/// Host `host-<i>` named `node<i>` with the IP [`ip`]`(i)`, and `fields` (status, role, stage…)
/// over those.
pub(crate) fn host(i: usize, fields: serde_json::Value) -> crate::service::Host {
    let inventory = serde_json::json!({"interfaces": [{"name": "ens3", "ipv4_addresses": [format!("{}/24", ip(i))]}]});
    let mut host = serde_json::json!({
        "id": format!("host-{i}"),
        "infra_env_id": "ie-1",
        "cluster_id": "c1",
        "role": "master",
        "requested_hostname": format!("node{i}"),
        "inventory": inventory.to_string(),
    });
    for (k, v) in fields.as_object().expect("fields are an object") {
        host[k] = v.clone();
    }
    serde_json::from_value(host).unwrap()
}

/// ClusterVersion `version` at 4.12.0, `Available` with `message`, the console enabled.
pub(crate) fn available_version(cluster: &FakeCluster, message: &str) {
    let cv = ClusterVersion {
        conditions: vec![cond("Available", "True", message)],
        enabled_capabilities: vec!["Console".into()],
        known_capabilities: vec!["Console".into()],
        desired_version: "4.12.0".into(),
    };
    cluster.set_cluster_version("version", cv);
}

/// A Node with its Ready condition and InternalIP.
pub(crate) fn node(name: &str, ready: bool, internal_ip: &str) -> Node {
    Node {
        name: name.into(),
        conditions: vec![cond("Ready", if ready { "True" } else { "False" }, "")],
        addresses: vec![NodeAddress {
            type_: "InternalIP".into(),
            address: internal_ip.into(),
        }],
        ..Node::default()
    }
}

/// A Node labelled master, without conditions.
pub(crate) fn master(name: &str) -> Node {
    Node {
        name: name.into(),
        labels: [(crate::openshift::role_label("master"), String::new())].into(),
        ..Node::default()
    }
}

pub(crate) fn cond(type_: &str, status: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: String::new(),
        message: message.into(),
    }
}

/// A builtin monitored operator in `status`.
pub(crate) fn record(name: &str, status: &str) -> MonitoredOperator {
    MonitoredOperator {
        name: name.into(),
        status: status.into(),
        operator_type: "builtin".into(),
        ..MonitoredOperator::default()
    }
}

/// The main context, cancelled once the fake clock reaches `secs`.
pub(crate) fn stop_at(clock: &FakeClock, secs: u64) -> Deadline<'_> {
    Deadline {
        clock,
        at: clock.at(std::time::Duration::from_secs(secs)),
    }
}

/// A 500 from the API server.
pub(crate) fn boom() -> ApiError {
    ApiError::new(500, "InternalError", "boom")
}

/// The local-storage operator's namespace and subscription.
pub(crate) const LSO_NS: &str = "openshift-local-storage";
pub(crate) const LSO_SUB: &str = "local-storage-operator";

/// The LSO subscription pointing at its CSV `lso.v4.12.0` in `phase` with `message`.
pub(crate) fn lso_csv(cluster: &FakeCluster, phase: &str, message: &str) {
    cluster.set_subscription(Subscription {
        namespace: LSO_NS.into(),
        name: LSO_SUB.into(),
        current_csv: "lso.v4.12.0".into(),
    });
    cluster.set_csv(Csv {
        namespace: LSO_NS.into(),
        name: "lso.v4.12.0".into(),
        phase: phase.into(),
        message: message.into(),
        version: "4.12.0".into(),
    });
}
