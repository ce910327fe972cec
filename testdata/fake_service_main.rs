//! `fake-assisted-service`: the tests' fake assisted-service (`tests/common/fake_service.rs`,
//! on the tests' HTTP server) as a program of its own, for installs where the test process
//! cannot serve it, e.g. inside a QEMU guest without a network device (on its loopback).
//!
//! ```text
//! fake-assisted-service --listen 127.0.0.1:0 --address-file ADDR --host-id UUID --role master
//!     --ignition-file IGN [--token-file TOKEN] --report-file REPORT
//! ```
//!
//! It serves one host: its role (the stage order the service enforces) and the Ignition config
//! served for it. Once listening it writes the token the installer must send
//! (`PULL_SECRET_TOKEN`) to `--token-file`, then the address (`127.0.0.1:PORT`, the port
//! chosen when 0 was asked for) to `--address-file`: both one line, each file written whole
//! (renamed into place), the address last, so that its presence means "ready". It serves until
//! SIGTERM or SIGINT (busybox `kill` sends SIGTERM), then writes the report
//! (`tests/common/service_report.rs`: the host's progress reports and what else the fake
//! recorded, JSON, also renamed into place) and exits 0. It reads and writes no other file.
//!
//! The service side of an appliance master's registry copy needs nothing more: a master's stage
//! order already has `Copying registry data to disk`.

#[path = "../tests/common/fake_service.rs"]
mod fake_service;
#[path = "../tests/common/http_server.rs"]
mod http_server;
#[path = "../tests/common/service_report.rs"]
mod service_report;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Parser;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use fake_service::FakeService;
use http_server::TestServer;
use service_report::ServiceReport;

const NAME: &str = "fake-assisted-service";

/// The tests' fake assisted-service, serving one host until SIGTERM or SIGINT, then writing
/// what it saw to --report-file.
#[derive(Parser)]
#[command(name = NAME)]
struct Args {
    /// Address to listen on (`127.0.0.1:0`: any free port, written to --address-file).
    #[arg(long, value_name = "IP:PORT")]
    listen: SocketAddr,
    /// Written (one line, `IP:PORT`) once the service answers: required with port 0.
    #[arg(long, value_name = "PATH")]
    address_file: Option<PathBuf>,
    /// The host the installer installs.
    #[arg(long, value_name = "UUID")]
    host_id: String,
    /// The host's role: the stage order the service accepts.
    #[arg(long, default_value = "master", value_parser = ["master", "arbiter", "worker", "bootstrap", "sno"])]
    role: String,
    /// The Ignition config served as the host's (the pointer config).
    #[arg(long, value_name = "PATH")]
    ignition_file: PathBuf,
    /// Written (one line) before the address: the token the installer must send.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Written when stopped: the JSON report.
    #[arg(long, value_name = "PATH")]
    report_file: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{NAME}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<()> {
    if args.listen.port() == 0 && args.address_file.is_none() {
        bail!("--listen with port 0 needs --address-file (where the chosen port is written)");
    }
    // Before anything is announced: a signal right after the address appears must still end
    // in a report, not in the default action.
    let mut signals = Signals::new([SIGTERM, SIGINT]).context("handling SIGTERM and SIGINT")?;
    let ignition = std::fs::read(&args.ignition_file)
        .with_context(|| format!("reading {}", args.ignition_file.display()))?;
    let svc = FakeService::new();
    svc.set_host_role(&args.host_id, &args.role);
    svc.set_host_ignition(&args.host_id, ignition);
    let server = TestServer::with_app_on(args.listen, svc.clone());
    if let Some(path) = &args.token_file {
        write_whole(path, format!("{}\n", svc.token()).as_bytes())?;
    }
    if let Some(path) = &args.address_file {
        write_whole(path, format!("{}\n", server.addr()).as_bytes())?;
    }
    eprintln!("{NAME}: serving host {} on {}", args.host_id, server.addr());
    let signal = signals.forever().next().unwrap_or(SIGTERM);
    let report = report_of(&svc, &server, &args.host_id);
    let json = serde_json::to_vec_pretty(&report).context("the report as JSON")?;
    write_whole(&args.report_file, &json)?;
    eprintln!(
        "{NAME}: stopped by signal {signal}; {} progress reports, report in {}",
        report.progress.len(),
        args.report_file.display()
    );
    Ok(())
}

/// What `svc`, served by `server`, recorded of `host_id`.
fn report_of(svc: &FakeService, server: &TestServer, host_id: &str) -> ServiceReport {
    let progress = svc.progress_reports(host_id);
    ServiceReport {
        host_id: host_id.to_string(),
        progress,
        host_logs_progress: svc.state().host_logs_reports.clone(),
        refused: server
            .requests()
            .iter()
            .filter(|r| r.status >= 400)
            .map(|r| format!("{} {} {}", r.method, r.path, r.status))
            .collect(),
    }
}

/// Written to a temporary name beside `path`, then renamed: readers never see part of it.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("{} is not a file path", path.display()))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}
