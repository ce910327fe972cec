//! Skip-MCO reboot (`--enable-skip-mco-reboot`, Go `installer.skipMcoReboot`): after the disk
//! is written, deploy the release OS image onto it with ostree, with the kernel arguments of
//! the node's MachineConfig (encapsulated in the config the machine-config-server serves, which
//! the host's pointer Ignition config names), so the node boots straight into what the MCO
//! would update it to and that reboot is saved. Best effort, as in Go: a failure is a warning
//! and the MCO updates the node as usual; only a stop (SIGTERM) ends the install here. Not
//! done in dry-run mode, with `--coreos-image` (Go never calls it there), nor on s390x (Go
//! deploys nothing there).

pub(crate) mod deploy;
pub(crate) mod fetch;
pub(crate) mod machine_config;
pub(crate) mod poll;

use anyhow::{Context, Result};
use std::path::Path;

use super::Flow;
use crate::clock::Stopped;
use deploy::{overwrite_os_image, platform_karg, Target};
use fetch::McsFetcher;
use machine_config::{pointer_config, EncapsulatedMc};
use poll::{EarlyFetch, FETCH_BUDGET};

const CONTINUING: &str = "Continuing installation without skipping MCO reboot";

/// The skip-MCO step of one install: its fetch runs from [`SkipMco::start`] to
/// [`SkipMco::finish`] (Go's point, after the write); dropped unfinished, the fetch ends.
pub(crate) struct SkipMco {
    fetch: EarlyFetch<EncapsulatedMc>,
}

impl SkipMco {
    /// Starts fetching the MachineConfig behind `ignition` (the host's pointer config); `None`
    /// when the flow does not skip the MCO reboot or the pointer leads nowhere (Go's warning).
    pub(crate) fn start(f: &Flow, ignition: &Path) -> Option<SkipMco> {
        let cfg = &f.cfg;
        if !cfg.enable_skip_mco_reboot {
            return None;
        }
        let skipped = [
            (cfg.dry_run, "in dry-run mode"),
            (cfg.coreos_image.is_some(), "with --coreos-image"),
            (f.arch == "s390x", "on s390x"),
        ];
        if let Some((_, why)) = skipped.iter().find(|(skip, _)| *skip) {
            tracing::info!("--enable-skip-mco-reboot: no OS image is deployed {why}");
            return None;
        }
        let fetcher = match pointed_fetcher(ignition) {
            Ok(fetcher) => fetcher,
            Err(e) => {
                tracing::warn!("failed getting encapsulated machine config: {e:#}. {CONTINUING}");
                return None;
            }
        };
        let shown = fetcher.shown();
        tracing::info!(
            "skip-MCO reboot: fetching the encapsulated MachineConfig from {shown} while the disk is written"
        );
        let fetch = EarlyFetch::start(
            f.host.clock.clone(),
            f.stop.clone(),
            f.intervals.poll,
            move || fetcher.fetch(),
            move |e, n| {
                tracing::warn!(
                    "failed to get the encapsulated MachineConfig from {shown} (try {n}): {e:#}"
                )
            },
        );
        Some(SkipMco { fetch })
    }

    /// Go's point (after the write, and a worker's wait): wait for the MachineConfig (at most
    /// 20 minutes from now), then deploy its OS image onto `device` with the `--append-karg`s
    /// of `--installer-args` and its kernel arguments. Failures are warnings; the error is only
    /// a stop.
    pub(crate) fn finish(self, f: &Flow, device: &str, installer_appends: &[String]) -> Result<()> {
        match self.deploy(f, device, installer_appends) {
            Err(e) if e.downcast_ref::<Stopped>().is_some() => Err(e.context("skip-MCO reboot")),
            Err(e) => {
                tracing::warn!("{e:#}. {CONTINUING}");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    fn deploy(self, f: &Flow, device: &str, installer_appends: &[String]) -> Result<()> {
        let clock = f.host.clock.as_ref();
        let mc = self
            .fetch
            .finish(clock, FETCH_BUDGET)
            .map_err(|e| unless_stopped(e, "failed getting encapsulated machine config"))?;
        if mc.os_image_url.is_empty() {
            anyhow::bail!("the encapsulated machine config has no osImageURL to deploy");
        }
        let cmdline = &f.paths.live_cmdline;
        let cmdline = std::fs::read_to_string(cmdline).unwrap_or_else(|e| {
            let path = cmdline.display();
            tracing::warn!("reading {path}: {e}; the platform is taken to be metal");
            String::new()
        });
        let platform = platform_karg(&cmdline);
        // Go's `convertToOverwriteKargs`: the installer args' appended kargs, then the
        // MachineConfig's, each as a `--karg` pair.
        let kargs: Vec<String> = (installer_appends.iter().chain(&mc.kernel_arguments))
            .flat_map(|k| ["--karg".to_string(), k.clone()])
            .collect();
        tracing::info!(
            "deploying {} onto {device} with {} kernel arguments of the MachineConfig",
            mc.os_image_url,
            mc.kernel_arguments.len()
        );
        let target = Target {
            runner: f.host.commands.as_ref(),
            clock,
            stop: &f.stop,
            device,
        };
        overwrite_os_image(&target, &mc.os_image_url, &platform, &kargs)
            .map_err(|e| unless_stopped(e, "failed overwriting OS image"))?;
        tracing::info!(
            "{} deployed onto {device}: the first boot needs no MCO reboot",
            mc.os_image_url
        );
        Ok(())
    }
}

/// The pointer config's fetcher: everything that trying again cannot fix fails here, at once
/// (Go would retry it for 20 minutes).
fn pointed_fetcher(ignition: &Path) -> Result<McsFetcher> {
    let bytes =
        std::fs::read(ignition).with_context(|| format!("reading {}", ignition.display()))?;
    let pointer = pointer_config(&bytes)
        .with_context(|| format!("the Ignition config {}", ignition.display()))?;
    McsFetcher::new(&pointer)
}

/// `e` with the context `what`, unless it is a stop (which says enough).
fn unless_stopped(e: anyhow::Error, what: &'static str) -> anyhow::Error {
    if e.downcast_ref::<Stopped>().is_some() {
        e
    } else {
        e.context(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::testing::TestFlow;
    use crate::host::lsblk::lsblk_json;
    use crate::ignition::data_url::tests::{encode_base64, gzip};

    const IMAGE: &str = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:4242";

    /// A pointer config whose merge source embeds (gzipped) a config holding a MachineConfig
    /// with `mc_spec`.
    fn pointer_with(mc_spec: serde_json::Value) -> String {
        let mc = serde_json::to_vec(&serde_json::json!({"spec": mc_spec})).unwrap();
        let served = serde_json::to_vec(&serde_json::json!({"storage": {"files": [{
            "path": machine_config::ENCAPSULATED_MC_PATH,
            "contents": {"source": format!("data:;base64,{}", encode_base64(&mc))}
        }]}}))
        .unwrap();
        serde_json::json!({"ignition": {"version": "3.2.0", "config": {"merge": [
            {"source": format!("data:;base64,{}", encode_base64(&gzip(&served)))}
        ]}}})
        .to_string()
    }

    /// A master flow with skip-MCO on, its pointer config written; returns the config's path.
    fn flow_with(pointer: &str) -> (TestFlow, std::path::PathBuf) {
        let mut t = TestFlow::new("master");
        t.flow.cfg.enable_skip_mco_reboot = true;
        t.flow.cfg.installer_args = vec!["--append-karg".into(), "ip=ens3:dhcp".into()];
        let dir = t.flow.paths.install_dir.clone();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("master-host.ign");
        std::fs::write(&path, pointer).unwrap();
        std::fs::write(
            &t.flow.paths.live_cmdline,
            "BOOT_IMAGE=/images/pxeboot/vmlinuz ignition.platform.id=openstack coreos.liveiso=x\n",
        )
        .unwrap();
        t.runner.ok(
            "lsblk --bytes --json /dev/vda",
            &lsblk_json("vda", "disk", &["vda1", "vda2", "vda3", "vda4"]),
        );
        (t, path)
    }

    fn finish(t: &TestFlow, path: &Path) -> Result<()> {
        let s = SkipMco::start(&t.flow, path).expect("skip-MCO starts");
        s.finish(&t.flow, "/dev/vda", &["ip=ens3:dhcp".to_string()])
    }

    #[test]
    fn an_unreadable_cmdline_means_metal_and_no_image_nothing() {
        let (t, path) = flow_with(&pointer_with(serde_json::json!({"osImageURL": IMAGE})));
        std::fs::remove_file(&t.flow.paths.live_cmdline).unwrap();
        finish(&t, &path).unwrap();
        let lines = t.runner.lines();
        let ostree = lines.iter().find(|l| l.starts_with("ostree ")).unwrap();
        assert!(
            ostree.contains("--karg ignition.platform.id=metal --karg $ignition_firstboot"),
            "{ostree}"
        );
        // A MachineConfig without an image deploys nothing.
        let (t, path) = flow_with(&pointer_with(serde_json::json!({"kernelArguments": ["a"]})));
        finish(&t, &path).unwrap();
        assert!(t.runner.lines().is_empty(), "{:?}", t.runner.lines());
    }

    #[test]
    fn nothing_is_started_in_dry_run_with_coreos_image_on_s390x_when_off_or_pointing_nowhere() {
        let pointer = pointer_with(serde_json::json!({"osImageURL": IMAGE}));
        // The flow with skip-MCO as it should be does start (the test can fail).
        let (t, path) = flow_with(&pointer);
        assert!(SkipMco::start(&t.flow, &path).is_some());
        type Change = fn(&mut TestFlow);
        let changes: [(&str, Change); 4] = [
            ("dry run", |t| t.flow.cfg.dry_run = true),
            ("--coreos-image", |t| {
                t.flow.cfg.coreos_image = Some("quay.io/x/y:z".into())
            }),
            ("s390x", |t| t.flow.arch = "s390x".into()),
            ("off", |t| t.flow.cfg.enable_skip_mco_reboot = false),
        ];
        for (what, change) in changes {
            let (mut t, path) = flow_with(&pointer);
            change(&mut t);
            assert!(SkipMco::start(&t.flow, &path).is_none(), "{what}");
            assert!(t.runner.lines().is_empty(), "{what}");
        }
        // A pointer that leads nowhere is given up at once.
        for pointer in [
            r#"{"ignition":{"version":"3.2.0"}}"#.to_string(),
            r#"{"ignition":{"config":{"merge":[{"source":"https://api-int.x:22623/config/master"}]}}}"#.to_string(),
            "not json".to_string(),
        ] {
            let (t, path) = flow_with(&pointer);
            assert!(SkipMco::start(&t.flow, &path).is_none(), "{pointer}");
            assert!(t.clock.sleeps().is_empty());
        }
    }
}
