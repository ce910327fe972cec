//! Dry mode through the whole main sequence: the pretend cluster of three dry-run hosts
//! (two rebooted at start, the third once the first is done) and the in-memory service. Every
//! rebooted host goes `Configuring`, `Joined`, `Done`; the install completes with the pretend
//! router CA and the final logs are uploaded.

use super::*;
use crate::config::cluster_hosts::ClusterHost;
use crate::controller::testing::{host, ip};
use crate::kube::dry::{DryCluster, DRY_INGRESS_CA};
use crate::service::{HostStage, HostStatus};
use serde_json::json;

#[test]
fn dry_mode_takes_the_rebooted_hosts_to_done_and_completes() {
    let h = Harness::new();
    // Dry host `i` is the node of the service's host `i`, rebooted once its marker exists.
    let hosts: Vec<ClusterHost> = (0..3)
        .map(|i| ClusterHost {
            hostname: format!("node{i}"),
            ip: ip(i),
            reboot_marker_path: h.dir.path().join(format!("node{i}.rebooted")),
        })
        .collect();
    for host in &hosts[..2] {
        std::fs::write(&host.reboot_marker_path, "").unwrap();
    }
    let late_marker = hosts[2].reboot_marker_path.clone();
    let dry = Arc::new(DryCluster::new(hosts));

    // The service's view: every host installing, at `Rebooting`.
    let installing = json!({"status": "installing-in-progress", "cluster_id": "c-1",
        "progress": {"current_stage": "Rebooting"}});
    let hosts = (0..3).map(|i| host(i, installing.clone())).collect();
    h.svc.update_cluster(|c| c.hosts = hosts);
    h.svc.set_operators(vec![record("console", "progressing")]);
    // As the service would: a host at `Done` is installed; the cluster finalizes once every
    // host is, and is installed once completed. Host 2 "reboots" when host 0 is done.
    h.svc.on_call(move |call, _, cluster, _| match call {
        ServiceCall::UpdateHostStage { host_id, stage, .. } if *stage == HostStage::Done => {
            if host_id == "host-0" {
                std::fs::write(&late_marker, "").unwrap();
            }
            for host in cluster.hosts.iter_mut().filter(|x| x.id == *host_id) {
                host.status = Some(HostStatus::Installed);
            }
            if cluster
                .hosts
                .iter()
                .all(|x| x.status == Some(HostStatus::Installed))
            {
                cluster.status = "finalizing".into();
            }
        }
        ServiceCall::CompleteInstallation(_) => cluster.status = "installed".into(),
        _ => {}
    });

    let mut controller = h.controller(&[("DRY_ENABLE", "true")]);
    let cluster: Arc<dyn ClusterApi> = dry.clone();
    controller.build_cluster = Box::new(move || Ok(cluster));
    let out = run(controller).unwrap();
    assert_eq!(out, Outcome::Done { error: false });

    let calls = h.svc.calls();
    let stage_calls: Vec<(usize, String, HostStage)> = calls
        .iter()
        .enumerate()
        .filter_map(|(at, c)| match c {
            ServiceCall::UpdateHostStage { host_id, stage, .. } => {
                Some((at, host_id.clone(), *stage))
            }
            _ => None,
        })
        .collect();
    for id in ["host-0", "host-1", "host-2"] {
        let stages: Vec<HostStage> = stage_calls
            .iter()
            .filter(|(_, h, _)| h == id)
            .map(|(_, _, s)| *s)
            .collect();
        assert_eq!(
            stages,
            [HostStage::Configuring, HostStage::Joined, HostStage::Done],
            "{id}: {stage_calls:?}"
        );
    }
    let at = |id: &str, stage: HostStage| {
        stage_calls
            .iter()
            .find(|(_, h, s)| h == id && *s == stage)
            .map(|(at, _, _)| *at)
            .unwrap()
    };
    assert!(
        at("host-0", HostStage::Done) < at("host-2", HostStage::Configuring),
        "host 2 shows up only once it rebooted: {stage_calls:?}"
    );

    assert_eq!(dry.events().len(), 1, "the ready Event");
    assert!(calls.contains(&ServiceCall::UploadIngressCert(DRY_INGRESS_CA.to_string())));
    assert!(calls.iter().any(|c| matches!(
        c,
        ServiceCall::ReportOperatorStatus(r) if r.name == "console"
    )));
    let complete = position(
        &calls,
        |c| matches!(c, ServiceCall::CompleteInstallation(p) if p.is_success),
    );
    assert!(at("host-2", HostStage::Done) < complete);
    let stage = |s| position(&calls, |c| *c == ServiceCall::UpdateFinalizingStage(s));
    assert!(
        stage(FinalizingStage::WaitingForClusterOperators) < stage(FinalizingStage::AddingRouterCa)
    );
    assert!(stage(FinalizingStage::AddingRouterCa) < stage(FinalizingStage::Done));
    assert!(stage(FinalizingStage::Done) < complete);
    let (requested, completed) = logs_progress(&calls);
    assert!(complete < requested && requested < completed);
    assert!(calls[requested..completed]
        .iter()
        .any(|c| matches!(c, ServiceCall::UploadControllerLogs(_))));
    assert!(
        crate::controller::testing::mg_images(&h.oc).is_empty(),
        "no must-gather on success"
    );
    assert_eq!(h.svc.cluster().status, "installed");
}

/// A single-node cluster in dry mode: a real service answered our `Configuring` for its host
/// with 409 ("Stages Configuring isn't available for host role master bootstrap true"). The
/// host goes `Joined`, `Done` only, and the install completes.
#[test]
fn dry_mode_on_a_single_node_never_reports_configuring() {
    let h = Harness::new();
    let node = ClusterHost {
        hostname: "node0".into(),
        ip: ip(0),
        reboot_marker_path: h.dir.path().join("node0.rebooted"),
    };
    std::fs::write(&node.reboot_marker_path, "").unwrap();
    let dry = Arc::new(DryCluster::new(vec![node]));
    let installing = json!({"status": "installing-in-progress", "cluster_id": "c-1",
        "bootstrap": true, "progress": {"current_stage": "Rebooting"}});
    h.svc.update_cluster(|c| {
        c.hosts = vec![host(0, installing)];
        c.control_plane_count = Some(1);
    });
    h.svc.set_operators(vec![record("console", "progressing")]);
    h.svc.on_call(move |call, _, cluster, _| match call {
        ServiceCall::UpdateHostStage { stage, .. } if *stage == HostStage::Done => {
            cluster.hosts[0].status = Some(HostStatus::Installed);
            cluster.status = "finalizing".into();
        }
        ServiceCall::CompleteInstallation(_) => cluster.status = "installed".into(),
        _ => {}
    });
    let mut controller = h.controller(&[("DRY_ENABLE", "true"), ("CONTROL_PLANE_COUNT", "1")]);
    let cluster: Arc<dyn ClusterApi> = dry.clone();
    controller.build_cluster = Box::new(move || Ok(cluster));
    let out = run(controller).unwrap();
    assert_eq!(out, Outcome::Done { error: false });
    let stages: Vec<HostStage> = (h.svc.calls().into_iter())
        .filter_map(|c| match c {
            ServiceCall::UpdateHostStage { stage, .. } => Some(stage),
            _ => None,
        })
        .collect();
    assert_eq!(stages, [HostStage::Joined, HostStage::Done]);
}
