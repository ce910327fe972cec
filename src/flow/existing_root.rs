//! `--installer-args` for `--coreos-image`: what the ostree deploy onto the running root takes
//! from them (kernel arguments, `--copy-network`), and what it has no use for.
//!
//! They are parsed as for a disk write (an unknown option is still refused), but the disk
//! writer's preflight does not run: there is no disk image to find, and a host booted from its
//! disk has no live image. The options that only a disk write uses are ignored with a warning,
//! as the Go installer ignores everything but kernel arguments and `--copy-network` here:
//! refusing them would fail installs the Go installer completes.

use std::path::Path;

use crate::host::existing_root::ExistingRoot;
use crate::write::args::DEFAULT_NETWORK_DIR;
use crate::write::WriterArgs;

/// The deploy of `image` with `ignition`, as `args` ask. `--network-dir` is honoured (it
/// names the keyfiles to copy, as it does for a disk write); Go always copies the default
/// directory.
pub(super) fn request<'a>(
    image: &'a str,
    args: &'a WriterArgs,
    ignition: &'a Path,
) -> ExistingRoot<'a> {
    let net = &args.kargs_network;
    ExistingRoot {
        image,
        ignition,
        append_kargs: &net.append_kargs,
        delete_kargs: &net.delete_kargs,
        network_dir: net.copy_network.then(|| {
            net.network_dir
                .as_deref()
                .unwrap_or(Path::new(DEFAULT_NETWORK_DIR))
        }),
    }
}

/// The options given in `args` that only a disk write uses.
pub(super) fn unused_options(args: &WriterArgs) -> Vec<&'static str> {
    let given = [
        ("--image-url", args.image_url.is_some()),
        ("--image-file", args.image_file.is_some()),
        ("--sha256", args.sha256.is_some()),
        ("--uncompressed-sha256", args.uncompressed_sha256.is_some()),
        ("--save-partlabel", !args.save_partlabel.is_empty()),
        ("--save-partindex", !args.save_partindex.is_empty()),
    ];
    given
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::parse_installer_args;

    /// `--installer-args` split at spaces, parsed.
    fn args(a: &str) -> WriterArgs {
        parse_installer_args(&a.split(' ').map(String::from).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn kargs_and_copy_network_reach_the_deploy() {
        let a = args("--append-karg nameserver=8.8.8.8 --delete-karg baz --append-karg=foo=bar -n");
        let r = request(
            "quay.io/x/y@sha256:1",
            &a,
            Path::new("/opt/install-dir/m.ign"),
        );
        assert_eq!(r.image, "quay.io/x/y@sha256:1");
        assert_eq!(r.ignition, Path::new("/opt/install-dir/m.ign"));
        assert_eq!(r.append_kargs, ["nameserver=8.8.8.8", "foo=bar"]);
        assert_eq!(r.delete_kargs, ["baz"]);
        assert_eq!(
            r.network_dir,
            Some(Path::new("/etc/NetworkManager/system-connections"))
        );
        assert!(unused_options(&a).is_empty());
        // No --copy-network, no keyfiles; --network-dir is honoured.
        let a = args("--network-dir /etc/custom");
        assert_eq!(request("i", &a, Path::new("x")).network_dir, None);
        let a = args("--copy-network --network-dir /etc/custom");
        assert_eq!(
            request("i", &a, Path::new("x")).network_dir,
            Some(Path::new("/etc/custom"))
        );
    }

    #[test]
    fn disk_only_options_are_named() {
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let disk = args(&format!(
            "--image-url http://mirror.example/rhcos.raw.gz --sha256 {a} \
             --save-partlabel data* --save-partindex 5-"
        ));
        assert_eq!(
            unused_options(&disk),
            [
                "--image-url",
                "--sha256",
                "--save-partlabel",
                "--save-partindex"
            ]
        );
        let file = args(&format!(
            "--image-file /tmp/x.raw --uncompressed-sha256 {b}"
        ));
        assert_eq!(
            unused_options(&file),
            ["--image-file", "--uncompressed-sha256"]
        );
    }
}
