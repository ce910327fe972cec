//! `write-image`'s options from elsewhere than its command line, end to end: a config file and
//! the live system's kernel arguments (a file in place of /proc/cmdline, and an installer.d
//! directory) install the same disk as the equivalent flags; `-I/--ignition-url` over http is
//! refused without a digest or --insecure-ignition, refused before the target is touched when
//! its digest is wrong, and embedded otherwise; its credentials never reach the output.
//! The writes with an Ignition config need root (the post-install steps mount /boot through a
//! loop device); the refusals do not.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;

use common::http_server::{Route, TestServer};
use common::images::sha256_hex;
use common::root::{fill, have_root, read_gpt, text, Ext4};
use coreos_image::{cached_image_set, ImageSet, ImageSpec, BLS_ENTRY_PATH, BOOT_LABEL};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const MIB: u64 = 1 << 20;
const IGNITION: &str = r#"{"ignition":{"version":"3.4.0"},"passwd":{"users":[{"name":"core"}]}}"#;

fn images() -> ImageSet {
    cached_image_set(&ImageSpec::test(512)).expect("test images")
}

/// A disk-image file larger than the image, filled with 0xA5 (so a write shows).
fn target(dir: &Path, name: &str, set: &ImageSet) -> PathBuf {
    let path = dir.join(name);
    let size = set.raw.size + 64 * MIB;
    std::fs::File::create(&path).unwrap().set_len(size).unwrap();
    fill(&path, size, 0xA5);
    path
}

fn write_image(args: &[&str]) -> Output {
    let out = Command::new(BIN).arg("write-image").args(args).output();
    out.expect("running assisted-installer")
}

fn succeeds(args: &[&str]) -> String {
    let out = write_image(args);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    text(&out)
}

fn untouched(path: &Path) -> bool {
    std::fs::read(path).unwrap().iter().all(|b| *b == 0xA5)
}

/// `a` and `b` hold the same install: the same bytes outside /boot (the partition table, the
/// image), and the same files in /boot (the filesystem's own timestamps differ).
fn assert_same_install(a: &Path, b: &Path) {
    let (ga, gb) = (read_gpt(a, 512), read_gpt(b, 512));
    let (da, db) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    let boot = &ga[3];
    let (start, end) = (
        (boot.starting_lba * 512) as usize,
        ((boot.ending_lba + 1) * 512) as usize,
    );
    assert_eq!(gb[3].starting_lba, boot.starting_lba);
    assert!(da[..start] == db[..start], "bytes before /boot differ");
    assert!(da[end..] == db[end..], "bytes after /boot differ");
    let (fa, fb) = (Ext4::on(a, 512, BOOT_LABEL), Ext4::on(b, 512, BOOT_LABEL));
    for path in [
        "/ignition/config.ign",
        &format!("/{BLS_ENTRY_PATH}"),
        "/ignition.firstboot",
    ] {
        assert_eq!(fa.text(path), fb.text(path), "{path}");
        assert_eq!(fa.mode(path), fb.mode(path), "{path}");
    }
}

#[test]
fn a_config_file_and_kernel_arguments_install_the_same_disk_as_the_flags() {
    if !have_root("a_config_file_and_kernel_arguments_install_the_same_disk_as_the_flags") {
        return;
    }
    let set = images();
    let srv = TestServer::start();
    srv.route("/c.ign", Route::bytes(IGNITION));
    let url = srv.url("/c.ign");
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (gz, sha) = (set.gz.path.display().to_string(), set.gz.sha256.clone());
    // The flags.
    let by_flags = target(dir.path(), "flags.img", &set);
    succeeds(&[
        "-f",
        &gz,
        "--sha256",
        &sha,
        "-I",
        &url,
        "--insecure-ignition",
        "-p",
        "qemu",
        "--append-karg",
        "rd.dasd=0.0.0100",
        "--firstboot-args",
        "rd.neednet=1 ip=dhcp",
        by_flags.to_str().unwrap(),
    ]);
    let fs = Ext4::on(&by_flags, 512, BOOT_LABEL);
    assert_eq!(fs.text("/ignition/config.ign"), IGNITION);
    let bls = fs.bls_options(&format!("/{BLS_ENTRY_PATH}"));
    assert!(
        bls.contains("ignition.platform.id=qemu") && bls.contains("rd.dasd=0.0.0100"),
        "{bls}"
    );
    assert!(fs
        .text("/ignition.firstboot")
        .contains("rd.neednet=1 ip=dhcp"));
    // A config file holding them all, the target too.
    let by_file = target(dir.path(), "file.img", &set);
    let yaml = format!(
        "dest-device: {}\nimage-file: {gz}\nsha256: {sha}\nignition-url: {url}\n\
         insecure-ignition: true\nplatform: qemu\nappend-karg: [rd.dasd=0.0.0100]\n\
         firstboot-args: rd.neednet=1 ip=dhcp\n",
        by_file.display()
    );
    let config = dir.path().join("install.yaml");
    std::fs::write(&config, yaml).unwrap();
    succeeds(&["-c", config.to_str().unwrap()]);
    assert_same_install(&by_flags, &by_file);
    // The live system's way: the image in an installer.d file, the rest on the command line.
    let by_kargs = target(dir.path(), "kargs.img", &set);
    let installer_d = dir.path().join("installer.d");
    std::fs::create_dir(&installer_d).unwrap();
    let image = format!("image-file: {gz}\nsha256: {sha}\n");
    std::fs::write(installer_d.join("10-image.yaml"), image).unwrap();
    let cmdline = dir.path().join("cmdline");
    let kargs = format!(
        "BOOT_IMAGE=/images/pxeboot/vmlinuz coreos.inst.install_dev={} \
         coreos.inst.ignition_url={url} coreos.inst.platform_id=qemu rd.dasd=0.0.0100 ip=dhcp \
         quiet\n",
        by_kargs.display()
    );
    std::fs::write(&cmdline, kargs).unwrap();
    let out = succeeds(&[
        "--from-kernel-args",
        "--cmdline",
        cmdline.to_str().unwrap(),
        "--installer-config-dir",
        installer_d.to_str().unwrap(),
    ]);
    assert!(
        out.contains("installing as: write-image --fetch-retries=infinite"),
        "{out}"
    );
    assert_same_install(&by_flags, &by_kargs);
}

#[test]
fn an_ignition_url_over_http_needs_its_digest_or_insecure_ignition() {
    let set = images();
    let srv = TestServer::start();
    srv.route("/c.ign", Route::bytes(IGNITION));
    let url = srv.url("/c.ign");
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let disk = target(dir.path(), "disk.img", &set);
    let (gz, sha) = (set.gz.path.display().to_string(), set.gz.sha256.clone());
    let image = ["-f", &gz, "--sha256", &sha];
    let run = |extra: &[&str]| {
        let args: Vec<&str> = image.iter().copied().chain(extra.iter().copied()).collect();
        write_image(&[&args[..], &[disk.to_str().unwrap()]].concat())
    };
    // Plain http, unchecked: refused before anything is fetched.
    let out = run(&["-I", &url]);
    assert!(!out.status.success());
    assert!(text(&out).contains("--ignition-hash") && text(&out).contains("--insecure-ignition"));
    assert!(srv.requests_for("/c.ign").is_empty(), "nothing fetched");
    // A wrong digest: fetched, refused, the target untouched.
    let wrong = format!("sha256-{}", sha256_hex(b"another config"));
    let out = run(&["-I", &url, "--ignition-hash", &wrong]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("does not match --ignition-hash"),
        "{}",
        text(&out)
    );
    assert_eq!(srv.requests_for("/c.ign").len(), 1);
    // Missing: an error naming the URL without its credentials or query.
    let secret = url
        .replace("http://", "http://core:hunter2@")
        .replace("/c.ign", "/none.ign?token=s3cret");
    let out = run(&["--ignition-url", &secret, "--insecure-ignition"]);
    let said = text(&out);
    assert!(!out.status.success());
    assert!(
        said.contains(&format!(
            "{}/none.ign",
            srv.base_url().trim_end_matches('/')
        )),
        "{said}"
    );
    assert!(said.contains("does not exist"), "{said}");
    assert!(
        !said.contains("hunter2") && !said.contains("s3cret"),
        "{said}"
    );
    assert!(
        untouched(&disk),
        "a refused Ignition config leaves the target as it was"
    );
    if !have_root("an_ignition_url_over_http_needs_its_digest_or_insecure_ignition") {
        return;
    }
    let right = format!("sha256-{}", sha256_hex(IGNITION.as_bytes()));
    for extra in [
        &["-I", &url, "--ignition-hash", &right][..],
        &["-I", &url, "--insecure-ignition"],
    ] {
        fill(&disk, std::fs::metadata(&disk).unwrap().len(), 0xA5);
        let out = run(extra);
        assert!(out.status.success(), "{extra:?}: {}", text(&out));
        let fs = Ext4::on(&disk, 512, BOOT_LABEL);
        assert_eq!(fs.text("/ignition/config.ign"), IGNITION, "{extra:?}");
        assert_eq!(fs.mode("/ignition/config.ign"), 0o600);
    }
    // `embed` fetches one too, onto a disk written without one.
    let other = IGNITION.replace("core", "admin");
    srv.route("/d.ign", Route::bytes(other.clone()));
    let d = srv.url("/d.ign");
    assert!(run(&[]).status.success());
    let out = Command::new(BIN)
        .args([
            "embed",
            "-I",
            &d,
            "--insecure-ignition",
            disk.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        Ext4::on(&disk, 512, BOOT_LABEL).text("/ignition/config.ign"),
        other
    );
}

/// An image URL's password and signed query stay out of the output, retries included.
#[test]
fn an_image_urls_credentials_are_never_printed() {
    let set = images();
    let srv = TestServer::start();
    let flaky = vec![vec![common::http_server::Fault::Status(500)]];
    srv.route("/i.raw.gz", Route::file(&set.gz.path).with_faults(flaky));
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let disk = target(dir.path(), "disk.img", &set);
    let url = srv
        .url("/i.raw.gz")
        .replace("http://", "http://core:hunter2@")
        + "?sig=s3cret";
    let missing = url.replace("/i.raw.gz", "/none.raw.gz");
    for (u, want) in [(&url, "server answered 500"), (&missing, "no such file")] {
        let out = write_image(&[
            "-u",
            u,
            "--insecure",
            "--fetch-retries",
            "1",
            "--preserve-on-error",
            disk.to_str().unwrap(),
        ]);
        let said = text(&out);
        assert!(said.contains(want), "{said}");
        assert!(
            !said.contains("hunter2") && !said.contains("s3cret"),
            "{said}"
        );
    }
}
