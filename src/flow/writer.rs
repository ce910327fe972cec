//! The flows' disk write, behind a narrow trait so scenario tests can script failures; the real
//! one runs the in-process writer (`write`).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

use crate::host::root::HostRoot;
use crate::ignition::IgnitionConfig;
use crate::image::progress::PercentCallback;
use crate::image::proxy::DownloadProxy;
use crate::image::{Cancel, Origin};
use crate::postinstall::PostInstall;
use crate::write::{plan, PlanSettings, Streamed, WritePlan, WriterArgs};

/// The disk write a flow asks for.
#[derive(Clone, Debug)]
pub struct WriteRequest {
    pub device: PathBuf,
    /// `--installer-args`, parsed.
    pub args: WriterArgs,
    /// Where the host paths of `args` and the live image are (Go's coreos-installer reads them
    /// in the host's mount namespace); `None`: local paths, else /proc/1/root for the live image.
    pub host_root: Option<HostRoot>,
    /// Read the image back after the write and check it (`ai.verify-write` on the live
    /// kernel command line: the service cannot pass `--verify`).
    pub verify: bool,
}

pub trait DiskWriter: Send + Sync {
    /// Everything in `--installer-args` that can be wrong, checked before the disk is touched
    /// (rather than after three write attempts).
    fn preflight(&self, args: &WriterArgs, host_root: Option<&HostRoot>) -> Result<()> {
        plan::check(args, &PlanSettings::for_flows(host_root.cloned(), None))?;
        Ok(())
    }
    /// Write the image and embed the Ignition config (none: only in a dry run, see
    /// [`crate::flow::Flow::usable_ignition`]); `percent` sees the progress.
    fn write(
        &self,
        req: &WriteRequest,
        ignition: Option<&Path>,
        percent: &(dyn Fn(u8) + Send + Sync),
    ) -> Result<()>;
    /// Stream and verify the image without making the disk bootable (the Ignition config is
    /// not known yet); `finish` on the result completes the write.
    fn stream(
        &self,
        req: &WriteRequest,
        percent: &(dyn Fn(u8) + Send + Sync),
    ) -> Result<Box<dyn PendingDisk>>;
}

/// A streamed, verified, not yet bootable disk.
pub trait PendingDisk: Send {
    /// Embed `ignition` (if any) and the post-install options, then write the partition table.
    fn finish(self: Box<Self>, ignition: Option<&Path>) -> Result<()>;
    /// Reset the disk (it must not boot a half-configured image); returns the error to report.
    fn abandon(self: Box<Self>, why: anyhow::Error) -> anyhow::Error;
}

/// The in-process writer (what `write-image` runs).
pub struct InProcessWriter {
    pub stop: Cancel,
    pub cacert: Option<PathBuf>,
    /// The proxies of the image and signature downloads (`InstallerConfig::download_proxy`).
    pub proxy: DownloadProxy,
}

impl InProcessWriter {
    fn settings(&self, host_root: Option<&HostRoot>, verify: bool) -> PlanSettings {
        let settings = PlanSettings::for_flows(host_root.cloned(), self.cacert.clone());
        PlanSettings {
            verify,
            proxy: Some(self.proxy.clone()),
            ..settings
        }
    }

    fn plan(&self, req: &WriteRequest, post: PostInstall) -> Result<WritePlan> {
        let settings = self.settings(req.host_root.as_ref(), req.verify);
        WritePlan::build(&req.device, &req.args, post, &settings)
    }
}

/// The flow's Ignition config, the one post-install step `--installer-args` cannot carry.
fn ignition_config(path: Option<&Path>) -> Result<Option<IgnitionConfig>> {
    let Some(path) = path else { return Ok(None) };
    IgnitionConfig::from_file(path, None)
        .map(Some)
        .with_context(|| format!("the Ignition config {}", path.display()))
}

impl DiskWriter for InProcessWriter {
    /// Also: without an image in `--installer-args`, the live image must be reachable.
    fn preflight(&self, args: &WriterArgs, host_root: Option<&HostRoot>) -> Result<()> {
        if let Origin::Live(live) = plan::check(args, &self.settings(host_root, false))? {
            live.locate()?;
        }
        Ok(())
    }

    fn write(
        &self,
        req: &WriteRequest,
        ignition: Option<&Path>,
        percent: &(dyn Fn(u8) + Send + Sync),
    ) -> Result<()> {
        let ignition = ignition_config(ignition)?;
        let plan = self.plan(
            req,
            PostInstall {
                ignition,
                ..PostInstall::default()
            },
        )?;
        let progress = PercentCallback::new(percent);
        let summary = crate::write::run(&plan, &progress, &self.stop)?;
        tracing::info!("{summary}");
        Ok(())
    }

    fn stream(
        &self,
        req: &WriteRequest,
        percent: &(dyn Fn(u8) + Send + Sync),
    ) -> Result<Box<dyn PendingDisk>> {
        let plan = self.plan(req, PostInstall::default())?;
        let progress = PercentCallback::new(percent);
        let streamed = crate::write::stream(&plan, &progress, &self.stop)?;
        Ok(Box::new(InProcessPending {
            streamed,
            post: plan.post,
            stop: self.stop.clone(),
        }))
    }
}

struct InProcessPending {
    streamed: Streamed,
    /// The plan's post-install steps; the Ignition config joins them in `finish`.
    post: PostInstall,
    stop: Cancel,
}

impl PendingDisk for InProcessPending {
    fn finish(self: Box<Self>, ignition: Option<&Path>) -> Result<()> {
        let post = match ignition_config(ignition) {
            Ok(config) => PostInstall {
                ignition: config,
                ..self.post
            },
            Err(e) => return Err(self.streamed.abandon(e)),
        };
        let summary = self.streamed.finish(&post, &self.stop)?;
        tracing::info!("{summary}");
        Ok(())
    }

    fn abandon(self: Box<Self>, why: anyhow::Error) -> anyhow::Error {
        self.streamed.abandon(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::root::PID1_ROOT;
    use crate::image::osmet::DEFAULT_OSMET_DIR;
    use crate::write::KargsAndNetworkArgs;

    #[test]
    fn without_an_image_the_live_image_must_be_reachable_before_the_disk_is_touched() {
        let on_host = Path::new(PID1_ROOT).join(DEFAULT_OSMET_DIR.trim_start_matches('/'));
        if Path::new(DEFAULT_OSMET_DIR).exists() || on_host.exists() {
            eprintln!("SKIPPED: this machine is a live system ({DEFAULT_OSMET_DIR} exists)");
            return;
        }
        let w = InProcessWriter {
            stop: Cancel::new(),
            cacert: None,
            proxy: DownloadProxy::default(),
        };
        let args = WriterArgs {
            kargs_network: KargsAndNetworkArgs {
                copy_network: true,
                ..KargsAndNetworkArgs::default()
            },
            ..WriterArgs::default()
        };
        let e = format!("{:#}", w.preflight(&args, None).unwrap_err());
        assert!(e.contains("no live image to install"), "{e}");
        assert!(e.contains(DEFAULT_OSMET_DIR), "{e}");
        assert!(e.contains("--pid=host"), "{e}");
        assert!(e.contains("--image-url"), "{e}");
        // With an image given, nothing about the live system is needed.
        let args = WriterArgs {
            image_url: Some("http://mirror.example/rhcos.raw.gz".into()),
            ..WriterArgs::default()
        };
        w.preflight(&args, None).unwrap();
    }
}
