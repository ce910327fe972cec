//! `--installer-args` for `--coreos-image`: what the ostree deploy onto the running root takes
//! from them (kernel arguments, `--copy-network`). They are parsed as for a disk write (an
//! unknown option is refused), but there is no image to find nor live image: the options only
//! a disk write uses are ignored with a warning, as Go ignores them (refusing them would fail
//! installs Go completes).

use std::path::Path;

use crate::host::existing_root::ExistingRoot;
use crate::write::args::DEFAULT_NETWORK_DIR;
use crate::write::WriterArgs;

/// The deploy of `image` with `ignition`, as `args` ask; `--network-dir` is honoured (Go always
/// copies the default directory).
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

    /// The keyfiles copied (the kargs and the default directory: flow_scenarios'
    /// coreos_image_deploys_onto_the_running_root_and_skips_the_disk_steps).
    #[test]
    fn network_dir_is_honoured_with_copy_network_only() {
        let dir = |a: &str| {
            let args = args(a);
            let dir = request("i", &args, Path::new("x")).network_dir;
            dir.map(Path::to_path_buf)
        };
        assert_eq!(dir("--network-dir /etc/custom"), None);
        let custom = dir("--copy-network --network-dir /etc/custom");
        assert_eq!(custom, Some("/etc/custom".into()));
        assert!(unused_options(&args("--append-karg a --delete-karg b -n")).is_empty());
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
