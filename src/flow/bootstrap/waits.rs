//! `waitForControlPlane` and the rest of the bootstrap post-phase: the bootstrap host stays up
//! until the masters have joined, bootkube and the etcd bootstrap are done, the controller runs,
//! (agent-based installs) no worker still needs this host's service, and the masters agree on
//! their MachineConfig. As in Go, these waits have no time limit and log their errors; only
//! the stop token ends one early.

use anyhow::{Context, Result};
use std::collections::BTreeSet;

use super::controller_logs::{upload_controller_logs, UPLOAD_EVERY};
use super::Flow;
use crate::config::Role;
use crate::controller::tasks::ready::invoker;
use crate::kube::install_config::{
    has_valid_vsphere_credentials, needed_ready_masters, remove_uninitialized_taint, replicas,
};
use crate::kube::{remove_taint_by_key, ClusterApi};
use crate::openshift;
use crate::openshift::mcs_logs::host_ips;
use crate::openshift::{
    CONTROLLER_NAMESPACE, CONTROLLER_READY_EVENT, CURRENT_CONFIG_ANNOTATION,
    DESIRED_CONFIG_ANNOTATION, UNINITIALIZED_TAINT,
};
use crate::service::models::{Host as ServiceHost, HostStatus};
use crate::service::stages::{HostStage, LogsState};

/// `waitForControlPlane` and the rest of the bootstrap post-phase, up to the log upload.
pub(crate) fn bootstrap_post_phase(f: &Flow) -> Result<()> {
    f.reporter.stage(
        HostStage::WaitingForControlPlane,
        "Waiting for bootstrap node preparation",
    );
    if !f.cfg.dry_run {
        let hosts = f.host.commands.run("cat", &["/etc/resolv.conf"])?;
        std::fs::write(&f.paths.resolv_conf, hosts)
            .with_context(|| format!("updating {}", f.paths.resolv_conf.display()))?;
    }
    let kubeconfig = f.paths.openshift_dir.join("auth/kubeconfig");
    let kube = (f.kube)(&kubeconfig).context("connecting to the bootstrap control plane")?;
    f.reporter.stage(
        HostStage::WaitingForControlPlane,
        "Waiting for masters to join bootstrap control plane",
    );
    let cluster = f
        .client
        .get_cluster(&f.cfg.cluster_id, true)
        .context("getting the cluster")?;
    let creds = cluster
        .install_config_overrides
        .as_deref()
        .is_some_and(has_valid_vsphere_credentials);
    tracing::info!(
        "platform {:?}, valid vSphere credentials: {creds}",
        cluster.platform_type()
    );
    let platform = cluster.platform_type().to_string();
    for role in [Role::Master, Role::Arbiter] {
        wait_for_nodes(f, kube.as_ref(), &role, &platform, creds)?;
    }
    wait_for_bootkube(f)?;
    wait_for_etcd_bootstrap(f)?;
    wait_for_controller(f, kube.as_ref())?;
    if invoker(kube.as_ref()) == openshift::INVOKER_AGENT {
        wait_for_workers(f)?;
    }
    wait_for_mc_annotations(f, kube.as_ref())
}

/// `waitForNodes`: until enough nodes of `role` are Ready (at once when the install-config
/// wants none), reporting `Joined` for each matching host.
fn wait_for_nodes(
    f: &Flow,
    kube: &dyn ClusterApi,
    role: &Role,
    platform: &str,
    creds: bool,
) -> Result<()> {
    // Ready nodes already counted (and reported).
    let mut counted = BTreeSet::new();
    // The other enabled hosts, fetched once and again after a node matched none of them.
    let mut inventory: Option<Vec<ServiceHost>> = None;
    f.poll(
        f.intervals.poll,
        format!("waiting for the {role} nodes"),
        || {
            let replicas = kube
                .get_config_map("kube-system", "cluster-config-v1")
                .ok()
                .flatten()
                .and_then(|d| d.get("install-config").cloned())
                .and_then(|y| replicas(&y).ok())
                .map(|r| match role {
                    Role::Arbiter => r.arbiter.unwrap_or(0),
                    _ => r.control_plane.unwrap_or(0),
                })?;
            if replicas < 1 {
                return Some(());
            }
            let needed = match role {
                Role::Arbiter => 1,
                _ => needed_ready_masters(replicas),
            };
            if inventory.is_none() {
                inventory = f
                    .client
                    .get_cluster(&f.cfg.cluster_id, false)
                    .ok()
                    .map(|c| {
                        c.hosts
                            .into_iter()
                            .filter(|h| h.id != f.cfg.host_id && !h.is_disabled())
                            .collect()
                    });
            }
            let nodes = match kube.list_nodes(Some(&openshift::role_label(role.as_str()))) {
                Ok(nodes) => nodes,
                Err(e) => {
                    tracing::warn!("listing {role} nodes: {e:#}");
                    return None;
                }
            };
            let untaint = !nodes.is_empty()
                && remove_uninitialized_taint(
                    platform,
                    &invoker(kube),
                    &f.cfg.openshift_version,
                    creds,
                );
            for node in &nodes {
                if untaint
                    && !node.is_ready()
                    && node.taints.iter().any(|t| t.key == UNINITIALIZED_TAINT)
                {
                    if let Err(e) = remove_taint_by_key(kube, &node.name, UNINITIALIZED_TAINT) {
                        tracing::warn!("removing the uninitialized taint of {}: {e:#}", node.name);
                    }
                }
                if !node.is_ready() || counted.contains(&node.name) {
                    continue;
                }
                let hosts = inventory.as_deref().unwrap_or_default();
                let matched = hosts.iter().find(|h| {
                    h.requested_hostname.to_lowercase() == node.name.to_lowercase()
                        || h.inventory
                            .as_deref()
                            .map(host_ips)
                            .unwrap_or_default()
                            .iter()
                            .any(|ip| node.internal_ips().any(|n| n == ip))
                });
                match matched {
                    Some(h) if h.status != Some(HostStatus::Installed) => {
                        f.reporter.other_host(h, HostStage::Joined, "");
                    }
                    Some(_) => {}
                    // Counted anyway; the inventory may be stale.
                    None => inventory = None,
                }
                counted.insert(node.name.clone());
            }
            if counted.len() >= needed {
                tracing::info!("{} {role} nodes are ready", counted.len());
                return Some(());
            }
            None
        },
    )
}

/// `waitForBootkube`: `Waiting for bootkube` until bootkube marks itself done.
pub(crate) fn wait_for_bootkube(f: &Flow) -> Result<()> {
    f.reporter.stage(HostStage::WaitingForBootkube, "");
    let done = f.paths.openshift_dir.join(".bootkube.done");
    f.poll(f.intervals.poll, "waiting for bootkube", || {
        done.exists().then_some(())
    })?;
    let status = f.host.systemd().status("bootkube.service");
    tracing::info!("bootkube is done: {status}");
    Ok(())
}

/// `waitForETCDBootstrap`: until progress.service (etcd bootstrap) has finished.
fn wait_for_etcd_bootstrap(f: &Flow) -> Result<()> {
    f.reporter.stage(
        HostStage::WaitingForBootkube,
        "waiting for ETCD bootstrap to be complete",
    );
    f.poll(
        f.intervals.poll,
        "waiting for the etcd bootstrap",
        || match f.host.systemd().is_active("progress.service") {
            Ok(s) if s.trim() == "inactive" => Some(()),
            Err(e) if e.output.trim() == "inactive" => Some(()),
            _ => None,
        },
    )?;
    let status = f.host.systemd().status("progress.service");
    tracing::info!("etcd bootstrap is done: {status}");
    Ok(())
}

/// `waitForController`: until the controller reports itself ready with an event, logging each
/// new event of its namespace. Meanwhile its logs are uploaded every [`UPLOAD_EVERY`] of the
/// flow's clock (the first after that long), and once more when it is ready, after the
/// cluster's logs are requested.
fn wait_for_controller(f: &Flow, kube: &dyn ClusterApi) -> Result<()> {
    f.reporter.stage(
        HostStage::WaitingForController,
        "waiting for controller pod ready event",
    );
    let clock = f.host.clock.as_ref();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut next_upload = clock.now() + UPLOAD_EVERY;
    let what = "waiting for the assisted-installer-controller";
    f.poll(f.intervals.poll, what, || {
        match kube.list_events(CONTROLLER_NAMESPACE) {
            Ok(events) => {
                for e in events.iter().filter(|e| seen.insert(e.name.clone())) {
                    tracing::info!("controller event {}: {} {}", e.name, e.reason, e.message);
                }
                if events.iter().any(|e| e.name == CONTROLLER_READY_EVENT) {
                    return Some(());
                }
            }
            Err(e) => tracing::warn!("listing events in {CONTROLLER_NAMESPACE}: {e:#}"),
        }
        if clock.now() >= next_upload {
            upload_controller_logs(f, kube);
            // As Go's ticker: uploads missed while one was slow are dropped, not caught up.
            while next_upload <= clock.now() {
                next_upload += UPLOAD_EVERY;
            }
        }
        None
    })?;
    tracing::info!("the assisted-installer-controller is ready");
    if let Err(e) = f
        .client
        .update_cluster_logs_progress(&f.cfg.cluster_id, LogsState::Requested)
    {
        tracing::warn!("reporting the cluster logs as requested: {e:#}");
    }
    upload_controller_logs(f, kube);
    Ok(())
}

/// `waitForWorkers`: agent-based installs run the service on this host, so it waits until no
/// worker still needs it.
fn wait_for_workers(f: &Flow) -> Result<()> {
    let busy = [
        HostStage::WaitingForControlPlane,
        HostStage::Installing,
        HostStage::StartingInstallation,
    ];
    let workers = Some(&Role::Worker);
    f.poll(f.intervals.slow_poll, "waiting for the workers", || match f
        .client
        .list_cluster_hosts(&f.cfg.cluster_id, workers)
    {
        Ok(hosts) => (!hosts
            .iter()
            .any(|h| h.stage().is_some_and(|s| busy.contains(&s))))
        .then_some(()),
        Err(e) => {
            tracing::warn!("listing workers: {e:#}");
            None
        }
    })
}

/// Every master has both MachineConfig annotations, both configs exist, and all masters want
/// the same config.
fn mc_annotations_consistent(kube: &dyn ClusterApi) -> Result<bool> {
    let masters = kube.list_nodes(Some(&openshift::role_label("master")))?;
    let mut desired: BTreeSet<&str> = BTreeSet::new();
    for node in &masters {
        let (Some(cur), Some(want)) = (
            node.annotations.get(CURRENT_CONFIG_ANNOTATION),
            node.annotations.get(DESIRED_CONFIG_ANNOTATION),
        ) else {
            return Ok(false);
        };
        if !kube.machine_config_exists(cur)? || !kube.machine_config_exists(want)? {
            return Ok(false);
        }
        desired.insert(want);
    }
    // No masters: none desired, keep waiting.
    Ok(desired.len() == 1)
}

/// `waitForMCAnnotationsConsistent`: the bootstrap must not reboot while masters point at
/// MachineConfigs that do not exist.
fn wait_for_mc_annotations(f: &Flow, kube: &dyn ClusterApi) -> Result<()> {
    let what = "waiting for consistent MachineConfig annotations";
    f.poll(f.intervals.poll, what, || {
        match mc_annotations_consistent(kube) {
            Ok(true) => return Some(()),
            Ok(false) => {
                tracing::info!("waiting for consistent MachineConfig annotations on the masters")
            }
            Err(e) => tracing::warn!("checking MachineConfig annotations: {e:#}"),
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Stopped;
    use crate::flow::testing::TestFlow;
    use crate::kube::testing::FakeCluster;
    use crate::kube::Node;
    use crate::openshift::role_label;
    use std::collections::BTreeMap;

    /// Masters (all named by their annotations) and MachineConfigs in memory.
    fn kube(masters: &[Node], configs: &[&str]) -> FakeCluster {
        let kube = FakeCluster::new();
        for (i, m) in masters.iter().enumerate() {
            kube.set_node(Node {
                name: format!("m{i}"),
                ..m.clone()
            });
        }
        configs.iter().for_each(|c| kube.add_machine_config(c));
        kube
    }

    fn master(current: Option<&str>, desired: Option<&str>) -> Node {
        let mut annotations = BTreeMap::new();
        if let Some(c) = current {
            annotations.insert(CURRENT_CONFIG_ANNOTATION.to_string(), c.to_string());
        }
        if let Some(d) = desired {
            annotations.insert(DESIRED_CONFIG_ANNOTATION.to_string(), d.to_string());
        }
        let labels = [(role_label("master"), String::new())];
        Node {
            annotations,
            labels: labels.into(),
            ..Node::default()
        }
    }

    #[test]
    fn machine_config_annotation_cases() {
        let a = Some("rendered-a");
        let ok = master(a, a);
        let no_current = master(None, a);
        let no_desired = master(a, None);
        let old_current = master(Some("rendered-old"), a);
        let new_desired = master(a, Some("rendered-new"));
        let desires_b = master(a, Some("rendered-b"));
        let (ab, a_only): (&[&str], &[&str]) = (&["rendered-a", "rendered-b"], &["rendered-a"]);
        let cases: [(Vec<&Node>, &[&str], bool, &str); 8] = [
            (vec![&ok], a_only, true, "one consistent master"),
            (vec![&ok, &ok], a_only, true, "two consistent masters"),
            (vec![], a_only, false, "no masters: keep waiting"),
            (vec![&no_current], a_only, false, "currentConfig missing"),
            (vec![&no_desired], a_only, false, "desiredConfig missing"),
            (vec![&old_current], a_only, false, "current MC missing"),
            (vec![&new_desired], a_only, false, "desired MC missing"),
            (vec![&ok, &desires_b], ab, false, "masters disagree"),
        ];
        for (masters, configs, expected, why) in cases {
            let masters: Vec<Node> = masters.into_iter().cloned().collect();
            let kube = kube(&masters, configs);
            assert_eq!(mc_annotations_consistent(&kube).unwrap(), expected, "{why}");
        }
    }

    #[test]
    fn a_stop_ends_a_wait_before_its_next_poll() {
        let t = TestFlow::new("bootstrap");
        // Masters that never agree, and a signal arriving during the third poll.
        let kube = kube(&[master(None, None)], &[]);
        let stop = t.flow.stop.clone();
        kube.before_each_call(move |kube, _| {
            if kube.count("list_nodes") == 2 {
                stop.cancel();
            }
        });
        let e = wait_for_mc_annotations(&t.flow, &kube).unwrap_err();
        assert!(e.downcast_ref::<Stopped>().is_some(), "{e:#}");
        assert_eq!(
            format!("{e:#}"),
            "waiting for consistent MachineConfig annotations: stop requested"
        );
        assert_eq!(kube.count("list_nodes"), 3);
        assert_eq!(
            t.clock.sleeps(),
            vec![t.flow.intervals.poll; 2],
            "the interval after the stop is not slept"
        );
        // Already stopped: the waits end at once, no interval slept.
        let e = wait_for_bootkube(&t.flow).unwrap_err();
        assert!(e.downcast_ref::<Stopped>().is_some(), "{e:#}");
        assert_eq!(format!("{e:#}"), "waiting for bootkube: stop requested");
        let e = wait_for_mc_annotations(&t.flow, &FakeCluster::new()).unwrap_err();
        assert!(e.downcast_ref::<Stopped>().is_some(), "{e:#}");
        assert_eq!(t.clock.sleeps().len(), 2, "no poll interval slept");
    }
}
