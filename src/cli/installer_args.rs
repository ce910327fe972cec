//! What `--installer-args` may ask of the in-process writer.
//!
//! The Go installer hands these coreos-installer arguments through unchanged. The service only
//! lets a few through (`--append-karg`, `--delete-karg`, `-n`, `--copy-network`,
//! `--network-dir`, `--save-partlabel`, `--save-partindex`, `--image-url`, `--image-file`); our
//! writer also takes `--sha256` and `--uncompressed-sha256`. Anything else is refused with an
//! error naming the argument, rather than silently ignored.

use std::path::PathBuf;

use anyhow::bail;

use crate::host::root::HostRoot;

/// The writer options asked for through `--installer-args`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterArgs {
    pub image_url: Option<String>,
    pub image_file: Option<PathBuf>,
    pub sha256: Option<String>,
    pub uncompressed_sha256: Option<String>,
    pub append_kargs: Vec<String>,
    pub delete_kargs: Vec<String>,
    /// `-n` / `--copy-network`.
    pub copy_network: bool,
    pub network_dir: Option<PathBuf>,
    pub save_partlabel: Vec<String>,
    pub save_partindex: Vec<String>,
    /// Where the host paths above (`--image-file`, `--network-dir` and its default) and the live
    /// image are: set by the flow, never parsed (the Go installer's coreos-installer reads them
    /// in the host's mount namespace). `None`: local paths.
    pub host_root: Option<HostRoot>,
}

#[derive(Clone, Copy)]
enum Opt {
    AppendKarg,
    DeleteKarg,
    CopyNetwork,
    NetworkDir,
    SavePartlabel,
    SavePartindex,
    ImageUrl,
    ImageFile,
    Sha256,
    UncompressedSha256,
}

const OPTIONS: &[(&str, Opt)] = &[
    ("--append-karg", Opt::AppendKarg),
    ("--delete-karg", Opt::DeleteKarg),
    ("-n", Opt::CopyNetwork),
    ("--copy-network", Opt::CopyNetwork),
    ("--network-dir", Opt::NetworkDir),
    ("--save-partlabel", Opt::SavePartlabel),
    ("--save-partindex", Opt::SavePartindex),
    ("--image-url", Opt::ImageUrl),
    ("--image-file", Opt::ImageFile),
    ("--sha256", Opt::Sha256),
    ("--uncompressed-sha256", Opt::UncompressedSha256),
];

fn supported_list() -> String {
    OPTIONS
        .iter()
        .map(|(name, opt)| match opt {
            Opt::CopyNetwork => name.to_string(),
            _ => format!("{name} <value>"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn set_once<T>(slot: &mut Option<T>, value: T, name: &str) -> anyhow::Result<()> {
    if slot.is_some() {
        bail!("--installer-args: {name:?} is given more than once");
    }
    *slot = Some(value);
    Ok(())
}

/// Parses the decoded `--installer-args` list. Values come as the next argument or as
/// `--option=value`.
pub fn parse_installer_args(args: &[String]) -> anyhow::Result<WriterArgs> {
    let mut out = WriterArgs::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let Some(&(name, opt)) = OPTIONS.iter().find(|(n, _)| *n == name) else {
            bail!(
                "--installer-args: {name:?} is not supported by the in-process writer; \
                 supported: {}",
                supported_list()
            );
        };
        if let Opt::CopyNetwork = opt {
            if inline.is_some() {
                bail!("--installer-args: {name:?} takes no value (got {arg:?})");
            }
            out.copy_network = true;
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => match args.get(i) {
                Some(v) if !v.starts_with("--") => {
                    i += 1;
                    v.clone()
                }
                _ => bail!("--installer-args: {name:?} needs a value"),
            },
        };
        if value.is_empty() {
            bail!("--installer-args: {name:?} needs a non-empty value");
        }
        match opt {
            Opt::AppendKarg => out.append_kargs.push(value),
            Opt::DeleteKarg => out.delete_kargs.push(value),
            Opt::SavePartlabel => out.save_partlabel.push(value),
            Opt::SavePartindex => out.save_partindex.push(value),
            Opt::NetworkDir => set_once(&mut out.network_dir, PathBuf::from(value), name)?,
            Opt::ImageUrl => set_once(&mut out.image_url, value, name)?,
            Opt::ImageFile => set_once(&mut out.image_file, PathBuf::from(value), name)?,
            Opt::Sha256 => set_once(&mut out.sha256, value, name)?,
            Opt::UncompressedSha256 => set_once(&mut out.uncompressed_sha256, value, name)?,
            Opt::CopyNetwork => unreachable!("handled above"),
        }
    }
    if out.image_url.is_some() && out.image_file.is_some() {
        bail!("--installer-args: \"--image-url\" and \"--image-file\" cannot be used together");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(a: &[&str]) -> anyhow::Result<WriterArgs> {
        parse_installer_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn empty() {
        assert_eq!(parse(&[]).unwrap(), WriterArgs::default());
    }

    #[test]
    fn all_options_separate_values() {
        let w = parse(&[
            "--append-karg",
            "ip=ens3:dhcp",
            "--append-karg",
            "nameserver=8.8.8.8",
            "--delete-karg",
            "console=ttyS0",
            "-n",
            "--network-dir",
            "/etc/nm",
            "--save-partlabel",
            "data*",
            "--save-partindex",
            "5-",
            "--image-url",
            "https://mirror/rhcos.raw.gz",
            "--sha256",
            "abc",
            "--uncompressed-sha256",
            "def",
        ])
        .unwrap();
        assert_eq!(
            w,
            WriterArgs {
                image_url: Some("https://mirror/rhcos.raw.gz".into()),
                image_file: None,
                sha256: Some("abc".into()),
                uncompressed_sha256: Some("def".into()),
                append_kargs: vec!["ip=ens3:dhcp".into(), "nameserver=8.8.8.8".into()],
                delete_kargs: vec!["console=ttyS0".into()],
                copy_network: true,
                network_dir: Some("/etc/nm".into()),
                save_partlabel: vec!["data*".into()],
                save_partindex: vec!["5-".into()],
                host_root: None,
            }
        );
    }

    #[test]
    fn equals_forms() {
        let w = parse(&[
            "--append-karg=ip=ens3:dhcp",
            "--delete-karg=quiet",
            "--copy-network",
            "--network-dir=/x",
            "--save-partlabel=a",
            "--save-partindex=1,2",
            "--image-file=/run/media/iso/image.raw.xz",
            "--sha256=00ff",
            "--uncompressed-sha256=11ee",
        ])
        .unwrap();
        assert_eq!(w.append_kargs, vec!["ip=ens3:dhcp"]);
        assert_eq!(w.delete_kargs, vec!["quiet"]);
        assert!(w.copy_network);
        assert_eq!(w.network_dir, Some(PathBuf::from("/x")));
        assert_eq!(w.save_partlabel, vec!["a"]);
        assert_eq!(w.save_partindex, vec!["1,2"]);
        assert_eq!(
            w.image_file,
            Some(PathBuf::from("/run/media/iso/image.raw.xz"))
        );
        assert_eq!(w.sha256.as_deref(), Some("00ff"));
        assert_eq!(w.uncompressed_sha256.as_deref(), Some("11ee"));
    }

    #[test]
    fn unsupported_argument_is_named() {
        let e = parse(&["-n", "--platform", "metal"])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "--installer-args: \"--platform\" is not supported by the in-process writer; \
                 supported: --append-karg <value>, --delete-karg <value>, -n, --copy-network"
            ),
            "{e}"
        );
        let e = parse(&["--platform=metal"]).unwrap_err().to_string();
        assert!(e.contains("\"--platform\" is not supported"), "{e}");
        let e = parse(&["/dev/sda"]).unwrap_err().to_string();
        assert!(e.contains("\"/dev/sda\" is not supported"), "{e}");
        let e = parse(&["-u", "https://x"]).unwrap_err().to_string();
        assert!(e.contains("\"-u\" is not supported"), "{e}");
    }

    #[test]
    fn missing_values() {
        for a in [
            vec!["--append-karg"],
            vec!["--append-karg", "--copy-network"],
            vec!["--image-url"],
            vec!["--network-dir", "--sha256", "x"],
            vec!["--delete-karg="],
        ] {
            let e = parse(&a).unwrap_err().to_string();
            assert!(e.contains("needs a"), "{a:?}: {e}");
        }
    }

    #[test]
    fn flags_without_values() {
        let e = parse(&["--copy-network=true"]).unwrap_err().to_string();
        assert!(e.contains("takes no value"), "{e}");
    }

    #[test]
    fn single_valued_options_once() {
        let e = parse(&["--image-url", "a", "--image-url", "b"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than once"), "{e}");
        let e = parse(&["--image-url", "a", "--image-file", "b"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be used together"), "{e}");
    }

    #[test]
    fn karg_value_may_start_with_single_dash() {
        let w = parse(&["--delete-karg", "-x"]).unwrap();
        assert_eq!(w.delete_kargs, vec!["-x"]);
    }
}
