use super::*;
use crate::image::retry::Retries;
use clap::Parser;
use std::iter::once;

/// `write-image <argv>` parsed, then resolved.
fn resolve_argv(argv: &[&str]) -> Result<WriteImageArgs> {
    let argv: Vec<String> = once("write-image")
        .chain(argv.iter().copied())
        .map(String::from)
        .collect();
    let cli = Cli::try_parse_from(once("assisted-installer".to_string()).chain(argv.clone()))?;
    let Command::WriteImage(a) = cli.command else {
        panic!("not write-image");
    };
    resolve(a, &argv)
}

/// A directory of config files (name, YAML).
fn files(named: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, yaml) in named {
        std::fs::write(dir.path().join(name), yaml).unwrap();
    }
    dir
}

fn path(dir: &tempfile::TempDir, name: &str) -> String {
    dir.path().join(name).display().to_string()
}

#[test]
fn later_files_override_earlier_ones_the_command_line_all_and_lists_accumulate() {
    let d = files(&[
        (
            "1.yaml",
            "dest-device: /dev/vda\nfetch-retries: 1\nappend-karg: [a, b]\nplatform: qemu\n",
        ),
        (
            "2.yaml",
            "fetch-retries: 2\nappend-karg: c\ninsecure: true\n",
        ),
    ]);
    let (f1, f2) = (path(&d, "1.yaml"), path(&d, "2.yaml"));
    let a = resolve_argv(&["-c", &f1, "--config-file", &f2]).unwrap();
    assert_eq!(a.device, Some("/dev/vda".into()));
    assert_eq!(a.fetch_retries, Retries::Count(2));
    assert_eq!(a.writer.kargs_network.append_kargs, ["a", "b", "c"]);
    assert_eq!(a.post.platform.as_deref(), Some("qemu"));
    assert!(a.insecure);
    // The other order: the first file's single values win.
    let a = resolve_argv(&["-c", &f2, "-c", &f1]).unwrap();
    assert_eq!(a.fetch_retries, Retries::Count(1));
    assert_eq!(a.writer.kargs_network.append_kargs, ["c", "a", "b"]);
    // The command line, before or after -c, overrides them all; its lists come last.
    let a = resolve_argv(&[
        "--append-karg",
        "e",
        "--fetch-retries",
        "3",
        "-c",
        &f1,
        "-c",
        &f2,
        "-p",
        "metal",
        "--append-karg=f",
        "/dev/vda",
    ])
    .unwrap();
    assert_eq!(a.fetch_retries, Retries::Count(3));
    assert_eq!(a.post.platform.as_deref(), Some("metal"));
    assert_eq!(
        a.writer.kargs_network.append_kargs,
        ["a", "b", "c", "e", "f"]
    );
    // Without any config file, nothing changes, and the command line stays strict.
    assert!(resolve_argv(&["--fetch-retries", "1", "--fetch-retries", "2", "/d"]).is_err());
}

#[test]
fn kernel_arguments_override_config_files_and_the_command_line_overrides_both() {
    let d = files(&[
        (
            "20-b.yaml",
            "platform: gcp\nappend-karg: [b]\nfetch-retries: 7\n",
        ),
        (
            "10-a.yaml",
            "dest-device: /dev/vda\nplatform: qemu\nappend-karg: [a]\n",
        ),
        (
            "cmdline",
            "ro coreos.inst.platform_id=metal rd.dasd=0.0.0100 ip=dhcp",
        ),
        ("c.yaml", "append-karg: [c]\nfetch-retries: 9\n"),
    ]);
    std::fs::create_dir(d.path().join("30-dir")).unwrap();
    let dir = d.path().join("installer.d");
    std::fs::create_dir(&dir).unwrap();
    for f in ["10-a.yaml", "20-b.yaml"] {
        std::fs::rename(d.path().join(f), dir.join(f)).unwrap();
    }
    let (dir, cmdline) = (dir.display().to_string(), path(&d, "cmdline"));
    let base = [
        "--from-kernel-args",
        "--cmdline",
        &cmdline,
        "--installer-config-dir",
        &dir,
    ];
    let a = resolve_argv(&base).unwrap();
    assert_eq!(a.device, Some("/dev/vda".into()));
    assert_eq!(a.post.platform.as_deref(), Some("metal"));
    assert_eq!(
        a.writer.kargs_network.append_kargs,
        ["a", "b", "rd.dasd=0.0.0100"]
    );
    assert_eq!(
        a.post.firstboot_args.as_deref(),
        Some("rd.neednet=1 ip=dhcp")
    );
    assert_eq!(
        a.fetch_retries,
        Retries::Count(7),
        "a config file's count wins over infinite"
    );
    let c = path(&d, "c.yaml");
    let mut argv = base.to_vec();
    argv.extend(["-c", &c, "-p", "aws", "--append-karg", "d"]);
    let a = resolve_argv(&argv).unwrap();
    assert_eq!(a.post.platform.as_deref(), Some("aws"));
    assert_eq!(
        a.fetch_retries,
        Retries::Count(9),
        "-c files come after installer.d"
    );
    assert_eq!(
        a.writer.kargs_network.append_kargs,
        ["a", "b", "c", "rd.dasd=0.0.0100", "d"]
    );
    // No installer.d: the live service's infinite retries, the device from the kargs.
    std::fs::write(&cmdline, "coreos.inst.install_dev=sdb").unwrap();
    let none = path(&d, "none");
    let a = resolve_argv(&[
        "--from-kernel-args",
        "--cmdline",
        &cmdline,
        "--installer-config-dir",
        &none,
    ])
    .unwrap();
    assert_eq!(a.fetch_retries, Retries::Infinite);
    assert_eq!(a.device, Some("/dev/sdb".into()));
}

#[test]
fn one_target_device_from_anywhere() {
    let d = files(&[
        ("a.yaml", "dest-device: /dev/vda\n"),
        ("b.yaml", "dest-device: /dev/vdb\n"),
        ("none.yaml", "platform: metal\n"),
        ("cmdline", "coreos.inst.install_dev=/dev/vda"),
    ]);
    let (a, b, none, cmdline) = (
        path(&d, "a.yaml"),
        path(&d, "b.yaml"),
        path(&d, "none.yaml"),
        path(&d, "cmdline"),
    );
    let got = resolve_argv(&[
        "-c",
        &a,
        "--from-kernel-args",
        "--cmdline",
        &cmdline,
        "--installer-config-dir",
        &path(&d, "no-dir"),
    ]);
    assert_eq!(
        got.unwrap().device,
        Some("/dev/vda".into()),
        "the same device twice is one"
    );
    let (missing, missing_yaml) = (path(&d, "missing"), path(&d, "missing.yaml"));
    for (argv, want) in [
        (&["-c", &a, "-c", &b][..], "two target devices: /dev/vda"),
        (&["-c", &a, "-c", &b], "/dev/vdb"),
        (&["-c", &a, "/dev/sdc"], "(the command line)"),
        (&["-c", &none], "no target device"),
        // DEVICE is required without -c or --from-kernel-args.
        (&[], "DEVICE"),
        (
            &["--from-kernel-args", "--cmdline", &missing, "/d"],
            "reading the kernel command line",
        ),
        (&["-c", &missing_yaml], "reading the config file"),
        // --cmdline needs --from-kernel-args.
        (&["--cmdline", &cmdline, "/d"], "--from-kernel-args"),
    ] {
        let e = resolve_argv(argv).unwrap_err().to_string();
        assert!(e.contains(want), "{argv:?}: {e}");
    }
}

#[test]
fn conflicts_across_sources_are_refused() {
    let d = files(&[("u.yaml", "image-url: https://m/i.raw.xz\ninsecure: true\n")]);
    let e = resolve_argv(&["-c", &path(&d, "u.yaml"), "-f", "/i.raw", "/d"]).unwrap_err();
    let e = e.to_string();
    assert!(
        e.starts_with(
            "with the options of the config files and kernel arguments: the argument '--image-url"
        ),
        "{e}"
    );
}

#[test]
fn the_logged_line_has_no_sources_and_no_secrets() {
    let argv: Vec<String> = [
        "-c",
        "a.yaml",
        "-cb.yaml",
        "--config-file=c.yaml",
        "--from-kernel-args",
        "--cmdline",
        "/x",
        "-I",
        "https://u:pw@h/c.ign?t=tok",
        "-v",
        "--firstboot-args",
        "ip=dhcp rd.neednet=1",
    ]
    .map(String::from)
    .to_vec();
    let mut line = without_sources(&argv);
    line.insert(0, "--image-url=http://h/i.xz?sig=tok".into());
    assert_eq!(
        for_log(&line),
        "--image-url=http://h/i.xz -I https://h/c.ign -v --firstboot-args 'ip=dhcp rd.neednet=1'"
    );
}

#[test]
fn ignition_url_rules() {
    let parse = |argv: &[&str]| resolve_argv(argv).and_then(|a| a.plan());
    const H: &str = "sha256-ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    assert!(parse(&["-I", "https://h/c.ign", "/d"]).is_ok());
    let e = parse(&["-I", "http://h/c.ign", "/d"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--insecure-ignition"), "{e}");
    assert!(parse(&["-I", "http://h/c.ign", "--insecure-ignition", "/d"]).is_ok());
    assert!(parse(&[
        "--ignition-url",
        "http://h/c.ign",
        "--ignition-hash",
        H,
        "/d"
    ])
    .is_ok());
    let e = parse(&["-I", "https://h/c.ign", "-i", "/c.ign", "/d"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot be used with"), "{e}");
    let e = parse(&["--ignition-hash", H, "/d"])
        .unwrap_err()
        .to_string();
    assert!(e.contains("required"), "{e}");
    // The short forms of the image and platform options.
    let a = resolve_argv(&["-u", "http://m/i.xz", "-p", "metal", "/d"]).unwrap();
    assert_eq!(a.writer.image_url.as_deref(), Some("http://m/i.xz"));
    assert_eq!(a.post.platform.as_deref(), Some("metal"));
    assert_eq!(
        resolve_argv(&["-f", "/i", "/d"]).unwrap().writer.image_file,
        Some("/i".into())
    );
}

/// The stream options work in config files and kernel arguments like every other option:
/// nothing in the expansion knows them by name.
#[test]
fn stream_options_come_from_config_files_and_kernel_arguments_too() {
    let d = files(&[
        (
            "s.yaml",
            "dest-device: /dev/vda\nstream: testing\narchitecture: aarch64\n\
             stream-base-url: https://mirror.example/streams/\nsigning-key: [/k1.asc, /k2.gpg]\n",
        ),
        (
            "cmdline",
            "coreos.inst.stream=next coreos.inst.install_dev=/dev/vda",
        ),
    ]);
    let (s, cmdline) = (path(&d, "s.yaml"), path(&d, "cmdline"));
    let a = resolve_argv(&["-c", &s]).unwrap();
    assert_eq!(a.stream.as_deref(), Some("testing"));
    assert_eq!(a.architecture.as_deref(), Some("aarch64"));
    assert_eq!(
        a.stream_base_url.as_deref(),
        Some("https://mirror.example/streams/")
    );
    assert_eq!(a.signing_key, [PathBuf::from("/k1.asc"), "/k2.gpg".into()]);
    // The kernel argument overrides the file; the command line overrides both.
    let k = ["--from-kernel-args", "--cmdline", &cmdline, "-c", &s];
    assert_eq!(resolve_argv(&k).unwrap().stream.as_deref(), Some("next"));
    let mut argv = k.to_vec();
    argv.extend(["-s", "stable"]);
    assert_eq!(
        resolve_argv(&argv).unwrap().stream.as_deref(),
        Some("stable")
    );
    // A stream from the kernel arguments still conflicts with an image URL from a file.
    std::fs::write(&s, "image-url: https://h/i.raw.xz\n").unwrap();
    let e = resolve_argv(&k).unwrap_err().to_string();
    assert!(e.contains("--stream") && e.contains("--image-url"), "{e}");
}
