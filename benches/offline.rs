//! `make bench`, offline part: install the live image (osmet) of a >= 1 GiB live fixture onto a
//! loop device, and in the same run, on the same files and device: the real
//! `coreos-installer install --offline` (the build the tests use), `dd oflag=direct bs=4M` of
//! the raw image, and `sha256sum` of the raw image. Both installers run in the same live-system
//! layout (a private mount namespace with /sysroot and /run/coreos-installer/osmet). A table of
//! medians and the ratios the offline-install issue asks for close the run.
//!
//! The fixture's osmet is packed with `--fast` (xz preset 0) to keep its generation quick; live
//! ISOs ship preset 9, whose decoder needs a 64 MiB dictionary. So our write also runs on the
//! same osmet with its packed stream recompressed with `xz -9`, for the peak memory that matters.
//!
//! Needs root (loop devices, mounts); prints why and exits otherwise.

#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "common/estimates.rs"]
mod estimates;
#[path = "../testdata/live_fixture.rs"]
mod live_fixture;
#[path = "../tests/common/live_ns.rs"]
mod live_ns;
#[path = "common/loopdev.rs"]
mod loopdev;
#[path = "common/peak_rss.rs"]
mod peak_rss;

use criterion::{criterion_group, Criterion, Throughput};
use estimates::median_secs;
use live_fixture::{cached_live_fixture, coreos_installer, LiveFixture};
use live_ns::LiveLayout;
use loopdev::BenchLoop;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");
const GROUP: &str = "offline";

struct Fixture {
    fx: LiveFixture,
    /// The live layout with the fixture's osmet, and with the same osmet whose packed stream
    /// is recompressed at xz preset 9; both with the udev stand-ins coreos-installer needs.
    live: LiveLayout,
    live_xz9: LiveLayout,
    packer: PathBuf,
    target: BenchLoop,
    _work: tempfile::TempDir,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let t = Instant::now();
        let fx = cached_live_fixture(512, true).expect("the live bench fixture");
        let packer = coreos_installer().expect("coreos-installer 0.27.0");
        eprintln!(
            "live bench fixture ready in {:.1?}: raw {} MiB",
            t.elapsed(),
            fx.raw_size >> 20
        );
        let work = tempfile::Builder::new()
            .prefix("bench-offline")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        // --partscan: coreos-installer checks exclusive access with BLKRRPART, which a loop
        // device without it refuses (EINVAL).
        let target = BenchLoop::new(fx.raw_size + (256 << 20), &["--partscan"]);
        let osmet_xz9 = recompress_xz9(&fx.osmet, work.path());
        // Warm the page cache: the live root and the osmet are in RAM on a live system.
        for p in [&fx.raw, &fx.osmet, &osmet_xz9] {
            let _ = std::fs::read(p).map(|d| d.len());
        }
        let _ = Command::new("sh")
            .arg("-c")
            .arg("find \"$1\" -type f -exec cat {} + > /dev/null")
            .arg("sh")
            .arg(&fx.sysroot)
            .status();
        let layout = |osmet: &Path| {
            let mut l = LiveLayout::new(&fx.sysroot, &[osmet.to_path_buf()]);
            l.udev_stub = true;
            l
        };
        Fixture {
            live: layout(&fx.osmet),
            live_xz9: layout(&osmet_xz9),
            fx,
            packer,
            target,
            _work: work,
        }
    })
}

/// The osmet file with its packed stream (the xz stream after header and body) decoded and
/// encoded again at preset 9, as live ISOs ship it.
fn recompress_xz9(osmet: &Path, dir: &Path) -> PathBuf {
    let t = Instant::now();
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
    let dir = dir.join("osmet-xz9");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join(osmet.file_name().unwrap());
    let mut file = bytes[..at].to_vec();
    file.extend_from_slice(&out.stdout);
    std::fs::write(&path, file).unwrap();
    eprintln!("osmet recompressed at xz -9 in {:.1?}", t.elapsed());
    path
}

fn run_ours(f: &Fixture, live: &LiveLayout, case: &'static str) {
    let out = live
        .command(BIN)
        .arg("write-image")
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
}

fn offline(c: &mut Criterion) {
    let f = fixture();
    let mut g = c.benchmark_group(GROUP);
    g.sample_size(10).warm_up_time(Duration::from_millis(1));
    g.throughput(Throughput::Bytes(f.fx.raw_size));
    g.bench_function("write-image", |b| {
        b.iter(|| run_ours(f, &f.live, "write-image"))
    });
    g.bench_function("write-image-xz9", |b| {
        b.iter(|| run_ours(f, &f.live_xz9, "write-image-xz9"))
    });
    g.bench_function("coreos-installer", |b| {
        b.iter(|| {
            let out = f
                .live
                .command(&f.packer)
                .args(["install", "--offline"])
                .arg(&f.target.path)
                .env("RUST_BACKTRACE", "0")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "coreos-installer install --offline: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        })
    });
    g.bench_function("dd-direct", |b| b.iter(|| f.target.dd_direct(&f.fx.raw)));
    g.bench_function("sha256sum", |b| {
        b.iter(|| {
            let out = Command::new("sha256sum").arg(&f.fx.raw).output().unwrap();
            assert!(String::from_utf8_lossy(&out.stdout).starts_with(&f.fx.raw_sha256));
        })
    });
    g.finish();
}

fn report() {
    let Some(f) = FIXTURE.get() else { return };
    let size = f.fx.raw_size;
    println!(
        "\n== offline install bench: {} MiB live fixture (osmet by coreos-installer 0.27.0), loop device (medians)",
        size >> 20
    );
    println!("{:<44} {:>9} {:>9}", "", "MB/s", "seconds");
    let rows = [
        ("write-image", "write-image, live image (osmet --fast)"),
        ("write-image-xz9", "write-image, live image (osmet xz -9)"),
        ("coreos-installer", "coreos-installer install --offline"),
        ("dd-direct", "dd oflag=direct bs=4M (raw image)"),
        ("sha256sum", "sha256sum (raw image)"),
    ];
    for (id, label) in rows {
        if let Some(s) = median_secs(GROUP, id) {
            println!("{label:<44} {:>9.0} {:>9.2}", size as f64 / s / 1e6, s);
        }
    }
    let ours = median_secs(GROUP, "write-image");
    if let (Some(ours), Some(ci)) = (ours, median_secs(GROUP, "coreos-installer")) {
        println!(
            "\ncoreos-installer install --offline / write-image: {:.2}x faster (goal >= 4)",
            ci / ours
        );
    }
    if let (Some(ours), Some(dd), Some(sha)) = (
        ours,
        median_secs(GROUP, "dd-direct"),
        median_secs(GROUP, "sha256sum"),
    ) {
        println!(
            "write-image / max(dd direct, sha256sum): {:.2} (goal <= 1.3)",
            ours / dd.max(sha)
        );
    }
    for case in ["write-image", "write-image-xz9"] {
        if let Some(peak) = peak_rss::max(case) {
            println!("peak RSS {case}: {peak:.1} MiB (goal < 128)");
        }
    }
}

static FIXTURE: OnceLock<&'static Fixture> = OnceLock::new();

fn benches(c: &mut Criterion) {
    let _ = FIXTURE.set(fixture());
    offline(c);
}

criterion_group!(group, benches);

fn main() {
    loopdev::run_bench("offline", group, report, || {
        FIXTURE.get().map(|f| &f.target)
    });
}
