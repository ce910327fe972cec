//! The container entrypoint: `assisted-installer --role master --cluster-id … --boot-device …`
//! with the Go installer's flags, run exactly as the assisted-service agent runs the Go one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use crate::cli::go_flags::{self, ParseOutcome};
use crate::clock::SystemClock;
use crate::config::InstallerConfig;
use crate::flow::node::run_installer;
use crate::flow::writer::InProcessWriter;
use crate::flow::{Flow, Intervals, KubeFactory, Paths};
use crate::host::commands::{CommandRunner, HostRunner, RecordingRunner};
use crate::host::reboot::{FakeReboot, Rebooter, ShutdownRebooter};
use crate::host::HostEffects;
use crate::image::Cancel;
use crate::kexec::{FromDisk, SyscallLoader};
use crate::kube::client::KubeClient;
use crate::kube::dry::DryCluster;
use crate::kube::ClusterApi;
use crate::service::client::{ClientConfig, ClientRetry, InventoryClient, ServiceClient};
use crate::service::reporter::Reporter;
use crate::{logging, signals};

/// Logged when `PULL_SECRET_TOKEN` is empty or unset. A service without authentication leaves
/// it so on purpose and accepts every request; one that requires it answers 401, and that
/// error names the token (`ServiceClient`).
pub const EMPTY_TOKEN_NOTE: &str = "PULL_SECRET_TOKEN is empty: no token is sent to the \
    assisted-service (no X-Secret-Key header), as a service without authentication expects";

/// Where the log goes: `/var/log/assisted-installer.log`, per fake host in dry-run mode (the
/// Go installer picks that from the DRY_ENABLE environment variable, not the flag: kept).
/// ASSISTED_INSTALLER_LOG_FILE overrides it (tests).
fn log_file(cfg: &InstallerConfig, env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    if let Some(p) = env("ASSISTED_INSTALLER_LOG_FILE") {
        return PathBuf::from(p);
    }
    let dry_env = env("DRY_ENABLE")
        .and_then(|v| go_flags::parse_go_bool(&v))
        .unwrap_or(false);
    if dry_env {
        let id = cfg.force_id.as_deref().unwrap_or_default();
        PathBuf::from(format!("/var/log/assisted-installer-{id}.log"))
    } else {
        PathBuf::from("/var/log/assisted-installer.log")
    }
}

/// Run the installer with Go-style `args` (without the program name); the process exit code.
pub fn run(args: &[String]) -> i32 {
    let env = |name: &str| std::env::var(name).ok();
    let cfg = match go_flags::parse(args, &env) {
        Ok(ParseOutcome::Run(cfg)) => cfg,
        Ok(ParseOutcome::Help) => {
            println!("{}", go_flags::usage());
            println!(
                "\nSubcommands: write-image, embed, controller (see `assisted-installer write-image --help`)."
            );
            return 0;
        }
        Err(u) => {
            eprintln!("{}", u.render());
            return u.exit_code;
        }
    };
    // journald fields as the Go installer sets them (logs_sender selects entries by TAG).
    let journal = vec![
        ("TAG".to_string(), "installer".to_string()),
        (
            "DRY_AGENT_ID".to_string(),
            cfg.force_id.clone().unwrap_or_default(),
        ),
    ];
    logging::init_with_file(cfg.verbose, Some(&log_file(&cfg, &env)), Some(journal));
    if let Some(w) = cfg.ignored_args_warning() {
        tracing::warn!("{w}");
    }
    if let Some(no_proxy) = &cfg.no_proxy {
        // Go sets these in its own environment at parse time, so the API client honours them.
        std::env::set_var("NO_PROXY", no_proxy);
        std::env::set_var("no_proxy", no_proxy);
    }
    let token = env("PULL_SECRET_TOKEN").unwrap_or_default();
    if token.is_empty() {
        tracing::info!("{EMPTY_TOKEN_NOTE}");
    }
    tracing::info!(
        "assisted-installer {} starting: {}",
        env!("CARGO_PKG_VERSION"),
        cfg.redacted()
    );
    match build_flow(cfg, token) {
        Ok((flow, signal)) => match run_installer(&flow) {
            Ok(()) => 0,
            // Stopped by a signal (`podman stop` sends SIGTERM): the shell's 128 + signal, as
            // when a process dies of it, after the disk was reset and `Failed` reported.
            Err(_) => match signal.load(Ordering::SeqCst) {
                0 => 1,
                sig => 128 + sig,
            },
        },
        Err(e) => {
            // As in Go: no Failed report when the client itself cannot be built.
            tracing::error!("{e:#}");
            1
        }
    }
}

/// The flow, and the cell that holds the number of the signal that stopped it (0: none).
fn build_flow(cfg: InstallerConfig, token: String) -> anyhow::Result<(Flow, Arc<AtomicI32>)> {
    let client = ServiceClient::new(ClientConfig {
        url: cfg.url.clone(),
        token: token.clone(),
        insecure: cfg.insecure,
        cacert: cfg.cacert.clone(),
        retry: if cfg.dry_run {
            ClientRetry::dry_run()
        } else {
            ClientRetry::default()
        },
    })?;
    let client: Arc<dyn InventoryClient> = Arc::new(client);
    let reporter = Arc::new(Reporter::spawn(
        client.clone(),
        cfg.infra_env_id.clone(),
        cfg.host_id.clone(),
        &cfg.role,
        cfg.is_single_node(),
    ));
    let commands: Arc<dyn CommandRunner> = if cfg.dry_run {
        Arc::new(dry_run_commands())
    } else {
        Arc::new(HostRunner {
            nsenter: true,
            env: cfg.child_proxy_env(),
            secret: Some(token.clone()),
        })
    };
    let (reboot, kube): (Arc<dyn Rebooter>, KubeFactory) = if cfg.dry_run {
        let Some(marker) = &cfg.fake_reboot_marker_path else {
            anyhow::bail!("--dry-run needs --fake-reboot-marker-path (or DRY_FAKE_REBOOT_MARKER_PATH): the file touched instead of rebooting");
        };
        // Go parses the cluster-hosts file at start too: a bad one ends the run here.
        let kube = dry_run_kube(Arc::new(DryCluster::from_config(&cfg)?));
        (Arc::new(FakeReboot(marker.clone())), kube)
    } else {
        // The new cluster's API through kube-rs, from the kubeconfig bootkube writes.
        let kube: KubeFactory = Arc::new(|path: &Path| -> anyhow::Result<Arc<dyn ClusterApi>> {
            Ok(Arc::new(KubeClient::from_kubeconfig(path)?))
        });
        (Arc::new(ShutdownRebooter(commands.clone())), kube)
    };
    // One token for the whole run: SIGINT/SIGTERM stop the write and every wait of the flow
    // (the client is left without it, so the `Failed` report still goes out).
    let stop = Cancel::new();
    let signal = signals::cancel_on_signal(&stop)?;
    // The downloads (an `--installer-args` image and its signature) go through the proxy the
    // Go installer's coreos-installer child was given; the service client above does not.
    let proxy = cfg.download_proxy(|name| std::env::var(name).ok());
    if !proxy.is_direct() {
        tracing::info!("image downloads: {}", proxy.describe());
    }
    let writer = Arc::new(InProcessWriter {
        stop: stop.clone(),
        cacert: cfg.cacert.clone(),
        proxy,
    });
    let dry = cfg.dry_run;
    let flow = Flow {
        cfg,
        token,
        client,
        reporter,
        host: HostEffects::new(commands, reboot, Arc::new(SystemClock), dry),
        writer,
        kexec: Arc::new(FromDisk(Arc::new(SyscallLoader))),
        paths: Paths {
            host_root: crate::host::root::detect(),
            ..Paths::default()
        },
        arch: std::env::consts::ARCH.to_string(),
        kube,
        intervals: Intervals::default(),
        early_write: true,
        stop,
    };
    Ok((flow, signal))
}

/// Dry run: no host command runs; each is logged and answered with empty output, except the
/// queries a flow waits on, answered as a host where nothing was started would answer them:
/// progress.service (the etcd bootstrap, which the bootstrap waits to see end) is `inactive`.
pub fn dry_run_commands() -> RecordingRunner {
    let runner = RecordingRunner::new();
    runner.ok("systemctl is-active progress.service", "inactive");
    runner
}

/// Dry run: the pretend cluster, whatever the kubeconfig (bootkube never ran).
pub fn dry_run_kube(cluster: Arc<DryCluster>) -> KubeFactory {
    Arc::new(move |_: &Path| -> anyhow::Result<Arc<dyn ClusterApi>> {
        let api: Arc<dyn ClusterApi> = cluster.clone();
        Ok(api)
    })
}
