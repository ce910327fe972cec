//! `make bench`, offline part: install the live image (osmet) of a >= 1 GiB live fixture onto a
//! loop device, the live root mounted on /sysroot from a zstd squashfs as the live ISO ships it
//! (`root.squashfs`, level 15 like the ISO build), and in the same run, on the same files and
//! device: the real `coreos-installer install --offline` (the build the tests use),
//! `dd oflag=direct bs=4M` of the raw image, the objects alone read from the squashfs with
//! write-image's parallelism, SHA-256 of the raw image by OpenSSL (SHA-NI where the CPU has it),
//! and a direct read of the written range of the device. Both installers run in the same
//! live-system layout (a private mount namespace with /sysroot and /run/coreos-installer/osmet);
//! every run that reads the root mounts the squashfs afresh in its own namespace, so its
//! squashfs caches are cold as on a live system's first read (the squashfs file itself stays in
//! the page cache: the ISO is in RAM). A table of medians and the ratios the offline-install
//! issues ask for close the run; rows left out by a criterion filter are left out of it.
//!
//! The fixture's osmet is packed with `--fast` (xz preset 0) to keep its generation quick; live
//! ISOs ship preset 9, whose decoder needs a 64 MiB dictionary. So our write also runs on the
//! same osmet with its packed stream recompressed with `xz -9`, for the peak memory that matters.
//!
//! Two thread counts, 2 and 16 whatever the machine's cores, for what grows with threads: the
//! peak memory of the `xz -9` install with `--read-threads 2` and `16`, and the `--verify`
//! read-back alone on 2 and 16 readers against the plain direct read of the device.
//!
//! `AI_BENCH_SMALL=1`: the tests' live fixture (about 360 MiB, quick to generate) instead of the
//! 1.1 GiB one, for a quick run; the big size is the reference.
//!
//! Needs root (loop devices, mounts); prints why and exits otherwise.

#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "common/estimates.rs"]
mod estimates;
#[path = "../testdata/live_fixture.rs"]
mod live_fixture;
#[path = "../tests/common/live_ns.rs"]
#[allow(dead_code)] // the tests' layout; this bench needs only its squashfs form
mod live_ns;
#[path = "common/loopdev.rs"]
mod loopdev;
#[path = "common/peak_rss.rs"]
mod peak_rss;

use criterion::{criterion_group, Criterion, Throughput};
use estimates::median_secs;
use live_fixture::{
    cached_live_fixture, cached_live_squashfs, coreos_installer, live_cache_name, LiveFixture,
};
use live_ns::{loop_devices_of, LiveLayout};
use loopdev::BenchLoop;
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const GROUP: &str = "offline";
/// mksquashfs's default zstd level, the one the live ISO build uses.
const SQUASHFS_LEVEL: u32 = 15;
/// Set (to an osmet file) when this binary is run inside the live layout to read the objects
/// alone (see [`read_objects`]).
const READ_OBJECTS_ENV: &str = "AI_BENCH_READ_OBJECTS";
/// With [`READ_OBJECTS_ENV`]: `1` to read them through the mounted squashfs (the kernel's
/// driver) instead of decoding its image.
const THROUGH_MOUNT_ENV: &str = "AI_BENCH_THROUGH_MOUNT";
/// `1`: the small fixture (see the module's doc).
const SMALL_ENV: &str = "AI_BENCH_SMALL";
/// The thread counts of the rows that show what grows with threads.
const THREADS: [usize; 2] = [2, 16];

struct Fixture {
    fx: LiveFixture,
    squashfs: PathBuf,
    /// The live layout on the squashfs with the fixture's osmet, and with the same osmet whose
    /// packed stream is recompressed at xz preset 9; both with the udev stand-ins
    /// coreos-installer needs.
    live: LiveLayout,
    live_xz9: LiveLayout,
    packer: PathBuf,
    target: BenchLoop,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let t = Instant::now();
        let big = std::env::var(SMALL_ENV).as_deref() != Ok("1");
        let fx = cached_live_fixture(512, big).expect("the live bench fixture");
        let squashfs = cached_live_squashfs(&fx, SQUASHFS_LEVEL).expect("its squashfs");
        let packer = coreos_installer().expect("coreos-installer 0.27.0");
        eprintln!(
            "live bench fixture ready in {:.1?}: raw {} MiB, root.squashfs {} MiB",
            t.elapsed(),
            fx.raw_size >> 20,
            std::fs::metadata(&squashfs).unwrap().len() >> 20
        );
        // --partscan: coreos-installer checks exclusive access with BLKRRPART, which a loop
        // device without it refuses (EINVAL).
        let target = BenchLoop::new(fx.raw_size + (256 << 20), &["--partscan"]);
        let osmet_xz9 = cached_osmet_xz9(&fx);
        // Warm the page cache: the ISO (hence root.squashfs) and the osmet are in RAM on a
        // live system; what is cold is the squashfs's own caches, fresh at each mount.
        for p in [&fx.raw, &fx.osmet, &osmet_xz9, &squashfs] {
            let _ = std::fs::read(p).map(|d| d.len());
        }
        let layout = |osmet: &Path| {
            let mut l = LiveLayout::squashfs(&squashfs, &[osmet.to_path_buf()]);
            l.udev_stub = true;
            l
        };
        Fixture {
            live: layout(&fx.osmet),
            live_xz9: layout(&osmet_xz9),
            squashfs,
            fx,
            packer,
            target,
        }
    })
}

/// The fixture's osmet file with its packed stream (the xz stream after header and body)
/// decoded and encoded again at preset 9, as live ISOs ship it; cached beside the fixture (it
/// takes minutes), tied to its raw image's checksum.
fn cached_osmet_xz9(fx: &LiveFixture) -> PathBuf {
    let name = format!("{}-osmet-xz9", live_cache_name(&fx.spec));
    let path = |dir: &Path| dir.join(fx.osmet.file_name().unwrap());
    let done = |dir: &Path| std::fs::read_to_string(dir.join("COMPLETE")).ok();
    coreos_image::cached(
        &name,
        "osmet xz -9",
        |dir| (done(dir)? == fx.raw_sha256).then(|| path(dir)),
        |dir| {
            std::fs::create_dir_all(dir)?;
            recompress_xz9(&fx.osmet, &path(dir));
            std::fs::write(dir.join("COMPLETE"), &fx.raw_sha256)?;
            Ok(path(dir))
        },
    )
    .unwrap()
}

fn recompress_xz9(osmet: &Path, path: &Path) {
    let bytes = std::fs::read(osmet).unwrap();
    let mut d = assisted_installer::image::osmet::format::Decoder::new(&bytes[..]);
    d.header().unwrap();
    d.body().unwrap();
    let at = d.position() as usize;
    let packed = {
        let mut out = Vec::new();
        let mut dec = liblzma::read::XzDecoder::new(&bytes[at..]);
        std::io::Read::read_to_end(&mut dec, &mut out).unwrap();
        out
    };
    let mut child = Command::new("xz")
        .args(["-9", "-T1", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&packed).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success());
    let mut file = bytes[..at].to_vec();
    file.extend_from_slice(&out.stdout);
    std::fs::write(path, file).unwrap();
}

/// The rows that ran in this process: criterion's saved medians of the others are older runs'.
static RAN: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
/// The `zeros:` line of write-image's summary (default options), as printed.
static ZEROS: Mutex<Option<String>> = Mutex::new(None);

fn ran(id: &'static str) {
    RAN.lock()
        .unwrap()
        .get_or_insert_with(HashSet::new)
        .insert(id);
}

/// The median of row `id`, if it ran in this process.
fn median(id: &str) -> Option<f64> {
    let ran = RAN.lock().unwrap().as_ref()?.contains(id);
    ran.then(|| median_secs(GROUP, id)).flatten()
}

fn run_ours(f: &Fixture, live: &LiveLayout, case: &'static str, args: &[&str]) {
    ran(case);
    let out = live
        .command(BIN)
        .arg("write-image")
        .args(args)
        .arg(&f.target.path)
        .env("ASSISTED_INSTALLER_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("verified against the osmet checksum"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    peak_rss::record(case, &stdout);
    if case == "write-image" {
        if let Some(line) = stdout.lines().find(|l| l.starts_with("zeros: ")) {
            *ZEROS.lock().unwrap() = Some(line.to_string());
        }
    }
}

fn offline(c: &mut Criterion) {
    let f = fixture();
    let mut g = c.benchmark_group(GROUP);
    g.sample_size(10).warm_up_time(Duration::from_millis(1));
    g.throughput(Throughput::Bytes(f.fx.raw_size));
    let ours: [(&'static str, &LiveLayout, &[&str]); 6] = [
        ("write-image", &f.live, &[]),
        (
            "write-image-through-mount",
            &f.live,
            &["--read-through-mount"],
        ),
        ("write-image-write-zeros", &f.live, &["--write-zeros"]),
        ("write-image-verify", &f.live, &["--verify"]),
        (
            "write-image-read-threads-1",
            &f.live,
            &["--read-threads", "1"],
        ),
        ("write-image-xz9", &f.live_xz9, &[]),
    ];
    for (id, live, args) in ours {
        g.bench_function(id, |b| b.iter(|| run_ours(f, live, id, args)));
    }
    for (id, threads) in [
        ("write-image-xz9-read-threads-2", "2"),
        ("write-image-xz9-read-threads-16", "16"),
    ] {
        let args = ["--read-threads", threads];
        g.bench_function(id, |b| b.iter(|| run_ours(f, &f.live_xz9, id, &args)));
    }
    for (id, threads) in [
        ("verify-read-2", THREADS[0]),
        ("verify-read-16", THREADS[1]),
    ] {
        g.bench_function(id, |b| {
            // The device holds the raw image (an install's fix-up changes its GPT areas).
            f.target.dd_direct(&f.fx.raw);
            let check = read_back_check(f);
            b.iter(|| {
                ran(id);
                check.run(&f.target.path, threads).unwrap();
            })
        });
    }
    g.bench_function("coreos-installer", |b| {
        b.iter(|| {
            ran("coreos-installer");
            let mut cmd = f.live.command(&f.packer);
            cmd.args(["install", "--offline"])
                .arg(&f.target.path)
                .env("RUST_BACKTRACE", "0");
            coreos_image::run(&mut cmd).unwrap();
        })
    });
    g.bench_function("dd-direct", |b| {
        b.iter(|| {
            ran("dd-direct");
            f.target.dd_direct(&f.fx.raw)
        })
    });
    for (id, through_mount) in [("objects-alone", "0"), ("objects-alone-through-mount", "1")] {
        g.bench_function(id, |b| {
            b.iter(|| {
                ran(id);
                // This very binary, even if a rebuild has replaced its file since it started.
                let mut cmd = f.live.command(format!("/proc/{}/exe", std::process::id()));
                cmd.env(READ_OBJECTS_ENV, &f.fx.osmet)
                    .env(THROUGH_MOUNT_ENV, through_mount);
                coreos_image::run(&mut cmd).unwrap();
            })
        });
    }
    g.bench_function("sha256-openssl", |b| {
        b.iter(|| {
            ran("sha256-openssl");
            let out = Command::new("openssl")
                .args(["dgst", "-sha256", "-r"])
                .arg(&f.fx.raw)
                .output()
                .unwrap();
            assert!(String::from_utf8_lossy(&out.stdout).starts_with(&f.fx.raw_sha256));
        })
    });
    g.bench_function("device-read", |b| {
        b.iter(|| {
            ran("device-read");
            let st = Command::new("dd")
                .arg(format!("if={}", f.target.path.display()))
                .args([
                    "of=/dev/null",
                    "bs=4M",
                    "iflag=direct,count_bytes",
                    "status=none",
                ])
                .arg(format!("count={}", f.fx.raw_size))
                .status()
                .unwrap();
            assert!(st.success());
        })
    });
    g.finish();
}

/// The raw image's sums as the stream takes them, once.
fn read_back_check(f: &Fixture) -> &'static assisted_installer::image::ReadBackCheck {
    static CHECK: OnceLock<assisted_installer::image::ReadBackCheck> = OnceLock::new();
    CHECK.get_or_init(|| assisted_installer::image::ReadBackCheck::of_image(&f.fx.raw).unwrap())
}

/// Inside the live layout: read every object extent the osmet file maps from
/// /sysroot/ostree/repo with write-image's own readers (its plan, store, batches and default
/// thread count), without the rest of the install.
fn read_objects(osmet: &Path) {
    use assisted_installer::image::osmet::read_objects_alone;
    let through_mount = std::env::var(THROUGH_MOUNT_ENV).as_deref() == Ok("1");
    let repo = Path::new("/sysroot/ostree/repo");
    let read = read_objects_alone(osmet, repo, None, through_mount).unwrap();
    assert!(read > 0, "no object bytes read");
}

fn report() {
    let Some(f) = FIXTURE.get() else { return };
    let size = f.fx.raw_size;
    println!(
        "\n== offline install bench: {} MiB live fixture (osmet by coreos-installer 0.27.0), root.squashfs (zstd {SQUASHFS_LEVEL}) mounted afresh per run, loop device (medians)",
        size >> 20
    );
    println!("{:<52} {:>9} {:>9}", "", "MB/s", "seconds");
    let rows = [
        ("write-image", "write-image, live image (osmet --fast)"),
        (
            "write-image-through-mount",
            "write-image --read-through-mount (kernel's squashfs)",
        ),
        (
            "write-image-write-zeros",
            "write-image --write-zeros (zeroing off)",
        ),
        ("write-image-verify", "write-image --verify"),
        ("write-image-read-threads-1", "write-image --read-threads 1"),
        ("write-image-xz9", "write-image, live image (osmet xz -9)"),
        (
            "write-image-xz9-read-threads-2",
            "write-image, osmet xz -9, --read-threads 2",
        ),
        (
            "write-image-xz9-read-threads-16",
            "write-image, osmet xz -9, --read-threads 16",
        ),
        ("verify-read-2", "--verify read-back alone, 2 readers"),
        ("verify-read-16", "--verify read-back alone, 16 readers"),
        ("coreos-installer", "coreos-installer install --offline"),
        ("dd-direct", "dd oflag=direct bs=4M (raw image)"),
        (
            "objects-alone",
            "objects alone from the squashfs (default threads)",
        ),
        (
            "objects-alone-through-mount",
            "objects alone through the mount (8 threads)",
        ),
        ("sha256-openssl", "openssl dgst -sha256 (SHA-NI; raw image)"),
        (
            "device-read",
            "dd iflag=direct bs=4M (device, written range)",
        ),
    ];
    for (id, label) in rows {
        if let Some(s) = median(id) {
            println!("{label:<52} {:>9.0} {:>9.2}", size as f64 / s / 1e6, s);
        }
    }
    println!();
    let limits = [
        ("dd direct", median("dd-direct")),
        ("objects alone", median("objects-alone")),
        ("SHA-256", median("sha256-openssl")),
    ];
    let limit = limits
        .iter()
        .filter_map(|&(name, s)| Some((name, s?)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    for (id, what) in [
        ("write-image", ""),
        ("write-image-write-zeros", " (zeroing off)"),
    ] {
        let Some(ours) = median(id) else { continue };
        if let Some(ci) = median("coreos-installer") {
            println!(
                "coreos-installer install --offline / {id}: {:.2}x{what} (goal >= 6)",
                ci / ours
            );
        }
        if let Some((name, s)) = limit {
            println!(
                "{id} / max(dd direct, objects alone, SHA-256) = {:.2}{what} (the max: {name}; goal <= 1.3)",
                ours / s
            );
        }
    }
    if let Some(line) = ZEROS.lock().unwrap().as_deref() {
        println!("share of the image that was zeros: {line}");
    }
    if let (Some(v), Some(w), Some(r)) = (
        median("write-image-verify"),
        median("write-image"),
        median("device-read"),
    ) {
        println!(
            "--verify adds {:.2} s = {:.2}x a direct read of the device alone",
            v - w,
            (v - w) / r
        );
    }
    for (id, threads) in [
        ("verify-read-2", THREADS[0]),
        ("verify-read-16", THREADS[1]),
    ] {
        if let (Some(v), Some(r)) = (median(id), median("device-read")) {
            println!(
                "--verify read-back on {threads} readers / direct read of the device: {:.2} (goal <= 1.1)",
                v / r
            );
        }
    }
    if let (Some(one), Some(w)) = (median("write-image-read-threads-1"), median("write-image")) {
        println!("--read-threads 1 / default: {:.2}", one / w);
    }
    if let (Some(k), Some(w)) = (median("write-image-through-mount"), median("write-image")) {
        println!(
            "--read-through-mount / default (the image decoded here): {:.2}",
            k / w
        );
    }
    for case in [
        "write-image",
        "write-image-xz9",
        "write-image-xz9-read-threads-2",
        "write-image-xz9-read-threads-16",
    ] {
        if let Some(peak) = peak_rss::max(case) {
            println!("peak RSS {case}: {peak:.1} MiB (goal < 128)");
        }
    }
    let leaked = loop_devices_of(&f.squashfs);
    if !leaked.is_empty() {
        println!("loop devices left on root.squashfs: {leaked:?}");
    }
}

static FIXTURE: OnceLock<&'static Fixture> = OnceLock::new();

fn benches(c: &mut Criterion) {
    let _ = FIXTURE.set(fixture());
    offline(c);
}

criterion_group!(group, benches);

fn main() {
    if let Some(osmet) = std::env::var_os(READ_OBJECTS_ENV) {
        return read_objects(Path::new(&osmet));
    }
    loopdev::run_bench("offline", group, report, || {
        FIXTURE.get().map(|f| &f.target)
    });
}
