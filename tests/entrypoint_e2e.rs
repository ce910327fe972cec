//! The container entrypoint end to end (root): the binary run with the Go installer's flags in
//! dry-run mode against the fake assisted-service, writing a CoreOS-like image to a loop
//! device. The disk must be bootable-shaped, carry the Ignition config the service served, and
//! the service must have seen the exact Go stage sequence.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "common/fake_service.rs"]
mod fake_service;

use common::root::{have_root, run, sgdisk_verify, LoopDev};
use coreos_image::{cached_image_set, ImageSpec};
use fake_service::FakeService;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const CLUSTER: &str = "1e2f3a4b-5c6d-4e7f-8a9b-0c1d2e3f4a5b";
const INFRA: &str = "2f3a4b5c-6d7e-4f80-9bac-1d2e3f4a5b6c";
const IGNITION: &str = r#"{"ignition":{"version":"3.4.0","config":{"merge":[{"source":"https://api-int.example:22623/config/master"}]}}}"#;

fn s(stage: &str, info: &str) -> (String, String) {
    (stage.to_string(), info.to_string())
}

#[test]
fn dry_run_master_writes_a_bootable_disk_with_the_served_ignition() {
    if !have_root("dry_run_master_writes_a_bootable_disk_with_the_served_ignition") {
        return;
    }
    let host = uuid::Uuid::new_v4().to_string();
    let set = cached_image_set(&ImageSpec::test(512)).unwrap();
    let svc = FakeService::start();
    svc.set_host_role(&host, "master");
    svc.set_host_ignition(&host, IGNITION);
    let dev = LoopDev::new(set.raw.size + 64 * (1 << 20), 512);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("rebooted");
    let net = dir.path().join("net");
    std::fs::create_dir(&net).unwrap();
    std::fs::write(net.join("eno1.nmconnection"), "[connection]\nid=eno1\n").unwrap();
    let installer_args = serde_json::to_string(&[
        "--image-file",
        set.gz.path.to_str().unwrap(),
        "--sha256",
        &set.gz.sha256,
        "--append-karg",
        "nameserver=8.8.8.8",
        "--copy-network",
        "--network-dir",
        net.to_str().unwrap(),
    ])
    .unwrap();
    let out = Command::new(BIN)
        .args([
            "--role",
            "master",
            "--infra-env-id",
            INFRA,
            "--cluster-id",
            CLUSTER,
        ])
        .args(["--host-id", &host, "--boot-device"])
        .arg(&dev.path)
        .args(["--url", &svc.url(), "--openshift-version", "4.17"])
        .args([
            "--controller-image",
            "quay.io/example/controller:1",
            "--agent-image",
            "quay.io/example/agent:1",
        ])
        .args([
            "--installer-args",
            &installer_args,
            "--dry-run",
            "--fake-reboot-marker-path",
        ])
        .arg(&marker)
        .env("PULL_SECRET_TOKEN", svc.token())
        .env(
            "ASSISTED_INSTALLER_LOG_FILE",
            dir.path().join("installer.log"),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(marker.exists(), "dry-run reboot marker");
    // The exact Go stage sequence for a master; the percentages depend on timing, but each is
    // at least 5 points above the last, and the last is 100.
    let reports = svc.progress_reports(&host);
    let percents: Vec<u32> = reports
        .iter()
        .filter(|(st, info)| st == "Writing image to disk" && !info.is_empty())
        .map(|(_, info)| info.trim_end_matches('%').parse().unwrap())
        .collect();
    assert_eq!(percents.last(), Some(&100), "{reports:?}");
    assert!(
        percents.windows(2).all(|w| w[1] >= w[0] + 5 || w[1] == 100),
        "{percents:?}"
    );
    let mut want = vec![
        s("Starting installation", "master"),
        s("Installing", "master"),
        s("Writing image to disk", ""),
    ];
    want.extend(
        percents
            .iter()
            .map(|p| s("Writing image to disk", &format!("{p}%"))),
    );
    want.push(s("Rebooting", ""));
    assert_eq!(reports, want);
    // A bootable-shaped disk with the served Ignition config.
    sgdisk_verify(&dev.path);
    let mut f = std::fs::File::open(&dev.path).unwrap();
    let gpt = gptman::GPT::read_from(&mut f, 512).unwrap();
    let boot = &gpt[3];
    let (start, len) = (
        boot.starting_lba * 512,
        (boot.ending_lba - boot.starting_lba + 1) * 512,
    );
    let boot_fs = dir.path().join("boot.img");
    run(Command::new("dd")
        .arg(format!("if={}", dev.path.display()))
        .arg(format!("of={}", boot_fs.display()))
        .args(["bs=1M", "status=none", "iflag=skip_bytes,count_bytes"])
        .arg(format!("skip={start}"))
        .arg(format!("count={len}")));
    let cat = |p: &str| {
        run(Command::new("debugfs")
            .arg("-R")
            .arg(format!("cat {p}"))
            .arg(&boot_fs))
    };
    assert_eq!(cat("/ignition/config.ign"), IGNITION);
    assert!(cat("/loader/entries/ostree-1-rhcos.conf").contains(" nameserver=8.8.8.8"));
    assert!(cat("/coreos-firstboot-network/eno1.nmconnection").contains("id=eno1"));
    // The token never reaches the log.
    let log = std::fs::read_to_string(dir.path().join("installer.log")).unwrap();
    assert!(
        !log.contains(&svc.token()) && !stderr.contains(&svc.token()),
        "token leaked"
    );
    assert!(
        log.contains("Writing") || log.contains("wrote"),
        "the log file is written"
    );
    let _ = std::fs::remove_file(format!("/opt/install-dir/master-{host}.ign"));
}

#[test]
fn go_flag_errors_exit_2_with_usage_and_help_exits_0() {
    let out = Command::new(BIN)
        .args(["--role", "master", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-such-flag") && stderr.contains("-boot-device"),
        "{stderr}"
    );
    let out = Command::new(BIN).arg("-help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("-installer-args"));
    let out = Command::new(BIN)
        .args(["--installer-args", "[not json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
