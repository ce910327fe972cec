//! Dry mode through the whole main sequence: the pretend cluster of three dry-run hosts
//! (two rebooted at start, the third once the first is done) and the in-memory service. Every
//! rebooted host goes `Configuring`, `Joined`, `Done`; the install completes with the pretend
//! router CA and the final logs are uploaded.

use super::*;
use crate::config::cluster_hosts::ClusterHost;
use crate::kube::dry::{DryCluster, DRY_INGRESS_CA};
use crate::service::{Host, HostStage, HostStatus};
use serde_json::json;

fn dry_host(dir: &Path, i: usize) -> ClusterHost {
    ClusterHost {
        hostname: format!("master-{i}"),
        ip: format!("192.0.2.{}", 10 + i),
        reboot_marker_path: dir.join(format!("master-{i}.rebooted")),
    }
}

/// The service's view of dry host `i`: installing, at `Rebooting`, its IP in the inventory.
fn service_host(i: usize) -> Host {
    let inventory = json!({"interfaces": [{"name": "ens3", "ipv4_addresses": [format!("192.0.2.{}/24", 10 + i)]}]});
    serde_json::from_value(json!({
        "id": format!("host-{i}"),
        "infra_env_id": "ie-1",
        "cluster_id": "c-1",
        "status": "installing-in-progress",
        "role": "master",
        "requested_hostname": format!("master-{i}"),
        "progress": {"current_stage": "Rebooting"},
        "inventory": inventory.to_string(),
    }))
    .unwrap()
}

#[test]
fn dry_mode_takes_the_rebooted_hosts_to_done_and_completes() {
    let h = Harness::new();
    let hosts: Vec<ClusterHost> = (0..3).map(|i| dry_host(h.dir.path(), i)).collect();
    for host in &hosts[..2] {
        std::fs::write(&host.reboot_marker_path, "").unwrap();
    }
    let late_marker = hosts[2].reboot_marker_path.clone();
    let dry = Arc::new(DryCluster::new(hosts));

    h.svc
        .update_cluster(|c| c.hosts = (0..3).map(service_host).collect());
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
    assert!(complete < logs_progress(&calls).1);
    assert_eq!(h.svc.cluster().status, "installed");
}
