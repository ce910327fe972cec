//! BareMetalHost update (Go `UpdateBMHs`), started only on the `baremetal` platform. With the
//! metal3 Provisioning, unmanaged BMHs become externally provisioned and unpaused; without it, the
//! status annotation moves into `.status`. Either way an empty consumerRef takes the **first**
//! unallocated worker Machine.
//!
//! Knowingly different from Go: the status annotation is copied as JSON as it is (it must be an
//! object), where Go decodes it into the typed status and encodes that (dropping unknown fields).

use super::{OrLog, GENERAL_WAIT};
use std::collections::HashSet;
use std::time::SystemTime;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Map, Value};

use crate::clock::{poll, PollError};
use crate::clock::{Clock, Stop};
use crate::controller::service::rfc3339;
use crate::kube::{ClusterApi, Machine};

/// Where the BareMetalHosts and Machines are.
pub(crate) const MACHINE_API_NAMESPACE: &str = "openshift-machine-api";
/// The cluster-scoped metal3 Provisioning whose existence picks the update.
pub(crate) const PROVISIONING_NAME: &str = "provisioning-configuration";
/// The Machine label and value of workers.
pub(crate) const MACHINE_ROLE_LABEL: &str = "machine.openshift.io/cluster-api-machine-role";
pub(crate) const WORKER_ROLE: &str = "worker";
/// metal3's paused annotation, removed when Provisioning exists.
pub(crate) const PAUSED_ANNOTATION: &str = "baremetalhost.metal3.io/paused";
/// metal3's status annotation, moved into `.status` when Provisioning does not exist.
pub(crate) const STATUS_ANNOTATION: &str = "baremetalhost.metal3.io/status";

/// The BMH task; see the module documentation.
pub(crate) struct BmhUpdate<'a> {
    pub(crate) cluster: &'a dyn ClusterApi,
    pub(crate) clock: &'a dyn Clock,
    /// The wall clock, for `status.lastUpdated`.
    pub(crate) wall_now: fn() -> SystemTime,
}

fn bmh_name(bmh: &Value) -> &str {
    bmh.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `spec.consumerRef` when set (Go's non-nil pointer).
fn consumer_ref(bmh: &Value) -> Option<&Value> {
    bmh.pointer("/spec/consumerRef").filter(|v| !v.is_null())
}

fn annotations(bmh: &Value) -> Map<String, Value> {
    bmh.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Sets `metadata.annotations` (left out when empty, as Go's `omitempty` encodes it).
fn set_annotations(bmh: &mut Value, annotations: Map<String, Value>) {
    if !bmh["metadata"].is_object() {
        bmh["metadata"] = json!({});
    }
    let meta = bmh["metadata"].as_object_mut().expect("an object");
    if annotations.is_empty() {
        meta.remove("annotations");
    } else {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
}

fn spec_mut(bmh: &mut Value) -> &mut Map<String, Value> {
    if !bmh["spec"].is_object() {
        bmh["spec"] = json!({});
    }
    bmh["spec"].as_object_mut().expect("an object")
}

impl<'a> BmhUpdate<'a> {
    /// The task as main starts it, on the wall clock.
    pub(crate) fn new(cluster: &'a dyn ClusterApi, clock: &'a dyn Clock) -> BmhUpdate<'a> {
        let wall_now = SystemTime::now;
        BmhUpdate {
            cluster,
            clock,
            wall_now,
        }
    }

    /// Rounds every [`GENERAL_WAIT`] until one updates everything or `stop` fires.
    pub(crate) fn run(&self, stop: &dyn Stop) -> Result<(), PollError> {
        let result = poll(self.clock, stop, GENERAL_WAIT, None, || self.round());
        match &result {
            Ok(()) => tracing::info!("Updated all the BMH CRs, finished successfully"),
            Err(e) => tracing::info!("stopped updating the BMH CRs: {e}"),
        }
        result
    }

    /// One round: true when every BMH is updated.
    pub(crate) fn round(&self) -> bool {
        let bmhs = self.cluster.list_bmhs(MACHINE_API_NAMESPACE);
        let Some(bmhs) = bmhs.or_error("failed to list the BareMetalHosts") else {
            return false;
        };
        tracing::info!("Number of BMHs is {}", bmhs.len());
        let machines = self.unallocated_machines(&bmhs);
        let Some(mut machines) = machines.or_error("failed to find the unallocated machines")
        else {
            return false;
        };
        tracing::info!("Number of unallocated Machines is {}", machines.len());
        let provisioning = self.cluster.provisioning_exists(PROVISIONING_NAME);
        let what = format_args!("failed to read the Provisioning {PROVISIONING_NAME}");
        let Some(provisioning) = provisioning.or_error(what) else {
            return false;
        };
        let mut all = true;
        for bmh in bmhs {
            let name = bmh_name(&bmh).to_string();
            tracing::info!("checking BareMetalHost {name}");
            let updated = self.update(bmh, provisioning, &mut machines);
            all &= updated
                .or_error(format_args!("failed to update BareMetalHost {name}"))
                .is_some();
        }
        all
    }

    /// The worker Machines no BMH's consumerRef names, in list order.
    fn unallocated_machines(&self, bmhs: &[Value]) -> Result<Vec<Machine>> {
        let machines = self.cluster.list_machines(MACHINE_API_NAMESPACE)?;
        let allocated: HashSet<&str> = bmhs
            .iter()
            .filter_map(consumer_ref)
            .map(|r| r.get("name").and_then(Value::as_str).unwrap_or(""))
            .collect();
        Ok(machines
            .into_iter()
            .filter(|m| m.labels.get(MACHINE_ROLE_LABEL).map(String::as_str) == Some(WORKER_ROLE))
            .filter(|m| !allocated.contains(m.name.as_str()))
            .collect())
    }

    /// One BMH (see the module documentation), written when anything changed.
    fn update(
        &self,
        mut bmh: Value,
        provisioning: bool,
        machines: &mut Vec<Machine>,
    ) -> Result<()> {
        let mut annotations = annotations(&bmh);
        let mut changed = false;
        if provisioning {
            let state = bmh
                .pointer("/status/provisioning/state")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !matches!(state, "" | "unmanaged") {
                tracing::info!(
                    "BareMetalHost {} has provisioning state {state:?}, leaving it",
                    bmh_name(&bmh)
                );
                return Ok(());
            }
            let external = Value::Bool(true);
            let spec = spec_mut(&mut bmh);
            changed =
                spec.insert("externallyProvisioned".into(), external.clone()) != Some(external);
        } else if let Some(text) = annotations
            .get(STATUS_ANNOTATION)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            // A JSON object; `null` is an empty status, as Go decodes it.
            let mut status = match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(status)) => Ok(status),
                Ok(Value::Null) => Ok(Map::new()),
                Ok(other) => Err(anyhow!("{other} is not a BareMetalHost status object")),
                Err(err) => Err(err.into()),
            }
            .with_context(|| format!("parsing the status annotation of {}", bmh_name(&bmh)))?;
            // Go's `IsZero` on a nil or zero time.
            let zero = |v: &Value| {
                v.as_str()
                    .is_some_and(|t| t.starts_with("0001-01-01T00:00:00"))
            };
            if status
                .get("lastUpdated")
                .is_none_or(|v| v.is_null() || zero(v))
            {
                status.insert("lastUpdated".into(), rfc3339((self.wall_now)()).into());
            }
            bmh["status"] = Value::Object(status);
            let name = bmh_name(&bmh).to_string();
            tracing::info!("updating the status of BareMetalHost {name}");
            self.cluster
                .update_bmh_status(MACHINE_API_NAMESPACE, &bmh)?;
            // The status update changed the resourceVersion: read it again.
            bmh = self.cluster.get_bmh(MACHINE_API_NAMESPACE, &name)?;
        }
        let moved = if provisioning {
            PAUSED_ANNOTATION
        } else {
            STATUS_ANNOTATION
        };
        if annotations.remove(moved).is_some() {
            set_annotations(&mut bmh, annotations);
            changed = true;
        }
        // Both: an empty consumerRef takes the first of `machines` (taken off the list).
        if consumer_ref(&bmh).is_none() {
            if machines.is_empty() {
                bail!(
                    "no available machine for bmh {}, need to wait for machineset controller to create one",
                    bmh_name(&bmh)
                );
            }
            let machine = machines.remove(0);
            tracing::info!(
                "setting the consumerRef of BareMetalHost {} to Machine {}",
                bmh_name(&bmh),
                machine.name
            );
            spec_mut(&mut bmh).insert(
                "consumerRef".into(),
                json!({
                    "apiVersion": machine.api_version,
                    "kind": "Machine",
                    "namespace": machine.namespace,
                    "name": machine.name,
                }),
            );
            changed = true;
        }
        if changed {
            tracing::info!("updating BareMetalHost {}", bmh_name(&bmh));
            self.cluster.update_bmh(MACHINE_API_NAMESPACE, &bmh)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
