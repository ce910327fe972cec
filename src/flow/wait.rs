//! The worker's wait for the control plane: it polls until the cluster is ready, as the Go
//! installer does, and fails only when the stop token ends it.

use anyhow::{Context, Result};

use super::Flow;
use crate::config::Role;
use crate::service::models::Host as ServiceHost;
use crate::service::stages::HostStage;

fn done(hosts: &[ServiceHost]) -> usize {
    hosts
        .iter()
        .filter(|h| h.stage() == Some(HostStage::Done))
        .count()
}

/// `workerWaitFor2ReadyMasters`: report `Waiting for control plane`, then wait until two
/// control-plane hosts (masters, or a master and an arbiter) are Done; at once for day-2
/// clusters (`AddHostsCluster`). Errors are logged and the poll goes on; only the stop token
/// ends it otherwise.
pub(crate) fn worker_wait_for_control_plane(f: &Flow) -> Result<()> {
    f.reporter.stage(HostStage::WaitingForControlPlane, "");
    let cluster_id = &f.cfg.cluster_id;
    let mut day2: Option<bool> = None;
    f.host
        .clock
        .poll_until(&f.stop, f.intervals.poll, || {
            if day2.is_none() {
                match f.client.get_cluster(cluster_id, true) {
                    Ok(c) => day2 = Some(c.is_day2()),
                    Err(e) => tracing::warn!("getting cluster {cluster_id}: {e:#}"),
                }
            }
            if day2? {
                tracing::info!("day-2 cluster: not waiting for the control plane");
                return Some(());
            }
            let masters = match f.client.list_cluster_hosts(cluster_id, Some(&Role::Master)) {
                Ok(h) => done(&h),
                Err(e) => {
                    tracing::warn!("listing the masters of cluster {cluster_id}: {e:#}");
                    0
                }
            };
            // Two-node clusters with an arbiter: a Done arbiter counts too. Errors ignored.
            let arbiters = f
                .client
                .list_cluster_hosts(cluster_id, Some(&Role::Arbiter))
                .map(|h| done(&h))
                .unwrap_or(0);
            if masters + arbiters >= 2 {
                tracing::info!(
                    "{masters} masters and {arbiters} arbiters are done: the control plane is up"
                );
                return Some(());
            }
            tracing::info!("waiting for the control plane: {masters} masters and {arbiters} arbiters done, 2 needed");
            None
        })
        .context("waiting for the control plane")
}
