//! Builders the controller's tests share.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Result;

use crate::clock::{Deadline, FakeClock};
use crate::controller::tasks::logs::{MustGatherRunner, MUST_GATHER_ENTRY};
use crate::controller::tasks::olm::{ManifestApplier, OLM_MANIFESTS_CONFIG_MAP};
use crate::kube::testing::FakeCluster;
use crate::kube::{ApiError, Condition, Csv, Node, NodeAddress, Subscription};
use crate::service::MonitoredOperator;

/// Records what would be applied: (kubeconfig, manifest content).
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) applied: Mutex<Vec<(PathBuf, String)>>,
    pub(crate) fail: bool,
}

impl ManifestApplier for Recorder {
    fn apply(&self, kubeconfig: &Path, manifest: &Path) -> Result<()> {
        let content = std::fs::read_to_string(manifest)?;
        self.applied
            .lock()
            .unwrap()
            .push((kubeconfig.to_path_buf(), content));
        if self.fail {
            anyhow::bail!("apply failed");
        }
        Ok(())
    }
}

/// A must-gather that records its images, fails its first `failures` runs and otherwise writes
/// a small tarball; the credentials must have been downloaded first.
#[derive(Default)]
pub(crate) struct FakeMustGather {
    pub(crate) failures: usize,
    pub(crate) images: Mutex<Vec<Vec<String>>>,
}

impl MustGatherRunner for FakeMustGather {
    fn run(&self, work_dir: &Path, kubeconfig: &Path, images: &[String]) -> Result<PathBuf> {
        let mut runs = self.images.lock().unwrap();
        runs.push(images.to_vec());
        assert!(kubeconfig.exists(), "credentials downloaded first");
        if runs.len() <= self.failures {
            anyhow::bail!("must-gather failed");
        }
        let path = work_dir.join(MUST_GATHER_ENTRY);
        std::fs::write(&path, b"MG")?;
        Ok(path)
    }
}

impl FakeMustGather {
    pub(crate) fn images(&self) -> Vec<Vec<String>> {
        self.images.lock().unwrap().clone()
    }
}

impl Recorder {
    pub(crate) fn contents(&self) -> Vec<String> {
        let applied = self.applied.lock().unwrap();
        applied.iter().map(|(_, c)| c.clone()).collect()
    }

    pub(crate) fn kubeconfigs(&self) -> Vec<PathBuf> {
        let applied = self.applied.lock().unwrap();
        applied.iter().map(|(k, _)| k.clone()).collect()
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
