//! The controller's process: `assisted-installer controller` and the binary run under the name
//! `assisted-installer-controller` (the Job's entrypoint), through Go's startup, with a clean
//! environment: outside a cluster they end at the Kubernetes client with exit 1. Dry mode's
//! pretend cluster is startup's, bootstrap's and the main sequence's unit tests (`dry_mode_*`).

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_assisted-installer");

/// The three required variables, and the token and log files moved into `dir`.
fn base_env(dir: &Path) -> Vec<(String, String)> {
    vec![
        ("CLUSTER_ID".into(), "c-1".into()),
        ("INVENTORY_URL".into(), "http://127.0.0.1:9".into()),
        ("OPENSHIFT_VERSION".into(), "4.17".into()),
        (
            "ASSISTED_CONTROLLER_TOKEN_FILE".into(),
            dir.join("token").display().to_string(),
        ),
        (
            "ASSISTED_CONTROLLER_LOG_FILE".into(),
            dir.join("controller_logs.log").display().to_string(),
        ),
    ]
}

fn run(program: &Path, args: &[&str], env: &[(String, String)]) -> Output {
    Command::new(program)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn without(env: &[(String, String)], key: &str) -> Vec<(String, String)> {
    env.iter().filter(|(k, _)| k != key).cloned().collect()
}

/// The controller is the binary named `assisted-installer-controller`, `controller`, or the
/// binary without any argument (the Job runs the image's entrypoint so), which then hints at the
/// installer's flags; with other arguments it is the installer. The environment fails before
/// the log file is opened (the unit test `each_step_fails_before_the_log_file_exists` has the
/// other startup failures).
#[test]
fn which_invocations_are_the_controller() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("assisted-installer-controller");
    std::os::unix::fs::symlink(BIN, &link).unwrap();
    let env = without(&base_env(dir.path()), "CLUSTER_ID");
    let missing = "required key CLUSTER_ID missing value";
    let hint = [
        missing,
        "no arguments were given",
        "pass the installer's flags",
    ];
    for (program, args, want) in [
        (link.as_path(), &[][..], &[missing][..]),
        (Path::new(BIN), &[], &hint),
        (Path::new(BIN), &["controller"], &[missing]),
    ] {
        let out = run(program, args, &env);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let err = text(&out.stderr);
        for want in want {
            assert!(err.contains(want), "{program:?} {args:?}: {err}");
        }
    }
    assert!(!dir.path().join("controller_logs.log").exists());
    // With any other argument, the same binary is the installer, which says something else.
    let err = text(&run(Path::new(BIN), &["--role", "master"], &env).stderr);
    assert!(!err.contains("required key"), "{err}");
}

#[test]
fn the_installer_help_names_the_controller_subcommand() {
    let out = run(Path::new(BIN), &["-help"], &[]);
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(
        all.contains("Subcommands: write-image, embed, controller"),
        "{all}"
    );
    let out = run(Path::new(BIN), &["controller", "--help"], &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stdout).contains("assisted-installer-controller"));
}

#[test]
fn outside_a_cluster_startup_fails_at_the_kubernetes_client_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "s3cr3t-from-file\n").unwrap();
    let log = dir.path().join("controller_logs.log");
    std::fs::write(&log, "an earlier run\n").unwrap();
    let mut env = base_env(dir.path());
    env.push(("PULL_SECRET_TOKEN".into(), "s3cr3t-from-env".into()));
    // Without arguments, as the Job runs it.
    let out = run(Path::new(BIN), &[], &env);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    // The Kubernetes client: no SNO kubeconfig and no in-cluster service account here.
    assert!(
        stderr.contains("creating the Kubernetes client"),
        "{stderr}"
    );
    assert!(
        stderr.contains("KUBERNETES_SERVICE_HOST is not set"),
        "{stderr}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.starts_with("an earlier run\n"), "appended: {logged}");
    let first = logged.lines().nth(1).unwrap();
    for text in [first, stdout.as_str()] {
        assert!(text.contains("CLUSTER_ID=c-1"), "{text}");
        assert!(text.contains("token=\"<masked>\""), "{text}");
    }
    for text in [&logged, &stdout, &stderr] {
        assert!(!text.contains("s3cr3t"), "the token leaked: {text}");
    }
    assert!(
        logged.contains("creating the Kubernetes client"),
        "{logged}"
    );
}
