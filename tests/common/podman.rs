//! The installer's container image, run by podman exactly as the assisted-service agent runs
//! it, on a "host" of the test's making.
//!
//! The host: this machine seen from a new PID and mount namespace (`unshare --pid --fork
//! --mount-proc`, since this machine's own PID 1 cannot be read), where podman is PID 1, so a
//! container sharing its PID namespace (`--pid=host`) finds the host's root at `/proc/1/root`.
//! In that namespace (private: nothing reaches this machine) the paths the agent mounts into the
//! container are the test's: `/opt` and `/var/log` are its directories, `/etc/pki` (through an
//! overlay on `/etc`) holds its CA bundle, and the journal socket is one it reads. Only the
//! mount point `/run/systemd/journal` is made on this machine's `/run` (a tmpfs) when missing.
//!
//! Podman here needs settings real hosts never do, passed on every call and never written to the
//! machine's configuration: runc with cgroupfs (hybrid cgroups, which crun refuses) and a
//! `containers.conf` without default ulimits (they cannot be raised here). The same ones as
//! `make image` (scripts/podman-env.sh); `AI_PODMAN_FLAGS` overrides the first two.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, MutexGuard};

use super::root::have_root;

/// The image the tests run: `make image` builds it (`AI_TEST_IMAGE` names another).
const DEFAULT_IMAGE: &str = "localhost/assisted-installer:latest";
/// The label `make image` gives the image: the sha256 of the binary it holds.
const BINARY_LABEL: &str = "io.assisted-installer.binary-sha256";
/// The container's name, as the agent names it.
pub(crate) const NAME: &str = "assisted-installer";

/// The agent's options before the image, word for word (its `install_cmd.go`), one entry per
/// option with its value: a bad-line test drops one entry.
const AGENT_OPTIONS: [&str; 11] = [
    "--privileged",
    "--pid=host",
    "--net=host",
    "--name=assisted-installer",
    "-v /dev:/dev:rw",
    "-v /opt:/opt:rw",
    "-v /var/log:/var/log:rw",
    "-v /run/systemd/journal/socket:/run/systemd/journal/socket",
    "-v /etc/pki:/etc/pki",
    "-v /tmp:/tmp",
    "--env=PULL_SECRET_TOKEN",
];

/// One container at a time: the agent's line names the container `assisted-installer`.
static ONE_CONTAINER: Mutex<()> = Mutex::new(());

/// Podman with this sandbox's settings and the image under test.
pub(crate) struct Podman {
    pub image: String,
    flags: Vec<String>,
    conf: tempfile::NamedTempFile,
    _one: MutexGuard<'static, ()>,
}

impl Podman {
    /// Podman and the image, or why not: skipped with one line when podman is not installed
    /// (a failure under `AI_REQUIRE_PODMAN=1`, as in CI); a missing or stale image always
    /// fails, naming `make image`.
    pub(crate) fn available(test: &str) -> Option<Podman> {
        if !have_root(test) {
            return None;
        }
        if Command::new("podman").arg("--version").output().is_err() {
            let why = "podman is not installed (bash .ci/install-deps installs it)";
            if std::env::var("AI_REQUIRE_PODMAN").as_deref() == Ok("1") {
                panic!("{test}: {why}, but AI_REQUIRE_PODMAN=1 forbids skipping");
            }
            eprintln!("SKIPPED {test}: {why}");
            return None;
        }
        let one = ONE_CONTAINER.lock().unwrap_or_else(|e| e.into_inner());
        let conf = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(conf.path(), "[containers]\ndefault_ulimits = []\n").unwrap();
        let flags = std::env::var("AI_PODMAN_FLAGS")
            .unwrap_or_else(|_| "--runtime runc --cgroup-manager cgroupfs".into());
        let podman = Podman {
            image: std::env::var("AI_TEST_IMAGE").unwrap_or_else(|_| DEFAULT_IMAGE.into()),
            flags: flags.split_whitespace().map(String::from).collect(),
            conf,
            _one: one,
        };
        podman.check_image();
        podman.remove(NAME);
        Some(podman)
    }

    /// The image exists and holds this checkout's binary (the one `make image` last stripped
    /// into target/image/installer): a test of an old image proves nothing.
    fn check_image(&self) {
        let label = format!("{{{{index .Labels \"{BINARY_LABEL}\"}}}}");
        let out = self
            .command()
            .args(["image", "inspect", "--format", &label, &self.image])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the image {} is not there: build it with `make image` ({})",
            self.image,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        if std::env::var("AI_TEST_IMAGE").is_ok() {
            return; // another image, on purpose
        }
        let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/image/installer");
        let bytes = std::fs::read(&built)
            .unwrap_or_else(|e| panic!("{}: {e}: run `make image`", built.display()));
        let want = format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(&bytes));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            want,
            "the image {} does not hold target/image/installer: run `make image`",
            self.image
        );
    }

    /// `podman` with the sandbox's settings.
    pub(crate) fn command(&self) -> Command {
        let mut cmd = Command::new("podman");
        cmd.args(&self.flags)
            .env("CONTAINERS_CONF", self.conf.path());
        cmd
    }

    /// `podman rm -f name` (no error when there is none).
    pub(crate) fn remove(&self, name: &str) {
        let _ = self.command().args(["rm", "-f", name]).output();
    }

    /// `podman stop name` (SIGTERM, then SIGKILL after 30 s) for a container started by
    /// `run` (the `unshare` of [`Host::command`]): in its host's PID namespace, where runc
    /// knows the container's processes by their numbers there.
    pub(crate) fn stop_in(&self, run: &std::process::Child, name: &str) -> Output {
        let children = format!("/proc/{0}/task/{0}/children", run.id());
        let children = std::fs::read_to_string(&children).unwrap();
        let pid1 = children
            .split_whitespace()
            .next()
            .expect("the host's PID 1");
        let mut stop = Command::new("nsenter");
        stop.args(["--target", pid1, "--pid", "--mount", "--", "podman"])
            .args(&self.flags)
            .args(["stop", "--time", "30", name])
            .env("CONTAINERS_CONF", self.conf.path());
        stop.output().unwrap()
    }

    /// The agent's `podman run` on `host`, without the option `dropped` (a bad line), with the
    /// installer's `flags` after the image.
    /// The token is in podman's environment, which `--env=PULL_SECRET_TOKEN` passes on.
    pub(crate) fn agent_run(
        &self,
        host: &Host,
        dropped: Option<&str>,
        flags: &[String],
        token: &str,
    ) -> Command {
        assert!(dropped.is_none_or(|d| AGENT_OPTIONS.contains(&d)));
        let options = AGENT_OPTIONS.iter().filter(|o| Some(**o) != dropped);
        let mut cmd = host.command();
        cmd.arg("podman")
            .args(&self.flags)
            .arg("run")
            .args(options.flat_map(|o| o.split(' ')))
            .arg(&self.image)
            .args(flags)
            .env("CONTAINERS_CONF", self.conf.path())
            .env("PULL_SECRET_TOKEN", token);
        cmd
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        self.remove(NAME);
    }
}

/// What a host namespace's script does before it runs its command (`$H`: the host's files).
const HOST_SETUP: &str = r#"set -e
H=$1; shift
mount --bind "$H/opt" /opt
mount --bind "$H/var-log" /var/log
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$H/etc,workdir=$H/etc-work" /etc
mount -t tmpfs tmpfs /run/systemd/journal
touch /run/systemd/journal/socket
mount --bind "$H/journal.socket" /run/systemd/journal/socket
exec "$@"
"#;

/// The host's files the agent's line mounts into the container, the test's own.
pub(crate) struct Host {
    dir: tempfile::TempDir,
    /// What the host's journald socket received, read as it arrives (as journald does).
    journal: Arc<Mutex<String>>,
}

impl Host {
    /// A host whose `/etc/pki` trusts `ca_pem` (UBI's and RHCOS's bundle path), besides the CA
    /// roots of the image.
    pub(crate) fn new(ca_pem: Option<&str>) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["opt", "var-log", "etc/pki/tls/certs", "etc-work"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        if let Some(ca) = ca_pem {
            std::fs::write(d.join("etc/pki/tls/certs/ca-bundle.crt"), ca).unwrap();
        }
        std::fs::create_dir_all("/run/systemd/journal").unwrap();
        let socket = UnixDatagram::bind(d.join("journal.socket")).unwrap();
        let journal = Arc::new(Mutex::new(String::new()));
        let received = journal.clone();
        // Ends with the test process (the socket is never closed while the host lives).
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            while let Ok(n) = socket.recv(&mut buf) {
                received
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Host { dir, journal }
    }

    /// The host's `/opt` as this process sees it.
    pub(crate) fn opt(&self) -> PathBuf {
        self.dir.path().join("opt")
    }

    /// The host's `/var/log` as this process sees it.
    pub(crate) fn var_log(&self) -> PathBuf {
        self.dir.path().join("var-log")
    }

    /// A command to which the host's namespaces and mounts are added: its program and
    /// arguments follow.
    pub(crate) fn command(&self) -> Command {
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--fork", "--mount-proc", "--", "bash", "-c"])
            .arg(HOST_SETUP)
            .arg("host-setup")
            .arg(self.dir.path());
        cmd
    }

    /// Every datagram the journal socket received so far, as text.
    pub(crate) fn journal_text(&self) -> String {
        self.journal.lock().unwrap().clone()
    }
}
