//! The bootstrap host (HA: it runs the bootstrap control plane, then pivots into a master) and
//! the single-node host (bootstrap-in-place), with the Go installer's steps, stages and info
//! strings (its `startBootstrap`, `waitForControlPlane` and `createSingleNodeMasterIgnition`).
//! Host effects go through `Flow::host`, the new cluster through `Flow::kube`, files under
//! /opt through `Flow::paths`.

use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeSet;
use std::path::PathBuf;

use super::Flow;
use crate::bootstrap::hostname::{needs_random_hostname, random_hostname};
use crate::bootstrap::ignition_merge::merge_host_into_sno;
use crate::bootstrap::mcs_logs::{
    host_ips, hosts_that_fetched_ignition, is_past_ignition_fetch, status_for, McsHost,
};
use crate::bootstrap::pull_secret::extract_pull_secret;
use crate::bootstrap::ssh_manifest::{render_ssh_manifest, SSH_MANIFEST_FILE_NAME};
use crate::config::Role;
use crate::host::commands::CommandRunner;
use crate::image::Cancel;
use crate::kube::install_config::{
    has_valid_vsphere_credentials, needed_ready_masters, remove_uninitialized_taint, replicas,
};
use crate::kube::{
    KubeApi, CONTROLLER_NAMESPACE, CONTROLLER_READY_EVENT, CURRENT_CONFIG_ANNOTATION,
    DESIRED_CONFIG_ANNOTATION, UNINITIALIZED_TAINT,
};
use crate::service::models::{Host as ServiceHost, HostStatus};
use crate::service::stages::{HostStage, LogsState};

/// Attempts at laying down the bootstrap Ignition with the MCO (Go: 3, immediate).
pub const MCO_ATTEMPTS: u32 = 3;

fn run(r: &dyn CommandRunner, program: &str, args: &[&str]) -> Result<String> {
    r.run(program, args).map_err(|e| anyhow!("{e}"))
}

fn kubeconfig(f: &Flow) -> PathBuf {
    f.paths.openshift_dir.join("auth/kubeconfig")
}

/// `startBootstrap`: everything the bootstrap control plane needs before bootkube runs.
/// `sno`: single-node (no SSH key, no NetworkManager restart, controller with SNO=true).
pub fn start_bootstrap(f: &Flow, sno: bool) -> Result<()> {
    let r = f.host.commands.as_ref();
    let dry = f.cfg.dry_run;
    run(r, "mkdir", &["-p", "/root/.ssh"])?;
    let bootstrap_ign = f.paths.install_dir.join("bootstrap.ign");
    f.client
        .download_cluster_file(&f.cfg.cluster_id, "bootstrap.ign", &bootstrap_ign)
        .context("downloading bootstrap.ign")?;
    if !dry {
        install_pull_secret(f, &bootstrap_ign)?;
        lay_down_bootstrap_ignition(f, &bootstrap_ign)?;
        if !sno {
            run(
                r,
                "ssh-keygen",
                &["-q", "-f", "/root/.ssh/id_rsa", "-N", ""],
            )
            .context("generating the bootstrap SSH key")?;
            create_ssh_manifest(f)?;
        }
    }
    f.host.systemd().systemctl("daemon-reload", &[])?;
    if !dry {
        check_hostname(f)?;
    }
    if !sno {
        // Triggers the local DNS prepender dispatcher script (absent on SNO's platform none).
        f.host
            .systemd()
            .systemctl("restart", &["NetworkManager.service"])?;
    }
    if !dry {
        crate::bootstrap::controller::render_manifests(
            &f.paths.openshift_dir.join("manifests"),
            &crate::bootstrap::controller::ControllerSettings::from_config(&f.cfg, &f.token, sno),
        )
        .context("rendering the assisted-installer-controller manifests")?;
    }
    ensure_oc(f)?;
    for unit in [
        "bootkube.service",
        "approve-csr.service",
        "progress.service",
    ] {
        f.host.systemd().systemctl("start", &[unit])?;
    }
    Ok(())
}

/// The pull secret from bootstrap.ign into /root/.docker/config.json on the host, so podman
/// can pull the MCO image. Its bytes never reach a log.
fn install_pull_secret(f: &Flow, bootstrap_ign: &std::path::Path) -> Result<()> {
    let ign = std::fs::read(bootstrap_ign)
        .with_context(|| format!("reading {}", bootstrap_ign.display()))?;
    let secret =
        extract_pull_secret(&ign).context("extracting the pull secret from bootstrap.ign")?;
    let tmp = &f.paths.extracted_pull_secret;
    use crate::postinstall::ignition::{write_secret_file, Existing};
    write_secret_file(tmp, &secret, Existing::Replace)
        .with_context(|| format!("writing {}", tmp.display()))?;
    let r = f.host.commands.as_ref();
    run(r, "mkdir", &["-p", "/root/.docker"])?;
    run(
        r,
        "mv",
        &[&tmp.display().to_string(), "/root/.docker/config.json"],
    )?;
    Ok(())
}

/// The MCO lays the bootstrap Ignition down on the live system (3 immediate attempts).
fn lay_down_bootstrap_ignition(f: &Flow, bootstrap_ign: &std::path::Path) -> Result<()> {
    let ign = bootstrap_ign.display().to_string();
    let args = [
        "run",
        "--net",
        "host",
        "--pid=host",
        "--volume",
        "/:/rootfs:rw",
        "--volume",
        "/usr/bin/rpm-ostree:/usr/bin/rpm-ostree",
        "--privileged",
        "--entrypoint",
        "/usr/bin/machine-config-daemon",
        &f.cfg.mco_image,
        "start",
        "--node-name",
        "localhost",
        "--root-mount",
        "/rootfs",
        "--once-from",
        &ign,
        "--skip-reboot",
    ];
    let mut last = None;
    for attempt in 1..=MCO_ATTEMPTS {
        match f.host.commands.run("podman", &args) {
            Ok(_) => return Ok(()),
            Err(e) => {
                tracing::warn!("extracting the bootstrap Ignition with the MCO (attempt {attempt} of {MCO_ATTEMPTS}): {e}");
                last = Some(e);
            }
        }
    }
    Err(anyhow!("{}", last.expect("an attempt")))
}

fn create_ssh_manifest(f: &Flow) -> Result<()> {
    let key = run(f.host.commands.as_ref(), "cat", &["/root/.ssh/id_rsa.pub"])?;
    let dir = f.paths.openshift_dir.join("openshift");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(SSH_MANIFEST_FILE_NAME);
    std::fs::write(&path, render_ssh_manifest(&key)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// An invalid or `localhost` hostname would let NetworkManager overwrite /etc/resolv.conf and
/// undo the local DNS prepender that bootkube needs: set a random valid one.
fn check_hostname(f: &Flow) -> Result<()> {
    let r = f.host.commands.as_ref();
    let name = run(r, "hostname", &[]).context("reading the hostname")?;
    if needs_random_hostname(name.trim()) {
        let new = random_hostname();
        tracing::info!(
            "hostname {:?} is not valid for the cluster; setting {new}",
            name.trim()
        );
        run(
            r,
            "bash",
            &["-c", &format!("hostnamectl set-hostname {new}")],
        )?;
    }
    Ok(())
}

/// RHEL-only boot images lack `oc`: overlay the node image first and wait for it.
fn ensure_oc(f: &Flow) -> Result<()> {
    let r = f.host.commands.as_ref();
    if r.run("stat", &["/usr/bin/oc"]).is_ok() {
        return Ok(());
    }
    let units = ["node-image-pull.service", "node-image-overlay.service"];
    f.host
        .systemd()
        .systemctl("start", &["--no-block", units[0], units[1]])?;
    for unit in units {
        loop {
            match f.host.systemd().show_active_state(unit) {
                Ok(s) if s.trim() == "active" => break,
                Ok(s) if s.trim() == "failed" => {
                    tracing::error!("{}", f.host.systemd().status(unit));
                    bail!("{unit} failed");
                }
                _ => f.host.clock.sleep(f.intervals.poll),
            }
        }
    }
    if r.run("stat", &["/usr/bin/oc"]).is_err() {
        bail!("/usr/bin/oc is still missing after the node image overlay");
    }
    Ok(())
}

/// The background task reporting other hosts `Configuring` (or `Waiting for ignition` for
/// workers) once the machine-config-server log shows them fetching their Ignition.
pub struct ConfiguringStatus {
    stop: Cancel,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl ConfiguringStatus {
    pub fn spawn(f: &Flow) -> ConfiguringStatus {
        let stop = Cancel::new();
        let (client, reporter_hosts) = (f.client.clone(), f.reporter.clone());
        let (cluster, me) = (f.cfg.cluster_id.clone(), f.cfg.host_id.clone());
        let (logs, every, s2) = (
            f.paths.container_logs.clone(),
            f.intervals.slow_poll,
            stop.clone(),
        );
        let handle = std::thread::Builder::new()
            .name("configuring".into())
            .spawn(move || {
                let mut hosts: Option<Vec<(McsHost, String, Option<HostStage>)>> = None;
                loop {
                    if hosts.is_none() {
                        match client.get_cluster(&cluster, false) {
                            Ok(c) => {
                                hosts = Some(
                                    c.hosts
                                        .iter()
                                        .filter(|h| h.id != me && !h.is_disabled())
                                        .map(|h| {
                                            let ips = h
                                                .inventory
                                                .as_deref()
                                                .map(host_ips)
                                                .unwrap_or_default();
                                            let host = McsHost {
                                                id: h.id.clone(),
                                                role: h.role.clone(),
                                                ips,
                                            };
                                            (host, h.infra_env_id.clone(), h.stage())
                                        })
                                        .collect(),
                                )
                            }
                            Err(e) => {
                                tracing::warn!("getting the hosts of cluster {cluster}: {e:#}")
                            }
                        }
                    }
                    if let Some(list) = hosts.as_mut() {
                        list.retain(|(_, _, stage)| !is_past_ignition_fetch(*stage));
                        if list.is_empty() {
                            return;
                        }
                        let log = read_mcs_logs(&logs);
                        let mcs: Vec<McsHost> = list.iter().map(|(h, _, _)| h.clone()).collect();
                        let fetched: BTreeSet<String> = hosts_that_fetched_ignition(&log, &mcs)
                            .into_iter()
                            .map(|h| h.id.clone())
                            .collect();
                        for (h, infra_env, stage) in list.iter_mut() {
                            if fetched.contains(&h.id) {
                                let new = status_for(h.role.as_ref());
                                reporter_hosts.other_host(infra_env, &h.id, new, "");
                                *stage = Some(new);
                            }
                        }
                    }
                    if s2.sleep(every) {
                        return;
                    }
                }
            })
            .expect("spawning the configuring-status thread");
        ConfiguringStatus {
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for ConfiguringStatus {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn read_mcs_logs(dir: &std::path::Path) -> String {
    let mut out = String::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.contains("machine-config-server") && name.ends_with(".log") {
                out.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
                out.push('\n');
            }
        }
    }
    out
}

/// `waitForControlPlane` and the rest of the bootstrap post-phase, up to the log upload.
pub fn bootstrap_post_phase(f: &Flow) -> Result<()> {
    f.reporter.stage(
        HostStage::WaitingForControlPlane,
        "Waiting for bootstrap node preparation",
    );
    if !f.cfg.dry_run {
        let hosts = run(f.host.commands.as_ref(), "cat", &["/etc/resolv.conf"])?;
        std::fs::write(&f.paths.resolv_conf, hosts)
            .with_context(|| format!("updating {}", f.paths.resolv_conf.display()))?;
    }
    let kube = (f.kube)(&kubeconfig(f)).context("connecting to the bootstrap control plane")?;
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
    wait_for_nodes(f, kube.as_ref(), &Role::Master, &platform, creds);
    wait_for_nodes(f, kube.as_ref(), &Role::Arbiter, &platform, creds);
    wait_for_bootkube(f);
    wait_for_etcd_bootstrap(f);
    wait_for_controller(f, kube.as_ref());
    if invoker(kube.as_ref()) == "agent-installer" {
        wait_for_workers(f);
    }
    wait_for_mc_annotations(f, kube.as_ref());
    Ok(())
}

fn invoker(kube: &dyn KubeApi) -> String {
    kube.get_config_map("openshift-config", "openshift-install-manifests")
        .ok()
        .flatten()
        .and_then(|d| d.get("invoker").cloned())
        .unwrap_or_else(|| "assisted-service".to_string())
}

/// Wait until enough nodes of `role` are Ready, reporting `Joined` for each matching host.
fn wait_for_nodes(f: &Flow, kube: &dyn KubeApi, role: &Role, platform: &str, creds: bool) {
    let mut counted: BTreeSet<String> = BTreeSet::new();
    let mut inventory: Option<Vec<ServiceHost>> = None;
    loop {
        let wanted = kube
            .get_config_map("kube-system", "cluster-config-v1")
            .ok()
            .flatten()
            .and_then(|d| d.get("install-config").cloned())
            .and_then(|y| replicas(&y).ok())
            .map(|r| {
                if *role == Role::Arbiter {
                    r.arbiter.unwrap_or(0)
                } else {
                    r.control_plane.unwrap_or(0)
                }
            });
        if let Some(replicas) = wanted {
            if replicas < 1 {
                return;
            }
            let needed = if *role == Role::Arbiter {
                1
            } else {
                needed_ready_masters(replicas)
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
            match kube.list_nodes(role.as_str()) {
                Ok(nodes) => {
                    let untaint = !nodes.is_empty()
                        && remove_uninitialized_taint(
                            platform,
                            &invoker(kube),
                            &f.cfg.openshift_version,
                            creds,
                        );
                    for node in &nodes {
                        if untaint
                            && !node.ready
                            && node.taints.iter().any(|t| t == UNINITIALIZED_TAINT)
                        {
                            if let Err(e) = kube.remove_node_taint(&node.name, UNINITIALIZED_TAINT)
                            {
                                tracing::warn!(
                                    "removing the uninitialized taint of {}: {e:#}",
                                    node.name
                                );
                            }
                        }
                        if !node.ready || counted.contains(&node.name) {
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
                                    .any(|ip| node.internal_ips.iter().any(|n| n == ip))
                        });
                        match matched {
                            Some(h) if h.status != Some(HostStatus::Installed) => {
                                f.reporter.other_host(
                                    &h.infra_env_id,
                                    &h.id,
                                    HostStage::Joined,
                                    "",
                                );
                            }
                            Some(_) => {}
                            // Counted anyway; the inventory may be stale.
                            None => inventory = None,
                        }
                        counted.insert(node.name.clone());
                    }
                    if counted.len() >= needed {
                        tracing::info!("{} {role} nodes are ready", counted.len());
                        return;
                    }
                }
                Err(e) => tracing::warn!("listing {role} nodes: {e:#}"),
            }
        }
        f.host.clock.sleep(f.intervals.poll);
    }
}

/// `Waiting for bootkube` until bootkube marks itself done.
pub fn wait_for_bootkube(f: &Flow) {
    f.reporter.stage(HostStage::WaitingForBootkube, "");
    let done = f.paths.openshift_dir.join(".bootkube.done");
    while !done.exists() {
        f.host.clock.sleep(f.intervals.poll);
    }
    tracing::info!(
        "bootkube is done: {}",
        f.host.systemd().status("bootkube.service")
    );
}

/// Until progress.service (etcd bootstrap) has finished.
fn wait_for_etcd_bootstrap(f: &Flow) {
    f.reporter.stage(
        HostStage::WaitingForBootkube,
        "waiting for ETCD bootstrap to be complete",
    );
    loop {
        match f.host.systemd().is_active("progress.service") {
            Ok(s) if s.trim() == "inactive" => break,
            Err(e) if e.output.trim() == "inactive" => break,
            _ => f.host.clock.sleep(f.intervals.poll),
        }
    }
    tracing::info!(
        "etcd bootstrap is done: {}",
        f.host.systemd().status("progress.service")
    );
}

/// Until the assisted-installer-controller reports itself ready with an event.
fn wait_for_controller(f: &Flow, kube: &dyn KubeApi) {
    f.reporter.stage(
        HostStage::WaitingForController,
        "waiting for controller pod ready event",
    );
    let mut seen: BTreeSet<String> = BTreeSet::new();
    loop {
        match kube.list_events(CONTROLLER_NAMESPACE) {
            Ok(events) => {
                for e in &events {
                    if seen.insert(e.name.clone()) {
                        tracing::info!("controller event {}: {} {}", e.name, e.reason, e.message);
                    }
                }
                if events.iter().any(|e| e.name == CONTROLLER_READY_EVENT) {
                    break;
                }
            }
            Err(e) => tracing::warn!("listing events in {CONTROLLER_NAMESPACE}: {e:#}"),
        }
        f.host.clock.sleep(f.intervals.poll);
    }
    if let Err(e) = f
        .client
        .update_cluster_logs_progress(&f.cfg.cluster_id, LogsState::Requested)
    {
        tracing::warn!("reporting the cluster logs as requested: {e:#}");
    }
}

/// Agent-based installs run the service on this host: wait until no worker still needs it.
fn wait_for_workers(f: &Flow) {
    let busy = [
        HostStage::WaitingForControlPlane,
        HostStage::Installing,
        HostStage::StartingInstallation,
    ];
    loop {
        match f
            .client
            .list_cluster_hosts(&f.cfg.cluster_id, Some(&Role::Worker))
        {
            Ok(hosts)
                if !hosts
                    .iter()
                    .any(|h| h.stage().is_some_and(|s| busy.contains(&s))) =>
            {
                return
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("listing workers: {e:#}"),
        }
        f.host.clock.sleep(f.intervals.slow_poll);
    }
}

/// Pure: every master has both MachineConfig annotations, both configs exist, and all masters
/// want the same config.
pub fn mc_annotations_consistent(kube: &dyn KubeApi) -> Result<bool> {
    let masters = kube.list_nodes(Role::Master.as_str())?;
    if masters.is_empty() {
        return Ok(false);
    }
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
    Ok(desired.len() == 1)
}

/// The bootstrap must not reboot while masters point at MachineConfigs that do not exist.
fn wait_for_mc_annotations(f: &Flow, kube: &dyn KubeApi) {
    loop {
        match mc_annotations_consistent(kube) {
            Ok(true) => return,
            Ok(false) => {
                tracing::info!("waiting for consistent MachineConfig annotations on the masters")
            }
            Err(e) => tracing::warn!("checking MachineConfig annotations: {e:#}"),
        }
        f.host.clock.sleep(f.intervals.poll);
    }
}

/// `createSingleNodeMasterIgnition`: bootstrap in place, wait for bootkube, and merge the
/// host's own Ignition into the single-node master.ign it produced. Returns master.ign.
pub fn single_node_master_ignition(f: &Flow) -> Result<PathBuf> {
    start_bootstrap(f, true)?;
    wait_for_bootkube(f);
    let master = f.paths.openshift_dir.join("master.ign");
    if !master.exists() {
        bail!("{} was not created by bootkube", master.display());
    }
    // Pure file work: done in dry-run mode too (the Go dry-run skips it; ours keeps the disk's
    // content meaningful).
    {
        let host_ign = f
            .paths
            .install_dir
            .join(format!("master-{}.ign", f.cfg.host_id));
        f.client
            .download_host_ignition(&f.cfg.infra_env_id, &f.cfg.host_id, &host_ign)
            .context("downloading the host Ignition config")?;
        let merged = merge_host_into_sno(
            &std::fs::read(&master).with_context(|| format!("reading {}", master.display()))?,
            &std::fs::read(&host_ign).with_context(|| format!("reading {}", host_ign.display()))?,
        )
        .context("merging the host Ignition config into the single-node master.ign")?;
        write_private(&master, &merged)?;
    }
    Ok(master)
}

fn write_private(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::{EventInfo, NodeInfo};
    use std::collections::BTreeMap;

    /// Masters and MachineConfigs in memory.
    struct Kube {
        masters: Vec<NodeInfo>,
        configs: Vec<&'static str>,
    }

    impl KubeApi for Kube {
        fn list_nodes(&self, role: &str) -> Result<Vec<NodeInfo>> {
            Ok(if role == "master" {
                self.masters.clone()
            } else {
                vec![]
            })
        }
        fn list_events(&self, _: &str) -> Result<Vec<EventInfo>> {
            Ok(vec![])
        }
        fn get_config_map(&self, _: &str, _: &str) -> Result<Option<BTreeMap<String, String>>> {
            Ok(None)
        }
        fn machine_config_exists(&self, name: &str) -> Result<bool> {
            Ok(self.configs.contains(&name))
        }
        fn remove_node_taint(&self, _: &str, _: &str) -> Result<()> {
            Ok(())
        }
    }

    fn master(current: Option<&str>, desired: Option<&str>) -> NodeInfo {
        let mut annotations = BTreeMap::new();
        if let Some(c) = current {
            annotations.insert(CURRENT_CONFIG_ANNOTATION.to_string(), c.to_string());
        }
        if let Some(d) = desired {
            annotations.insert(DESIRED_CONFIG_ANNOTATION.to_string(), d.to_string());
        }
        NodeInfo {
            name: "m".into(),
            ready: true,
            annotations,
            ..NodeInfo::default()
        }
    }

    fn consistent(masters: Vec<NodeInfo>, configs: Vec<&'static str>) -> bool {
        mc_annotations_consistent(&Kube { masters, configs }).unwrap()
    }

    #[test]
    fn machine_config_annotation_cases() {
        let ok = || master(Some("rendered-a"), Some("rendered-a"));
        assert!(
            consistent(vec![ok()], vec!["rendered-a"]),
            "one consistent master"
        );
        assert!(
            consistent(vec![ok(), ok()], vec!["rendered-a"]),
            "two consistent masters"
        );
        assert!(
            !consistent(vec![], vec!["rendered-a"]),
            "no masters: keep waiting"
        );
        assert!(
            !consistent(vec![master(None, Some("rendered-a"))], vec!["rendered-a"]),
            "currentConfig missing"
        );
        assert!(
            !consistent(vec![master(Some("rendered-a"), None)], vec!["rendered-a"]),
            "desiredConfig missing"
        );
        assert!(
            !consistent(
                vec![master(Some("rendered-old"), Some("rendered-a"))],
                vec!["rendered-a"]
            ),
            "current MC missing"
        );
        assert!(
            !consistent(
                vec![master(Some("rendered-a"), Some("rendered-new"))],
                vec!["rendered-a"]
            ),
            "desired MC missing"
        );
        assert!(
            !consistent(
                vec![ok(), master(Some("rendered-a"), Some("rendered-b"))],
                vec!["rendered-a", "rendered-b"]
            ),
            "masters disagree on desiredConfig"
        );
    }
}
