//! The installer's own downloads go through the proxy it is given, as its Go predecessor's
//! coreos-installer child did: the entrypoint (dry-run master, root: it keeps the Ignition
//! config in /opt/install-dir) installs an `--installer-args --image-url` on a made-up host
//! that only the test proxy resolves, with `--http-proxy` (carrying a password, which no output
//! shows); the assisted-service calls stay direct, as in Go. `--no-proxy` sends a listed host
//! around the proxy.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;

use common::fake_service::FakeService;
use common::http_proxy::TestProxy;
use common::http_server::{Route, TestServer};
use common::master_run::{assert_master_stages, master_args, served_master, IGNITION};
use common::root::{have_root, sgdisk_verify, Ext4};
use coreos_image::{cached_image_set, ImageSet, ImageSpec, BOOT_LABEL};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
/// A name that never resolves (RFC 2606): only the test proxy knows it.
const IMAGES_HOST: &str = "images.example.invalid";
const PASSWORD: &str = "pr0xy-s3cret";
/// Long enough for the install, short enough that a download retrying on a name that does
/// not resolve (the flows retry ten times) fails the test rather than hanging it.
const DEADLINE: Duration = Duration::from_secs(120);

struct Install {
    success: bool,
    /// stdout, stderr and the log file.
    output: String,
    svc: FakeService,
    host: String,
    /// Holds the disk-image file `disk`.
    _dir: tempfile::TempDir,
    disk: std::path::PathBuf,
}

/// A dry-run master install of `installer_args` (JSON) onto a disk-image file, with `extra`
/// flags after the agent's.
fn install(installer_args: &str, extra: &[&str], disk_size: u64) -> Install {
    let (host, svc, server) = served_master();
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    std::fs::File::create(&disk)
        .unwrap()
        .set_len(disk_size)
        .unwrap();
    let (stdout, stderr, log) = (
        dir.path().join("stdout"),
        dir.path().join("stderr"),
        dir.path().join("installer.log"),
    );
    let args = master_args(
        &host,
        &disk,
        &server.base_url(),
        installer_args,
        &dir.path().join("rebooted"),
    );
    let mut child = Command::new(BIN)
        .args(args)
        .args(extra)
        .env("PULL_SECRET_TOKEN", svc.token())
        .env("ASSISTED_INSTALLER_LOG_FILE", &log)
        // The host is this machine (its PID 1 is not readable here).
        .env("ASSISTED_INSTALLER_HOST_ROOT", "/")
        // The installer's own proxy must come from its flags, not from this environment.
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .stdout(Stdio::from(std::fs::File::create(&stdout).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&stderr).unwrap()))
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = std::fs::remove_file(format!("/opt/install-dir/master-{host}.ign"));
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let mut output = format!("{}{}{}", read(&stdout), read(&stderr), read(&log));
    if status.is_none() {
        output.push_str(&format!("\n(killed after {}s)", DEADLINE.as_secs()));
    }
    Install {
        success: status.is_some_and(|s| s.success()),
        output,
        svc,
        host,
        _dir: dir,
        disk,
    }
}

fn images() -> ImageSet {
    cached_image_set(&ImageSpec::test(512)).expect("test images")
}

/// The server of the gzip image, at /img.raw.gz.
fn served(set: &ImageSet) -> TestServer {
    let srv = TestServer::start();
    srv.route("/img.raw.gz", Route::file(&set.gz.path));
    srv
}

/// `--installer-args` installing the gzip image from `url`.
fn installer_args(url: &str, set: &ImageSet) -> String {
    serde_json::to_string(&["--image-url", url, "--sha256", &set.gz.sha256]).unwrap()
}

/// Installed: the Go stages, a valid table, the served Ignition config on the boot partition.
fn assert_installed(run: &Install) {
    assert!(run.success, "{}", run.output);
    assert_master_stages(&run.svc.progress_reports(&run.host), false);
    sgdisk_verify(&run.disk);
    let boot = Ext4::on(&run.disk, 512, BOOT_LABEL);
    assert_eq!(boot.text("/ignition/config.ign"), IGNITION);
}

#[test]
fn an_installer_args_image_and_its_signature_come_through_the_http_proxy_flag() {
    if !have_root("an_installer_args_image_and_its_signature_come_through_the_http_proxy_flag") {
        return;
    }
    let set = images();
    let origin = served(&set);
    let proxy = TestProxy::start(&[(IMAGES_HOST, origin.addr())]).with_credentials("ai", PASSWORD);
    let url = format!("http://{IMAGES_HOST}/img.raw.gz");
    let with_password = proxy
        .url()
        .replace("http://", &format!("http://ai:{PASSWORD}@"));
    let size = set.raw.size + (64 << 20);
    let run = install(
        &installer_args(&url, &set),
        &["--http-proxy", &with_password],
        size,
    );
    assert_installed(&run);
    // The signature looked for next to the image, then the image: both through the proxy, with
    // its credentials; nothing else (the assisted-service is reached directly, as in Go).
    let requests = proxy.requests();
    let targets: Vec<&str> = requests.iter().map(|r| r.target.as_str()).collect();
    assert_eq!(targets, [format!("{url}.sig"), url.clone()], "{requests:?}");
    assert!(requests.iter().all(|r| r.authorization.is_some()));
    assert_eq!(origin.requests_for("/img.raw.gz").len(), 1);
    assert!(!run.svc.progress_reports(&run.host).is_empty());
    assert!(
        run.output
            .contains("image downloads: http URLs through http://ai:<SECRET>@"),
        "{}",
        run.output
    );
    assert!(!run.output.contains(PASSWORD), "the proxy password leaked");
}

/// `--no-proxy` lists hosts reached directly: the image on 127.0.0.1 is fetched around the
/// proxy, which sees nothing; without it the same URL goes through the proxy.
#[test]
fn no_proxy_sends_a_listed_host_around_the_proxy() {
    if !have_root("no_proxy_sends_a_listed_host_around_the_proxy") {
        return;
    }
    let set = images();
    let origin = served(&set);
    let proxy = TestProxy::start(&[]);
    let url = origin.url("/img.raw.gz");
    let size = set.raw.size + (64 << 20);
    let args = installer_args(&url, &set);
    let run = install(
        &args,
        &[
            "--http-proxy",
            &proxy.url(),
            "--no-proxy",
            "localhost,127.0.0.1",
        ],
        size,
    );
    assert_installed(&run);
    assert_eq!(proxy.targets(), Vec::<String>::new());
    let run = install(&args, &["--http-proxy", &proxy.url()], size);
    assert_installed(&run);
    assert_eq!(proxy.targets(), [format!("{url}.sig"), url]);
}
