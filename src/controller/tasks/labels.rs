//! Node labels (Go `UpdateNodeLabels`). The `worker` MachineConfigPool is paused while worker
//! labels are applied, and stays paused until every labelled host's Node carries its labels; an
//! unpause failure ends the round and the next one re-pauses (a no-op) and retries.

use super::{OrLog, GENERAL_WAIT};
use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::Value;

use crate::clock::{poll, PollError};
use crate::clock::{Clock, Stop};
use crate::config::Role;
use crate::controller::hosts::{HostMap, NODE_LABELS_SKIP};
use crate::controller::service::ControllerService;
use crate::kube::{ClusterApi, Node};

/// The pool paused while labels are applied.
pub(crate) const WORKER_POOL: &str = "worker";

/// The node-labels task; see the module documentation.
pub(crate) struct NodeLabels<'a> {
    pub(crate) cluster: &'a dyn ClusterApi,
    pub(crate) service: &'a dyn ControllerService,
    pub(crate) clock: &'a dyn Clock,
}

/// Whether every label of `labels` (a JSON object of strings) is already on `node`. Text that
/// is not such an object counts as "already there", as in Go.
fn labels_up_to_date(node: &Node, labels: &str) -> bool {
    match serde_json::from_str::<Option<BTreeMap<String, String>>>(labels) {
        Ok(wanted) => wanted
            .unwrap_or_default()
            .iter()
            .all(|(k, v)| node.labels.get(k) == Some(v)),
        Err(e) => {
            tracing::warn!(
                "failed to parse the labels {labels:?} of node {}: {e}",
                node.name
            );
            true
        }
    }
}

impl NodeLabels<'_> {
    /// Rounds every [`GENERAL_WAIT`] until one finishes or `stop` fires.
    pub(crate) fn run(&self, stop: &dyn Stop) -> Result<(), PollError> {
        let result = poll(self.clock, stop, GENERAL_WAIT, None, || self.round());
        match &result {
            Ok(()) => tracing::info!("finished updating the node labels"),
            Err(e) => tracing::info!("stopped updating the node labels: {e}"),
        }
        result
    }

    /// One round: true when the task is done.
    pub(crate) fn round(&self) -> bool {
        let hosts = HostMap::fetch(self.service, NODE_LABELS_SKIP);
        let Some(hosts) = hosts.or_error("failed to get the hosts' info") else {
            return false;
        };
        let labelled = hosts.filter(|h| !h.host.node_labels.is_empty());
        if labelled.is_empty() {
            tracing::info!("No hosts with labels, skipping update node labels");
            return true;
        }
        let pause = labelled.iter().any(|(_, h)| {
            h.host.role == Some(Role::Worker) && !h.host.machine_config_pool_name.is_empty()
        });
        let what = format_args!("failed to pause the {WORKER_POOL} MachineConfigPool");
        if pause && self.set_workers_paused(true).or_error(what).is_none() {
            return false;
        }
        let updated = self.label_nodes(&labelled);
        if updated < labelled.len() {
            tracing::info!(
                "labels are applied on {updated} of {} nodes, waiting",
                labelled.len()
            );
            return false;
        }
        let what = format_args!("failed to unpause the {WORKER_POOL} MachineConfigPool");
        !pause || self.set_workers_paused(false).or_error(what).is_some()
    }

    /// GET the worker pool; merge-patch `spec.paused` when it is not `paused` already.
    fn set_workers_paused(&self, paused: bool) -> Result<()> {
        let pool = self.cluster.get_machine_config_pool(WORKER_POOL)?;
        if pool.paused == paused {
            tracing::info!("MachineConfigPool {WORKER_POOL} already has paused={paused}");
            return Ok(());
        }
        tracing::info!("setting paused={paused} on MachineConfigPool {WORKER_POOL}");
        self.cluster
            .set_machine_config_pool_paused(WORKER_POOL, paused)
    }

    /// How many Nodes of `labelled` carry their labels now.
    fn label_nodes(&self, labelled: &HostMap) -> usize {
        let nodes = self.cluster.list_nodes(None);
        let Some(nodes) = nodes.or_error("failed to list the nodes") else {
            return 0;
        };
        let mut count = 0;
        for node in nodes.iter().filter(|n| n.is_ready()) {
            let addresses: Vec<(&str, &str)> = node
                .addresses
                .iter()
                .map(|a| (a.type_.as_str(), a.address.as_str()))
                .collect();
            let Some(host) = labelled.match_node(labelled, &node.name, &addresses) else {
                continue;
            };
            let labels = &host.host.node_labels;
            if labels_up_to_date(node, labels) {
                count += 1;
                continue;
            }
            let what = format_args!("failed to set the labels of node {}", node.name);
            if self.patch(node, labels).or_error(what).is_some() {
                count += 1;
            }
        }
        count
    }

    fn patch(&self, node: &Node, labels: &str) -> Result<()> {
        // Parses: `labels_up_to_date` accepted it as an object of strings.
        let labels: Value = serde_json::from_str(labels)?;
        tracing::info!("setting labels {labels} on node {}", node.name);
        self.cluster.patch_node_labels(&node.name, &labels)
    }
}

#[cfg(test)]
mod tests;
