//! Skip-MCO's deploy for real (root): the master flow writes a CoreOS-like image with an XFS
//! root onto a loop device twice its size with the in-process writer, then the deploy runs
//! lsblk, partx, mount, growpart, xfs_growfs, fsfreeze and umount for real (`/mnt` rebased to a
//! temporary directory, in a private mount namespace) and fakes only setenforce and ostree.
//! The root partition must have grown as Go computes it (the free percentage of the disk left
//! unallocated), its XFS with it, and the GPT must stay valid.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;

use assisted_installer::clock::FakeClock;
use assisted_installer::flow::node::run_installer;
use assisted_installer::flow::testing::{FlowBuilder, HOST};
use assisted_installer::flow::writer::InProcessWriter;
use assisted_installer::host::commands::{CommandRunner, HostRunner, RecordingRunner, Reply};
use assisted_installer::host::reboot::FakeReboot;
use assisted_installer::image::Cancel;
use base64::Engine;
use common::fake_service::FakeService;
use common::root::{have_root, read_gpt, sgdisk_verify, LoopDev};
use coreos_image::cached_xfs_raw;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

const MIB: u64 = 1 << 20;
const IMAGE: &str = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:100p";

fn base64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// A pointer config embedding (gzipped) a config with the encapsulated MachineConfig.
fn pointer() -> String {
    let mc = serde_json::json!({"spec": {"osImageURL": IMAGE, "kernelArguments": ["mc.karg=1"]}});
    let served = serde_json::json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [{
        "path": "/etc/ignition-machine-config-encapsulated.json",
        "contents": {"source": format!("data:;base64,{}", base64(&serde_json::to_vec(&mc).unwrap()))}
    }]}});
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&serde_json::to_vec(&served).unwrap()).unwrap();
    let source = format!("data:;base64,{}", base64(&gz.finish().unwrap()));
    serde_json::json!({"ignition": {"version": "3.2.0", "config": {"merge": [{"source": source}]}}})
        .to_string()
}

/// What the fake ostree saw of the mounts when it ran.
#[derive(Debug, Default, Clone)]
struct AtDeploy {
    /// The data section of the root XFS mounted on /mnt (`xfs_info`: blocks × block size).
    root_fs_bytes: u64,
    /// /mnt/boot holds the boot filesystem (its BLS entry).
    boot_mounted: bool,
    /// The root filesystem's ostree repository is on /mnt.
    root_mounted: bool,
}

/// Runs the real tools, with `/mnt` rebased under `mnt`; fakes setenforce and ostree (which
/// looks at the mounts), answers the flow's other commands (cleanup, boot order, logs) with
/// success and nothing, as a BIOS host would.
fn runner(
    mnt: PathBuf,
    seen: Arc<Mutex<AtDeploy>>,
    lsblk: Arc<Mutex<Vec<String>>>,
) -> RecordingRunner {
    RecordingRunner::with_script(move |program, args| {
        let rebase = |a: &String| match a.strip_prefix("/mnt") {
            Some(rest) => format!("{}{rest}", mnt.display()),
            None => a.clone(),
        };
        match program {
            "lsblk" | "partx" | "mount" | "umount" | "growpart" | "xfs_growfs" | "fsfreeze" => {
                let args: Vec<String> = args.iter().map(rebase).collect();
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let reply = match HostRunner::default().run(program, &args) {
                    Ok(out) => Reply::ok(out),
                    Err(e) => Reply::fail(e.exit_code.unwrap_or(1), e.to_string()),
                };
                if let ("lsblk", Reply::Ok(out)) = (program, &reply) {
                    lsblk.lock().unwrap().push(out.clone());
                }
                Some(reply)
            }
            "ostree" => {
                *seen.lock().unwrap() = AtDeploy {
                    root_fs_bytes: xfs_data_bytes(&mnt),
                    boot_mounted: mnt.join("boot/loader/entries").is_dir(),
                    root_mounted: mnt.join("ostree/repo").is_dir(),
                };
                Some(Reply::ok(""))
            }
            "test" => Some(Reply::fail(1, "")),
            _ => Some(Reply::ok("")),
        }
    })
}

/// The size of the data section of the XFS mounted on `mnt`: `xfs_info`'s first `bsize=` and
/// `blocks=`, both on its `data` line.
fn xfs_data_bytes(mnt: &std::path::Path) -> u64 {
    let out = common::root::run(Command::new("xfs_info").arg(mnt));
    let data = &out[out
        .find("\ndata")
        .unwrap_or_else(|| panic!("xfs_info: {out}"))..];
    let field = |name: &str| -> u64 {
        let value = data.split_once(name).unwrap().1;
        let digits = value.split(|c: char| !c.is_ascii_digit()).next();
        digits.unwrap().parse().unwrap()
    };
    field("bsize=") * field("blocks=")
}

/// Undoes what the deploy leaves, even when it or the test fails: unmounts what is still
/// mounted, then thaws the boot and root filesystems (frozen before their unmount, a frozen
/// superblock outlives the unmount and would keep the loop device busy) by mounting each again.
struct Thaw {
    mnt: PathBuf,
    partitions: [PathBuf; 2],
}

impl Drop for Thaw {
    fn drop(&mut self) {
        let run = |args: &[&std::ffi::OsStr]| {
            let _ = Command::new(args[0]).args(&args[1..]).output();
        };
        run(&["umount".as_ref(), "-R".as_ref(), self.mnt.as_os_str()]);
        for p in &self.partitions {
            if p.exists() {
                run(&["mount".as_ref(), p.as_os_str(), self.mnt.as_os_str()]);
                run(&[
                    "fsfreeze".as_ref(),
                    "--unfreeze".as_ref(),
                    self.mnt.as_os_str(),
                ]);
                run(&["umount".as_ref(), self.mnt.as_os_str()]);
            }
        }
    }
}

/// `(disk − used − root) × 100 / disk` from lsblk's JSON, computed here independently.
fn go_free_percent(lsblk_json: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(lsblk_json).unwrap();
    let disk = &v["blockdevices"][0];
    let size = |n: &serde_json::Value| n["size"].as_u64().unwrap();
    let parts: Vec<u64> = disk["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(size)
        .collect();
    let used: u64 = parts.iter().sum();
    (size(disk) - used - parts[3]) * 100 / size(disk)
}

#[test]
fn the_root_partition_grows_as_go_computes_and_the_image_is_deployed_onto_the_mounted_disk() {
    if !have_root(
        "the_root_partition_grows_as_go_computes_and_the_image_is_deployed_onto_the_mounted_disk",
    ) {
        return;
    }
    let (spec, raw) = cached_xfs_raw().expect("the XFS test image");
    let dev = LoopDev::new(2048 * MIB, 512);
    let disk = dev.path.display().to_string();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let svc = FakeService::new();
    svc.set_host_role(HOST, "master");
    svc.set_host_ignition(HOST, pointer());
    std::fs::write(
        dir.path().join("cmdline"),
        "ignition.platform.id=qemu console=ttyS0\n",
    )
    .unwrap();
    let seen = Arc::new(Mutex::new(AtDeploy::default()));
    let lsblk = Arc::new(Mutex::new(Vec::new()));
    let commands = Arc::new(runner(mnt.clone(), seen.clone(), lsblk.clone()));
    let writer = InProcessWriter {
        stop: Cancel::new(),
        cacert: None,
        proxy: Default::default(),
    };
    let flow = FlowBuilder::new("master", dir.path(), svc.client(), Arc::new(writer))
        .cfg(|c| c.boot_device = dev.path.clone())
        .commands(commands.clone())
        .clock(Arc::new(FakeClock::new()))
        .reboot(Arc::new(FakeReboot(dir.path().join("rebooted"))))
        .installer_args(&[
            "--image-file",
            raw.to_str().unwrap(),
            "--append-karg",
            "installer.karg=1",
        ])
        .cfg(|c| c.enable_skip_mco_reboot = true)
        .build();
    let thaw = Thaw {
        mnt: mnt.clone(),
        partitions: [
            PathBuf::from(format!("{disk}p3")),
            PathBuf::from(format!("{disk}p4")),
        ],
    };
    // The mounts happen in a namespace of this thread's own (the commands inherit it); the
    // thaw runs there too, before the thread ends.
    let result = std::thread::spawn(move || {
        use nix::mount::{mount, MsFlags};
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).unwrap();
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .unwrap();
        let _thaw = thaw;
        run_installer(&flow)
    })
    .join()
    .unwrap();
    result.unwrap();
    assert_eq!(svc.progress_reports(HOST).last().unwrap().0, "Rebooting");

    // Go's commands, with the free percentage Go computes from what lsblk said before.
    let before = lsblk.lock().unwrap()[0].clone();
    let free = go_free_percent(&before);
    let root_mib = spec.root_mib;
    let used_mib = 1 + 8 + 32 + root_mib;
    assert_eq!(free, (2048 - used_mib - root_mib) * 100 / 2048, "{before}");
    let lines = commands.lines();
    let start = lines.iter().position(|l| l.starts_with("partx "));
    let end = lines.iter().rposition(|l| l == "umount /mnt");
    let (start, end) = start.zip(end).unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!(
        lines[start..=end],
        [
            format!("partx --update {disk}"),
            format!("lsblk --bytes --json {disk}"),
            format!("lsblk --bytes --json {disk}"),
            format!("lsblk --bytes --json {disk}"),
            format!("mount {disk}p4 /mnt"),
            format!("mount {disk}p3 /mnt/boot"),
            format!("growpart --free-percent={free} {disk} 4"),
            "xfs_growfs /mnt".to_string(),
            "setenforce 0".to_string(),
            format!(
                "ostree container image deploy --sysroot /mnt --authfile /root/.docker/config.json \
                 --imgref ostree-unverified-registry:{IMAGE} --karg ignition.platform.id=qemu \
                 --karg $ignition_firstboot --stateroot rhcos --karg installer.karg=1 \
                 --karg mc.karg=1"
            ),
            "fsfreeze --freeze /mnt/boot".to_string(),
            "umount /mnt/boot".to_string(),
            "fsfreeze --freeze /mnt".to_string(),
            "umount /mnt".to_string(),
        ],
        "every command ran once, none failed: {lines:#?}"
    );

    // The root partition ends where growpart leaves `free` % of the disk's sectors unused.
    sgdisk_verify(&dev.path);
    let gpt = read_gpt(&dev.path, 512);
    let sectors = 2048 * MIB / 512;
    let root = &gpt[4];
    assert_eq!(
        root.starting_lba,
        spec.partitions()[3].start_lba(512),
        "the root did not move"
    );
    assert_eq!(
        root.ending_lba,
        gpt.header.last_usable_lba - sectors / 100 * free,
        "root partition {root:?}"
    );
    let grown = (root.ending_lba - root.starting_lba + 1) * 512;
    assert!(
        grown > 2 * root_mib * MIB - MIB,
        "the root at least doubled: {grown}"
    );
    for n in 1..=3 {
        assert_eq!(
            gpt[n].ending_lba,
            spec.partitions()[n as usize - 1].end_lba(512),
            "{n}"
        );
    }

    // ostree ran with both filesystems mounted, the root's XFS grown to the partition.
    let at = seen.lock().unwrap().clone();
    assert!(at.root_mounted && at.boot_mounted, "{at:?}");
    assert_eq!(
        at.root_fs_bytes,
        grown / 4096 * 4096,
        "the XFS fills the grown partition"
    );
}
