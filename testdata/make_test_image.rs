//! Build CoreOS-like metal test images (raw + gz/xz/zst) and print their paths, sizes and hashes;
//! or, with `--live`, the live-system fixtures (raw image, osmet file packed by the real
//! coreos-installer, sysroot tree; needs root and coreos-installer 0.27.0).
//!
//! ```text
//! cargo run --example make-test-image -- [--sector-size 512|4096] [--bench] [--out DIR]
//! cargo run --example make-test-image -- --live [--sector-size 512|4096] [--bench] [--out DIR]
//! ```
//!
//! Without `--out` the images come from (or are added to) the shared test-data cache
//! (`$AI_TESTDATA_DIR`, else `$CARGO_TARGET_DIR/testdata-cache`, else `target/testdata-cache`).

#[path = "coreos_image.rs"]
mod coreos_image;
#[path = "live_fixture.rs"]
mod live_fixture;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use coreos_image::{cache_root, cached_image_set, generate_image_set, ImageFile, ImageSpec};
use live_fixture::{
    cached_live_fixture, coreos_installer, generate_live_fixture, live_cache_name, LiveFixture,
};

const USAGE: &str = "usage: make-test-image [--live] [--sector-size 512|4096] [--bench] [--out DIR]

  --sector-size N   logical sector size of the GPT (default 512; with --live, both)
  --bench           build the large (>= 1 GiB) bench image instead of the small test image
  --live            build the live-system fixture (XFS root, osmet file packed by
                    coreos-installer 0.27.0, sysroot tree) instead; needs root
  --root-mib N      override the root partition size in MiB (with --live: only with --out)
  --seed N          override the content seed (default 1; with --live: only with --out)
  --out DIR         write into DIR instead of the shared cache (always regenerates)";

struct Args {
    sector_size: Option<u64>,
    bench: bool,
    live: bool,
    root_mib: Option<u64>,
    seed: Option<u64>,
    out: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        sector_size: None,
        bench: false,
        live: false,
        root_mib: None,
        seed: None,
        out: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{what} needs a value"))
        };
        let number = |s: String, what: &str| -> Result<u64, String> {
            s.parse::<u64>()
                .map_err(|_| format!("invalid {what}: {s:?}"))
        };
        match name.as_str() {
            "--sector-size" => {
                let v = number(value("--sector-size")?, "sector size")?;
                if v != 512 && v != 4096 {
                    return Err(format!("sector size must be 512 or 4096, not {v}"));
                }
                args.sector_size = Some(v);
            }
            "--bench" => args.bench = true,
            "--live" => args.live = true,
            "--root-mib" => args.root_mib = Some(number(value("--root-mib")?, "root size")?),
            "--seed" => args.seed = Some(number(value("--seed")?, "seed")?),
            "--out" => args.out = Some(PathBuf::from(value("--out")?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.live && args.out.is_none() && (args.root_mib.is_some() || args.seed.is_some()) {
        return Err(
            "--live takes --root-mib and --seed only with --out (the cache holds the \
                    standard fixtures)"
                .to_string(),
        );
    }
    Ok(args)
}

fn print_file(label: &str, f: &ImageFile, raw_size: u64) {
    // Ignore write errors (e.g. a closed pipe when piped into `head`).
    let _ = writeln!(
        std::io::stdout().lock(),
        "{label:<4} {}\n     size {} bytes ({:.1} MiB, {:.1}% of raw)\n     sha256 {}",
        f.path.display(),
        f.size,
        f.size as f64 / (1u64 << 20) as f64,
        100.0 * f.size as f64 / raw_size as f64,
        f.sha256
    );
}

fn print_live(fx: &LiveFixture, elapsed: std::time::Duration) {
    let (kernel, initramfs) = fx.boot_objects();
    let osmet_size = std::fs::metadata(&fx.osmet).map(|m| m.len()).unwrap_or(0);
    let _ = writeln!(
        std::io::stdout().lock(),
        "live sector_size={} ({elapsed:.1?})\n\
         raw     {}\n        size {} bytes ({:.1} MiB)\n        sha256 {}\n\
         osmet   {}\n        size {} bytes ({:.1} MiB)\n        description {:?}\n\
         sysroot {}\n\
         kernel  /boot/{} = object {}\n\
         initrd  /boot/{} = object {}",
        fx.sector_size,
        fx.raw.display(),
        fx.raw_size,
        fx.raw_size as f64 / (1u64 << 20) as f64,
        fx.raw_sha256,
        fx.osmet.display(),
        osmet_size,
        osmet_size as f64 / (1u64 << 20) as f64,
        fx.description,
        fx.sysroot.display(),
        fx.kernel_boot_path(),
        kernel,
        fx.initramfs_boot_path(),
        initramfs,
    );
}

fn live_main(args: &Args) -> ExitCode {
    let sizes = match args.sector_size {
        Some(ss) => vec![ss],
        None => vec![512, 4096],
    };
    for ss in sizes {
        let started = Instant::now();
        let result = match &args.out {
            Some(dir) => {
                let mut spec = ImageSpec::live(ss, args.bench);
                if let Some(r) = args.root_mib {
                    spec.root_mib = r;
                }
                if let Some(s) = args.seed {
                    spec.seed = s;
                }
                let dir = dir.join(live_cache_name(&spec));
                let _ = std::fs::remove_dir_all(&dir);
                coreos_installer()
                    .and_then(|installer| generate_live_fixture(&spec, &installer, &dir))
            }
            None => cached_live_fixture(ss, args.bench),
        };
        match result {
            Ok(fx) => print_live(&fx, started.elapsed()),
            Err(e) => {
                eprintln!("error: {e:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.live {
        return live_main(&args);
    }
    let sector_size = args.sector_size.unwrap_or(512);
    let mut spec = if args.bench {
        ImageSpec::bench(sector_size)
    } else {
        ImageSpec::test(sector_size)
    };
    if let Some(r) = args.root_mib {
        spec.root_mib = r;
    }
    if let Some(s) = args.seed {
        spec.seed = s;
    }
    let started = Instant::now();
    let result = match &args.out {
        Some(dir) => generate_image_set(&spec, dir),
        None => {
            let _ = writeln!(
                std::io::stdout().lock(),
                "cache {}",
                cache_root().join(spec.cache_name()).display()
            );
            cached_image_set(&spec)
        }
    };
    let set = match result {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let _ = writeln!(
        std::io::stdout().lock(),
        "spec sector_size={} root_mib={} seed={} ({:.1?})",
        spec.sector_size,
        spec.root_mib,
        spec.seed,
        started.elapsed()
    );
    let raw_size = set.raw.size;
    print_file("raw", &set.raw, raw_size);
    print_file("gz", &set.gz, raw_size);
    print_file("xz", &set.xz, raw_size);
    print_file("zst", &set.zst, raw_size);
    ExitCode::SUCCESS
}
