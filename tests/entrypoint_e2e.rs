//! The container entrypoint end to end (root): the binary run with the Go installer's flags in
//! dry-run mode against the fake assisted-service, writing a CoreOS-like image to a loop
//! device, from an image file, and from the live image as the service really starts it (no
//! image in --installer-args, run in a live-system mount layout). The disk must be bootable-shaped, carry the Ignition config the service served, and
//! the service must have seen the exact Go stage sequence.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "../testdata/live_fixture.rs"]
mod live_fixture;

use assisted_installer::commands::install::EMPTY_TOKEN_NOTE;
use common::fake_service::FakeService;
use common::live_ns::LiveLayout;
use common::master_run::{assert_master_stages, master_args, served_master, IGNITION};
use common::root::{have_root, sgdisk_verify, Ext4, LoopDev};
use coreos_image::{cached_image_set, ImageSpec, BOOT_LABEL};
use live_fixture::cached_live_fixture;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");

/// One dry-run master install against the fake service.
struct MasterRun {
    svc: FakeService,
    host: String,
    dir: tempfile::TempDir,
    out: std::process::Output,
}

/// Run the entrypoint as the agent does (Go flags, token in the environment), as `cmd` (the
/// binary itself, or the binary inside a live-system layout).
fn run_master(cmd: Command, boot_device: &Path, installer_args: &str) -> MasterRun {
    run_master_as(cmd, boot_device, installer_args, true)
}

/// [`run_master`], with `PULL_SECRET_TOKEN` set to the service's token or unset.
fn run_master_as(
    mut cmd: Command,
    boot_device: &Path,
    installer_args: &str,
    token: bool,
) -> MasterRun {
    let (host, svc, server) = served_master();
    let dir = tempfile::tempdir().unwrap();
    let out = cmd
        .args(master_args(
            &host,
            boot_device,
            &server.base_url(),
            installer_args,
            &dir.path().join("rebooted"),
        ))
        .env(
            "PULL_SECRET_TOKEN",
            if token { svc.token() } else { String::new() },
        )
        .env(
            "ASSISTED_INSTALLER_LOG_FILE",
            dir.path().join("installer.log"),
        )
        .output()
        .unwrap();
    let _ = std::fs::remove_file(format!("/opt/install-dir/master-{host}.ign"));
    MasterRun {
        svc,
        host,
        dir,
        out,
    }
}

impl MasterRun {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    /// Success, the reboot marker, and the exact Go stage sequence for a master.
    fn assert_installed(&self) {
        assert!(self.out.status.success(), "{}", self.stderr());
        assert!(
            self.dir.path().join("rebooted").exists(),
            "dry-run reboot marker"
        );
        assert_master_stages(&self.svc.progress_reports(&self.host), false);
        // The token never reaches the log.
        let log = std::fs::read_to_string(self.dir.path().join("installer.log")).unwrap();
        assert!(
            !log.contains(&self.svc.token()) && !self.stderr().contains(&self.svc.token()),
            "token leaked"
        );
        assert!(
            log.contains("Writing") || log.contains("wrote"),
            "the log file is written"
        );
    }
}

#[test]
fn dry_run_master_writes_a_bootable_disk_with_the_served_ignition() {
    if !have_root("dry_run_master_writes_a_bootable_disk_with_the_served_ignition") {
        return;
    }
    let set = cached_image_set(&ImageSpec::test(512)).unwrap();
    let dev = LoopDev::new(set.raw.size + 64 * (1 << 20), 512);
    let net = tempfile::tempdir().unwrap();
    std::fs::write(
        net.path().join("eno1.nmconnection"),
        "[connection]\nid=eno1\n",
    )
    .unwrap();
    let installer_args = serde_json::to_string(&[
        "--image-file",
        set.gz.path.to_str().unwrap(),
        "--sha256",
        &set.gz.sha256,
        "--append-karg",
        "nameserver=8.8.8.8",
        "--copy-network",
        "--network-dir",
        net.path().to_str().unwrap(),
    ])
    .unwrap();
    // Run on the host itself: its files are this process's (this test machine's PID 1 is not
    // readable, so say so rather than let the installer look through /proc/1/root).
    let mut cmd = Command::new(BIN);
    cmd.env("ASSISTED_INSTALLER_HOST_ROOT", "/");
    let r = run_master(cmd, &dev.path, &installer_args);
    r.assert_installed();
    sgdisk_verify(&dev.path);
    let boot = Ext4::on(&dev.path, 512, BOOT_LABEL);
    assert_eq!(boot.text("/ignition/config.ign"), IGNITION);
    assert!(boot
        .text("/loader/entries/ostree-1-rhcos.conf")
        .contains(" nameserver=8.8.8.8"));
    assert!(boot
        .text("/coreos-firstboot-network/eno1.nmconnection")
        .contains("id=eno1"));
}

/// A process whose mount namespace is "the host": the live system's layout and its
/// NetworkManager keyfiles. Killed on drop.
struct HostView {
    child: std::process::Child,
    _layout: LiveLayout,
}

impl HostView {
    fn start(layout: LiveLayout) -> HostView {
        use std::io::BufRead;
        let mut child = layout
            .command("sh")
            .args(["-c", "echo ready; exec sleep 600"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the host view did not start");
        HostView {
            child,
            _layout: layout,
        }
    }

    /// The host's root as a container with --pid=host sees it (/proc/1/root there).
    fn root(&self) -> String {
        format!("/proc/{}/root", self.child.id())
    }
}

impl Drop for HostView {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn dry_run_master_in_a_container_installs_the_hosts_live_image_and_keyfiles() {
    if !have_root("dry_run_master_in_a_container_installs_the_hosts_live_image_and_keyfiles") {
        return;
    }
    // The situation of the agent's `podman run --privileged --pid=host`: the host (a live
    // system) has the osmet files, /sysroot and the static network keyfiles; the installer's
    // own mount namespace has none of the live image, and an /etc/NetworkManager of its own.
    let fx = cached_live_fixture(512, false).unwrap();
    let dev = LoopDev::new(fx.raw_size + 64 * (1 << 20), 512);
    let host_net = tempfile::tempdir().unwrap();
    let keyfile = "[connection]\nid=static-eno1\n[ipv4]\nmethod=manual\naddress1=192.0.2.10/24\n";
    std::fs::write(host_net.path().join("static-eno1.nmconnection"), keyfile).unwrap();
    let mut host = LiveLayout::new(&fx.sysroot, std::slice::from_ref(&fx.osmet));
    host.network_dir = Some(host_net.path().to_path_buf());
    let host = HostView::start(host);
    let container_net = tempfile::tempdir().unwrap();
    std::fs::write(
        container_net.path().join("decoy.nmconnection"),
        "[connection]\nid=the-container-image-s-own\n",
    )
    .unwrap();
    let empty = tempfile::tempdir().unwrap();
    let mut container = LiveLayout::new(empty.path(), &[]);
    container.network_dir = Some(container_net.path().to_path_buf());
    // What the service really sends: no image, only what users and the service add.
    let mut cmd = container.command(BIN);
    cmd.env("ASSISTED_INSTALLER_HOST_ROOT", host.root());
    let r = run_master(
        cmd,
        &dev.path,
        r#"["--append-karg","x=1","--copy-network"]"#,
    );
    r.assert_installed();
    assert!(
        r.stderr().contains(&format!(
            "installing {} x86_64 (512-byte sectors) from {}/run/coreos-installer/osmet/",
            fx.description,
            host.root()
        )),
        "{}",
        r.stderr()
    );
    sgdisk_verify(&dev.path);
    let boot = Ext4::on(&dev.path, 512, BOOT_LABEL);
    assert_eq!(boot.text("/ignition/config.ign"), IGNITION);
    let options = boot.bls_options("/loader/entries/ostree-1-rhcos.conf");
    assert!(options.ends_with(" x=1"), "{options}");
    // The host's keyfile, byte for byte, mode 0600; not the container's.
    let copied = "/coreos-firstboot-network/static-eno1.nmconnection";
    assert_eq!(boot.text(copied), keyfile);
    assert_eq!(boot.mode(copied), 0o600);
    let listing = boot.debugfs("ls /coreos-firstboot-network");
    let listing = String::from_utf8_lossy(&listing);
    assert!(!listing.contains("decoy"), "{listing}");
    // Everything but the table and /boot is the live image, byte for byte.
    let raw = std::fs::File::open(&fx.raw).unwrap();
    let disk = std::fs::File::open(&dev.path).unwrap();
    use std::os::unix::fs::FileExt;
    let root_at = fx.spec().partitions()[3].offset;
    let mut a = vec![0u8; 4 << 20];
    let mut b = vec![0u8; 4 << 20];
    raw.read_exact_at(&mut a, root_at).unwrap();
    disk.read_exact_at(&mut b, root_at).unwrap();
    assert!(a == b, "the root partition differs from the live image");
}

/// Without `PULL_SECRET_TOKEN` the log says what is true: no token is sent (a service without
/// authentication wants none). The fake service wants one: its 401 fails the run with an error
/// that names the token (no header is sent: service_client.rs).
#[test]
fn without_a_token_none_is_sent_and_a_401_names_pull_secret_token() {
    let mut cmd = Command::new(BIN);
    cmd.env("ASSISTED_INSTALLER_HOST_ROOT", "/");
    let dev = tempfile::NamedTempFile::new().unwrap();
    let installer_args = r#"["--image-url","http://127.0.0.1:9/rhcos.raw.gz"]"#;
    let r = run_master_as(cmd, dev.path(), installer_args, false);
    let stderr = r.stderr();
    assert_eq!(r.out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(EMPTY_TOKEN_NOTE), "{stderr}");
    assert!(!stderr.contains("will refuse"), "{stderr}");
    let named = "401 Unauthorized: Unauthorized; no token was sent, and this assisted-service \
                 requires one: PULL_SECRET_TOKEN is empty or unset";
    assert!(stderr.contains(named), "{stderr}");
    assert!(r.svc.progress_reports(&r.host).is_empty());
}

#[test]
fn go_flag_errors_exit_2_with_usage_and_help_exits_0() {
    for (args, code, output, wants) in [
        (
            &["--role", "master", "--no-such-flag"][..],
            2,
            "stderr",
            &["no-such-flag", "-boot-device"][..],
        ),
        (&["-help"], 0, "stdout", &["-installer-args"]),
        (&["--installer-args", "[not json"], 2, "stderr", &[]),
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        let text = match output {
            "stdout" => String::from_utf8_lossy(&out.stdout),
            _ => stderr,
        };
        for want in wants {
            assert!(text.contains(want), "{args:?}: {text}");
        }
    }
}
