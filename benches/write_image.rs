//! `make bench`: write a >= 1 GiB CoreOS-like image (gz, xz, zst, raw) over loopback HTTP onto a
//! loop device with the real binary, and measure in the same run the limits of each stage: our
//! decoder alone into /dev/null, `gzip -dc` on the same file, and `dd oflag=direct bs=4M` of the
//! raw image to the same device. Criterion measures; a table of MB/s and ratios closes the run.
//! Needs root (loop devices); prints why and exits otherwise.

#[path = "../testdata/coreos_image.rs"]
mod coreos_image;
#[path = "common/estimates.rs"]
mod estimates;
#[path = "../tests/common/fake_service.rs"]
mod fake_service;
#[path = "../tests/common/http_server.rs"]
mod http_server;
#[path = "common/loopdev.rs"]
mod loopdev;
#[path = "common/peak_rss.rs"]
mod peak_rss;

use assisted_installer::image::format::{sniff, Decompressor, XzSettings};
use coreos_image::{cached_image_set, Compression, ImageSet, ImageSpec};
use criterion::{criterion_group, Criterion, Throughput};
use estimates::median_secs;
use http_server::TestServer;
use loopdev::BenchLoop;
use std::io::{BufReader, Read};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");

struct Fixture {
    set: ImageSet,
    server: TestServer,
    target: BenchLoop,
}

static FIXTURE: OnceLock<Fixture> = OnceLock::new();

fn fixture() -> &'static Fixture {
    FIXTURE.get_or_init(|| {
        let t = Instant::now();
        let set = cached_image_set(&ImageSpec::bench(512)).expect("bench images");
        eprintln!(
            "bench images ready in {:.1?}: raw {} MiB",
            t.elapsed(),
            set.raw.size >> 20
        );
        let target = BenchLoop::new(set.raw.size + (256 << 20), &[]);
        let server = TestServer::start();
        for c in [
            None,
            Some(Compression::Gzip),
            Some(Compression::Xz),
            Some(Compression::Zstd),
        ] {
            let f = set.compressed(c);
            server.serve_file(&format!("/{}", name(c)), &f.path);
            // Warm the page cache so the first sample is not a disk read.
            let _ = std::fs::read(&f.path).map(|d| d.len());
        }
        Fixture {
            set,
            server,
            target,
        }
    })
}

fn name(c: Option<Compression>) -> &'static str {
    match c {
        None => "raw",
        Some(Compression::Gzip) => "gz",
        Some(Compression::Xz) => "xz",
        Some(Compression::Zstd) => "zst",
    }
}

fn decode_to_null(path: &Path, xz: XzSettings) -> u64 {
    let mut f = BufReader::with_capacity(256 << 10, std::fs::File::open(path).unwrap());
    let mut head = [0u8; 6];
    f.read_exact(&mut head).unwrap();
    let f = BufReader::with_capacity(256 << 10, std::fs::File::open(path).unwrap());
    let mut d = Decompressor::new(sniff(&head), f, xz).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = d.read(&mut buf).unwrap();
        if k == 0 {
            break;
        }
        n += k as u64;
    }
    d.finish().unwrap();
    n
}

fn stage_limits(c: &mut Criterion) {
    let f = fixture();
    let mut g = c.benchmark_group("limits");
    g.sample_size(10).warm_up_time(Duration::from_millis(1));
    g.throughput(Throughput::Bytes(f.set.raw.size));
    for comp in [Compression::Gzip, Compression::Xz, Compression::Zstd] {
        let path = f.set.compressed(Some(comp)).path.clone();
        g.bench_function(format!("decode-{}", name(Some(comp))), |b| {
            b.iter(|| assert_eq!(decode_to_null(&path, XzSettings::default()), f.set.raw.size))
        });
    }
    let xz = f.set.xz.path.clone();
    g.bench_function("decode-xz-1thread", |b| {
        let one = XzSettings {
            threads: 1,
            ..XzSettings::default()
        };
        b.iter(|| assert_eq!(decode_to_null(&xz, one), f.set.raw.size))
    });
    let gz = f.set.gz.path.clone();
    g.bench_function("gzip-dc", |b| {
        b.iter(|| {
            let st = Command::new("sh")
                .arg("-c")
                .arg(format!("gzip -dc {} > /dev/null", gz.display()))
                .status()
                .unwrap();
            assert!(st.success());
        })
    });
    g.bench_function("dd-direct", |b| {
        b.iter(|| f.target.dd_direct(&f.set.raw.path))
    });
    g.finish();
}

fn end_to_end(c: &mut Criterion) {
    let f = fixture();
    let mut g = c.benchmark_group("write-image");
    g.sample_size(10).warm_up_time(Duration::from_millis(1));
    g.throughput(Throughput::Bytes(f.set.raw.size));
    for comp in [
        Some(Compression::Gzip),
        Some(Compression::Xz),
        Some(Compression::Zstd),
        None,
    ] {
        let file = f.set.compressed(comp);
        let url = f.server.url(&format!("/{}", name(comp)));
        g.bench_function(name(comp), |b| {
            b.iter(|| {
                let out = Command::new(BIN)
                    .args(["write-image", "--image-url", &url, "--sha256", &file.sha256])
                    .arg(&f.target.path)
                    .env("ASSISTED_INSTALLER_LOG", "warn")
                    .output()
                    .unwrap();
                let stdout = String::from_utf8_lossy(&out.stdout);
                assert!(
                    out.status.success(),
                    "{stdout}{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                peak_rss::record(name(comp), &stdout);
            })
        });
    }
    // The same gz write with the post-install steps of an assisted install: Ignition config,
    // kernel arguments, network keyfiles.
    let inputs = tempfile::tempdir().unwrap();
    let ign = inputs.path().join("config.ign");
    std::fs::write(&ign, r#"{"ignition":{"version":"3.4.0"}}"#).unwrap();
    let net = inputs.path().join("net");
    std::fs::create_dir(&net).unwrap();
    std::fs::write(net.join("eno1.nmconnection"), "[connection]\nid=eno1\n").unwrap();
    let url = f.server.url("/gz");
    g.bench_function("gz+post-install", |b| {
        b.iter(|| {
            let out = Command::new(BIN)
                .args([
                    "write-image",
                    "--image-url",
                    &url,
                    "--sha256",
                    &f.set.gz.sha256,
                ])
                .arg("-i")
                .arg(&ign)
                .args([
                    "--append-karg",
                    "ip=dhcp",
                    "--delete-karg",
                    "rw",
                    "-n",
                    "--network-dir",
                ])
                .arg(&net)
                .arg(&f.target.path)
                .env("ASSISTED_INSTALLER_LOG", "warn")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        })
    });
    g.finish();
}

fn report() {
    let Some(f) = FIXTURE_SIZE.get() else { return };
    let mbs = |s: f64| *f as f64 / s / 1e6;
    let get = |g: &str, id: &str| median_secs(g, id);
    println!(
        "\n== write-image bench: {} MiB CoreOS-like image, loop device, loopback HTTP (medians)",
        f >> 20
    );
    println!("{:<34} {:>9} {:>9}", "stage", "MB/s", "seconds");
    let rows = [
        ("limits", "decode-gz", "decoder alone: gz"),
        ("limits", "gzip-dc", "gzip -dc (GNU)"),
        ("limits", "decode-xz", "decoder alone: xz (all threads)"),
        (
            "limits",
            "decode-xz-1thread",
            "decoder alone: xz (1 thread)",
        ),
        ("limits", "decode-zst", "decoder alone: zst"),
        ("limits", "dd-direct", "dd oflag=direct bs=4M (raw)"),
        ("write-image", "gz", "write-image gz (HTTP -> loop)"),
        ("write-image", "xz", "write-image xz"),
        ("write-image", "zst", "write-image zst"),
        ("write-image", "raw", "write-image raw"),
    ];
    for (g, id, label) in rows {
        if let Some(s) = get(g, id) {
            println!("{label:<34} {:>9.0} {:>9.2}", mbs(s), s);
        }
    }
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    let dd = get("limits", "dd-direct");
    println!();
    if let Some(r) = ratio(get("limits", "gzip-dc"), get("limits", "decode-gz")) {
        println!("gz decoder speed vs gzip -dc: {r:.2}x (required >= 2)");
    }
    for (fmt, dec) in [
        ("gz", "decode-gz"),
        ("xz", "decode-xz"),
        ("zst", "decode-zst"),
    ] {
        let limit = get("limits", dec).zip(dd).map(|(a, b)| a.max(b));
        if let Some(r) = ratio(get("write-image", fmt), limit) {
            println!("write-image {fmt} time / max(decoder alone, dd direct): {r:.2} (gz required <= 1.25)");
        }
    }
    if let (Some(post), Some(plain)) = (
        get("write-image", "gz+post-install"),
        get("write-image", "gz"),
    ) {
        println!("post-install steps (Ignition, kargs, network) add {:.2} s to a gz write (required <= 2)", post - plain);
    }
    if let Some(r) = ratio(get("write-image", "raw"), dd) {
        println!("write-image raw time / dd direct: {r:.2}");
    }
    if let Some(r) = ratio(
        get("limits", "decode-xz-1thread"),
        get("limits", "decode-xz"),
    ) {
        println!(
            "xz multi-block decoding, all threads vs 1 thread: {r:.2}x faster (required >= 1.6)"
        );
    }
    if let (Some(early), Some(late)) = (
        get("single-node", "early-write"),
        get("single-node", "write-after-bootkube"),
    ) {
        println!(
            "single-node critical path (gz image, bootstrap simulated at {} s): {late:.2} s writing after bootkube, {early:.2} s with the early write ({:.2} s saved)",
            SIMULATED_BOOTSTRAP.as_secs(),
            late - early
        );
    }
    for fmt in ["gz", "xz", "zst", "raw"] {
        if let Some(peak) = peak_rss::max(fmt) {
            println!("peak RSS write-image {fmt}: {peak:.1} MiB (gz required < 128)");
        }
    }
}

static FIXTURE_SIZE: OnceLock<u64> = OnceLock::new();

/// How long the simulated bootstrap control plane takes to form (bootkube's work).
const SIMULATED_BOOTSTRAP: Duration = Duration::from_secs(4);

/// One single-node install, in-process: recorded host commands, the in-memory fake
/// assisted-service, the real writer onto the bench loop device, and bootkube "done" after
/// SIMULATED_BOOTSTRAP.
fn single_node_install(f: &Fixture, early_write: bool) -> Duration {
    use assisted_installer::clock::SystemClock;
    use assisted_installer::flow::node::run_installer;
    use assisted_installer::flow::testing::{FlowBuilder, HOST};
    use assisted_installer::flow::writer::InProcessWriter;
    use assisted_installer::flow::Intervals;
    use assisted_installer::host::commands::RecordingRunner;
    use assisted_installer::image::Cancel;
    use std::sync::Arc;
    let svc = fake_service::FakeService::new();
    svc.set_host_role(HOST, "sno");
    svc.set_host_ignition(HOST, r#"{"ignition":{"version":"3.4.0"}}"#);
    svc.set_cluster_file(
        "bootstrap.ign",
        r#"{"ignition":{"version":"3.2.0"},"storage":{"files":[{"path":"/root/.docker/config.json","contents":{"source":"data:,%7B%22auths%22%3A%7B%7D%7D"}}]}}"#,
    );
    let dir = tempfile::tempdir().unwrap();
    let openshift = dir.path().join("openshift");
    std::fs::create_dir_all(&openshift).unwrap();
    std::fs::write(
        openshift.join("master.ign"),
        r#"{"ignition":{"version":"3.2.0"}}"#,
    )
    .unwrap();
    let runner = Arc::new(RecordingRunner::new());
    runner.ok("hostname", "sno-0");
    let writer = InProcessWriter {
        stop: Cancel::new(),
        cacert: None,
        proxy: Default::default(),
    };
    let url = f.server.url("/gz");
    let flow = FlowBuilder::new("master", dir.path(), svc.client(), Arc::new(writer))
        .cfg(|c| {
            c.boot_device = f.target.path.clone();
            c.control_plane_count = 1;
            c.skip_installation_disk_cleanup = true;
        })
        .installer_args(&["--image-url", &url, "--sha256", &f.set.gz.sha256])
        .commands(runner)
        .clock(Arc::new(SystemClock))
        .intervals(Intervals {
            poll: Duration::from_millis(50),
            slow_poll: Duration::from_millis(200),
        })
        .early_write(early_write)
        .build();
    let done = openshift.join(".bootkube.done");
    let start = Instant::now();
    let bootkube = std::thread::spawn(move || {
        std::thread::sleep(SIMULATED_BOOTSTRAP);
        std::fs::write(done, "").unwrap();
    });
    run_installer(&flow).expect("single-node install");
    let took = start.elapsed();
    bootkube.join().unwrap();
    took
}

fn single_node(c: &mut Criterion) {
    let f = fixture();
    let mut g = c.benchmark_group("single-node");
    g.sample_size(10).warm_up_time(Duration::from_millis(1));
    for (id, early) in [("early-write", true), ("write-after-bootkube", false)] {
        g.bench_function(id, |b| {
            b.iter_custom(|n| (0..n).map(|_| single_node_install(f, early)).sum())
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    let _ = FIXTURE_SIZE.set(fixture().set.raw.size);
    stage_limits(c);
    end_to_end(c);
    single_node(c);
}

criterion_group!(group, benches);

fn main() {
    loopdev::run_bench("write-image", group, report, || {
        FIXTURE.get().map(|f| &f.target)
    });
}
