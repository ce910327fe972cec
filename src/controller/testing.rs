//! Builders the controller's tests share.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::clock::{Deadline, FakeClock};
use crate::controller::tasks::logs::MUST_GATHER_ENTRY;
use crate::controller::tasks::olm::OLM_MANIFESTS_CONFIG_MAP;
use crate::host::commands::{CommandRunner, ExecError};
use crate::kube::testing::FakeCluster;
use crate::kube::{ApiError, Condition, Csv, Node, NodeAddress, Subscription};
use crate::service::MonitoredOperator;

/// `oc` run through `bash -c` as the controller runs it: records each manifest applied
/// (kubeconfig, content), failing them all with `fail_apply`; records each must-gather's images,
/// failing the first `mg_failures` runs, else leaving a `must-gather.local.1` directory whose
/// `tar` writes "MG". Any other command (the reboots count) succeeds with no output.
#[derive(Default)]
pub(crate) struct FakeOc {
    pub(crate) fail_apply: bool,
    pub(crate) mg_failures: usize,
    pub(crate) applied: Mutex<Vec<(PathBuf, String)>>,
    pub(crate) images: Mutex<Vec<Vec<String>>>,
}

impl CommandRunner for FakeOc {
    fn run_streaming(
        &self,
        program: &str,
        args: &[&str],
        _: &mut dyn FnMut(&[u8]),
    ) -> Result<String, ExecError> {
        let failed = Err(ExecError::exit(program, args, 1, "failed"));
        let ["-c", script] = args else {
            return Ok(String::new());
        };
        if let Some(rest) = script.strip_prefix("oc --kubeconfig=") {
            let (kubeconfig, manifest) = rest.split_once(" apply -f ").expect("oc apply");
            let content = std::fs::read_to_string(manifest).unwrap();
            self.applied
                .lock()
                .unwrap()
                .push((kubeconfig.into(), content));
            return if self.fail_apply {
                failed
            } else {
                Ok(String::new())
            };
        }
        let (dir, command) = script
            .strip_prefix("cd ")
            .and_then(|s| s.split_once(" && "))
            .expect("must-gather runs in its work dir");
        let dir = Path::new(dir);
        if let Some(rest) = command.strip_prefix("oc --kubeconfig=") {
            let (kubeconfig, images) = rest.split_once(" adm must-gather").unwrap();
            assert!(
                Path::new(kubeconfig).exists(),
                "credentials downloaded first"
            );
            let mut runs = self.images.lock().unwrap();
            runs.push(
                images
                    .split(" --image=")
                    .skip(1)
                    .map(String::from)
                    .collect(),
            );
            if runs.len() <= self.mg_failures {
                return failed;
            }
            std::fs::create_dir_all(dir.join("must-gather.local.1")).unwrap();
        } else {
            assert_eq!(command, "tar zcf must-gather.tar.gz must-gather.local.1");
            std::fs::write(dir.join(MUST_GATHER_ENTRY), "MG").unwrap();
        }
        Ok(String::new())
    }
}

impl FakeOc {
    pub(crate) fn images(&self) -> Vec<Vec<String>> {
        self.images.lock().unwrap().clone()
    }

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
