//! The package's example programs for tests that run them as processes (e.g. the
//! `fake-assisted-service`): Cargo builds examples for `cargo test` only as compile checks and
//! gives tests no path to them (`CARGO_BIN_EXE_*` is for `[[bin]]` targets), so they are built
//! here, once per test process, with the test's own profile, target directory and target, and
//! located from Cargo's JSON messages.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The executable of the example `name`, built if it is not up to date (`cargo build
/// --example NAME --locked`; a no-op when nothing changed). Panics with Cargo's output when the
/// build fails.
pub(crate) fn example_binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let path = build_example(name);
    built.insert(name.to_string(), path.clone());
    path
}

fn build_example(name: &str) -> PathBuf {
    // The directory `tmp` of the target directory this test was built in.
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is inside the target directory")
        .to_path_buf();
    let (profile, triple) = test_build_layout(&target_dir);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "build",
            "--locked",
            "--message-format=json-render-diagnostics",
        ])
        .args(["--example", name, "--profile", &profile])
        .arg("--target-dir")
        .arg(&target_dir);
    if let Some(triple) = triple {
        cmd.args(["--target", &triple]);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|m| {
            m["reason"] == "compiler-artifact"
                && m["target"]["name"] == name
                && m["target"]["kind"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|k| k == "example"))
        })
        .and_then(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("{cmd:?} named no executable for the example {name}"))
}

/// The Cargo profile and the `--target` (if any) this test executable was built with, from
/// where it is: `<target dir>[/<triple>]/<profile dir>/deps/<test>`. The profile directory is
/// the profile's name, except `debug` (the `dev` and `test` profiles) and `release` (`release`
/// and `bench`).
fn test_build_layout(target_dir: &Path) -> (String, Option<String>) {
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable is in <profile dir>/deps");
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(other) => other.to_string(),
    };
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    let triple = profile_dir.parent().and_then(|above| {
        let in_target_dir = above.parent().is_some_and(|p| same(p, target_dir));
        (!same(above, target_dir) && in_target_dir)
            .then(|| above.file_name()?.to_str().map(str::to_string))
            .flatten()
    });
    (profile, triple)
}
