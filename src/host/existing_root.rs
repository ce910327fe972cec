//! Installing onto the running root instead of a disk (`--coreos-image`, Go
//! `Ops.WriteImageToExistingRoot`): the host already runs an ostree system booted from its
//! disk (e.g. a RHEL boot image), so the CoreOS container image is deployed next to it with
//! ostree into a new `install` stateroot, and Ignition is armed for its first boot. Nothing is
//! partitioned or streamed. Every step is a host command; the caller retries the whole
//! sequence.

use std::path::Path;

use anyhow::{Context, Result};

use super::commands::CommandRunner;

/// The ref `node-image-pull.service` leaves behind (see [`write_image_to_existing_root`]).
const NODE_IMAGE_REF_FILE: &str = "/ostree/repo/refs/heads/coreos/node-image";
const NODE_IMAGE_REF: &str = "coreos/node-image";
/// The new stateroot the image is deployed into (the running one is left alone).
const STATEROOT: &str = "install";
/// The pull secret (podman's and ostree's auth file).
const AUTHFILE: &str = "/root/.docker/config.json";
/// Ignition runs on the deployment's first boot, for bare metal.
const FIRSTBOOT_KARG: &str = "$ignition_firstboot";
const PLATFORM_KARG: &str = "ignition.platform.id=metal";
/// Where CoreOS' first boot finds the keyfiles and the Ignition config.
const FIRSTBOOT_NETWORK_DIR: &str = "/boot/coreos-firstboot-network";
const IGNITION_DIR: &str = "/boot/ignition";
const IGNITION_FIRSTBOOT_FLAG: &str = "/boot/ignition.firstboot";

/// What to deploy, and what `--installer-args` asked for that ostree can do.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExistingRoot<'a> {
    /// The `--coreos-image` container image.
    pub image: &'a str,
    /// The Ignition config (a path the host sees too: /opt is shared).
    pub ignition: &'a Path,
    pub append_kargs: &'a [String],
    pub delete_kargs: &'a [String],
    /// With `--copy-network`: the host directory whose keyfiles go to the first boot.
    pub network_dir: Option<&'a Path>,
}

/// Deploys `root.image` next to the running system (see the module documentation).
///
/// Directories are made with `mkdir -p` where Go uses `mkdir`: Go's retry of the whole
/// sequence then fails at once on the directory the failed attempt made; ours can succeed.
pub(crate) fn write_image_to_existing_root(
    runner: &dyn CommandRunner,
    root: &ExistingRoot<'_>,
) -> Result<()> {
    // Runs `program args…`, with `what` as the error's context.
    let step = |what: &str, program: &str, args: &[&str]| -> Result<()> {
        runner
            .run(program, args)
            .map(drop)
            .context(what.to_string())
    };
    let image = root.image;
    let sysroot = ["/sysroot", "-o", "remount,rw"];
    step("remounting /sysroot read-write", "mount", &sysroot)?;
    step(
        "remounting /boot read-write",
        "mount",
        &["/boot", "-o", "remount,rw"],
    )?;
    // node-image-pull.service may still hold its ref to the boot image's content; the deploy
    // below would then race it. Dropping the ref (and the stamp it checks) stops that.
    if runner.run("stat", &[NODE_IMAGE_REF_FILE]).is_ok() {
        let delete = ["refs", "--repo", "/ostree/repo", "--delete", NODE_IMAGE_REF];
        step("deleting the node-image ostree ref", "ostree", &delete)?;
        let stamp = ["/ostree/repo/tmp/node-image"];
        step("marking the node image as pulled", "touch", &stamp)?;
    }
    let init = ["admin", "stateroot-init", STATEROOT];
    step("creating the install stateroot", "ostree", &init)?;
    let deploy = format!(
        "container image deploy --stateroot {STATEROOT} --sysroot / --authfile {AUTHFILE} \
         --karg {FIRSTBOOT_KARG} --karg {PLATFORM_KARG} --image"
    );
    let mut deploy: Vec<&str> = deploy.split_whitespace().collect();
    deploy.push(image);
    step(&format!("deploying {image} with ostree"), "ostree", &deploy)?;
    let finalize = ["admin", "finalize-staged"];
    step("finalizing the staged deployment", "ostree", &finalize)?;
    if !root.append_kargs.is_empty() || !root.delete_kargs.is_empty() {
        let mut args = vec!["kargs", "--os", STATEROOT];
        for k in root.append_kargs {
            args.extend(["--append", k.as_str()]);
        }
        for k in root.delete_kargs {
            args.extend(["--delete-if-present", k.as_str()]);
        }
        step(
            "changing the kernel arguments of the deployment",
            "rpm-ostree",
            &args,
        )?;
        // rpm-ostree stages a new deployment for the change.
        step("finalizing the staged deployment", "ostree", &finalize)?;
    }
    if let Some(dir) = root.network_dir {
        // rsync copies the directory's contents only with the trailing slash.
        let source = format!("{}/", dir.display().to_string().trim_end_matches('/'));
        let target = format!("{FIRSTBOOT_NETWORK_DIR}/");
        let mkdir = ["-p", FIRSTBOOT_NETWORK_DIR];
        step("creating the first-boot network directory", "mkdir", &mkdir)?;
        let what = format!("copying the network keyfiles of {source}");
        step(&what, "rsync", &["-av", &source, &target])?;
    }
    let ignition = root.ignition.display().to_string();
    let target = format!("{IGNITION_DIR}/config.ign");
    step("creating /boot/ignition", "mkdir", &["-p", IGNITION_DIR])?;
    let what = format!("copying the Ignition config {ignition}");
    step(&what, "cp", &[&ignition, &target])?;
    let flag = [IGNITION_FIRSTBOOT_FLAG];
    step("arming Ignition for the first boot", "touch", &flag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::{ExecError, RecordingRunner};

    const IMAGE: &str = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:d21f2ed754a66d18b0a13a59434fa4dc36abd4320e78f3be83a3e29e21e3c2f9";

    fn root<'a>(
        append: &'a [String],
        delete: &'a [String],
        net: Option<&'a Path>,
    ) -> ExistingRoot<'a> {
        ExistingRoot {
            image: IMAGE,
            ignition: Path::new("/tmp/ignition.ign"),
            append_kargs: append,
            delete_kargs: delete,
            network_dir: net,
        }
    }

    /// Go's sequence (ops_test.go, `WriteImageToExistingRoot`), `mkdir -p` for `mkdir`.
    fn deploy() -> Vec<String> {
        vec![
            "ostree admin stateroot-init install".into(),
            format!(
                "ostree container image deploy --stateroot install --sysroot / --authfile \
                 /root/.docker/config.json --karg $ignition_firstboot --karg \
                 ignition.platform.id=metal --image {IMAGE}"
            ),
            "ostree admin finalize-staged".into(),
        ]
    }

    fn remount_and_stat() -> Vec<String> {
        vec![
            "mount /sysroot -o remount,rw".into(),
            "mount /boot -o remount,rw".into(),
            "stat /ostree/repo/refs/heads/coreos/node-image".into(),
        ]
    }

    fn ignition() -> Vec<String> {
        vec![
            "mkdir -p /boot/ignition".into(),
            "cp /tmp/ignition.ign /boot/ignition/config.ign".into(),
            "touch /boot/ignition.firstboot".into(),
        ]
    }

    fn absent_ref() -> RecordingRunner {
        let r = RecordingRunner::new();
        r.fail(
            "stat /ostree/repo/refs/heads/coreos/node-image",
            1,
            "stat: No such file",
        );
        r
    }

    #[test]
    fn the_node_image_ref_is_deleted_when_it_exists() {
        let delete_ref = vec![
            "ostree refs --repo /ostree/repo --delete coreos/node-image".into(),
            "touch /ostree/repo/tmp/node-image".into(),
        ];
        for (r, deleted) in [(absent_ref(), vec![]), (RecordingRunner::new(), delete_ref)] {
            write_image_to_existing_root(&r, &root(&[], &[], None)).unwrap();
            let expected = [remount_and_stat(), deleted, deploy(), ignition()];
            assert_eq!(r.lines(), expected.concat());
        }
    }

    /// The kargs through rpm-ostree then a second finalize; the network keyfiles after them,
    /// from the directory with or without its trailing slash.
    #[test]
    fn kernel_arguments_then_a_second_finalize_then_the_network_keyfiles() {
        let append = ["nameserver=8.8.8.8".to_string(), "foo=bar".to_string()];
        let delete = ["baz".to_string()];
        for dir in [
            "/etc/NetworkManager/system-connections",
            "/etc/NetworkManager/system-connections/",
        ] {
            let r = absent_ref();
            let net = Some(Path::new(dir));
            write_image_to_existing_root(&r, &root(&append, &delete, net)).unwrap();
            let expected = [
                remount_and_stat(),
                deploy(),
                vec![
                    "rpm-ostree kargs --os install --append nameserver=8.8.8.8 --append foo=bar \
                     --delete-if-present baz"
                        .into(),
                    "ostree admin finalize-staged".into(),
                    "mkdir -p /boot/coreos-firstboot-network".into(),
                    "rsync -av /etc/NetworkManager/system-connections/ /boot/coreos-firstboot-network/"
                        .into(),
                ],
                ignition(),
            ]
            .concat();
            assert_eq!(r.lines(), expected, "{dir}");
        }
        // Deletions alone are enough.
        let r = absent_ref();
        write_image_to_existing_root(&r, &root(&[], &delete, None)).unwrap();
        assert!(r
            .lines()
            .contains(&"rpm-ostree kargs --os install --delete-if-present baz".to_string()));
    }

    #[test]
    fn a_failed_step_stops_the_sequence_and_names_it() {
        let r = absent_ref();
        r.fail(&deploy()[1], 1, "error: Error: pulling image: unauthorized");
        let e = write_image_to_existing_root(&r, &root(&[], &[], None)).unwrap_err();
        assert!(e.downcast_ref::<ExecError>().is_some());
        let text = format!("{e:#}");
        assert!(
            text.starts_with(&format!(
                "deploying {IMAGE} with ostree: failed executing ostree [container image deploy"
            )),
            "{text}"
        );
        assert!(
            text.ends_with("LastOutput \"Error: pulling image: unauthorized\""),
            "{text}"
        );
        assert_eq!(r.lines().last().unwrap(), &deploy()[1]);
    }
}
