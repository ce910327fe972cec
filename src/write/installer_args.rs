//! `--installer-args`: the coreos-installer arguments the assisted-service passes through (the
//! Go installer hands them to coreos-installer unchanged). They are parsed with `write-image`'s
//! own definitions ([`WriterArgs`]), which hold exactly what the flows support: the options the
//! service lets through (`--append-karg`, `--delete-karg`, `-n`, `--copy-network`,
//! `--network-dir`, `--save-partlabel`, `--save-partindex`, `--image-url`, `--image-file`) and
//! our `--sha256` and `--uncompressed-sha256`. Anything else is refused with an error naming
//! the argument, rather than silently ignored.

use anyhow::{anyhow, Result};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, Parser};

use super::args::WriterArgs;

#[derive(Parser, Debug)]
#[command(
    name = "--installer-args",
    no_binary_name = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
struct InstallerArgs {
    #[command(flatten)]
    writer: WriterArgs,
}

/// Parses the decoded `--installer-args` list. Values come as the next argument or as
/// `--option=value`.
pub fn parse_installer_args(args: &[String]) -> Result<WriterArgs> {
    InstallerArgs::try_parse_from(args)
        .map(|a| a.writer)
        .map_err(|e| anyhow!("--installer-args: {}", explain(&first_error(args, e), args)))
}

/// The error of the first wrong argument. clap checks a value when the option's arguments
/// end, so in `--network-dir --sha256 x` it finds the stray `x` before the missing value of
/// `--network-dir` (`--sha256` is taken as the value, then refused): parse the arguments
/// before the unknown one again to find an earlier error. The unknown argument is looked for
/// from the end: if an earlier one spelled the same is the culprit, the shorter parse finds it.
fn first_error(args: &[String], e: clap::Error) -> clap::Error {
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let Some(ContextValue::String(unknown)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    let spelled_so = |a: &String| {
        a == unknown
            || a.strip_prefix(unknown.as_str())
                .is_some_and(|v| v.starts_with('='))
    };
    match args.iter().rposition(spelled_so) {
        Some(at) => match InstallerArgs::try_parse_from(&args[..at]) {
            Err(earlier) => first_error(&args[..at], earlier),
            Ok(_) => e,
        },
        None => e,
    }
}

/// clap's error in our words: the argument, and what is wrong with it.
fn explain(e: &clap::Error, args: &[String]) -> String {
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(option_name(s)),
        _ => None,
    };
    let arg = context(ContextKind::InvalidArg).unwrap_or_default();
    match e.kind() {
        ErrorKind::UnknownArgument => format!(
            "{arg:?} is not supported by the in-process writer; supported: {}",
            supported()
        ),
        ErrorKind::ArgumentConflict => match context(ContextKind::PriorArg) {
            Some(other) if other != arg => {
                // In the order they were given.
                let given = |name: &str| args.iter().position(|a| option_name(a) == name);
                let (first, second) = if given(&other) < given(&arg) {
                    (other, arg)
                } else {
                    (arg, other)
                };
                format!("{first:?} and {second:?} cannot be used together")
            }
            _ => format!("{arg:?} is given more than once"),
        },
        // clap says the same of `--image-url` at the end and of `--image-url=`.
        ErrorKind::InvalidValue if args.last().is_some_and(|a| *a == arg) => {
            format!("{arg:?} needs a value")
        }
        ErrorKind::InvalidValue => format!("{arg:?} needs a non-empty value"),
        // Refused by `args::value`: an option where the value should be.
        ErrorKind::ValueValidation => format!("{arg:?} needs a value"),
        ErrorKind::TooManyValues | ErrorKind::NoEquals => {
            let value = match e.get(ContextKind::InvalidValue) {
                Some(ContextValue::String(v)) => format!(" (got {v:?})"),
                _ => String::new(),
            };
            format!("{arg:?} takes no value{value}")
        }
        // Nothing else can happen with these definitions; clap's own first line, then.
        _ => {
            let rendered = e.render().to_string();
            let line = rendered.lines().next().unwrap_or_default();
            line.trim_start_matches("error: ").to_string()
        }
    }
}

/// `--image-url` from clap's `--image-url <URL>` or `--platform=metal`.
fn option_name(rendered: &str) -> String {
    let name = rendered.split([' ', '=']).next().unwrap_or(rendered);
    name.to_string()
}

/// The supported options, in the order of their definitions.
fn supported() -> String {
    InstallerArgs::command()
        .get_arguments()
        .flat_map(|a| {
            let value = if a.get_action().takes_values() {
                " <value>"
            } else {
                ""
            };
            let short = a.get_short().map(|s| format!("-{s}{value}"));
            let long = a.get_long().map(|l| format!("--{l}{value}"));
            short.into_iter().chain(long)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::args::KargsAndNetworkArgs;
    use std::path::PathBuf;

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
                kargs_network: KargsAndNetworkArgs {
                    append_kargs: vec!["ip=ens3:dhcp".into(), "nameserver=8.8.8.8".into()],
                    delete_kargs: vec!["console=ttyS0".into()],
                    copy_network: true,
                    network_dir: Some("/etc/nm".into()),
                },
                save_partlabel: vec!["data*".into()],
                save_partindex: vec!["5-".into()],
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
        let kn = &w.kargs_network;
        assert_eq!(kn.append_kargs, vec!["ip=ens3:dhcp"]);
        assert_eq!(kn.delete_kargs, vec!["quiet"]);
        assert!(kn.copy_network);
        assert_eq!(kn.network_dir, Some(PathBuf::from("/x")));
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
    fn the_first_wrong_argument_is_named() {
        for (a, want) in [
            (
                &["--network-dir", "--sha256", "x"][..],
                "\"--network-dir\" needs a value",
            ),
            (&["x", "--append-karg", "x"], "\"x\" is not supported"),
            (&["--append-karg", "x", "x"], "\"x\" is not supported"),
            (
                &["--append-karg", "--image-url", "x", "--bad"],
                "\"--append-karg\" needs a value",
            ),
        ] {
            let e = parse(a).unwrap_err().to_string();
            assert!(e.contains(want), "{a:?}: {e}");
        }
    }

    #[test]
    fn flags_without_values() {
        let e = parse(&["--copy-network=true"]).unwrap_err().to_string();
        assert!(e.contains("takes no value"), "{e}");
        // A flag may come twice.
        assert!(
            parse(&["-n", "--copy-network"])
                .unwrap()
                .kargs_network
                .copy_network
        );
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
        let e = parse(&["--image-file=b", "--image-url", "a"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"--image-file\" and \"--image-url\" cannot be used together"),
            "{e}"
        );
    }

    #[test]
    fn karg_value_may_start_with_single_dash() {
        let w = parse(&["--delete-karg", "-x"]).unwrap();
        assert_eq!(w.kargs_network.delete_kargs, vec!["-x"]);
    }
}
