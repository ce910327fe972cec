//! The single-node early write for real (root): a dry-run host, the fake
//! assisted-service, the image over HTTP, the in-process writer onto a loop device. The image
//! must be on the disk (with the disk still unbootable) before bootkube completes, and the
//! final disk must hold the merged Ignition.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;

use assisted_installer::clock::SystemClock;
use assisted_installer::flow::node::run_installer;
use assisted_installer::flow::testing::{FlowBuilder, HOST};
use assisted_installer::flow::writer::InProcessWriter;
use assisted_installer::flow::Intervals;
use assisted_installer::host::reboot::FakeReboot;
use assisted_installer::ignition::merge::merge_host_into_sno;
use assisted_installer::image::Cancel;
use common::fake_service::FakeService;
use common::http_server::TestServer;
use common::root::{have_root, sgdisk_verify, Ext4, LoopDev};
use coreos_image::{cached_image_set, ImageSpec, BLS_ENTRY_PATH, BOOT_LABEL};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SNO_IGN: &str = r#"{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/etc/hostname","contents":{"source":"data:,localhost"}},{"path":"/etc/kubernetes/kubelet.conf","contents":{"source":"data:,kubelet"}}]}}"#;
const HOST_IGN: &str = r#"{"ignition":{"version":"3.4.0","config":{"merge":[{"source":"https://api-int.example:22623/config/master"}]}},"storage":{"files":[{"path":"/etc/hostname","contents":{"source":"data:,sno-0"}}]}}"#;

#[test]
fn the_image_is_on_disk_before_bootkube_completes_and_ends_with_the_merged_ignition() {
    if !have_root(
        "the_image_is_on_disk_before_bootkube_completes_and_ends_with_the_merged_ignition",
    ) {
        return;
    }
    let set = cached_image_set(&ImageSpec::test(512)).unwrap();
    let raw = std::fs::read(&set.raw.path).unwrap();
    let http = TestServer::start();
    let url = http.serve_file("/rhcos.raw.gz", &set.gz.path);
    let svc = FakeService::new();
    svc.set_host_role(HOST, "sno");
    svc.set_host_ignition(HOST, HOST_IGN);
    svc.set_cluster_file("bootstrap.ign", r#"{"ignition":{"version":"3.2.0"}}"#);
    let dev = LoopDev::new(set.raw.size + 32 * (1 << 20), 512);
    let dir = tempfile::tempdir().unwrap();
    let openshift = dir.path().join("openshift");
    std::fs::create_dir_all(&openshift).unwrap();
    std::fs::write(openshift.join("master.ign"), SNO_IGN).unwrap();
    let marker = dir.path().join("rebooted");
    let writer = InProcessWriter {
        stop: Cancel::new(),
        cacert: None,
        proxy: Default::default(),
    };
    let flow = FlowBuilder::new("master", dir.path(), svc.client(), Arc::new(writer))
        .cfg(|c| c.boot_device = dev.path.clone())
        .cfg(|c| c.control_plane_count = 1)
        .cfg(|c| c.dry_run = true)
        .installer_args(&[
            "--image-url",
            &url,
            "--sha256",
            &set.gz.sha256,
            "--append-karg",
            "early.write=1",
        ])
        .reboot(Arc::new(FakeReboot(marker.clone())))
        .clock(Arc::new(SystemClock))
        .intervals(Intervals {
            poll: Duration::from_millis(20),
            slow_poll: Duration::from_millis(100),
        })
        .build();
    // Plays bootkube: it finishes only once the image's last megabytes are on the disk, while
    // the disk still has no bootable partition table.
    let watch_dev = dev.path.clone();
    let done = openshift.join(".bootkube.done");
    let tail_at = raw.len() as u64 - (3 << 20);
    let tail = raw[tail_at as usize..tail_at as usize + (1 << 20)].to_vec();
    let bootkube = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        let f = std::fs::File::open(&watch_dev).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            assert!(
                Instant::now() < deadline,
                "the image never reached the disk before bootkube"
            );
            f.read_exact_at(&mut buf, tail_at).unwrap();
            if buf == tail {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The backup-LBA field of the primary header at LBA 1, as it is now.
        let mut hdr = [0u8; 512];
        f.read_exact_at(&mut hdr, 512).unwrap();
        let used =
            (&hdr[..8] == b"EFI PART").then(|| u64::from_le_bytes(hdr[32..40].try_into().unwrap()));
        std::fs::write(&done, "").unwrap();
        used
    });
    run_installer(&flow).unwrap();
    let table_when_streamed = bootkube.join().unwrap();
    // While bootkube ran, the disk's table was the empty pre-stream one, not the image's.
    let mut img = std::io::Cursor::new(raw.clone());
    let image_table = gptman::GPT::read_from(&mut img, 512).unwrap();
    assert_ne!(
        table_when_streamed,
        Some(image_table.header.backup_lba),
        "the image's table was on disk early"
    );
    // The SNO stage order, and the final disk.
    let stages: Vec<String> = svc
        .progress_reports(HOST)
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    let mut dedup = stages.clone();
    dedup.dedup();
    assert_eq!(
        dedup,
        [
            "Starting installation",
            "Installing",
            "Waiting for bootkube",
            "Writing image to disk",
            "Rebooting"
        ]
    );
    assert!(marker.exists());
    sgdisk_verify(&dev.path);
    let boot_fs = Ext4::on(&dev.path, 512, BOOT_LABEL);
    let on_disk = boot_fs.text("/ignition/config.ign");
    let merged = merge_host_into_sno(SNO_IGN.as_bytes(), HOST_IGN.as_bytes()).unwrap();
    assert_eq!(
        on_disk.as_bytes(),
        merged.as_slice(),
        "the disk holds the merged Ignition"
    );
    assert!(
        on_disk.contains("data:,sno-0") && on_disk.contains("kubelet"),
        "{on_disk}"
    );
    // The kernel arguments of --installer-args, checked when the stream began, are applied
    // with the Ignition config once it is known.
    let options = boot_fs.bls_options(&format!("/{BLS_ENTRY_PATH}"));
    assert!(
        options.split_whitespace().any(|k| k == "early.write=1"),
        "{options}"
    );
}
