//! The entrypoint's dry-run appliance master install against the standalone fake
//! assisted-service (the `fake-assisted-service` example) as a process, as a guest without a
//! network runs it, onto a disk-image file (root: the entrypoint keeps the Ignition config in
//! /opt/install-dir), the report holding the exact Go stage sequence with the registry copy.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::examples::example_binary;
use common::master_run::{assert_master_stages, master_args, IGNITION};
use common::root::have_root;
use common::service_report::ServiceReport;
use coreos_image::{cached_image_set, ImageSpec};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const EXAMPLE: &str = "fake-assisted-service";

/// The service process and its files; killed on drop if still running.
struct ServiceProcess {
    child: Child,
    dir: tempfile::TempDir,
    addr: String,
    token: String,
}

impl ServiceProcess {
    /// Started on any free port of the loopback, serving `host` as a master with [`IGNITION`];
    /// returns once its address file is there.
    fn start(host: &str) -> ServiceProcess {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let file = |name: &str| dir.path().join(name);
        std::fs::write(file("master.ign"), IGNITION).unwrap();
        let mut child = Command::new(example_binary(EXAMPLE))
            .args(["--listen", "127.0.0.1:0", "--address-file"])
            .arg(file("address"))
            .args(["--host-id", host, "--role", "master", "--ignition-file"])
            .arg(file("master.ign"))
            .arg("--token-file")
            .arg(file("token"))
            .arg("--report-file")
            .arg(file("report.json"))
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !file("address").exists() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("{EXAMPLE} exited before it was ready: {status}");
            }
            assert!(Instant::now() < deadline, "{EXAMPLE} not ready in 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        let read = |name: &str| std::fs::read_to_string(file(name)).unwrap();
        let (addr, token) = (read("address"), read("token"));
        assert!(
            addr.ends_with('\n') && token.ends_with('\n'),
            "one line each"
        );
        ServiceProcess {
            child,
            addr: addr.trim().to_string(),
            token: token.trim().to_string(),
            dir,
        }
    }

    /// Stops it with `signal`; it must exit 0 having written its report.
    fn stop(mut self, signal: Signal) -> ServiceReport {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{EXAMPLE} still running 30 s after {signal}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{EXAMPLE} stopped by {signal}: {status}");
        ServiceReport::read(&self.dir.path().join("report.json")).unwrap()
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An appliance master (the host has the registry marker, and the image: `host_root` is where
/// the installer finds the host's files) against the service process, onto a disk-image file.
/// A plain master against the fake in the test process, onto a loop device: entrypoint_e2e.rs's
/// `dry_run_master_writes_a_bootable_disk_with_the_served_ignition`.
#[test]
fn a_dry_run_appliance_master_against_the_service_process_reports_the_go_stages() {
    if !have_root("a_dry_run_appliance_master_against_the_service_process_reports_the_go_stages") {
        return;
    }
    let set = cached_image_set(&ImageSpec::test(512)).unwrap();
    let host_root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::create_dir_all(host_root.path().join("run/media/iso/registry")).unwrap();
    let image = host_root.path().join("image.raw.gz");
    if std::fs::hard_link(&set.gz.path, &image).is_err() {
        std::fs::copy(&set.gz.path, &image).unwrap();
    }
    let args = ["--image-file", "/image.raw.gz", "--sha256", &set.gz.sha256];
    let installer_args = serde_json::to_string(&args).unwrap();
    // The entrypoint run as the agent runs it.
    let host = uuid::Uuid::new_v4().to_string();
    let svc = ServiceProcess::start(&host);
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let disk = work.path().join("disk.img");
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(set.raw.size + 64 * (1 << 20))
        .unwrap();
    let marker = work.path().join("rebooted");
    let out = Command::new(BIN)
        .args(master_args(
            &host,
            &disk,
            &format!("http://{}", svc.addr),
            &installer_args,
            &marker,
        ))
        .env("PULL_SECRET_TOKEN", &svc.token)
        .env("ASSISTED_INSTALLER_HOST_ROOT", host_root.path())
        .env(
            "ASSISTED_INSTALLER_LOG_FILE",
            work.path().join("installer.log"),
        )
        .output()
        .unwrap();
    let _ = std::fs::remove_file(format!("/opt/install-dir/master-{host}.ign"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(marker.exists(), "dry-run reboot marker");
    // The image went onto the file, Ignition included.
    let found = Command::new("grep")
        .args(["-qaF", IGNITION])
        .arg(&disk)
        .status()
        .unwrap();
    assert!(
        found.success(),
        "the served Ignition config is not on the disk image"
    );
    let report = svc.stop(Signal::SIGTERM);
    assert_eq!(report.host_id, host);
    assert!(report.refused.is_empty(), "{:?}", report.refused);
    assert_eq!(
        report.host_logs_progress,
        [(host.clone(), "requested".to_string())]
    );
    assert_master_stages(&report.progress, true);
}
