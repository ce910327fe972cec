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

use common::root::{have_root, labels, read_gpt, run, sgdisk_verify, text, Ext4, LoopDev};
use coreos_image::{cached_image_set, ImageFile, ImageSet, ImageSpec, BLS_ENTRY_PATH, BOOT_LABEL};
use std::io::Seek;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const MIB: u64 = 1 << 20;

const IGNITION: &str = r#"{"ignition":{"version":"3.4.0"},"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["ssh-ed25519 AAAA test"]}]}}"#;
const KARGS: [&str; 2] = [
    "ip=192.0.2.10::192.0.2.1:255.255.255.0:node0:eno1:none",
    "nameserver=192.0.2.53",
];

fn images(ss: u64) -> ImageSet {
    cached_image_set(&ImageSpec::test(ss)).expect("test images")
}

/// `--image-file` and `--sha256` of `file`.
fn source(file: &ImageFile) -> Vec<String> {
    let path = file.path.display().to_string();
    vec![
        "--image-file".into(),
        path,
        "--sha256".into(),
        file.sha256.clone(),
    ]
}

/// The inputs of the post-install options (an Ignition file and a network directory with two
/// keyfiles and a subdirectory), and the options themselves, used throughout for write-image
/// and embed alike.
struct Inputs {
    dir: tempfile::TempDir,
}

impl Inputs {
    fn new() -> Inputs {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.ign"), IGNITION).unwrap();
        let net = dir.path().join("net");
        std::fs::create_dir_all(net.join("subdir")).unwrap();
        for (name, kind) in [("eno1", "ethernet"), ("bond0", "bond")] {
            let keyfile = format!("[connection]\nid={name}\ntype={kind}\n");
            std::fs::write(net.join(format!("{name}.nmconnection")), keyfile).unwrap();
        }
        Inputs { dir }
    }

    fn args(&self) -> Vec<String> {
        let path = |name: &str| self.dir.path().join(name).display().to_string();
        let mut args = vec!["-i".to_string(), path("config.ign")];
        for karg in KARGS {
            args.extend(["--append-karg".to_string(), karg.to_string()]);
        }
        args.extend(["--delete-karg", "rw", "-n", "--network-dir"].map(String::from));
        args.push(path("net"));
        args
    }
}

/// `assisted-installer <command> <args> <post-install options of inputs> <dev>`.
fn install(command: &str, args: &[String], inputs: Option<&Inputs>, dev: &Path) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg(command).args(args);
    cmd.args(inputs.map(Inputs::args).unwrap_or_default());
    cmd.arg(dev).output().expect("running assisted-installer")
}

/// Like [`install`], which must succeed.
fn installed(command: &str, args: &[String], inputs: Option<&Inputs>, dev: &Path) -> String {
    let out = install(command, args, inputs, dev);
    assert!(out.status.success(), "{}", text(&out));
    text(&out)
}

/// Everything the post-install options must have produced on `dev`.
fn assert_post_installed(dev: &Path, spec: &ImageSpec) {
    let ss = spec.sector_size;
    let out = sgdisk_verify(dev);
    assert!(!out.contains("Warning"), "{out}");
    let dev_size = std::fs::File::open(dev)
        .unwrap()
        .seek(std::io::SeekFrom::End(0));
    let last = dev_size.unwrap() / ss - 1;
    let backup = read_gpt(dev, ss).header.backup_lba;
    assert_eq!(backup, last, "backup header at the last LBA");
    let fs = Ext4::on(dev, ss, BOOT_LABEL);
    assert_eq!(
        fs.text("/ignition/config.ign"),
        IGNITION,
        "config.ign bytes"
    );
    assert_eq!(fs.mode("/ignition/config.ign"), 0o600);
    assert_eq!(fs.mode("/ignition"), 0o700);
    let options = spec.bls_options();
    let options = options.split_whitespace().filter(|k| *k != "rw");
    let expected = options.chain(KARGS).collect::<Vec<_>>().join(" ");
    let bls = format!("/{BLS_ENTRY_PATH}");
    assert_eq!(fs.bls_options(&bls), expected, "BLS options line");
    let listing = String::from_utf8(fs.debugfs("ls -l /coreos-firstboot-network")).unwrap();
    assert!(
        listing.contains("eno1.nmconnection") && listing.contains("bond0.nmconnection"),
        "{listing}"
    );
    let only_files = !listing.contains("subdir");
    assert!(only_files, "only regular files are copied: {listing}");
    assert_eq!(
        fs.text("/coreos-firstboot-network/eno1.nmconnection"),
        "[connection]\nid=eno1\ntype=ethernet\n"
    );
}

/// One sector size with partition scanning on (BLKRRPART succeeds, and creates nothing on a
/// kernel without parsers), the other without (BLKRRPART fails with EINVAL); each over an earlier
/// install whose `data` partition is saved.
#[test]
fn write_image_with_post_install_options_and_a_saved_partition_at_512_and_4096() {
    if !have_root("write_image_with_post_install_options_and_a_saved_partition_at_512_and_4096") {
        return;
    }
    for (ss, flags) in [(512, &[][..]), (4096, &["--partscan"][..])] {
        let set = images(ss);
        let (out, dev) =
            write_keeping_a_saved_partition(ss, set.raw.size, &set.spec, &source(&set.zst), flags);
        assert!(
            !out.contains("removing the mountpoint"),
            "the mountpoint is removed once, without a warning: {out}"
        );
        // The data partitions are the image's, byte for byte.
        let (disk, raw) = (
            std::fs::read(&dev.path).unwrap(),
            std::fs::read(&set.raw.path).unwrap(),
        );
        let gpt = read_gpt(&dev.path, ss);
        for n in [1u32, 2, 4] {
            let r = (gpt[n].starting_lba * ss) as usize..((gpt[n].ending_lba + 1) * ss) as usize;
            assert!(
                disk[r.clone()] == raw[r],
                "partition {n} differs from the image"
            );
        }
    }
}

/// The one-shot write at 512 goes to a disk-image file: the post-install steps work on files too.
#[test]
fn embed_on_a_written_disk_matches_a_one_shot_write() {
    if !have_root("embed_on_a_written_disk_matches_a_one_shot_write") {
        return;
    }
    for ss in [512u64, 4096] {
        let set = images(ss);
        let inp = Inputs::new();
        // Two steps: write, then embed.
        let a = LoopDev::new(set.raw.size + 64 * MIB, ss);
        installed("write-image", &source(&set.gz), None, &a.path);
        installed("embed", &[], Some(&inp), &a.path);
        assert_post_installed(&a.path, &set.spec);
        // One shot: at 512 onto a disk-image file (a disk of 512-byte sectors to the writer).
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let (b, _loop_dev) = if ss == 512 {
            let file = dir.path().join("disk.img");
            let f = std::fs::File::create(&file).unwrap();
            f.set_len(set.raw.size + 64 * MIB).unwrap();
            (file, None)
        } else {
            let dev = LoopDev::new(set.raw.size + 64 * MIB, ss);
            (dev.path.clone(), Some(dev))
        };
        installed("write-image", &source(&set.gz), Some(&inp), &b);
        assert_post_installed(&b, &set.spec);
        // Same table, same non-boot bytes, same files in /boot.
        let (ga, gb) = (read_gpt(&a.path, ss), read_gpt(&b, ss));
        assert_eq!(ga.header.disk_guid, gb.header.disk_guid);
        let entries = |g: &gptman::GPT| {
            let used = g.iter().filter(|(_, p)| p.is_used());
            used.map(|(n, p)| (n, p.clone())).collect::<Vec<_>>()
        };
        assert_eq!(entries(&ga), entries(&gb));
        let (da, db) = (std::fs::read(&a.path).unwrap(), std::fs::read(&b).unwrap());
        let boot = &ga[3];
        let (start, end) = (
            (boot.starting_lba * ss) as usize,
            ((boot.ending_lba + 1) * ss) as usize,
        );
        assert!(da[..start] == db[..start], "bytes before /boot differ");
        assert!(da[end..] == db[end..], "bytes after /boot differ");
        let (fa, fb) = (
            Ext4::on(&a.path, ss, BOOT_LABEL),
            Ext4::on(&b, ss, BOOT_LABEL),
        );
        for path in [
            "/ignition/config.ign",
            &format!("/{BLS_ENTRY_PATH}"),
            "/coreos-firstboot-network/bond0.nmconnection",
        ] {
            assert_eq!(fa.text(path), fb.text(path), "{path}");
            assert_eq!(fa.mode(path), fb.mode(path), "{path}");
        }
    }
}

/// A disk with an old GPT holding a `data` partition (filled with a pattern) from `start_mib`.
fn disk_with_data_partition(
    ss: u64,
    size: u64,
    start_mib: u64,
    len_mib: u64,
    flags: &[&str],
) -> (LoopDev, Vec<u8>) {
    let dev = LoopDev::with_flags(size, ss, flags);
    let lba = |mib: u64| mib * MIB / ss;
    let old_boot = format!("1:{}:{}", lba(1), lba(9) - 1);
    let data = format!("2:{}:{}", lba(start_mib), lba(start_mib + len_mib) - 1);
    let sgdisk = [
        "-n",
        &old_boot,
        "-c",
        "1:old-boot",
        "-n",
        &data,
        "-c",
        "2:data",
    ];
    run(Command::new("sgdisk").args(sgdisk).arg(&dev.path));
    let data = common::images::pattern((len_mib * MIB) as usize, 77);
    dev.write(start_mib * MIB, &data);
    (dev, data)
}

/// Write an image (`source`: its write-image arguments) of `image_size` bytes with the
/// post-install options and `--save-partlabel da*` over an earlier install holding a `data`
/// partition past the image, on a loop device attached with `flags`: everything
/// post-installed, and `data` kept (renumbered to #5, same bytes). Returns write-image's output
/// and the device.
fn write_keeping_a_saved_partition(
    ss: u64,
    image_size: u64,
    spec: &ImageSpec,
    source: &[String],
    flags: &[&str],
) -> (String, LoopDev) {
    let start = (image_size >> 20) + 16;
    let (dev, data) = disk_with_data_partition(ss, image_size + 64 * MIB, start, 32, flags);
    let mut args = source.to_vec();
    args.extend(["--save-partlabel".to_string(), "da*".to_string()]);
    let out = installed("write-image", &args, Some(&Inputs::new()), &dev.path);
    assert_post_installed(&dev.path, spec);
    let used = labels(&read_gpt(&dev.path, ss));
    assert_eq!(used.len(), 5, "{used:?}");
    assert_eq!(used[4], (5, "data".to_string()), "saved #2 renumbered to 5");
    assert!(
        dev.read(start * MIB, data.len()) == data,
        "saved data changed"
    );
    (out, dev)
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
        let (out, _) = write_keeping_a_saved_partition(ss, fx.raw_size, &fx.spec(), &source, &[]);
        assert!(out.contains("verified against the osmet checksum"), "{out}");
    }
}

/// Over an earlier install: saving its old boot partition, inside the image, is refused before
/// anything is written; then a failing post-install step resets the table, keeping the saved
/// `data` partition past the image.
#[test]
fn a_saved_partition_inside_the_image_is_refused_and_a_failing_post_install_step_keeps_one() {
    if !have_root(
        "a_saved_partition_inside_the_image_is_refused_and_a_failing_post_install_step_keeps_one",
    ) {
        return;
    }
    let set = images(512);
    let start = (set.raw.size >> 20) + 16;
    let (dev, data) = disk_with_data_partition(512, set.raw.size + 64 * MIB, start, 32, &[]);
    let before = dev.sha256();
    let mut args = source(&set.gz);
    args.extend(["--save-partindex".to_string(), "1".to_string()]);
    let out = install("write-image", &args, None, &dev.path);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let message = stderr.lines().find(|l| l.contains("saved partition 1"));
    let message = message.unwrap_or_else(|| panic!("{stderr}"));
    assert!(stderr.contains("nothing was written"), "{stderr}");
    assert!(!message.contains("  "), "a run of spaces in {message:?}");
    assert_eq!(dev.sha256(), before);

    let inp = Inputs::new();
    // More than the boot filesystem can hold: the network copy fails with ENOSPC.
    let huge = inp.dir.path().join("net/huge.nmconnection");
    std::fs::write(huge, vec![b'x'; 40 << 20]).unwrap();
    let mut args = source(&set.gz);
    args.extend(["--save-partlabel".to_string(), "data".to_string()]);
    let out = install("write-image", &args, Some(&inp), &dev.path);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("post-install") && stderr.contains("huge.nmconnection"),
        "{stderr}"
    );
    sgdisk_verify(&dev.path);
    let used = labels(&read_gpt(&dev.path, 512));
    assert_eq!(
        used,
        [(2, "data".to_string())],
        "only the saved partition is left"
    );
    assert!(dev.read(start * MIB, data.len()) == data);
}

/// Over an earlier install whose GPT has both headers damaged (their checksums), signatures
/// still there: with either save option the write is refused before anything is written (the
/// device's bytes unchanged), naming the disk, each header's damage and the two ways on.
#[test]
fn a_damaged_table_with_partitions_to_save_is_refused_and_left_as_it_was() {
    if !have_root("a_damaged_table_with_partitions_to_save_is_refused_and_left_as_it_was") {
        return;
    }
    let set = images(512);
    let size = set.raw.size + 64 * MIB;
    let start = (set.raw.size >> 20) + 16;
    let (dev, _) = disk_with_data_partition(512, size, start, 32, &[]);
    for header in [512, size - 512] {
        let mut crc = dev.read(header + 16, 4);
        crc.iter_mut().for_each(|b| *b ^= 0xff);
        dev.write(header + 16, &crc);
        assert_eq!(dev.read(header, 8), b"EFI PART");
    }
    let before = dev.sha256();
    let disk = dev.path.display().to_string();
    for save in [["--save-partlabel", "data"], ["--save-partindex", "2"]] {
        let mut args = source(&set.gz);
        args.extend(save.map(String::from));
        let out = install("write-image", &args, None, &dev.path);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        for want in [
            &format!("the GPT partition table of {disk} is damaged"),
            "primary GPT header (LBA 1): corrupted CRC32 checksum",
            &format!(
                "backup GPT header (LBA {}): corrupted CRC32",
                size / 512 - 1
            ),
            &format!("gdisk {disk}"),
            "drop --save-partlabel and --save-partindex",
        ] {
            assert!(stderr.contains(want), "{want:?} not in {stderr}");
        }
        assert_eq!(dev.sha256(), before, "{save:?}: the device was modified");
    }
}
