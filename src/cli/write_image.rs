//! `assisted-installer write-image`: options, and their translation into a checked plan.

use anyhow::{Context, Result};
use clap::builder::TypedValueParser;
use clap::Args;
use std::path::PathBuf;

use super::postinstall::PostInstallArgs;
use crate::image::osmet::MAX_READERS;
use crate::image::retry::Retries;
use crate::image::stream::{this_architecture, StreamSpec, DEFAULT_BASE_URL};
use crate::image::Origin;
use crate::write::{PlanSettings, Unverified, WritePlan, WriterArgs};

#[derive(Args, Debug, Clone)]
pub struct WriteImageArgs {
    /// The image, its digests, the partitions to keep, kernel arguments and keyfiles (what
    /// `--installer-args` may carry too).
    #[command(flatten)]
    pub writer: WriterArgs,
    /// Install the live system's own image (the default without --image-url or --image-file;
    /// accepted for coreos-installer compatibility: nothing is ever downloaded without a URL).
    #[arg(long, conflicts_with = "image")]
    pub offline: bool,
    /// Where the live image's osmet files are [default: /run/coreos-installer/osmet, else the
    /// host's, through /proc/1/root].
    #[arg(long, value_name = "DIR", conflicts_with = "image")]
    pub osmet_dir: Option<PathBuf>,
    /// The OSTree repository holding the live image's objects [default: /sysroot/ostree/repo,
    /// else the host's, through /proc/1/root].
    #[arg(long, value_name = "DIR", conflicts_with = "image")]
    pub ostree_repo: Option<PathBuf>,
    /// Write an image that has no signature and no digest to check (otherwise refused). A
    /// signature that is present is always checked: a bad one is refused even with this.
    #[arg(long)]
    pub insecure: bool,
    /// Install the latest image of this CoreOS stream (stable, testing, next, …): the metal
    /// image for --architecture and the disk's sector size, checked against the stream's
    /// signature (and its digests when the metadata came over https).
    #[arg(short = 's', long, value_name = "NAME", conflicts_with_all = STREAM_CONFLICTS,
          value_parser = stream_name())]
    pub stream: Option<String>,
    /// Where the stream metadata is (<URL>/<NAME>.json) [default:
    /// https://builds.coreos.fedoraproject.org/streams/].
    #[arg(long, value_name = "URL")]
    pub stream_base_url: Option<String>,
    /// The architecture whose stream image to install [default: this machine's: x86_64,
    /// aarch64, s390x or ppc64le]. Only streams use it (accepted and ignored otherwise, as by
    /// coreos-installer, so one config file serves both).
    #[arg(short = 'a', long, value_name = "ARCH")]
    pub architecture: Option<String>,
    /// A public key (armored or binary OpenPGP) trusted for image signatures besides the
    /// publishers' built-in release keys (repeatable).
    #[arg(long, value_name = "FILE")]
    pub signing_key: Vec<PathBuf>,
    /// Extra CA certificates (PEM) to trust for https, on top of the system roots.
    #[arg(long, value_name = "PEM")]
    pub cacert: Option<PathBuf>,
    /// Retries for a failed or broken-off download (exponential backoff from 1 s, capped at 60 s), or "infinite".
    #[arg(long, value_name = "N|infinite", default_value = "5")]
    pub fetch_retries: Retries,
    /// On failure, leave the disk as the failed write left it instead of resetting it to an empty partition table.
    #[arg(long)]
    pub preserve_on_error: bool,
    /// After the write, read the image back from the disk (O_DIRECT) and check its SHA-256
    /// against the stream's; a mismatch fails the write, naming the first differing MiB.
    #[arg(long)]
    pub verify: bool,
    /// Write the image's zeros as data instead of having the disk zero them (BLKZEROOUT, or
    /// holes punched in an image file): for benches, and disks whose zeroing is slow.
    #[arg(long)]
    pub write_zeros: bool,
    /// After the write, load the installed system (the written /boot's boot entry, kernel and
    /// initramfs, with the first-boot arguments) for a kexec reboot and say how to start it;
    /// if it cannot be loaded, a warning says why and the write still succeeds.
    #[arg(long)]
    pub kexec: bool,
    #[command(flatten)]
    pub post: PostInstallArgs,
    /// Threads for xz decoding (multi-block images); default: one per CPU.
    #[arg(long, value_name = "N", hide_short_help = true)]
    pub xz_threads: Option<u32>,
    /// Threads reading the live image's OSTree objects, 1 to 64 [default: one per core, up to
    /// 8, when the squashfs image under them is decoded here; 8 through the mounted
    /// filesystem, where they also wait on the media].
    #[arg(long, value_name = "N", hide_short_help = true, conflicts_with = "image",
          value_parser = clap::value_parser!(u16).range(1..=MAX_READERS as i64))]
    pub read_threads: Option<u16>,
    /// Read the live image's OSTree objects through the mounted filesystem even when it is a
    /// squashfs (by default its image is decoded here, on every reader thread): for benches, and
    /// a way around a squashfs this program cannot decode.
    #[arg(long, hide_short_help = true, conflicts_with = "image")]
    pub read_through_mount: bool,
    /// YAML file of options: keys are the long option names, dest-device is DEVICE
    /// (repeatable; later files override earlier ones, the command line overrides them all).
    #[arg(short = 'c', long, value_name = "FILE")]
    pub config_file: Vec<PathBuf>,
    /// Install as the live system's coreos.inst.* kernel arguments say, with the config files
    /// of /etc/coreos/installer.d, as coreos-installer's live install service does.
    #[arg(long)]
    pub from_kernel_args: bool,
    /// The kernel command line for --from-kernel-args [default: /proc/cmdline].
    #[arg(long, value_name = "FILE", requires = "from_kernel_args")]
    pub cmdline: Option<PathBuf>,
    /// Where --from-kernel-args takes config files from [default: /etc/coreos/installer.d].
    #[arg(long, value_name = "DIR", requires = "from_kernel_args", hide = true)]
    pub installer_config_dir: Option<PathBuf>,
    /// Target: a block device, or an existing regular file used as a disk image.
    #[arg(value_name = "DEVICE", required_unless_present_any = ["config_file", "from_kernel_args"])]
    pub device: Option<PathBuf>,
}

impl WriteImageArgs {
    pub(crate) fn plan(&self) -> Result<WritePlan> {
        let settings = PlanSettings {
            fetch_retries: self.fetch_retries,
            unverified: if self.insecure {
                Unverified::Allow
            } else {
                Unverified::Refuse
            },
            // Run directly on a host: local paths (else /proc/1/root for the live image).
            host_root: None,
            cacert: self.cacert.clone(),
            // As coreos-installer: HTTP_PROXY, HTTPS_PROXY, NO_PROXY (and lowercase).
            proxy: None,
            osmet_dir: self.osmet_dir.clone(),
            ostree_repo: self.ostree_repo.clone(),
            preserve_on_error: self.preserve_on_error,
            xz_threads: self.xz_threads,
            verify: self.verify,
            zeroing: !self.write_zeros,
            read_threads: self.read_threads.map(usize::from),
            read_through_mount: self.read_through_mount,
            signing_keys: self.signing_key.clone(),
        };
        let device = self.device.as_deref().context(
            "no target device: give DEVICE, dest-device in a config file, or coreos.inst.install_dev",
        )?;
        let mut plan = WritePlan::build(device, &self.writer, self.post.read()?, &settings)?;
        match &self.stream {
            Some(name) => {
                plan.origin = Origin::Stream(StreamSpec {
                    name: name.clone(),
                    base_url: (self.stream_base_url.as_deref())
                        .unwrap_or(DEFAULT_BASE_URL)
                        .to_string(),
                    arch: (self.architecture.as_deref())
                        .unwrap_or(this_architecture())
                        .to_string(),
                });
            }
            None if self.architecture.is_some() || self.stream_base_url.is_some() => {
                tracing::warn!("--architecture and --stream-base-url are ignored without --stream")
            }
            None => {}
        }
        Ok(plan)
    }
}

/// What `--stream` names the image instead of.
const STREAM_CONFLICTS: [&str; 9] = [
    "image_url",
    "image_file",
    "sha256",
    "uncompressed_sha256",
    "offline",
    "osmet_dir",
    "ostree_repo",
    "read_threads",
    "read_through_mount",
];

/// A stream name: a file name on the metadata server.
fn stream_name() -> impl TypedValueParser<Value = String> {
    clap::builder::NonEmptyStringValueParser::new().try_map(|v| {
        if v.contains(['/', '?', '#']) || v.starts_with('.') || v.starts_with('-') {
            Err(format!(
                "{v:?} is not a stream name (e.g. stable, testing, next)"
            ))
        } else {
            Ok(v)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::osmet::LiveImage;
    use crate::image::source::ImageLocation;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: WriteImageArgs,
    }

    /// The plan of `write-image <args>` (`args` split at spaces).
    fn parse(args: &str) -> Result<WritePlan> {
        let t = T::try_parse_from(std::iter::once("x").chain(args.split(' ')))?;
        t.a.plan()
    }

    const H: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    #[test]
    fn insecure_and_digests_reach_the_plan_and_the_decision_is_left_to_the_run() {
        // Whether an image without a digest is refused depends on its signature, looked for
        // when the write runs (see write::signed).
        let p = parse("--image-url http://x/i.gz /dev/sda").unwrap();
        assert_eq!(p.signing.unverified, Unverified::Refuse);
        let p = parse("--image-url http://x/i.gz --insecure /dev/sda").unwrap();
        assert_eq!(p.signing.unverified, Unverified::Allow);
        assert!(p.write.expected.is_empty());
        assert!(!p.write.verify, "--verify is off by default");
        let p = parse(&format!(
            "--image-file /i.gz --sha256 {H} --verify /dev/sda"
        ))
        .unwrap();
        assert!(p.write.verify);
        assert_eq!(p.origin, Origin::Given(ImageLocation::File("/i.gz".into())));
        assert_eq!(p.write.expected.compressed.unwrap().to_string(), H);
    }

    #[test]
    fn a_stream_replaces_the_image_options() {
        let p = parse("-s next -a s390x /d").unwrap();
        let spec = StreamSpec {
            name: "next".into(),
            base_url: DEFAULT_BASE_URL.into(),
            arch: "s390x".into(),
        };
        assert_eq!(p.origin, Origin::Stream(spec));
        let p = parse("--stream stable --stream-base-url http://127.0.0.1:9/s /d").unwrap();
        let Origin::Stream(s) = p.origin else {
            panic!("{:?}", p.origin)
        };
        assert_eq!(s.url(), "http://127.0.0.1:9/s/stable.json");
        assert_eq!(s.arch, this_architecture());
        // Without a stream they are ignored, as by coreos-installer.
        let p = parse("-a s390x --stream-base-url http://x --image-file /f /d").unwrap();
        assert_eq!(p.origin, Origin::Given(ImageLocation::File("/f".into())));
    }

    #[test]
    fn at_most_one_source_and_the_live_image_by_default() {
        let p = parse("/dev/sda").unwrap();
        assert_eq!(p.origin, Origin::Live(LiveImage::default()));
        let p = parse("--offline --osmet-dir /o --ostree-repo /r /dev/sda").unwrap();
        assert_eq!(
            p.origin,
            Origin::Live(LiveImage {
                osmet_dir: Some("/o".into()),
                ostree_repo: Some("/r".into()),
                ..LiveImage::default()
            })
        );
    }

    /// A stream, the live image's options and another source exclude each other.
    #[test]
    fn conflicting_sources_are_refused() {
        for a in [
            "-s stable --image-url http://x /d",
            "-s stable --image-file /f /d",
            &format!("-s stable --sha256 {H} /d"),
            "-s stable --offline /d",
            "-s stable --read-threads 2 /d",
            "-s ../etc /d",
            "--offline --image-url http://x --insecure /d",
            "--osmet-dir /o --image-file /f --insecure /d",
            "--ostree-repo /r --image-url http://x --insecure /d",
            "--image-url http://x --image-file /y --insecure /dev/sda",
            "--read-threads 2 --image-url http://x --insecure /d",
            "--read-through-mount --image-file /f --insecure /d",
            "--image-url http://x --insecure --fetch-retries many /d",
        ] {
            assert!(parse(a).is_err(), "{a}");
        }
    }

    #[test]
    fn read_threads_from_1_to_64_reach_the_live_image() {
        for n in [1, 5, 64] {
            let p = parse(&format!("--read-threads {n} /d")).unwrap();
            let live = LiveImage {
                read_threads: Some(n),
                ..LiveImage::default()
            };
            assert_eq!(p.origin, Origin::Live(live), "--read-threads {n}");
        }
        for bad in ["0", "65", "many"] {
            let e = parse(&format!("--read-threads {bad} /d")).unwrap_err();
            assert!(e.to_string().contains("--read-threads"), "{bad}: {e}");
        }
        let e = parse("--read-threads 65 /d").unwrap_err().to_string();
        assert!(e.contains("1..=64"), "{e}");
        let p = parse("--read-through-mount /d").unwrap();
        let live = LiveImage {
            read_through_mount: true,
            ..LiveImage::default()
        };
        assert_eq!(p.origin, Origin::Live(live), "--read-through-mount");
    }

    #[test]
    fn retries_and_bad_digests() {
        let p = parse("--image-url http://x --insecure --fetch-retries infinite /d").unwrap();
        assert_eq!(p.http.retry.retries, Retries::Infinite);
        let e = parse("--image-url http://x --uncompressed-sha256 12 /d").unwrap_err();
        assert!(e.to_string().contains("--uncompressed-sha256"), "{e}");
    }

    /// No kexec load unless `--kexec`; zeros go to the kernel unless `--write-zeros`.
    #[test]
    fn kexec_and_write_zeros_are_off_by_default() {
        let t = |args: &[&str]| {
            T::try_parse_from([&["x"], args, &["/d"]].concat())
                .unwrap()
                .a
        };
        assert!(!t(&[]).kexec && t(&["--kexec"]).kexec);
        assert!(t(&[]).plan().unwrap().write.zeroing);
        assert!(!t(&["--write-zeros"]).plan().unwrap().write.zeroing);
    }
}
