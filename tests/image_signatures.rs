//! Signed images and CoreOS streams end to end: `write-image` of test images signed at test time
//! with GnuPG (as the publishers sign theirs), served by a local server, onto a disk-image file
//! (512-byte sectors) and, as root, a 4096-byte-sector loop device. A good signature writes the
//! image byte for byte; a wrong one, one by another key, a truncated one, or none without a
//! digest or --insecure is refused; the disk is left untouched when the refusal comes before it
//! is opened, and with an empty valid partition table when the image had to be read to tell.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;

use common::http_server::{Route, TestServer};
use common::images::assert_image_on_disk;
use common::root::{assert_empty_gpt, have_root, run, sgdisk_verify, text, LoopDev};
use coreos_image::{cached_image_set, ImageSet, ImageSpec};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const MIB: u64 = 1 << 20;

fn images(ss: u64) -> ImageSet {
    cached_image_set(&ImageSpec::test(ss)).expect("test images")
}

/// A throwaway GnuPG home with ed25519 keys (made in milliseconds).
struct Gpg {
    home: tempfile::TempDir,
}

impl Gpg {
    fn new() -> Gpg {
        // A short path: gpg-agent's socket lives in it.
        let home = tempfile::Builder::new()
            .prefix("gpg")
            .tempdir_in("/tmp")
            .unwrap();
        Gpg { home }
    }

    fn gpg(&self, args: &[&str]) -> Vec<u8> {
        let out = Command::new("gpg")
            .env("GNUPGHOME", self.home.path())
            .args([
                "--batch",
                "--quiet",
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
            ])
            .args(args)
            .output()
            .expect("running gpg (package gnupg)");
        assert!(out.status.success(), "gpg {args:?}: {}", text(&out));
        out.stdout
    }

    /// A new signing key; its fingerprint.
    fn new_key(&self, uid: &str) -> String {
        self.gpg(&["--quick-gen-key", uid, "ed25519", "sign", "never"]);
        self.fingerprints(uid)[0].clone()
    }

    /// The fingerprints of `uid`'s key: the primary key's, then its subkeys'.
    fn fingerprints(&self, uid: &str) -> Vec<String> {
        let list = self.gpg(&["--with-colons", "--list-keys", uid]);
        String::from_utf8(list)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("fpr:"))
            .map(|l| l.trim_matches(':').to_string())
            .collect()
    }

    /// A detached binary signature of `file` by exactly `key` (a primary key or a subkey).
    fn sign(&self, key: &str, file: &Path) -> Vec<u8> {
        let by = format!("{key}!");
        self.gpg(&[
            "--detach-sign",
            "--local-user",
            &by,
            "--output",
            "-",
            file.to_str().unwrap(),
        ])
    }

    /// The public key written to a file, armored or binary.
    fn export(&self, fpr: &str, armor: bool, to: &Path) -> PathBuf {
        let args = match armor {
            true => vec!["--armor", "--export", fpr],
            false => vec!["--export", fpr],
        };
        std::fs::write(to, self.gpg(&args)).unwrap();
        to.to_path_buf()
    }
}

impl Drop for Gpg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .env("GNUPGHOME", self.home.path())
            .args(["--kill", "gpg-agent"])
            .output();
    }
}

fn write_image(args: &[&str], target: &Path) -> Output {
    Command::new(BIN)
        .arg("write-image")
        .args(args)
        .arg(target)
        .output()
        .expect("running assisted-installer")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The write succeeded and the target holds the raw image byte for byte (but the table
/// sectors the fix-up rewrites by design).
fn assert_written(out: &Output, target: &Path, set: &ImageSet) {
    assert!(out.status.success(), "{}", text(out));
    let disk = std::fs::read(target).unwrap();
    let raw = std::fs::read(&set.raw.path).unwrap();
    assert_image_on_disk(&disk, &raw, set.spec.sector_size);
    sgdisk_verify(target);
}

/// A disk-image file holding old data (so a refusal that touched it would show).
fn old_disk(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let old: Vec<u8> = (0..256 * MIB as usize).map(|i| (i % 251) as u8).collect();
    std::fs::write(&p, old).unwrap();
    p
}

fn sha(p: &Path) -> String {
    run(Command::new("sha256sum").arg(p))[..64].to_string()
}

/// Refused before the target was opened: it still holds its old data.
fn assert_refused_untouched(args: &[&str], target: &Path, wanted: &[&str]) {
    let before = sha(target);
    let out = write_image(args, target);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let e = stderr(&out);
    for w in wanted {
        assert!(e.contains(w), "missing {w:?} in:\n{e}");
    }
    assert_eq!(
        sha(target),
        before,
        "a refused write changed {}",
        target.display()
    );
}

/// Refused after the image was streamed: the target has an empty, valid partition table.
fn assert_refused_reset(args: &[&str], target: &Path, ss: u64, wanted: &[&str]) {
    let out = write_image(args, target);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let e = stderr(&out);
    for w in wanted {
        assert!(e.contains(w), "missing {w:?} in:\n{e}");
    }
    assert_empty_gpt(target, ss);
}

/// The publisher's key (A, signing with a subkey too), another key (B), and the files.
struct Signed {
    gpg: Gpg,
    a: String,
    a_sub: String,
    b: String,
    dir: tempfile::TempDir,
}

fn keys() -> Signed {
    let gpg = Gpg::new();
    let a = gpg.new_key("Publisher <a@example.com>");
    gpg.gpg(&["--quick-add-key", &a, "ed25519", "sign", "never"]);
    let a_sub = gpg.fingerprints(&a)[1].clone();
    let b = gpg.new_key("Someone else <b@example.com>");
    let dir = tempfile::tempdir().unwrap();
    Signed {
        gpg,
        a,
        a_sub,
        b,
        dir,
    }
}

#[test]
fn url_and_file_images_are_checked_against_their_signatures() {
    let set = images(512);
    let k = keys();
    let d = k.dir.path();
    let armored = k.gpg.export(&k.a, true, &d.join("a.asc"));
    let binary = k.gpg.export(&k.a, false, &d.join("a.gpg"));
    let xz = &set.xz.path;
    let good = k.gpg.sign(&k.a, xz);
    let srv = TestServer::start();
    srv.route("/i.raw.xz", Route::file(xz));
    srv.route("/i.raw.xz.sig", Route::bytes(good.clone()));
    let url = srv.url("/i.raw.xz");
    let key_a = ["--signing-key", armored.to_str().unwrap()];

    // A good signature, an armored --signing-key: the image, byte for byte.
    let target = old_disk(d, "good-url");
    let out = write_image(&[&["--image-url", &url][..], &key_a].concat(), &target);
    assert_written(&out, &target, &set);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = format!("OpenPGP signature {url}.sig: good, by key {}", k.a);
    assert!(stdout.contains(&said), "{stdout}");

    // A file next to its .sig, by the signing subkey, a binary --signing-key.
    let file = d.join("f.raw.xz");
    std::fs::copy(xz, &file).unwrap();
    std::fs::write(d.join("f.raw.xz.sig"), k.gpg.sign(&k.a_sub, xz)).unwrap();
    let target = old_disk(d, "good-file");
    let args = [
        "--image-file",
        file.to_str().unwrap(),
        "--signing-key",
        binary.to_str().unwrap(),
    ];
    let out = write_image(&args, &target);
    assert_written(&out, &target, &set);
    let said = format!("good, by subkey {} of key {}", k.a_sub, k.a);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&said),
        "{}",
        text(&out)
    );

    // Without --signing-key the key is unknown: refused before the disk is opened, naming
    // the key and the way out, even with --insecure.
    let target = old_disk(d, "refused");
    for insecure in [&[][..], &["--insecure"]] {
        let args = [&["--image-url", &url][..], insecure].concat();
        let fpr = format!("fingerprint {}", k.a);
        assert_refused_untouched(&args, &target, &[&fpr, "--signing-key FILE", &url]);
    }

    // A signature by another key.
    srv.route("/b.raw.xz", Route::file(xz));
    srv.route("/b.raw.xz.sig", Route::bytes(k.gpg.sign(&k.b, xz)));
    let b_url = srv.url("/b.raw.xz");
    let fpr = format!("fingerprint {}", k.b);
    assert_refused_untouched(
        &[&["--image-url", &b_url][..], &key_a].concat(),
        &target,
        &[&fpr, "--signing-key FILE"],
    );

    // A truncated signature, with --insecure too: unreadable, refused.
    srv.route("/t.raw.xz", Route::file(xz));
    srv.route(
        "/t.raw.xz.sig",
        Route::bytes(good[..good.len() - 20].to_vec()),
    );
    let t_url = srv.url("/t.raw.xz");
    let args = [&["--image-url", &t_url, "--insecure"][..], &key_a].concat();
    assert_refused_untouched(
        &args,
        &target,
        &["is not a valid OpenPGP signature", &t_url],
    );

    // A good signature of other bytes: found out only once the image was read, so the disk
    // was written, and is reset to an empty table (its first MiB was never written).
    let other = d.join("other");
    std::fs::write(&other, b"some other file").unwrap();
    srv.route("/w.raw.xz", Route::file(xz));
    srv.route("/w.raw.xz.sig", Route::bytes(k.gpg.sign(&k.a, &other)));
    let w_url = srv.url("/w.raw.xz");
    for insecure in [&[][..], &["--insecure"]] {
        let args = [&["--image-url", &w_url][..], &key_a, insecure].concat();
        let target = old_disk(d, "wrong");
        let key = format!("key {}", k.a);
        let wanted = ["does not match the image", &w_url, &key];
        assert_refused_reset(&args, &target, 512, &wanted);
    }

    // No signature: refused without a digest or --insecure; written with either.
    srv.route("/n.raw.xz", Route::file(xz));
    let n_url = srv.url("/n.raw.xz");
    let target = old_disk(d, "none");
    let missing = format!("{n_url}.sig is missing");
    assert_refused_untouched(&["--image-url", &n_url], &target, &[&missing, "--insecure"]);
    let out = write_image(&["--image-url", &n_url, "--insecure"], &target);
    assert_written(&out, &target, &set);
    let target = old_disk(d, "none-sha");
    let out = write_image(
        &["--image-url", &n_url, "--sha256", &set.xz.sha256],
        &target,
    );
    assert_written(&out, &target, &set);
}

/// Stream metadata naming `raw.xz` and `4k.raw.xz` images on `srv`, under /streams/<name>.json.
fn serve_stream(srv: &TestServer, name: &str, formats: &[(&str, &str, Option<&str>)]) {
    let mut f = serde_json::Map::new();
    for (format, path, sha) in formats {
        let mut disk = serde_json::json!({
            "location": srv.url(path),
            "signature": srv.url(&format!("{path}.sig")),
        });
        if let Some(sha) = sha {
            disk["sha256"] = (*sha).into();
        }
        f.insert(format.to_string(), serde_json::json!({ "disk": disk }));
    }
    let doc = serde_json::json!({
        "stream": name,
        "architectures": {
            "x86_64": { "artifacts": { "metal": { "release": "1", "formats": f } } },
            "aarch64": { "artifacts": { "qemu": {} } }
        }
    });
    let path = format!("/streams/{name}.json");
    srv.route(&path, Route::bytes(serde_json::to_vec(&doc).unwrap()));
}

#[test]
fn a_stream_names_the_image_its_digests_and_its_signature() {
    let set = images(512);
    let k = keys();
    let d = k.dir.path();
    let key = k.gpg.export(&k.a, true, &d.join("a.asc"));
    let srv = TestServer::start();
    srv.route("/s/metal.raw.xz", Route::file(&set.xz.path));
    srv.route(
        "/s/metal.raw.xz.sig",
        Route::bytes(k.gpg.sign(&k.a, &set.xz.path)),
    );
    // The 4K image is not there: a disk-image file must get the 512-byte one.
    let formats = [
        ("raw.xz", "/s/metal.raw.xz", Some(set.xz.sha256.as_str())),
        ("4k.raw.xz", "/s/missing-4k.raw.xz", None),
    ];
    serve_stream(&srv, "testing", &formats);
    serve_stream(&srv, "only4k", &formats[1..]);
    let base = srv.url("/streams/");
    let stream = |name: &'static str| {
        [
            "--stream",
            name,
            "--stream-base-url",
            &base,
            "-a",
            "x86_64",
            "--signing-key",
            key.to_str().unwrap(),
        ]
        .map(str::to_string)
    };
    let target = old_disk(d, "stream");
    let args = stream("testing");
    let out = write_image(&args.each_ref().map(String::as_str), &target);
    assert_written(&out, &target, &set);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("OpenPGP signature"),
        "{}",
        text(&out)
    );

    // What is not there is named, before the disk is written.
    let target = old_disk(d, "stream-errors");
    let refused = |args: &[String], wanted: &[&str]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_refused_untouched(&args, &target, wanted);
    };
    refused(
        &stream("nosuch"),
        &["there is no stream \"nosuch\"", "nosuch.json"],
    );
    let mut s390 = stream("testing");
    s390[5] = "s390x".into();
    refused(&s390, &["architecture \"s390x\" (it has: aarch64, x86_64)"]);
    let mut arm = stream("testing");
    arm[5] = "aarch64".into();
    refused(
        &arm,
        &["no metal artifact for architecture \"aarch64\" (it has: qemu)"],
    );
    refused(
        &stream("only4k"),
        &["in format \"raw.xz\" (it has: 4k.raw.xz)"],
    );

    // Over plain http the stream's digests do not count: without its signature the image is
    // refused, unless --insecure.
    srv.route("/s/unsigned.raw.xz", Route::file(&set.xz.path));
    let unsigned = [("raw.xz", "/s/unsigned.raw.xz", Some(set.xz.sha256.as_str()))];
    serve_stream(&srv, "unsigned", &unsigned);
    refused(&stream("unsigned"), &["came over plain http", "--insecure"]);
    let mut insecure = stream("unsigned").to_vec();
    insecure.push("--insecure".into());
    let insecure: Vec<&str> = insecure.iter().map(String::as_str).collect();
    let out = write_image(&insecure, &target);
    assert_written(&out, &target, &set);
}

#[test]
fn a_4k_disk_gets_the_streams_4k_image() {
    if !have_root("a_4k_disk_gets_the_streams_4k_image") {
        return;
    }
    let set = images(4096);
    let k = keys();
    let key = k.gpg.export(&k.a, true, &k.dir.path().join("a.asc"));
    let srv = TestServer::start();
    srv.route("/s/m4k.raw.xz", Route::file(&set.xz.path));
    srv.route(
        "/s/m4k.raw.xz.sig",
        Route::bytes(k.gpg.sign(&k.a, &set.xz.path)),
    );
    let formats = [
        ("raw.xz", "/s/missing-512.raw.xz", None),
        ("4k.raw.xz", "/s/m4k.raw.xz", Some(set.xz.sha256.as_str())),
    ];
    serve_stream(&srv, "stable", &formats);
    let dev = LoopDev::new(set.raw.size + 64 * MIB, 4096);
    dev.fill(4 * MIB, 0xa5);
    let base = srv.url("/streams/");
    let args = ["-s", "stable", "--stream-base-url", &base, "-a", "x86_64"];
    let out = write_image(
        &[&args[..], &["--signing-key", key.to_str().unwrap()]].concat(),
        &dev.path,
    );
    assert_written(&out, &dev.path, &set);
    // The same stream signed by a key the disk's user did not pass: refused, disk unchanged.
    let before = dev.sha256();
    let out = write_image(&args, &dev.path);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("--signing-key FILE"),
        "{}",
        text(&out)
    );
    assert_eq!(dev.sha256(), before);
}

/// The install flows look for `<--image-url>.sig` too, and refuse a signature by a key they do
/// not know before the disk is opened (the Go installer's coreos-installer did the same).
#[test]
fn the_flows_check_the_signature_next_to_an_installer_args_image_url() {
    use assisted_installer::flow::writer::{DiskWriter, InProcessWriter, WriteRequest};
    use assisted_installer::image::Cancel;
    use assisted_installer::write::parse_installer_args;
    let set = images(512);
    let k = keys();
    let d = k.dir.path();
    let srv = TestServer::start();
    srv.route("/f.raw.xz", Route::file(&set.xz.path));
    srv.route(
        "/f.raw.xz.sig",
        Route::bytes(k.gpg.sign(&k.a, &set.xz.path)),
    );
    let ign = d.join("config.ign");
    std::fs::write(&ign, r#"{"ignition":{"version":"3.2.0"}}"#).unwrap();
    let writer = InProcessWriter {
        stop: Cancel::new(),
        cacert: None,
        proxy: Default::default(),
    };
    let target = old_disk(d, "flow");
    let before = sha(&target);
    let args = ["--image-url".to_string(), srv.url("/f.raw.xz")];
    let req = WriteRequest {
        device: target.clone(),
        args: parse_installer_args(&args).unwrap(),
        host_root: None,
        verify: false,
    };
    let e = writer
        .write(&req, Some(ign.as_path()), &|_| {})
        .unwrap_err();
    let e = format!("{e:#}");
    assert!(e.contains(&format!("fingerprint {}", k.a)), "{e}");
    assert!(e.contains("--signing-key FILE"), "{e}");
    assert_eq!(srv.requests_for("/f.raw.xz.sig").len(), 1);
    assert_eq!(sha(&target), before, "the disk was touched");
}

/// Over https the stream's digests verify the image: an unsigned image is written without
/// --insecure when its sha256 matches, and refused (the disk reset) when it does not.
#[test]
fn a_stream_over_https_is_verified_by_its_digests() {
    use common::http_server::{Reply, Request};
    use common::tls_server::Pki;
    let set = images(512);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let pki = Pki::new(d, "streams");
    let ca = d.join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let images_srv = TestServer::start();
    images_srv.route("/unsigned.raw.xz", Route::file(&set.xz.path));
    let location = images_srv.url("/unsigned.raw.xz");
    let (good, bad) = (set.xz.sha256.clone(), "ab".repeat(32));
    let app = move |r: &Request| {
        let sha = match r.path.as_str() {
            "/streams/good.json" => &good,
            "/streams/bad.json" => &bad,
            _ => return Reply::empty(404),
        };
        let disk = serde_json::json!({ "location": location, "sha256": sha });
        let metal = serde_json::json!({ "formats": { "raw.xz": { "disk": disk } } });
        let arch = serde_json::json!({ "artifacts": { "metal": metal } });
        Reply::json(
            200,
            &serde_json::json!({ "architectures": { "x86_64": arch } }),
        )
    };
    let tls = TestServer::with_app_tls(app, &pki.cert, &pki.key);
    let base = tls.url("/streams/");
    assert!(base.starts_with("https://"), "{base}");
    let args = |name| {
        let ca = ca.to_str().unwrap().to_string();
        [
            "-s",
            name,
            "--stream-base-url",
            &base,
            "-a",
            "x86_64",
            "--cacert",
            &ca,
        ]
        .map(str::to_string)
    };
    let target = old_disk(d, "https");
    let good = args("good");
    let out = write_image(&good.each_ref().map(String::as_str), &target);
    assert_written(&out, &target, &set);
    let bad = args("bad");
    let bad = bad.each_ref().map(String::as_str);
    assert_refused_reset(
        &bad,
        &target,
        512,
        &["sha256 of the compressed image", &"ab".repeat(32)],
    );
}

/// `write-image` with `env` in place of this process's proxy variables.
fn write_image_env(args: &[&str], target: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"] {
        cmd.env_remove(name).env_remove(name.to_lowercase());
    }
    cmd.envs(env.iter().copied())
        .arg("write-image")
        .args(args)
        .arg(target)
        .output()
        .expect("running assisted-installer")
}

/// As coreos-installer, `write-image` downloads through the proxy of the standard environment
/// (`HTTP_PROXY`, …, uppercase or lowercase): an image on a made-up host that only the test
/// proxy resolves, its signature, an `--ignition-url`, a stream's metadata. Without the proxy
/// the name does not resolve; `NO_PROXY` sends a listed host around it.
#[test]
fn downloads_go_through_the_proxy_of_the_environment() {
    use common::http_proxy::TestProxy;
    use common::images::sha256_hex;
    use common::root::Ext4;
    use coreos_image::BOOT_LABEL;
    const HOST: &str = "images.example.invalid";
    let set = images(512);
    let k = keys();
    let d = k.dir.path();
    let key_a = k.gpg.export(&k.a, true, &d.join("a.asc"));
    let key_a = ["--signing-key", key_a.to_str().unwrap()];
    let origin = TestServer::start();
    origin.route("/f.raw.xz", Route::file(&set.xz.path));
    origin.route(
        "/f.raw.xz.sig",
        Route::bytes(k.gpg.sign(&k.a, &set.xz.path)),
    );
    let ign = r#"{"ignition":{"version":"3.2.0"}}"#;
    origin.route("/c.ign", Route::bytes(ign));
    let image = format!("http://{HOST}/f.raw.xz");
    let disk = serde_json::json!({ "location": image, "signature": format!("{image}.sig") });
    let formats = serde_json::json!({ "raw.xz": { "disk": disk } });
    let stream = serde_json::json!({ "architectures": { "x86_64": {
        "artifacts": { "metal": { "release": "1", "formats": formats } } } } });
    origin.route("/streams/s.json", Route::bytes(stream.to_string()));
    let proxy = TestProxy::start(&[(HOST, origin.addr())]);

    let ign_url = format!("http://{HOST}/c.ign");
    let hash = format!("sha256-{}", sha256_hex(ign.as_bytes()));
    let args = [
        &["--image-url", &image, "--fetch-retries", "0"][..],
        &["--ignition-url", &ign_url, "--ignition-hash", &hash],
        &key_a,
    ]
    .concat();
    // No proxy: the name does not resolve, and the disk is not touched.
    let target = old_disk(d, "direct");
    let before = sha(&target);
    let out = write_image_env(&args, &target, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let e = stderr(&out);
    assert!(e.contains(&format!("http://{HOST}/c.ign")), "{e}");
    assert!(e.contains("dns error"), "{e}");
    assert_eq!(sha(&target), before);
    assert!(proxy.targets().is_empty());

    // HTTP_PROXY: the Ignition config, the signature, the image, all through the proxy.
    let out = write_image_env(&args, &target, &[("HTTP_PROXY", &proxy.url())]);
    assert!(out.status.success(), "{}", text(&out));
    let mut seen = proxy.targets();
    seen.sort();
    assert_eq!(
        seen,
        [ign_url.clone(), image.clone(), format!("{image}.sig")]
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("good, by key"));
    sgdisk_verify(&target);
    assert_eq!(
        Ext4::on(&target, 512, BOOT_LABEL).text("/ignition/config.ign"),
        ign
    );

    // http_proxy (lowercase): a stream's metadata, then its image and signature.
    let base = format!("http://{HOST}/streams/");
    let stream_args = [
        &["--stream", "s", "--architecture", "x86_64"][..],
        &["--stream-base-url", &base],
        &key_a,
    ]
    .concat();
    let target = old_disk(d, "stream");
    let before = proxy.targets().len();
    let out = write_image_env(&stream_args, &target, &[("http_proxy", &proxy.url())]);
    assert_written(&out, &target, &set);
    let stream_url = format!("http://{HOST}/streams/s.json");
    let seen = &proxy.targets()[before..];
    assert_eq!(seen[0], stream_url, "{seen:?}");
    assert_eq!(seen.len(), 3, "{seen:?}");

    // NO_PROXY: a listed host is reached directly.
    let direct = origin.url("/f.raw.xz");
    let target = old_disk(d, "no-proxy");
    let before = proxy.targets().len();
    let env = [
        ("HTTP_PROXY", proxy.url()),
        ("NO_PROXY", "127.0.0.1".into()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = write_image_env(
        &[&["--image-url", &direct][..], &key_a].concat(),
        &target,
        &env,
    );
    assert_written(&out, &target, &set);
    assert_eq!(proxy.targets().len(), before, "{:?}", proxy.targets());
}
