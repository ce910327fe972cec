//! `startBootstrap`: everything the bootstrap control plane needs before bootkube runs, on the
//! HA bootstrap host and (with the single-node differences) on the single-node host; then the
//! single-node host's `createSingleNodeMasterIgnition`.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;
use uuid::Uuid;

use super::{wait_for_bootkube, Flow};
use crate::clock::{Failure, Schedule};
use crate::controller::deploy::render_manifests;
use crate::host::ExecError;
use crate::ignition::merge::merge_host_into_sno;
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
        f.poll(f.intervals.poll, format!("waiting for {unit}"), || match f
            .host
            .systemd()
            .show_active_state(unit)
        {
            Ok(s) if s.trim() == "active" => Some(Ok(())),
            Ok(s) if s.trim() == "failed" => {
                tracing::error!("{}", f.host.systemd().status(unit));
                Some(Err(anyhow::anyhow!("{unit} failed")))
            }
            _ => None,
        })??;
    }
    if r.run("stat", &["/usr/bin/oc"]).is_err() {
        bail!("/usr/bin/oc is still missing after the node image overlay");
    }
    Ok(())
}

/// Bootstrap in place, wait for bootkube, and merge the host's own Ignition into the
/// single-node master.ign it produced (`updateSingleNodeIgnition`, mode 0600). Returns
/// master.ign.
pub(crate) fn single_node_master_ignition(f: &Flow) -> Result<PathBuf> {
    start_bootstrap(f, true)?;
    wait_for_bootkube(f)?;
    let master = f.paths.openshift_dir.join("master.ign");
    if !master.exists() {
        bail!("{} was not created by bootkube", master.display());
    }
    // Pure file work: done in dry-run mode too (the Go dry-run skips it; ours keeps the disk's
    // content meaningful).
    let host_ign = f
        .paths
        .install_dir
        .join(format!("master-{}.ign", f.cfg.host_id));
    f.client
        .download_host_ignition(&f.cfg.infra_env_id, &f.cfg.host_id, &host_ign)
        .context("downloading the host Ignition config")?;
    // Both must parse; a dry run goes on with master.ign as bootkube left it.
    let instead = "master.ign is not merged";
    if !f.usable_ignition(&host_ign, instead)? || !f.usable_ignition(&master, instead)? {
        return Ok(master);
    }
    let merged = merge_host_into_sno(
        &std::fs::read(&master).with_context(|| format!("reading {}", master.display()))?,
        &std::fs::read(&host_ign).with_context(|| format!("reading {}", host_ign.display()))?,
    )
    .context("merging the host Ignition config into the single-node master.ign")?;
    write_secret_file(&master, &merged, Existing::Replace)
        .with_context(|| format!("writing {}", master.display()))?;
    Ok(master)
}

/// Prefix of the replacement hostname, as the Go installer spells it.
const RANDOM_HOSTNAME_PREFIX: &str = "random-hostname-";

/// `checkHostname`: true for `localhost` and for a name that does not match
/// `^[a-z0-9][a-z0-9\-.]{0,61}[a-z0-9]$` (checked by hand). The name is taken exactly as given:
/// a trailing newline, upper case or a single character make it invalid, as for the Go regex.
fn needs_random_hostname(hostname: &str) -> bool {
    let bytes = hostname.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let middle = |b: &u8| edge(b) || *b == b'-' || *b == b'.';
    let valid = (2..=63).contains(&bytes.len())
        && edge(&bytes[0])
        && edge(&bytes[bytes.len() - 1])
        && bytes[1..bytes.len() - 1].iter().all(middle);
    hostname == "localhost" || !valid
}

/// `random-hostname-<uuid4>`: 52 characters, all of them allowed by the pattern above.
fn random_hostname() -> String {
    format!("{RANDOM_HOSTNAME_PREFIX}{}", Uuid::new_v4())
}

/// `metadata.name` of the SSH MachineConfig (Go `CreateOpenshiftSshManifest`), which authorises
/// the bootstrap's key for `core` on every master so log gathering can ssh into them.
const SSH_MANIFEST_NAME: &str = "99-assisted-installer-master-ssh";
/// Its file under `/opt/openshift/openshift/`, in the openshift-installer manifest naming scheme.
const SSH_MANIFEST_FILE_NAME: &str =
    "99_openshift-machineconfig_99-assisted-installer-master-ssh.yaml";

/// The MachineConfig for `public_key` (`id_rsa.pub`), trimmed. An empty key, or one with a line
/// break or another control character inside, is refused: an `authorized_keys` entry is one line.
fn render_ssh_manifest(public_key: &str) -> Result<String> {
    let key = public_key.trim();
    if key.is_empty() {
        bail!("cannot render the SSH manifest: the public key is empty");
    }
    if key.contains(['\n', '\r']) {
        bail!("cannot render the SSH manifest: the public key spans several lines");
    }
    if key.chars().any(char::is_control) {
        bail!("cannot render the SSH manifest: the public key contains control characters");
    }
    Ok(format!(
        "apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  labels:
    machineconfiguration.openshift.io/role: master
  name: {SSH_MANIFEST_NAME}
spec:
  config:
    ignition:
      version: 3.1.0
    passwd:
      users:
      - name: core
        sshAuthorizedKeys:
        - {}
",
        // A JSON string is a YAML double-quoted scalar: only `"` and `\` are escaped once control
        // characters are refused; `#`, `:` and non-ASCII stay literal.
        serde_json::to_string(key)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names_are_kept_and_invalid_ones_replaced() {
        let kept = [
            "master-0",
            "master-0.ocp.example.com",
            "ab",
            "a1",
            "00",
            "node.with-dashes-and.dots9",
            &"a".repeat(63),
            // Only the exact name localhost is replaced: a longer one that starts with it is fine.
            "localhost2",
            "localhost.localdomain",
        ];
        let replaced = [
            "localhost",
            "",
            "a",
            "-master",
            "master-",
            ".master",
            "master.",
            "Master-0",
            "master_0",
            "master 0",
            "master-0\n",
            "mäster",
            &"a".repeat(64),
        ];
        for (names, replace) in [(&kept[..], false), (&replaced[..], true)] {
            for name in names {
                assert_eq!(needs_random_hostname(name), replace, "{name:?}");
            }
        }
    }

    #[test]
    fn random_hostname_is_valid_and_random() {
        let first = random_hostname();
        let second = random_hostname();
        assert_ne!(first, second);
        for name in [&first, &second] {
            assert!(name.starts_with(RANDOM_HOSTNAME_PREFIX), "{name}");
            let uuid = Uuid::parse_str(&name[RANDOM_HOSTNAME_PREFIX.len()..]).unwrap();
            assert_eq!(uuid.get_version_num(), 4);
            assert_eq!(name.len(), 52);
            assert!(!needs_random_hostname(name), "{name}");
        }
    }

    const KEY: &str =
        "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQDfakekeyfortestsonly+/= root@bootstrap";

    #[test]
    fn exact_output_whatever_whitespace_surrounds_the_key() {
        let expected = r#"apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  labels:
    machineconfiguration.openshift.io/role: master
  name: 99-assisted-installer-master-ssh
spec:
  config:
    ignition:
      version: 3.1.0
    passwd:
      users:
      - name: core
        sshAuthorizedKeys:
        - "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQDfakekeyfortestsonly+/= root@bootstrap"
"#;
        // Surrounding whitespace is trimmed.
        for key in [KEY.to_string(), format!("  {KEY}\n"), format!("{KEY}\r\n")] {
            assert_eq!(render_ssh_manifest(&key).unwrap(), expected);
        }
        assert!(SSH_MANIFEST_FILE_NAME.ends_with(&format!("_{SSH_MANIFEST_NAME}.yaml")));
    }

    #[test]
    fn quotes_and_backslashes_are_escaped() {
        let key = r#"ssh-ed25519 AAAAC3Nz "quoted" back\slash # not: a comment"#;
        let manifest = render_ssh_manifest(key).unwrap();
        let last = manifest.lines().last().unwrap();
        assert_eq!(
            last,
            r#"        - "ssh-ed25519 AAAAC3Nz \"quoted\" back\\slash # not: a comment""#
        );
    }

    #[test]
    fn empty_and_multi_line_keys_are_refused() {
        for key in ["", "   ", "\n"] {
            let err = render_ssh_manifest(key).unwrap_err();
            assert!(err.to_string().contains("empty"), "{err}");
        }
        for key in [
            "ssh-rsa AAAA\nssh-rsa BBBB",
            "ssh-rsa AAAA\r\nkind: Secret",
            "ssh-rsa A\rB",
        ] {
            let err = render_ssh_manifest(key).unwrap_err();
            assert!(err.to_string().contains("several lines"), "{err}");
        }
        let err = render_ssh_manifest("ssh-rsa AAAA\u{0}x").unwrap_err();
        assert!(err.to_string().contains("control characters"), "{err}");
    }
}
