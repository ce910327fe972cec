//! Node status, host stages and "Configuring" detection (Go `WaitAndUpdateNodesStatus`), with
//! CSR approval ([`super::csr`]) running beside it.
//!
//! The stage read in a round is the round's snapshot, so a Ready node whose host is
//! `Configuring`/`Rebooting` gets `Joined` **and** `Done` in one round.
//!
//! **MCS matching** reuses the installer's bootstrap matcher ([`crate::openshift::mcs_logs`]).
//! Knowingly different from Go: the dots of an IPv4 address are literal and an address cannot
//! match inside a longer one (Go's `\b` binds only to the last IP of the alternation, so e.g.
//! `2.168.126.100` matched a request from `192.168.126.100`). Kept from Go: a host with **no
//! IPs** matches as soon as the log holds any Ignition request (Go's pattern is then empty);
//! the logs of all pods are one text, and any failed log read empties it.

pub(crate) use super::GENERAL_WAIT;
use std::collections::HashSet;

use anyhow::Result;

use super::reboots::RebootsNotify;
use super::{csr, OrLog};
use crate::clock::Clock;
use crate::clock::{poll, PollError};
use crate::controller::hosts::{HostInfo, HostMap, NODE_STATUS_SKIP};
use crate::controller::service::ControllerService;
use crate::image::Cancel;
use crate::kube::ClusterApi;
use crate::openshift::mcs_logs::{hosts_that_fetched_ignition, ignition_fetch_addresses, McsHost};
use crate::service::{check_stage, HostStage, HostStatus};

/// Where the machine-config-server pods run.
use crate::openshift::MCS_NAMESPACE;
/// Their label selector.
pub(crate) const MCS_SELECTOR: &str = "k8s-app=machine-config-server";
/// How far back their logs are read.
pub(crate) const MCS_LOG_SINCE_SECONDS: i64 = 300;
/// The taint removed from not-Ready nodes on nutanix and vSphere (`removeUninitializedTaint`).
pub(crate) const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// The node-status task; see the module documentation.
pub(crate) struct NodeStatus<'a> {
    pub(crate) cluster: &'a dyn ClusterApi,
    pub(crate) service: &'a dyn ControllerService,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) notifier: &'a dyn RebootsNotify,
    /// `removeUninitializedTaint`: remove the uninitialized taint from nodes that are not Ready.
    pub(crate) remove_uninitialized_taint: bool,
}

impl NodeStatus<'_> {
    /// CSR approval in the background (its own thread, as Go's goroutine: a slow round does
    /// not delay it), [`NodeStatus::rounds`] until one finishes or `stop` fires.
    pub(crate) fn run(&self, stop: &Cancel) -> Result<(), PollError> {
        // CSR approval stops with the tasks or when node status ends.
        let child = stop.child();
        std::thread::scope(|s| {
            let approver = s.spawn(|| csr::run(self.cluster, self.clock, &child, GENERAL_WAIT));
            let result = self.rounds(stop);
            child.cancel();
            if approver.join().is_err() {
                tracing::error!("CSR approval panicked");
            }
            match &result {
                Ok(()) => tracing::info!("finished waiting for the nodes"),
                Err(e) => tracing::info!("stopped waiting for the nodes: {e}"),
            }
            result
        })
    }

    /// A round at once, then every [`GENERAL_WAIT`], until one finishes or `stop` fires.
    fn rounds(&self, stop: &Cancel) -> Result<(), PollError> {
        poll(self.clock, stop, GENERAL_WAIT, None, || self.round())
    }

    /// One round: true when the task is done.
    pub(crate) fn round(&self) -> bool {
        tracing::info!("checking the status of the nodes");
        let hosts = HostMap::fetch(self.service, NODE_STATUS_SKIP);
        let Some(hosts) = hosts.or_error("failed to get the hosts' info") else {
            return false;
        };
        for (name, h) in hosts.iter() {
            tracing::info!(
                "host {name}: status {:?}, stage {:?}, progress info {:?}",
                h.host
                    .status
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                h.host.current_stage(),
                h.host
                    .progress
                    .as_ref()
                    .map_or("", |p| p.progress_info.as_str())
            );
        }
        let pending = hosts.filter(|h| h.host.status != Some(HostStatus::Installed));
        let in_error = pending
            .iter()
            .filter(|(_, h)| h.host.status == Some(HostStatus::Error))
            .count();
        if in_error > 0 && in_error == pending.len() {
            tracing::info!("all {in_error} unfinished hosts are in error, stop waiting");
            return true;
        }
        if pending.is_empty() {
            tracing::info!("all nodes were successfully installed");
            return true;
        }
        let nodes = self.cluster.list_nodes(None);
        let Some(nodes) = nodes.or_error("failed to list the nodes") else {
            return false;
        };
        // Each Node's stage updates; an error ends the Node's turn.
        for node in &nodes {
            let addresses: Vec<(&str, &str)> = node
                .addresses
                .iter()
                .map(|a| (a.type_.as_str(), a.address.as_str()))
                .collect();
            let Some(host) = pending.match_node(&hosts, &node.name, &addresses) else {
                tracing::warn!("Node {} is not in inventory hosts", node.name);
                continue;
            };
            if let Some(ip) = hosts.changed_ip(&addresses) {
                tracing::warn!(
                    "node {} has IP {ip}, which is not among its host's IPs: it may have changed",
                    node.name
                );
            }
            // The round's snapshot: not re-read after the updates below.
            let stage = host.host.stage();
            let failed_stage = format_args!("failed to update the stage of node {}", node.name);
            if matches!(stage, Some(HostStage::Configuring | HostStage::Rebooting))
                && self
                    .set_stage(&hosts, host, HostStage::Joined)
                    .or_error(failed_stage)
                    .is_none()
            {
                continue;
            }
            let ready = node.is_ready();
            let untaint = format_args!(
                "failed to remove the uninitialized taint of node {}",
                node.name
            );
            if !ready
                && self.remove_uninitialized_taint
                && self.untaint(&node.name).or_error(untaint).is_none()
            {
                continue;
            }
            if ready && stage != Some(HostStage::Done) {
                if self
                    .set_stage(&hosts, host, HostStage::Done)
                    .or_error(failed_stage)
                    .is_none()
                {
                    continue;
                }
                self.notifier.start(
                    &node.name,
                    &host.host.id,
                    &host.host.infra_env_id,
                    host.host.cluster_id.as_deref().unwrap_or(""),
                );
            }
        }
        let fresh = HostMap::fetch(self.service, NODE_STATUS_SKIP);
        if let Some(fresh) = fresh.or_error("failed to get the hosts' info") {
            self.update_configuring(&fresh);
        }
        false
    }

    /// Reports `stage` for `host`, one of `hosts`, unless the service would refuse it (not in
    /// the host's stage order, or before the stage the host list gave it): then only a debug
    /// line.
    fn set_stage(&self, hosts: &HostMap, host: &HostInfo, stage: HostStage) -> Result<()> {
        let order = hosts.stage_order(&host.host);
        if let Err(skip) = check_stage(order, host.host.stage(), stage) {
            tracing::debug!("not reporting host {} stage {stage}: {skip}", host.host.id);
            return Ok(());
        }
        tracing::info!("reporting host {} stage {stage}", host.host.id);
        self.service
            .update_host_stage(&host.host.infra_env_id, &host.host.id, stage)
    }

    /// GET the Node; remove its first uninitialized taint, if any (JSON patch by index).
    pub(crate) fn untaint(&self, name: &str) -> Result<()> {
        let node = self.cluster.get_node(name)?;
        if let Some(i) = node
            .taints
            .iter()
            .position(|t| t.key == UNINITIALIZED_TAINT)
        {
            tracing::info!("removing the taint {UNINITIALIZED_TAINT} from node {name}");
            self.cluster
                .remove_node_taint(name, i, UNINITIALIZED_TAINT)?;
        }
        Ok(())
    }

    /// The machine-config-server pods' recent logs, concatenated; "" when the list or any log
    /// read fails.
    fn mcs_log(&self) -> String {
        let pods = self
            .cluster
            .list_pods(MCS_NAMESPACE, Some(MCS_SELECTOR), None);
        let pods = pods.or_warn("failed to list the machine-config-server pods");
        let logs = pods.into_iter().flatten().map(|pod| {
            let since = Some(MCS_LOG_SINCE_SECONDS);
            let log = self.cluster.pod_log(MCS_NAMESPACE, &pod.name, since);
            log.or_warn(format_args!("failed to read the log of pod {}", pod.name))
        });
        logs.collect::<Option<String>>().unwrap_or_default()
    }

    /// The MCS detection (point 4 of a round): `Configuring` for the hosts that fetched their Ignition.
    fn update_configuring(&self, hosts: &HostMap) {
        let log = self.mcs_log();
        let watched: Vec<&HostInfo> = hosts
            .iter()
            .map(|(_, h)| h)
            .filter(|h| {
                let stage = h.host.stage();
                !matches!(
                    stage,
                    Some(HostStage::Configuring | HostStage::Joined | HostStage::Done)
                )
            })
            .collect();
        let with_ips: Vec<McsHost> = watched
            .iter()
            .filter(|h| !h.ips.is_empty())
            .map(|h| McsHost {
                id: h.host.id.clone(),
                role: h.host.role.clone(),
                ips: h.ips.clone(),
            })
            .collect();
        let fetched: HashSet<&str> = hosts_that_fetched_ignition(&log, &with_ips)
            .into_iter()
            .map(|h| h.id.as_str())
            .collect();
        let any_request = !ignition_fetch_addresses(&log).is_empty();
        for host in watched {
            let matched = if host.ips.is_empty() {
                any_request
            } else {
                fetched.contains(host.host.id.as_str())
            };
            if matched {
                let what = format_args!("failed to update the stage of host {}", host.host.id);
                (self.set_stage(hosts, host, HostStage::Configuring)).or_error(what);
            }
        }
    }
}

#[cfg(test)]
mod tests;
