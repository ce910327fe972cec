//! Build CoreOS-like metal test images (raw + gz/xz/zst) and print their paths, sizes and hashes.
//!
//! ```text
//! cargo run --example make-test-image -- [--sector-size 512|4096] [--bench] [--out DIR]
//! ```
//!
//! Without `--out` the images come from (or are added to) the shared test-data cache
//! (`$AI_TESTDATA_DIR`, else `$CARGO_TARGET_DIR/testdata-cache`, else `target/testdata-cache`).

#[path = "coreos_image.rs"]
mod coreos_image;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use coreos_image::{cache_root, cached_image_set, generate_image_set, ImageFile, ImageSpec};

const USAGE: &str = "usage: make-test-image [--sector-size 512|4096] [--bench] [--out DIR]

  --sector-size N   logical sector size of the GPT (default 512)
  --bench           build the large (>= 1 GiB) bench image instead of the small test image
  --root-mib N      override the root partition size in MiB
  --seed N          override the content seed (default 1)
  --out DIR         write into DIR instead of the shared cache (always regenerates)";

struct Args {
    sector_size: u64,
    bench: bool,
    root_mib: Option<u64>,
    seed: Option<u64>,
    out: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        sector_size: 512,
        bench: false,
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
                args.sector_size = v;
            }
            "--bench" => args.bench = true,
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

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut spec = if args.bench {
        ImageSpec::bench(args.sector_size)
    } else {
        ImageSpec::test(args.sector_size)
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
