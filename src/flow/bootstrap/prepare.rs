//! `startBootstrap`: everything the bootstrap control plane needs before bootkube runs, on the
//! HA bootstrap host and (with the single-node differences) on the single-node host.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::Duration;

use super::hostname::{needs_random_hostname, random_hostname};
use super::ssh_manifest::{render_ssh_manifest, SSH_MANIFEST_FILE_NAME};
use super::Flow;
use crate::clock::{Failure, Schedule};
use crate::controller::deploy::render_manifests;
use crate::host::ExecError;
use crate::ignition::pull_secret::extract_pull_secret;
use crate::postinstall::ignition::{write_secret_file, Existing};

/// Attempts at laying down the bootstrap Ignition with the MCO (Go: 3, immediate).
const MCO_ATTEMPTS: u32 = 3;
/// The machine-config-daemon's podman run: these arguments, the MCO image, then the start ones
/// and the Ignition config.
const MCO_RUN: &str = "run --net host --pid=host --volume /:/rootfs:rw \
    --volume /usr/bin/rpm-ostree:/usr/bin/rpm-ostree --privileged \
    --entrypoint /usr/bin/machine-config-daemon";
const MCO_START: &str = "start --node-name localhost --root-mount /rootfs --once-from";

/// `startBootstrap`. `sno`: single-node (no SSH key, no NetworkManager restart, controller
/// with SNO=true).
pub(crate) fn start_bootstrap(f: &Flow, sno: bool) -> Result<()> {
    let r = f.host.commands.as_ref();
    let dry = f.cfg.dry_run;
    r.run("mkdir", &["-p", "/root/.ssh"])?;
    let bootstrap_ign = f.paths.install_dir.join("bootstrap.ign");
    f.client
        .download_cluster_file(&f.cfg.cluster_id, "bootstrap.ign", &bootstrap_ign)
        .context("downloading bootstrap.ign")?;
    if !dry {
        install_pull_secret(f, &bootstrap_ign)?;
        lay_down_bootstrap_ignition(f, &bootstrap_ign)?;
        if !sno {
            r.run("ssh-keygen", &["-q", "-f", "/root/.ssh/id_rsa", "-N", ""])
                .context("generating the bootstrap SSH key")?;
            let key = r.run("cat", &["/root/.ssh/id_rsa.pub"])?;
            let dir = f.paths.openshift_dir.join("openshift");
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let path = dir.join(SSH_MANIFEST_FILE_NAME);
            std::fs::write(&path, render_ssh_manifest(&key)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    f.host.systemd().systemctl("daemon-reload", &[])?;
    if !dry {
        // `checkHostname`: an invalid or `localhost` hostname would let NetworkManager
        // overwrite /etc/resolv.conf and undo the local DNS prepender that bootkube needs.
        let name = r.run("hostname", &[]).context("reading the hostname")?;
        let name = name.trim();
        if needs_random_hostname(name) {
            let new = random_hostname();
            tracing::info!("hostname {name:?} is not valid for the cluster; setting {new}");
            r.run("bash", &["-c", &format!("hostnamectl set-hostname {new}")])?;
        }
    }
    if !sno {
        // Triggers the local DNS prepender dispatcher script (absent on SNO's platform none).
        f.host
            .systemd()
            .systemctl("restart", &["NetworkManager.service"])?;
    }
    if !dry {
        render_manifests(
            &f.paths.openshift_dir.join("manifests"),
            &f.cfg,
            &f.token,
            sno,
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
fn install_pull_secret(f: &Flow, bootstrap_ign: &Path) -> Result<()> {
    let ign = std::fs::read(bootstrap_ign)
        .with_context(|| format!("reading {}", bootstrap_ign.display()))?;
    let secret =
        extract_pull_secret(&ign).context("extracting the pull secret from bootstrap.ign")?;
    let tmp = &f.paths.extracted_pull_secret;
    write_secret_file(tmp, &secret, Existing::Replace)
        .with_context(|| format!("writing {}", tmp.display()))?;
    let r = f.host.commands.as_ref();
    r.run("mkdir", &["-p", "/root/.docker"])?;
    r.run(
        "mv",
        &[&tmp.display().to_string(), "/root/.docker/config.json"],
    )?;
    Ok(())
}

/// `extractIgnitionToFS`: the MCO lays the bootstrap Ignition down on the live system, with
/// [`MCO_ATTEMPTS`] immediate attempts; the last failure is the error.
fn lay_down_bootstrap_ignition(f: &Flow, bootstrap_ign: &Path) -> Result<()> {
    let ign = bootstrap_ign.display().to_string();
    let image = [f.cfg.mco_image.as_str()].into_iter();
    let args: Vec<&str> = (MCO_RUN.split(' ').chain(image))
        .chain(MCO_START.split(' '))
        .chain([ign.as_str(), "--skip-reboot"])
        .collect();
    f.host
        .clock
        .retry(
            &f.stop,
            &Schedule::tries(MCO_ATTEMPTS, Duration::ZERO),
            |failures| {
                f.host.commands.run("podman", &args).map_err(|e| {
                    let attempt = failures + 1;
                    tracing::warn!("extracting the bootstrap Ignition with the MCO (attempt {attempt} of {MCO_ATTEMPTS}): {e}");
                    Failure::Retry(e)
                })
            },
            |_: &ExecError, _| {},
        )
        .map(|_| ())
        .map_err(|e| e.into_anyhow())
}

/// RHEL-only boot images lack `oc`: overlay the node image first and wait for it (the Go
/// installer polls each unit's ActiveState with no time limit).
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
        f.host
            .clock
            .poll_until(&f.stop, f.intervals.poll, || {
                match f.host.systemd().show_active_state(unit) {
                    Ok(s) if s.trim() == "active" => Some(Ok(())),
                    Ok(s) if s.trim() == "failed" => {
                        tracing::error!("{}", f.host.systemd().status(unit));
                        Some(Err(anyhow::anyhow!("{unit} failed")))
                    }
                    _ => None,
                }
            })
            .with_context(|| format!("waiting for {unit}"))??;
    }
    if r.run("stat", &["/usr/bin/oc"]).is_err() {
        bail!("/usr/bin/oc is still missing after the node image overlay");
    }
    Ok(())
}
