//! Post-install steps end to end as root, on 512- and 4096-byte loop devices larger than the
//! image: the GPT fix-up (sgdisk -v, backup at the last LBA), Ignition bytes and modes, the BLS
//! options line, network files, saved partitions, resets on failure, and `embed` on a disk
//! written earlier giving the same result as a one-shot write; and the same from the live image
//! (osmet), with every option the service passes through `--installer-args`.

mod common;
#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "../testdata/live_fixture.rs"]
mod live_fixture;

use common::root::{have_root, run, sgdisk_verify, LoopDev};
use coreos_image::{cached_image_set, ImageSet, ImageSpec};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const MIB: u64 = 1 << 20;

const IGNITION: &str = r#"{"ignition":{"version":"3.4.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-ed25519 AAAA test"]}]}}"#;

fn images(ss: u64) -> &'static ImageSet {
    static SETS: [OnceLock<ImageSet>; 2] = [OnceLock::new(), OnceLock::new()];
    SETS[(ss == 4096) as usize]
        .get_or_init(|| cached_image_set(&ImageSpec::test(ss)).expect("test images"))
}

fn cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("running assisted-installer")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Inputs for the post-install options: an Ignition file and a network directory.
struct Inputs {
    dir: tempfile::TempDir,
}

impl Inputs {
    fn new() -> Inputs {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.ign"), IGNITION).unwrap();
        let net = dir.path().join("net");
        std::fs::create_dir(&net).unwrap();
        std::fs::write(
            net.join("eno1.nmconnection"),
            "[connection]\nid=eno1\ntype=ethernet\n",
        )
        .unwrap();
        std::fs::write(
            net.join("bond0.nmconnection"),
            "[connection]\nid=bond0\ntype=bond\n",
        )
        .unwrap();
        std::fs::create_dir(net.join("subdir")).unwrap();
        Inputs { dir }
    }
    fn ignition(&self) -> String {
        self.dir.path().join("config.ign").display().to_string()
    }
    fn net(&self) -> String {
        self.dir.path().join("net").display().to_string()
    }
}

/// The post-install options used throughout, for write-image and embed alike.
fn post_args(inp: &Inputs) -> Vec<String> {
    [
        "-i",
        &inp.ignition(),
        "--append-karg",
        "ip=192.0.2.10::192.0.2.1:255.255.255.0:node0:eno1:none",
        "--append-karg",
        "nameserver=192.0.2.53",
        "--delete-karg",
        "rw",
        "-n",
        "--network-dir",
        &inp.net(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn read_gpt(dev: &Path, ss: u64) -> gptman::GPT {
    let mut f = std::fs::File::open(dev).unwrap();
    gptman::GPT::read_from(&mut f, ss).expect("valid GPT")
}

/// The boot partition of `dev` copied to a file, for debugfs.
fn boot_fs(dev: &Path, ss: u64, number: u32) -> tempfile::NamedTempFile {
    use std::os::unix::fs::FileExt;
    let gpt = read_gpt(dev, ss);
    let p = &gpt[number];
    let (start, len) = (
        p.starting_lba * ss,
        (p.ending_lba - p.starting_lba + 1) * ss,
    );
    let mut buf = vec![0u8; len as usize];
    std::fs::File::open(dev)
        .unwrap()
        .read_exact_at(&mut buf, start)
        .unwrap();
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), &buf).unwrap();
    f
}

fn debugfs(fs: &Path, request: &str) -> String {
    run(Command::new("debugfs").arg("-R").arg(request).arg(fs))
}

fn file_mode(fs: &Path, path: &str) -> u32 {
    let stat = debugfs(fs, &format!("stat {path}"));
    let mode = stat
        .split("Mode:")
        .nth(1)
        .unwrap_or_else(|| panic!("no {path} in the boot filesystem: {stat}"))
        .split_whitespace()
        .next()
        .unwrap();
    u32::from_str_radix(mode, 8).unwrap()
}

fn options_line(fs: &Path) -> String {
    debugfs(fs, "cat /loader/entries/ostree-1-rhcos.conf")
        .lines()
        .find_map(|l| l.strip_prefix("options "))
        .expect("an options line")
        .to_string()
}

/// Everything the post-install options must have produced on `dev`.
fn assert_post_installed(dev: &Path, spec: &ImageSpec) {
    let ss = spec.sector_size;
    let out = sgdisk_verify(dev);
    assert!(!out.contains("Warning"), "{out}");
    let gpt = read_gpt(dev, ss);
    let dev_size = if std::fs::metadata(dev).unwrap().is_file() {
        std::fs::metadata(dev).unwrap().len()
    } else {
        run(Command::new("blockdev").arg("--getsize64").arg(dev))
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(
        gpt.header.backup_lba,
        dev_size / ss - 1,
        "backup header at the last LBA"
    );
    let boot = boot_fs(dev, ss, 3);
    let fs = boot.path();
    assert_eq!(
        debugfs(fs, "cat /ignition/config.ign"),
        IGNITION,
        "config.ign bytes"
    );
    assert_eq!(file_mode(fs, "/ignition/config.ign") & 0o7777, 0o600);
    assert_eq!(file_mode(fs, "/ignition") & 0o7777, 0o700);
    let expected = spec
        .bls_options()
        .split_whitespace()
        .filter(|k| *k != "rw")
        .chain([
            "ip=192.0.2.10::192.0.2.1:255.255.255.0:node0:eno1:none",
            "nameserver=192.0.2.53",
        ])
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(options_line(fs), expected, "BLS options line");
    let listing = debugfs(fs, "ls -l /coreos-firstboot-network");
    assert!(
        listing.contains("eno1.nmconnection") && listing.contains("bond0.nmconnection"),
        "{listing}"
    );
    assert!(
        !listing.contains("subdir"),
        "only regular files are copied: {listing}"
    );
    assert_eq!(
        debugfs(fs, "cat /coreos-firstboot-network/eno1.nmconnection"),
        "[connection]\nid=eno1\ntype=ethernet\n"
    );
}

/// One sector size with partition scanning on (BLKRRPART succeeds, and creates nothing on a
/// kernel without parsers), the other without (BLKRRPART fails with EINVAL).
fn one_shot(ss: u64) {
    let set = images(ss);
    let inp = Inputs::new();
    let dev = LoopDev::with_flags(
        set.raw.size + 200 * MIB,
        ss,
        if ss == 4096 { &["--partscan"] } else { &[] },
    );
    let mut args = vec![
        "write-image".to_string(),
        "--image-file".into(),
        set.zst.path.display().to_string(),
        "--sha256".into(),
        set.zst.sha256.clone(),
    ];
    args.extend(post_args(&inp));
    args.push(dev.path.display().to_string());
    let out = cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("removing the mountpoint"),
        "the mountpoint is removed once, without a warning: {}",
        text(&out)
    );
    assert_post_installed(&dev.path, &set.spec);
    // The data partitions are the image's, byte for byte.
    let disk = std::fs::read(&dev.path).unwrap();
    let raw = std::fs::read(&set.raw.path).unwrap();
    for n in [1u32, 2, 4] {
        let p = &read_gpt(&dev.path, ss)[n];
        let r = (p.starting_lba * ss) as usize..((p.ending_lba + 1) * ss) as usize;
        assert!(
            disk[r.clone()] == raw[r],
            "partition {n} differs from the image"
        );
    }
}

#[test]
fn write_image_with_post_install_options_at_512() {
    if have_root("write_image_with_post_install_options_at_512") {
        one_shot(512);
    }
}

#[test]
fn write_image_with_post_install_options_at_4096() {
    if have_root("write_image_with_post_install_options_at_4096") {
        one_shot(4096);
    }
}

#[test]
fn embed_on_a_written_disk_matches_a_one_shot_write() {
    if !have_root("embed_on_a_written_disk_matches_a_one_shot_write") {
        return;
    }
    for ss in [512u64, 4096] {
        let set = images(ss);
        let inp = Inputs::new();
        let image = set.gz.path.display().to_string();
        // Two steps: write, then embed.
        let a = LoopDev::new(set.raw.size + 64 * MIB, ss);
        let out = cli(&[
            "write-image",
            "--image-file",
            &image,
            "--sha256",
            &set.gz.sha256,
            a.path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out));
        let mut args = vec!["embed".to_string()];
        args.extend(post_args(&inp));
        args.push(a.path.display().to_string());
        let out = cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(out.status.success(), "{}", text(&out));
        assert_post_installed(&a.path, &set.spec);
        // One shot.
        let b = LoopDev::new(set.raw.size + 64 * MIB, ss);
        let mut args = vec![
            "write-image".to_string(),
            "--image-file".into(),
            image.clone(),
            "--sha256".into(),
            set.gz.sha256.clone(),
        ];
        args.extend(post_args(&inp));
        args.push(b.path.display().to_string());
        let out = cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(out.status.success(), "{}", text(&out));
        // Same table, same non-boot bytes, same files in /boot.
        let (ga, gb) = (read_gpt(&a.path, ss), read_gpt(&b.path, ss));
        assert_eq!(ga.header.disk_guid, gb.header.disk_guid);
        let entries = |g: &gptman::GPT| {
            g.iter()
                .filter(|(_, p)| p.is_used())
                .map(|(n, p)| (n, p.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(entries(&ga), entries(&gb));
        let (da, db) = (
            std::fs::read(&a.path).unwrap(),
            std::fs::read(&b.path).unwrap(),
        );
        let boot = &ga[3];
        let boot_range = (boot.starting_lba * ss) as usize..((boot.ending_lba + 1) * ss) as usize;
        assert!(
            da[..boot_range.start] == db[..boot_range.start],
            "bytes before /boot differ"
        );
        assert!(
            da[boot_range.end..] == db[boot_range.end..],
            "bytes after /boot differ"
        );
        let (fa, fb) = (boot_fs(&a.path, ss, 3), boot_fs(&b.path, ss, 3));
        for path in [
            "/ignition/config.ign",
            "/loader/entries/ostree-1-rhcos.conf",
            "/coreos-firstboot-network/bond0.nmconnection",
        ] {
            assert_eq!(
                debugfs(fa.path(), &format!("cat {path}")),
                debugfs(fb.path(), &format!("cat {path}")),
                "{path}"
            );
            assert_eq!(
                file_mode(fa.path(), path),
                file_mode(fb.path(), path),
                "{path}"
            );
        }
    }
}

/// A disk with an old GPT holding a `data` partition (filled with a pattern) from `start_mib`.
fn disk_with_data_partition(
    ss: u64,
    size: u64,
    start_mib: u64,
    len_mib: u64,
) -> (LoopDev, Vec<u8>) {
    let dev = LoopDev::new(size, ss);
    let lba = |mib: u64| mib * MIB / ss;
    run(Command::new("sgdisk")
        .arg("-n")
        .arg(format!("1:{}:{}", lba(1), lba(9) - 1))
        .args(["-c", "1:old-boot"])
        .arg("-n")
        .arg(format!(
            "2:{}:{}",
            lba(start_mib),
            lba(start_mib + len_mib) - 1
        ))
        .args(["-c", "2:data"])
        .arg(&dev.path));
    let data = common::images::pattern((len_mib * MIB) as usize, 77);
    dev.write(start_mib * MIB, &data);
    (dev, data)
}

/// Write an image (`source`: its write-image arguments) of `image_size` bytes with the
/// post-install options and `--save-partlabel da*` over an earlier install holding a `data`
/// partition past the image: everything post-installed, and `data` kept (renumbered to #5,
/// same bytes). Returns write-image's output.
fn write_keeping_a_saved_partition(
    ss: u64,
    image_size: u64,
    spec: &ImageSpec,
    source: &[String],
) -> String {
    let start = (image_size >> 20) + 16;
    let (dev, data) = disk_with_data_partition(ss, image_size + 64 * MIB, start, 32);
    let inp = Inputs::new();
    let mut args = vec!["write-image".to_string()];
    args.extend_from_slice(source);
    args.extend(["--save-partlabel".to_string(), "da*".to_string()]);
    args.extend(post_args(&inp));
    args.push(dev.path.display().to_string());
    let out = cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", text(&out));
    assert_post_installed(&dev.path, spec);
    let gpt = read_gpt(&dev.path, ss);
    let used: Vec<(u32, String)> = gpt
        .iter()
        .filter(|(_, p)| p.is_used())
        .map(|(n, p)| (n, p.partition_name.as_str().to_string()))
        .collect();
    assert_eq!(
        used.last().unwrap(),
        &(5, "data".to_string()),
        "saved #2 renumbered to 5: {used:?}"
    );
    assert_eq!(used.len(), 5);
    assert_eq!(
        dev.read(start * MIB, data.len()),
        data,
        "saved data changed"
    );
    text(&out)
}

#[test]
fn saved_partitions_keep_their_data_and_name_and_are_renumbered() {
    if !have_root("saved_partitions_keep_their_data_and_name_and_are_renumbered") {
        return;
    }
    for ss in [512u64, 4096] {
        let set = images(ss);
        let source = [
            "--image-file".to_string(),
            set.xz.path.display().to_string(),
            "--sha256".into(),
            set.xz.sha256.clone(),
        ];
        write_keeping_a_saved_partition(ss, set.raw.size, &set.spec, &source);
    }
}

/// What the service passes through `--installer-args` (kargs, network, saved partitions) works
/// the same with the live image as the source, over an earlier install.
#[test]
fn the_live_image_takes_every_post_install_option_and_keeps_saved_partitions() {
    if !have_root("the_live_image_takes_every_post_install_option_and_keeps_saved_partitions") {
        return;
    }
    for ss in [512u64, 4096] {
        let fx = live_fixture::cached_live_fixture(ss, false).unwrap();
        let osmets = tempfile::tempdir().unwrap();
        std::fs::copy(&fx.osmet, osmets.path().join(fx.osmet.file_name().unwrap())).unwrap();
        let source = [
            "--osmet-dir".to_string(),
            osmets.path().display().to_string(),
            "--ostree-repo".into(),
            fx.sysroot.join("ostree/repo").display().to_string(),
        ];
        let out = write_keeping_a_saved_partition(ss, fx.raw_size, &fx.spec(), &source);
        assert!(out.contains("verified against the osmet checksum"), "{out}");
    }
}

#[test]
fn a_saved_partition_inside_the_image_is_refused_before_writing() {
    if !have_root("a_saved_partition_inside_the_image_is_refused_before_writing") {
        return;
    }
    let set = images(512);
    let (dev, _) = disk_with_data_partition(512, set.raw.size + 64 * MIB, 40, 16);
    let before = run(Command::new("sha256sum").arg(&dev.path));
    let out = cli(&[
        "write-image",
        "--image-file",
        set.gz.path.to_str().unwrap(),
        "--sha256",
        &set.gz.sha256,
        "--save-partindex",
        "2",
        dev.path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("saved partition 2") && stderr.contains("nothing was written"),
        "{stderr}"
    );
    let message = stderr
        .lines()
        .find(|l| l.contains("saved partition 2"))
        .unwrap_or_default();
    assert!(!message.contains("  "), "a run of spaces in {message:?}");
    assert_eq!(run(Command::new("sha256sum").arg(&dev.path)), before);
}

#[test]
fn a_failing_post_install_step_resets_the_table_keeping_saved_partitions() {
    if !have_root("a_failing_post_install_step_resets_the_table_keeping_saved_partitions") {
        return;
    }
    let set = images(512);
    let start = (set.raw.size >> 20) + 16;
    let (dev, data) = disk_with_data_partition(512, set.raw.size + 64 * MIB, start, 32);
    let inp = Inputs::new();
    // More than the boot filesystem can hold: the network copy fails with ENOSPC.
    std::fs::write(
        PathBuf::from(inp.net()).join("huge.nmconnection"),
        vec![b'x'; 40 << 20],
    )
    .unwrap();
    let mut args = vec![
        "write-image".to_string(),
        "--image-file".into(),
        set.gz.path.display().to_string(),
        "--sha256".into(),
        set.gz.sha256.clone(),
        "--save-partlabel".into(),
        "data".into(),
    ];
    args.extend(post_args(&inp));
    args.push(dev.path.display().to_string());
    let out = cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("post-install") && stderr.contains("huge.nmconnection"),
        "{stderr}"
    );
    sgdisk_verify(&dev.path);
    let gpt = read_gpt(&dev.path, 512);
    let used: Vec<(u32, String)> = gpt
        .iter()
        .filter(|(_, p)| p.is_used())
        .map(|(n, p)| (n, p.partition_name.as_str().to_string()))
        .collect();
    assert_eq!(
        used,
        vec![(2, "data".to_string())],
        "only the saved partition is left"
    );
    assert_eq!(dev.read(start * MIB, data.len()), data);
}

#[test]
fn write_image_with_post_install_onto_a_disk_image_file() {
    if !have_root("write_image_with_post_install_onto_a_disk_image_file") {
        return;
    }
    let set = images(512);
    let inp = Inputs::new();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = dir.path().join("disk.img");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(set.raw.size + 32 * MIB)
        .unwrap();
    let mut args = vec![
        "write-image".to_string(),
        "--image-file".into(),
        set.gz.path.display().to_string(),
        "--sha256".into(),
        set.gz.sha256.clone(),
    ];
    args.extend(post_args(&inp));
    args.push(file.display().to_string());
    let out = cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", text(&out));
    assert_post_installed(&file, &set.spec);
}
