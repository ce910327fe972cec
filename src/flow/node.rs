//! `RunInstaller` / `InstallNode` for masters and workers, in the Go installer's order and with
//! its stage and info strings (they appear in the UI and in triage signatures).

use anyhow::{Context, Result};
use std::path::Path;
use std::time::Duration;

use super::bootstrap::{
    bootstrap_post_phase, single_node_master_ignition, start_bootstrap, ConfiguringStatus,
};
use super::early::EarlyWrite;
use super::existing_root;
use super::first_boot::{self, with_warnings};
use super::skip_mco::SkipMco;
use super::writer::WriteRequest;
use super::Flow;
use crate::clock::{Failure, Schedule, Stopped, WaitError};
use crate::config::{KernelOptions, Role};
use crate::disk::partitions::has_partition_maps;
use crate::host::boot_order::set_boot_order;
use crate::host::disk_prep::{cleanup_install_device, format_disks, resolve_disk_symlink};
use crate::host::existing_root::write_image_to_existing_root;
use crate::host::logs::upload_installation_logs;
use crate::host::reboot::ironic_agent_present;
use crate::host::registry_copy;
use crate::host::root::HostRoot;
use crate::service::models::Host as ServiceHost;
use crate::service::stages::{HostStage, LogsState};
use crate::write::parse_installer_args;
use crate::write::post_install::reload_partitions;

/// Attempts at the disk write, about a second apart (Go: `utils.Retry(3, …)`).
const WRITE_ATTEMPTS: u32 = 3;

/// The whole run: format the `--format-disk` disks, install the node, and on a fatal error
/// report `Failed` with the reason. The reporter is drained before returning.
pub fn run_installer(f: &Flow) -> Result<()> {
    // The host's files (keyfiles, live image) must be reachable before any disk is touched,
    // the --format-disk ones included.
    let result = f
        .paths
        .host_root
        .clone()
        .map_err(anyhow::Error::from)
        .and_then(|host_root| {
            if !f.cfg.dry_run && f.cfg.coreos_image.is_none() && !f.cfg.format_disks.is_empty() {
                let failed = format_disks(f.host.commands.as_ref(), &f.cfg.format_disks);
                if failed > 0 {
                    tracing::warn!("{failed} of the --format-disk disks could not be formatted");
                }
            }
            install_node(f, host_root)
        });
    if let Err(e) = &result {
        tracing::error!("installation failed: {e:#}");
        f.reporter.stage(HostStage::Failed, format!("{e:#}"));
    }
    if !f.reporter.drain(Duration::from_secs(60)) {
        tracing::warn!("some progress reports could not be sent before exiting");
    }
    result
}

fn install_node(f: &Flow, host_root: HostRoot) -> Result<()> {
    let cfg = &f.cfg;
    f.reporter
        .stage(HostStage::StartingInstallation, cfg.role.as_str());
    // --installer-args must be usable (and their host paths reachable) before anything is
    // touched.
    let writer_args = parse_installer_args(&cfg.installer_args)?;
    match &cfg.coreos_image {
        // Deployed with ostree onto the running root: no disk write to prepare for.
        Some(image) => {
            let unused = existing_root::unused_options(&writer_args);
            if !unused.is_empty() {
                tracing::warn!(
                    "--coreos-image {image}: ignoring the --installer-args options that only a disk write uses: {}",
                    unused.join(", ")
                );
            }
        }
        None => f.writer.preflight(&writer_args, Some(&host_root))?,
    }
    let device = resolve_disk_symlink(&cfg.boot_device);
    let dev = device.display().to_string();
    // With --coreos-image the disk holds the running system. Partitions to keep rule the
    // cleanup out: its wipefs erases the partition table the writer reads them from (Go
    // loses them silently unless the user also passed --skip-installation-disk-cleanup).
    let keeps_partitions =
        !writer_args.save_partlabel.is_empty() || !writer_args.save_partindex.is_empty();
    if keeps_partitions && !cfg.skip_installation_disk_cleanup && !cfg.dry_run {
        tracing::info!(
            "skipping the cleanup of install device {dev}: --installer-args asks to keep partitions (--save-partlabel/--save-partindex), and the cleanup's wipefs would erase the partition table they are read from"
        );
    }
    if !cfg.dry_run
        && !cfg.skip_installation_disk_cleanup
        && !keeps_partitions
        && cfg.coreos_image.is_none()
    {
        if let Err(e) = cleanup_install_device(f.host.commands.as_ref(), &dev) {
            f.reporter.stage(
                HostStage::StartingInstallation,
                format!(
                    "Could not clean install device {dev}. The installation will continue. If the installation fails, clean the disk and try again"
                ),
            );
            // Triage signatures match this exact line.
            tracing::error!("failed to prepare install device {dev}, err {e}");
        }
    }
    std::fs::create_dir_all(&f.paths.install_dir)
        .with_context(|| format!("creating {}", f.paths.install_dir.display()))?;
    let single_node = cfg.is_single_node();
    let bootstrap = cfg.role == Role::Bootstrap && !single_node;
    let kernel = KernelOptions::read(&f.paths.live_cmdline);
    if kernel.verify_write {
        tracing::info!(
            "ai.verify-write is set on the kernel command line ({}): the image will be read back from {} and checked after the write",
            f.paths.live_cmdline.display(),
            device.display()
        );
    }
    if kernel.kexec {
        tracing::info!(
            "ai.kexec is set on the kernel command line ({}): the host will reboot into the installed system with kexec, or through the firmware if it cannot be loaded",
            f.paths.live_cmdline.display()
        );
    }
    let request = WriteRequest {
        device,
        args: writer_args,
        host_root: Some(host_root.clone()),
        verify: kernel.verify_write,
    };
    // The bootstrap and single-node disks are not needed by the live system: write them while
    // the control plane forms (see flow::early).
    let mut early = ((bootstrap || single_node) && f.early_write && cfg.coreos_image.is_none())
        .then(|| EarlyWrite::start(f.writer.clone(), &request));
    let result = install_after_prologue(
        f,
        &host_root,
        &request,
        (bootstrap, single_node, kernel.kexec),
        &mut early,
    );
    match (result, early) {
        (Err(e), Some(early)) => Err(early.abandon(e)),
        (r, _) => r,
    }
}

fn install_after_prologue(
    f: &Flow,
    host_root: &HostRoot,
    request: &WriteRequest,
    (bootstrap, single_node, kexec): (bool, bool, bool),
    early: &mut Option<EarlyWrite>,
) -> Result<()> {
    let cfg = &f.cfg;
    let dev = request.device.display().to_string();
    // The role reported and installed: the HA bootstrap pivots into a master.
    let mut role = cfg.role.clone();
    let _configuring = if bootstrap {
        start_bootstrap(f, false)?;
        // Dry run too: its machine-config-server log is made up from the cluster-hosts file.
        let watcher = ConfiguringStatus::spawn(f);
        role = Role::Master;
        Some(watcher)
    } else {
        None
    };
    f.reporter.stage(HostStage::Installing, role.as_str());
    let ignition = if single_node {
        let ignition = single_node_master_ignition(f)?;
        // Go installs the single node as a master from here on (it gets the registry copy).
        role = Role::Master;
        ignition
    } else {
        // `GET …/downloads/ignition` into `<install dir>/<role>-<hostID>.ign`.
        let path = f
            .paths
            .install_dir
            .join(format!("{role}-{}.ign", cfg.host_id));
        f.client
            .download_host_ignition(&cfg.infra_env_id, &cfg.host_id, &path)
            .context("downloading the host Ignition config")?;
        path
    };
    // A real install refuses an Ignition config that does not parse here, before the disk is
    // written (an early write is reset); a dry run writes the disk without it.
    let usable = f.usable_ignition(&ignition, "the disk is written without an Ignition config")?;
    let ignition = usable.then_some(ignition.as_path());
    // Fetched while the disk is written; deployed at Go's point, after the write (and a
    // worker's wait), before the boot order.
    let skip_mco = ignition.and_then(|ignition| SkipMco::start(f, ignition));
    write_image_to_disk(f, request, ignition, early.take())?;
    let warnings = first_boot::check(f, request);
    if cfg.role == Role::Worker {
        worker_wait_for_control_plane(f, &with_warnings("", &warnings))?;
    }
    // Skip-MCO, the boot entry and the registry copy are about a written disk: not with
    // --coreos-image (SkipMco::start is None then).
    let on_disk = cfg.coreos_image.is_none();
    if let Some(skip_mco) = skip_mco {
        skip_mco.finish(f, &dev, &request.args.kargs_network.append_kargs)?;
    }
    if !cfg.dry_run && on_disk {
        let firmware_disks = |esp| crate::disk::firmware_disks(&request.device, esp);
        if let Err(e) = set_boot_order(
            f.host.commands.as_ref(),
            f.host.clock.as_ref(),
            &dev,
            &firmware_disks,
            &f.arch,
        ) {
            tracing::warn!("failed to set the boot order of {dev}: {e:#}");
            // Without its entry the host starts the discovery ISO again after the reboot and
            // waits for a user: say so where the user looks, on the stage the host is at.
            let stage = if cfg.role == Role::Worker {
                HostStage::WaitingForControlPlane
            } else {
                HostStage::WritingImageToDisk
            };
            f.reporter.stage(stage, boot_entry_failure_info(&dev, &e));
        }
    }
    if on_disk && role == Role::Master && host_root.local(&f.paths.registry_marker)?.exists() {
        copy_registry_data(f, &dev)?;
    }
    if bootstrap {
        bootstrap_post_phase(f)?;
    }
    upload_logs(f, bootstrap || single_node);
    // With --coreos-image no disk was written: nothing to load.
    let kexec = (kexec && on_disk).then_some(request.device.as_path());
    // Single node reboots at once; the others wait a minute (etcd bootstrap race, OCPBUGS-5988).
    let when = if single_node { "now" } else { "+1" };
    finalize(f, when, kexec, &warnings)
}

/// The service's info text when the UEFI boot entry could not be made: what failed, and what
/// the user must do so that the host starts the installed system.
fn boot_entry_failure_info(dev: &str, e: &anyhow::Error) -> String {
    format!(
        "Could not create the UEFI boot entry for the installation disk {dev} ({e:#}). \
         Set the boot order in the firmware setup (or pick the disk in its boot menu) to start \
         from the installation disk, or the host will boot the discovery ISO again after the reboot"
    )
}

/// Report `Writing image to disk`, finish the early write if there is one, else (or if it
/// failed) write with up to three attempts about a second apart, with percentages. With
/// `--coreos-image`, deploy that image onto the running root instead, with the same attempts
/// (ostree prints no percentages: the stage alone is reported).
fn write_image_to_disk(
    f: &Flow,
    req: &WriteRequest,
    ignition: Option<&Path>,
    early: Option<EarlyWrite>,
) -> Result<()> {
    f.reporter.stage(HostStage::WritingImageToDisk, "");
    if let Some(image) = &f.cfg.coreos_image {
        if f.cfg.dry_run {
            // Go's dry run swaps only coreos-installer for a fake; ours runs no host command.
            tracing::info!("dry run: not deploying {image} onto the running root");
            return Ok(());
        }
        // Only a dry run goes on without one (see `Flow::usable_ignition`).
        let ignition = ignition.context("no Ignition config to deploy with --coreos-image")?;
        let root = existing_root::request(image, &req.args, ignition);
        return write_attempts(f, "the running root", || {
            write_image_to_existing_root(f.host.commands.as_ref(), &root)
        });
    }
    if let Some(early) = early {
        match early.complete(&f.reporter, ignition) {
            Ok(()) => return Ok(()),
            Err(e) => tracing::warn!(
                "the early write of {} failed ({e:#}); writing it again",
                req.device.display()
            ),
        }
    }
    let reporter = &f.reporter;
    let percent = |p: u8| reporter.write_percent(p);
    write_attempts(f, &req.device.display().to_string(), || {
        f.writer.write(req, ignition, &percent)
    })
}

/// Up to [`WRITE_ATTEMPTS`] of `write` onto `target`, about a second apart.
fn write_attempts(f: &Flow, target: &str, mut write: impl FnMut() -> Result<()>) -> Result<()> {
    let schedule = Schedule::tries(WRITE_ATTEMPTS, Duration::from_secs(1));
    let written = f.host.clock.retry(
        &f.stop,
        &schedule,
        |failures| {
            write().map_err(|e| {
                let attempt = failures + 1;
                tracing::warn!(
                    "writing the image to {target} (attempt {attempt} of {WRITE_ATTEMPTS}): {e:#}"
                );
                Failure::Retry(e)
            })
        },
        |_, _| {},
    );
    match written {
        Ok(()) => Ok(()),
        // `{:#}` renders "failed after 3 attempts, last error: <the chain>", Go's text; the
        // writer's own error stays below it, typed.
        Err(WaitError::GaveUp { last, .. }) => Err(last.context(format!(
            "failed after {WRITE_ATTEMPTS} attempts, last error"
        ))),
        // When the write itself saw the signal, its error says what was left on the disk.
        Err(WaitError::Stopped { last, .. }) => {
            let stopped = match last {
                Some(last) => last.context(Stopped),
                None => Stopped.into(),
            };
            Err(stopped.context(format!("writing the image to {target}")))
        }
        Err(WaitError::Fatal { error, .. }) => Err(error),
    }
}

/// `Copying registry data to disk`, then the copy with its percentages (Go
/// `Ops.CopyRegistryData`); any failure is fatal. In dry-run mode only the stage is reported:
/// Go's dry run would run the copy's host commands, ours runs none.
fn copy_registry_data(f: &Flow, device: &str) -> Result<()> {
    let stage = HostStage::CopyingRegistryDataToDisk;
    f.reporter.stage(stage, "");
    if f.cfg.dry_run {
        tracing::info!("dry run: not copying the registry data to {device}");
        return Ok(());
    }
    let reporter = &f.reporter;
    let reload = || reload_partitions(Path::new(device));
    let maps: Option<&dyn Fn() -> Result<()>> =
        has_partition_maps(Path::new(device)).then_some(&reload);
    registry_copy::copy_registry_data(
        f.host.commands.as_ref(),
        f.host.clock.as_ref(),
        &f.stop,
        device,
        maps,
        &mut |percent| reporter.stage(stage, format!("{percent}%")),
    )
    .with_context(|| format!("copying the registry data to {device}"))
}

/// logs-progress `requested`, then the agent's logs_sender; failures are only logged.
fn upload_logs(f: &Flow, is_bootstrap: bool) {
    let cfg = &f.cfg;
    if let Err(e) =
        f.client
            .update_host_logs_progress(&cfg.infra_env_id, &cfg.host_id, LogsState::Requested)
    {
        tracing::warn!("reporting the logs as requested: {e:#}");
    }
    if let Err(e) = upload_installation_logs(f.host.commands.as_ref(), cfg, &f.token, is_bootstrap)
    {
        tracing::warn!("uploading the installation logs: {e}");
    }
}

/// Report `Rebooting`, drain the reports, and reboot `when`, or leave it to ironic (never in
/// dry-run mode, where the reboot touches a marker).
/// `warnings`: what may stop the first boot, kept in the `Rebooting` info, which the UI shows
/// while the host boots.
fn finalize(f: &Flow, when: &str, kexec: Option<&Path>, warnings: &[String]) -> Result<()> {
    let ironic = !f.cfg.dry_run
        && ironic_agent_present(f.host.commands.as_ref())
            .context("checking for the ironic agent")?;
    let info = match ironic {
        true => "Ironic will reboot the node shortly",
        false => "",
    };
    f.reporter
        .stage(HostStage::Rebooting, with_warnings(info, warnings));
    f.reporter.drain(Duration::from_secs(60));
    if ironic {
        if kexec.is_some() {
            tracing::info!("ai.kexec: Ironic reboots this host, not the installer: no kexec");
        }
        return f.host.systemd().systemctl("stop", &["agent.service"]);
    }
    if let Some(device) = kexec {
        // The one warning of a fallback: the install succeeded whatever happens here.
        match kexec_reboot(f, device, when) {
            Ok(()) => return Ok(()),
            Err(e) => tracing::warn!("ai.kexec: {e:#}; rebooting through the firmware"),
        }
    }
    f.host.reboot.reboot(when)
}

/// Load the installed system of `device` (not in dry-run mode, where no disk was written) and
/// schedule the kexec reboot into it.
fn kexec_reboot(f: &Flow, device: &Path, when: &str) -> Result<()> {
    if f.cfg.dry_run {
        tracing::info!(
            "dry run: not loading the installed system of {}",
            device.display()
        );
    } else {
        let loaded = f.kexec.load(device)?;
        tracing::info!(
            "ai.kexec: loaded {} ({} bytes of initramfs) from {}",
            loaded.image.kernel,
            loaded.initramfs_bytes,
            device.display()
        );
    }
    f.host.reboot.kexec_reboot(when)
}

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
fn worker_wait_for_control_plane(f: &Flow, info: &str) -> Result<()> {
    f.reporter.stage(HostStage::WaitingForControlPlane, info);
    let cluster_id = &f.cfg.cluster_id;
    let mut day2: Option<bool> = None;
    let what = "waiting for the control plane";
    f.poll(f.intervals.poll, what, || {
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
        tracing::info!(
            "waiting for the control plane: {masters} masters and {arbiters} arbiters done, \
             2 needed"
        );
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::testing::TestFlow;
    use crate::host::ExecError;
    use crate::kexec::testing::{coreos_boot, FromBootDir, RecordingLoader};
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    /// A stop before the write (master) or during the worker's wait, after it: reported as a
    /// failure, with no poll after it and no reboot.
    #[test]
    fn a_stop_is_reported_as_a_failure() {
        let cases = [
            ("master", "writing the image to /dev/vda", 0),
            ("worker", "waiting for the control plane", 1),
        ];
        for (role, during, writes) in cases {
            let t = TestFlow::new(role);
            match role {
                "master" => t.flow.stop.cancel(),
                _ => t
                    .service
                    .stop_when_listing_hosts
                    .store(true, Ordering::SeqCst),
            }
            let e = run_installer(&t.flow).unwrap_err();
            assert!(e.downcast_ref::<Stopped>().is_some(), "{e:#}");
            let reports = t.reports();
            let failed = ("Failed".to_string(), format!("{during}: stop requested"));
            assert_eq!(reports.last().unwrap(), &failed, "{reports:?}");
            assert!(t.clock.sleeps().is_empty(), "no poll after the stop");
            assert!(!reports.iter().any(|(stage, _)| stage == "Rebooting"));
            assert_eq!(t.writer.calls().len(), writes, "{role}");
        }
    }

    /// A UEFI host whose boot entry cannot be made: the install goes on to the reboot, and the
    /// service is told, on the stage the host is at, what failed and what the user must do.
    #[test]
    fn a_boot_entry_that_cannot_be_made_is_reported_to_the_service() {
        let t = TestFlow::new("master");
        let create = "efibootmgr -v -d /dev/vda -p 2 -c -L Red Hat Enterprise Linux -l \\EFI\\redhat\\shimx64.efi";
        t.runner
            .fail("test -f /usr/sbin/bootlist", 1, "")
            .ok(
                "lsblk --bytes --json /dev/vda",
                &crate::host::lsblk::lsblk_json("vda", "disk", &["vda1", "vda2", "vda3", "vda4"]),
            )
            .ok("ls -1 /mnt/EFI", "redhat")
            .fail(
                create,
                5,
                "efibootmgr: Could not prepare Boot variable: No such device",
            );
        run_installer(&t.flow).expect("the install goes on");
        assert!(t.runner.lines().iter().any(|l| l == create));
        let reports = t.reports();
        let at = reports
            .iter()
            .position(|(_, info)| info.starts_with("Could not create the UEFI boot entry"))
            .unwrap_or_else(|| panic!("not reported: {reports:?}"));
        let (stage, info) = &reports[at];
        assert_eq!(stage, "Writing image to disk");
        assert!(
            info.starts_with(
                "Could not create the UEFI boot entry for the installation disk /dev/vda \
                 (Failed to set efibootmgr to boot from disk /dev/vda: "
            ) && info.contains("Could not prepare Boot variable: No such device")
                && info.ends_with(
                    "Set the boot order in the firmware setup (or pick the disk in its boot \
                     menu) to start from the installation disk, or the host will boot the \
                     discovery ISO again after the reboot"
                ),
            "{info}"
        );
        assert_eq!(
            reports[at - 1],
            ("Writing image to disk".into(), "100%".into())
        );
        assert_eq!(reports.last().unwrap().0, "Rebooting");
    }

    /// A failed host command stays an ExecError under the flow's error, with or without context.
    #[test]
    fn a_failed_host_command_stays_an_exec_error() {
        let ironic = "systemctl list-units --no-legend ironic-agent.service";
        let cases = [
            ("bootstrap", "mkdir -p /root/.ssh", "mkdir: Error: read-only file system", "Error: read-only file system",
             "failed executing mkdir [-p /root/.ssh], Error exit status 1, LastOutput \"Error: read-only file system\""),
            ("master", ironic, "boom", "boom",
             "checking for the ironic agent: failed executing systemctl [list-units --no-legend ironic-agent.service], Error exit status 1, LastOutput \"boom\""),
        ];
        for (role, line, output, last_output, info) in cases {
            let t = TestFlow::new(role);
            t.runner.fail(line, 1, output);
            let e = run_installer(&t.flow).unwrap_err();
            let exec = e.downcast_ref::<ExecError>().expect("the ExecError");
            assert_eq!(
                (exec.exit_code, exec.output.as_str()),
                (Some(1), last_output)
            );
            let failed = ("Failed".to_string(), info.to_string());
            assert_eq!(t.reports().last().unwrap(), &failed);
        }
    }

    #[test]
    fn ai_verify_write_on_the_live_kernel_command_line_turns_the_read_back_on() {
        for (cmdline, verify) in [
            (Some("BOOT_IMAGE=/vmlinuz ro ai.verify-write=1 quiet"), true),
            (Some("BOOT_IMAGE=/vmlinuz ro ai.verify-write=0"), false),
            (Some("BOOT_IMAGE=/vmlinuz ro"), false),
            (None, false),
        ] {
            let t = TestFlow::new("master");
            if let Some(text) = cmdline {
                std::fs::write(&t.flow.paths.live_cmdline, text).unwrap();
            }
            // Only the write matters here, whatever the steps after it do.
            let _ = run_installer(&t.flow);
            let calls = t.writer.calls();
            assert_eq!(calls.len(), 1, "{cmdline:?}");
            assert_eq!(calls[0].verify, verify, "{cmdline:?}");
        }
    }

    /// A master's run: the flow, its host commands, its reports, its warnings about kexec.
    type MasterRun = (TestFlow, Vec<String>, Vec<(String, String)>, Vec<String>);
    /// A fallback case: its name, how it breaks the kexec, what the warning says.
    type Fallback = (&'static str, fn(&mut TestFlow), &'static str);

    /// A master's run with `cmdline` and a /boot set up by `boot`.
    fn master_run(cmdline: &str, boot: impl FnOnce(&mut TestFlow)) -> MasterRun {
        let mut t = TestFlow::new("master");
        std::fs::write(&t.flow.paths.live_cmdline, cmdline).unwrap();
        boot(&mut t);
        let (result, warnings) = crate::logging::warnings_during(|| run_installer(&t.flow));
        result.expect("the install succeeds");
        let kexec = warnings
            .into_iter()
            .filter(|w| w.contains("kexec"))
            .collect();
        let (lines, reports) = (t.runner.lines(), t.reports());
        (t, lines, reports, kexec)
    }

    const SHUTDOWN: &str = "shutdown -r +1 'Installation completed, server is going to reboot.'";
    const TIMER: &str = "systemd-run --unit=assisted-installer-kexec --on-active=1min \
        --timer-property=AccuracySec=1s /bin/sh -c systemctl --message=\"$1\" kexec || \
        systemctl --message=\"$1\" reboot sh Installation completed, server is going to reboot.";

    /// Every step before the reboot is the same as without the option (boot order, logs,
    /// `Rebooting`); the load comes after them, and the reboot is the kexec one.
    #[test]
    fn ai_kexec_loads_the_written_system_and_reboots_into_it_after_every_other_step() {
        let (_, plain, plain_reports, _) = master_run("ro", |_| {});
        assert_eq!(plain.last().unwrap(), SHUTDOWN);
        // The boot order (bootlist here, efibootmgr on UEFI hosts) and the logs come first.
        for step in ["bootlist -m normal -o /dev/vda", "logs_sender"] {
            assert!(plain.iter().any(|l| l.contains(step)), "{step}: {plain:?}");
        }

        let (t, lines, reports, warnings) = master_run("ro ai.kexec=1", |t| {
            coreos_boot(&t.boot, Some("rd.neednet=1 ip=dhcp"))
        });
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(lines[..lines.len() - 1], plain[..plain.len() - 1]);
        assert_eq!(lines.last().unwrap(), TIMER);
        assert_eq!(reports, plain_reports);
        assert_eq!(t.kexec.devices(), [Path::new("/dev/vda")]);
        let calls = t.loader.calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].kernel, b"kernel image");
        assert_eq!(
            calls[0].cmdline,
            "ignition.firstboot rd.neednet=1 ip=dhcp ostree=/ostree/boot.1/rhcos/1/0 console=ttyS0"
        );
    }

    /// Whatever fails, one warning says why and the host reboots through the firmware exactly
    /// as without the option.
    #[test]
    fn each_kexec_failure_is_one_warning_and_the_usual_reboot() {
        let (_, plain, plain_reports, _) = master_run("ro", |_| {});
        let cases: [Fallback; 4] = [
            ("no entry", |_| {}, "no BLS entry"),
            (
                "no kernel",
                |t| {
                    coreos_boot(&t.boot, None);
                    std::fs::remove_file(t.boot.join("ostree/rhcos-1/vmlinuz")).unwrap();
                },
                "the kernel /ostree/rhcos-1/vmlinuz on /boot: No such file",
            ),
            (
                "refused",
                |t| {
                    coreos_boot(&t.boot, None);
                    let refusing = Arc::new(RecordingLoader::refusing(libc::EKEYREJECTED));
                    t.flow.kexec = Arc::new(FromBootDir::new(&t.boot, refusing));
                },
                "the kernel's signature was refused",
            ),
            (
                "not scheduled",
                |t| {
                    coreos_boot(&t.boot, None);
                    t.runner
                        .fail(TIMER, 1, "Failed to start transient timer unit");
                },
                "scheduling the kexec reboot: failed executing systemd-run",
            ),
        ];
        for (name, boot, why) in cases {
            let (_, lines, reports, warnings) = master_run("ro ai.kexec", boot);
            assert_eq!(warnings.len(), 1, "{name}: {warnings:?}");
            assert!(
                warnings[0].contains("ai.kexec: ")
                    && warnings[0].contains(why)
                    && warnings[0].ends_with("; rebooting through the firmware"),
                "{name}: {warnings:?}"
            );
            let without_timer: Vec<_> = lines
                .iter()
                .filter(|l| !l.starts_with("systemd-run"))
                .collect();
            assert_eq!(without_timer, plain.iter().collect::<Vec<_>>(), "{name}");
            assert_eq!(reports, plain_reports, "{name}");
        }
    }
}
