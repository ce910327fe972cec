//! `createSingleNodeMasterIgnition`: the single-node host bootstraps in place, and the
//! `master.ign` bootkube produces (with the host's own Ignition merged in) is what goes on disk.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;

use super::{start_bootstrap, wait_for_bootkube, Flow};
use crate::ignition::merge::merge_host_into_sno;
use crate::postinstall::ignition::{write_secret_file, Existing};

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
    let merged = merge_host_into_sno(
        &std::fs::read(&master).with_context(|| format!("reading {}", master.display()))?,
        &std::fs::read(&host_ign).with_context(|| format!("reading {}", host_ign.display()))?,
    )
    .context("merging the host Ignition config into the single-node master.ign")?;
    write_secret_file(&master, &merged, Existing::Replace)
        .with_context(|| format!("writing {}", master.display()))?;
    Ok(master)
}
