//! `assisted-installer write-image` end to end as root: CoreOS-like images over HTTP from a
//! local fault-injecting server onto 512- and 4096-byte loop devices, read back byte for byte;
//! and the failure cases that must refuse early or leave an empty valid GPT.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;

use common::http_server::{Fault, Route, TestServer};
use common::images::{assert_image_on_disk, zeros_summary};
use common::root::{assert_empty_gpt, have_root, run, sgdisk_verify, text, LoopDev};
use coreos_image::{cached_image_set, Compression, ImageSet, ImageSpec};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const MIB: u64 = 1 << 20;

fn images(ss: u64) -> ImageSet {
    cached_image_set(&ImageSpec::test(ss)).expect("test images")
}

/// The source arguments: `--image-url` (an http URL) or `--image-file`, and `--sha256`.
fn from<'a>(source: &'a str, sha256: &'a str) -> [&'a str; 4] {
    let flag = if source.starts_with("http") {
        "--image-url"
    } else {
        "--image-file"
    };
    [flag, source, "--sha256", sha256]
}

fn write_image(args: &[&str], dev: &Path) -> Output {
    Command::new(BIN)
        .arg("write-image")
        .args(args)
        .arg(dev)
        .output()
        .expect("running assisted-installer")
}

/// The device holds the raw image (see `assert_image_on_disk` for the table sectors the GPT
/// fix-up rewrites), and `sgdisk -v` finds no problem with the result.
fn assert_written(dev: &LoopDev, set: &ImageSet) {
    let disk = std::fs::read(&dev.path).unwrap();
    let raw = std::fs::read(&set.raw.path).unwrap();
    assert_image_on_disk(&disk, &raw, set.spec.sector_size);
    sgdisk_verify(&dev.path);
}

/// `write-image` with `args` onto `dev` must fail before writing anything, saying each of
/// `wanted` on stderr.
fn assert_refused(dev: &LoopDev, args: &[&str], wanted: &[&str]) {
    let before = dev.sha256();
    let out = write_image(args, &dev.path);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        wanted.iter().all(|w| stderr.contains(w)),
        "{wanted:?}: {stderr}"
    );
    assert_eq!(dev.sha256(), before, "the device was modified");
}

#[test]
fn each_format_over_http_onto_512_and_4096_byte_loop_devices_one_resumed() {
    if !have_root("each_format_over_http_onto_512_and_4096_byte_loop_devices_one_resumed") {
        return;
    }
    let compressions = [
        None,
        Some(Compression::Gzip),
        Some(Compression::Xz),
        Some(Compression::Zstd),
    ];
    for ss in [512, 4096] {
        let set = images(ss);
        let srv = TestServer::start();
        for c in compressions {
            let file = set.compressed(c);
            // The gzip image at 512 has its connection cut at half, to be resumed.
            let cut = (ss, c) == (512, Some(Compression::Gzip));
            let faults = vec![vec![Fault::CutAfter(file.size / 2)]];
            let route = Route::file(&file.path).with_faults(if cut { faults } else { vec![] });
            let path = format!("/img-{c:?}");
            srv.route(&path, route);
            let url = srv.url(&path);
            let dev = LoopDev::new(set.raw.size + 64 * MIB, ss);
            // Old data under the whole image: a zero the write left out would show.
            dev.fill(set.raw.size, 0x5a);
            let mut args = from(&url, &file.sha256).to_vec();
            if c.is_some() {
                args.extend(["--uncompressed-sha256", &set.raw.sha256]);
            }
            let out = write_image(&args, &dev.path);
            assert!(out.status.success(), "{c:?} at {ss}: {}", text(&out));
            assert_written(&dev, &set);
            // The summary: sizes, sector size and both digests verified.
            let stdout = String::from_utf8_lossy(&out.stdout);
            let wanted = [
                format!("wrote {} bytes (", set.raw.size),
                format!("{ss}-byte sectors) from {} bytes", file.size),
                format!("{} (verified)", file.sha256),
                format!("{} (verified)", set.raw.sha256),
                "MB/s".into(),
            ];
            assert!(wanted.iter().all(|w| stdout.contains(w)), "{stdout}");
            let (zeros, how) = zeros_summary(&stdout);
            assert!(zeros > 1.0, "{stdout}");
            assert_eq!(how, "zeroed by the kernel (BLKZEROOUT)", "{stdout}");
            if cut {
                let reqs = srv.requests_for(&path);
                assert_eq!(reqs.len(), 2, "{reqs:?}");
                let range = reqs[1].header("range").unwrap();
                assert!(range.starts_with("bytes="), "{reqs:?}");
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(stderr.contains("resuming"), "{}", text(&out));
            }
        }
    }
}

/// The partitions the kernel has for `dev` (from sysfs): number, byte offset, byte length,
/// and whether its /dev node is there.
fn kernel_partitions(dev: &LoopDev) -> Vec<(u32, u64, u64, bool)> {
    let name = dev.path.file_name().unwrap().to_string_lossy().into_owned();
    let sys = Path::new("/sys/block").join(&name);
    let num = |p: &Path| -> u64 { std::fs::read_to_string(p).unwrap().trim().parse().unwrap() };
    let mut parts: Vec<_> = std::fs::read_dir(&sys)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("partition").exists())
        .map(|e| {
            let dir = e.path();
            let node = Path::new("/dev").join(e.file_name());
            (
                num(&dir.join("partition")) as u32,
                num(&dir.join("start")) * 512,
                num(&dir.join("size")) * 512,
                node.exists(),
            )
        })
        .collect();
    parts.sort();
    parts
}

/// This kernel parses no partition table: the nodes after a write are the writer's. They stay
/// after a successful install (the steps after the write and the user's tools need them), at
/// the table's offsets, and go with a failed one (no node for a partition the disk lost).
#[test]
fn partition_nodes_stay_after_a_successful_install_and_go_with_a_failed_one() {
    if !have_root("partition_nodes_stay_after_a_successful_install_and_go_with_a_failed_one") {
        return;
    }
    let set = images(4096);
    let dev = LoopDev::new(set.raw.size + 16 * MIB, 4096);
    let out = write_image(
        &from(set.raw.path.to_str().unwrap(), &set.raw.sha256),
        &dev.path,
    );
    assert!(out.status.success(), "{}", text(&out));
    let want: Vec<_> = set
        .spec
        .partitions()
        .iter()
        .map(|p| (p.number, p.offset, p.size, true))
        .collect();
    assert_eq!(kernel_partitions(&dev), want, "{}", text(&out));
    // What the Go-ported steps after the write (registry copy, boot order) read: lsblk lists
    // the four partitions as the disk's children, by their node names.
    let lsblk = run(Command::new("lsblk")
        .args(["--bytes", "--json", "-o", "NAME,TYPE"])
        .arg(&dev.path));
    let name = dev.path.file_name().unwrap().to_string_lossy().into_owned();
    for n in 1..=4 {
        assert!(
            lsblk.contains(&format!("\"{name}p{n}\"")),
            "partition {n} missing from lsblk: {lsblk}"
        );
    }

    // The same disk again, with an image that fails its digest half-way, past the first MiB
    // (raw: nothing but the digest can notice).
    let srv = TestServer::start();
    let corrupt = vec![Fault::CorruptByte(set.raw.size / 2 + 12345)];
    srv.route("/img.raw", Route::file(&set.raw.path).with_sticky(corrupt));
    let out = write_image(&from(&srv.url("/img.raw"), &set.raw.sha256), &dev.path);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sha256") && stderr.contains(&set.raw.sha256),
        "{stderr}"
    );
    assert_empty_gpt(&dev.path, 4096);
    assert_eq!(kernel_partitions(&dev), vec![], "{}", text(&out));
}

/// On one 512-byte device smaller than the 512-byte image, with data at both ends: a 404, an
/// image of the other sector size and one too big are refused before anything is written; the
/// device, once mounted, is refused naming the mountpoint.
#[test]
fn refusals_come_before_anything_is_written() {
    if !have_root("refusals_come_before_anything_is_written") {
        return;
    }
    let set = images(512);
    let dev = LoopDev::new(set.raw.size - 8 * MIB, 512);
    let pattern = vec![0x3cu8; MIB as usize];
    dev.write(0, &pattern);
    dev.write(set.raw.size - 9 * MIB, &pattern);
    let srv = TestServer::start();
    let url = srv.url("/nope.raw.gz");
    let not_found = ["--image-url", &url, "--insecure"];
    assert_refused(&dev, &not_found, &["404", "/nope.raw.gz"]);
    let set4k = images(4096);
    let args = from(set4k.gz.path.to_str().unwrap(), &set4k.gz.sha256);
    assert_refused(&dev, &args, &["4096-byte sectors", "512-byte sectors"]);
    let url = srv.serve_file("/img.xz", &set.xz.path);
    let args = from(&url, &set.xz.sha256);
    assert_refused(&dev, &args, &["holds only", "nothing was written"]);

    run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&dev.path));
    let mnt = tempfile::tempdir().unwrap();
    run(Command::new("mount").arg(&dev.path).arg(mnt.path()));
    let out = write_image(
        &from(set.gz.path.to_str().unwrap(), &set.gz.sha256),
        &dev.path,
    );
    run(Command::new("umount").arg(mnt.path()));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is in use"), "{stderr}");
    assert!(
        stderr.contains(&format!("mounted on {}", mnt.path().display())),
        "{stderr}"
    );
}

#[test]
fn sigterm_mid_write_leaves_an_empty_gpt_and_exits_143() {
    if !have_root("sigterm_mid_write_leaves_an_empty_gpt_and_exits_143") {
        return;
    }
    let set = images(512);
    let srv = TestServer::start();
    // About 8 s for the whole download, so the signal lands mid-stream.
    srv.route(
        "/img.gz",
        Route::file(&set.gz.path).with_sticky(vec![Fault::Throttle(set.gz.size / 8)]),
    );
    let dev = LoopDev::new(set.raw.size + 16 * MIB, 512);
    // A bootable-looking old table that must not survive.
    dev.write(0, &std::fs::read(&set.raw.path).unwrap()[..MIB as usize]);
    let mut child = Command::new(BIN)
        .args([
            "write-image",
            "--image-url",
            &srv.url("/img.gz"),
            "--sha256",
            &set.gz.sha256,
        ])
        .arg(&dev.path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the stream is well under way: a quarter of it has been sent.
    let deadline = Instant::now() + Duration::from_secs(30);
    while srv
        .requests_for("/img.gz")
        .first()
        .map_or(0, |r| r.body_bytes_sent)
        < set.gz.size / 4
    {
        assert!(Instant::now() < deadline, "the download never got going");
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let start = Instant::now();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(10), "slow to stop");
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(
        stderr.contains("SIGTERM") && stderr.contains("interrupted"),
        "{stderr}"
    );
    assert_empty_gpt(&dev.path, 512);
}

#[test]
fn verify_reads_the_image_back_and_says_so_in_the_summary() {
    if !have_root("verify_reads_the_image_back_and_says_so_in_the_summary") {
        return;
    }
    let set = images(512);
    let file = set.compressed(Some(Compression::Gzip));
    let dev = LoopDev::new(set.raw.size + 64 * MIB, 512);
    let path = file.path.to_str().unwrap();
    let args = [from(path, &file.sha256).as_slice(), &["--verify"]].concat();
    let out = write_image(&args, &dev.path);
    assert!(out.status.success(), "{}", text(&out));
    assert_written(&dev, &set);
    // Everything after the first MiB came from the disk (the first is written at commit).
    let stdout = String::from_utf8_lossy(&out.stdout);
    let read = (set.raw.size - MIB) as f64 / MIB as f64;
    let want = format!("read back: sha256 matches ({read:.1} MiB in ");
    let line = stdout.lines().find(|l| l.starts_with(&want));
    assert!(
        line.is_some_and(|l| l.ends_with(" MB/s)")),
        "{want:?} in {stdout}"
    );
}

/// `write-image --kexec` reads the written /boot: the BLS entry's kernel, and its options after
/// our karg edit with `$ignition_firstboot` expanded from the first-boot arguments, as the
/// debug line shows. The kernel of this machine cannot load (no kexec, or a test image's
/// kernel that is no kernel): one warning says why, and the write still succeeds.
#[test]
fn kexec_loads_the_written_entry_or_warns_why_and_succeeds() {
    if !have_root("kexec_loads_the_written_entry_or_warns_why_and_succeeds") {
        return;
    }
    let set = images(512);
    let file = set.compressed(Some(Compression::Gzip));
    let dev = LoopDev::new(set.raw.size + 64 * MIB, 512);
    let path = file.path.to_str().unwrap();
    let post = [
        "--kexec",
        "--append-karg",
        "ai.test=1",
        "--firstboot-args",
        "rd.neednet=1 ip=dhcp",
    ];
    let args = [from(path, &file.sha256).as_slice(), &post].concat();
    let out = write_image(&args, &dev.path);
    assert!(out.status.success(), "{}", text(&out));
    sgdisk_verify(&dev.path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let options = set.spec.bls_options().replace(
        "$ignition_firstboot",
        "ignition.firstboot rd.neednet=1 ip=dhcp",
    );
    let want = format!(
        "kexec: loading /{} with options {options} ai.test=1",
        set.spec.kernel_path()
    );
    assert!(stderr.contains(&want), "{want:?} in {stderr}");
    // /sys/kernel/kexec_loaded exists on kernels built with kexec.
    let why = match Path::new("/sys/kernel/kexec_loaded").exists() {
        true => "not a kernel image this kernel can boot",
        false => "this kernel has no kexec support",
    };
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("kexec: not loaded") && warnings[0].contains(why),
        "{why:?}: {stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("kexec: loaded"), "{stdout}");
}

/// The library's load on written disks, a loop device and a disk-image file, through the
/// recording loader (this machine's kernel cannot load): it is handed the kernel and the
/// initramfs of the image's /boot, byte for byte, and the entry's command line; the disk is
/// left as written.
#[test]
fn the_written_system_is_handed_to_the_loader_from_a_disk_and_from_an_image_file() {
    use assisted_installer::kexec::load_installed;
    use assisted_installer::kexec::testing::RecordingLoader;
    if !have_root("the_written_system_is_handed_to_the_loader_from_a_disk_and_from_an_image_file") {
        return;
    }
    let set = images(512);
    let file = set.compressed(Some(Compression::Gzip));
    let path = file.path.to_str().unwrap();
    let dev = LoopDev::new(set.raw.size + 64 * MIB, 512);
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("disk.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(set.raw.size + 64 * MIB)
        .unwrap();
    let (kernel, initrd) = set.spec.boot_payloads();
    let cmdline = set
        .spec
        .bls_options()
        .replace("$ignition_firstboot ", "ignition.firstboot ");
    for target in [dev.path.clone(), image] {
        let out = write_image(&from(path, &file.sha256), &target);
        assert!(out.status.success(), "{}", text(&out));
        let before = std::fs::read(&target).unwrap();
        let loader = RecordingLoader::default();
        let loaded = load_installed(&target, &loader).unwrap();
        let calls = loader.calls();
        assert_eq!(calls.len(), 1, "{}", target.display());
        assert!(calls[0].kernel == kernel && calls[0].initrd.as_ref() == Some(&initrd));
        assert_eq!(calls[0].cmdline, cmdline);
        assert_eq!(
            loaded.to_string(),
            format!(
                "kexec: loaded /{} ({:.1} MiB initramfs); start it with: systemctl kexec",
                set.spec.kernel_path(),
                initrd.len() as f64 / MIB as f64
            )
        );
        assert!(
            std::fs::read(&target).unwrap() == before,
            "{}",
            target.display()
        );
    }
}
