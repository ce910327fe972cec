//! The package's example programs for tests that run them as processes (e.g. the
//! `fake-assisted-service`): Cargo gives tests no path to examples (`CARGO_BIN_EXE_*` is for
//! `[[bin]]` targets), so they are built here, once per test process, into the test's own
//! target directory with its profile, and located from Cargo's JSON messages.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The executable of the example `name`, built if it is not up to date (a no-op when nothing
/// changed). Panics with Cargo's output when the build fails.
pub(crate) fn example_binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Mutex::default).lock().unwrap();
    built
        .entry(name.to_string())
        .or_insert_with(|| build_example(name))
        .clone()
}

fn build_example(name: &str) -> PathBuf {
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap();
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    };
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "build",
            "--locked",
            "--message-format=json-render-diagnostics",
        ])
        .args(["--example", name, "--profile", profile, "--target-dir"])
        .arg(target_dir);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{cmd:?} failed:\n{stderr}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .and_then(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("{cmd:?} named no executable for the example {name}"))
}
