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
                let given = |name: &str| args.iter().position(|a| spelled(a, name));
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
        ErrorKind::InvalidValue if args.last().is_some_and(|a| spelled(a, &arg)) => {
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

/// Whether the argument `a` is the option clap calls `name` (`--image-url`), in its long or
/// short form (`-u`, `-uURL`).
fn spelled(a: &str, name: &str) -> bool {
    if option_name(a) == name {
        return true;
    }
    let short = InstallerArgs::command()
        .get_arguments()
        .find(|x| {
            x.get_long()
                .is_some_and(|l| name.strip_prefix("--") == Some(l))
        })
        .and_then(|x| x.get_short());
    short.is_some_and(|s| {
        !a.starts_with("--") && a.strip_prefix('-').is_some_and(|r| r.starts_with(s))
    })
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

    fn parse(a: &[&str]) -> anyhow::Result<WriterArgs> {
        parse_installer_args(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn every_option_in_both_forms() {
        assert_eq!(parse(&[]).unwrap(), WriterArgs::default());
        let valued = [
            ("--append-karg", "ip=ens3:dhcp"),
            ("--append-karg", "nameserver=8.8.8.8"),
            ("--delete-karg", "console=ttyS0"),
            ("--network-dir", "/etc/nm"),
            ("--save-partlabel", "data*"),
            ("--save-partindex", "5-"),
            ("--image-url", "https://mirror/rhcos.raw.gz"),
            ("--sha256", "abc"),
            ("--uncompressed-sha256", "def"),
        ];
        let separate: Vec<&str> = valued.iter().flat_map(|(o, v)| [*o, *v]).collect();
        let equals: Vec<String> = valued.iter().map(|(o, v)| format!("{o}={v}")).collect();
        let equals: Vec<&str> = equals.iter().map(String::as_str).collect();
        let want = WriterArgs {
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
        };
        assert_eq!(parse(&[&separate[..], &["-n"]].concat()).unwrap(), want);
        assert_eq!(
            parse(&[&["--copy-network"], &equals[..]].concat()).unwrap(),
            want
        );
        for image_file in [
            &["--image-file", "/i.raw.xz"][..],
            &["--image-file=/i.raw.xz"],
        ] {
            assert_eq!(
                parse(image_file).unwrap().image_file,
                Some("/i.raw.xz".into())
            );
        }
        // A flag may come twice; a karg value may start with a single dash.
        assert!(
            parse(&["-n", "--copy-network"])
                .unwrap()
                .kargs_network
                .copy_network
        );
        let w = parse(&["--delete-karg", "-x"]).unwrap();
        assert_eq!(w.kargs_network.delete_kargs, vec!["-x"]);
    }

    /// coreos-installer's short forms, which a passthrough may use: the same options, and the
    /// same refusals (in the table below).
    #[test]
    fn short_forms_of_the_image_options() {
        let w = parse(&["-u", "https://mirror/i.raw.xz", "--sha256", "abc"]).unwrap();
        assert_eq!(w.image_url.as_deref(), Some("https://mirror/i.raw.xz"));
        let w = parse(&["-f/i.raw.xz"]).unwrap();
        assert_eq!(w.image_file, Some("/i.raw.xz".into()));
    }

    /// Each refusal names the first wrong argument.
    #[test]
    fn refusals() {
        for (a, want) in [
            (
                &["-n", "--platform", "metal"][..],
                "--installer-args: \"--platform\" is not supported by the in-process writer; \
                 supported: --append-karg <value>, --delete-karg <value>, -n, --copy-network",
            ),
            (&["--platform=metal"], "\"--platform\" is not supported"),
            (&["/dev/sda"], "\"/dev/sda\" is not supported"),
            (&["-p", "metal"], "\"-p\" is not supported"),
            (&["--append-karg"], "needs a"),
            (&["--append-karg", "--copy-network"], "needs a"),
            (&["--image-url"], "needs a"),
            (&["--delete-karg="], "needs a"),
            (
                &["--network-dir", "--sha256", "x"],
                "\"--network-dir\" needs a value",
            ),
            (&["x", "--append-karg", "x"], "\"x\" is not supported"),
            (&["--append-karg", "x", "x"], "\"x\" is not supported"),
            (
                &["--append-karg", "--image-url", "x", "--bad"],
                "\"--append-karg\" needs a value",
            ),
            (&["--copy-network=true"], "takes no value"),
            (
                &["-f", "/i", "-u", "https://x"],
                "\"--image-file\" and \"--image-url\" cannot be used together",
            ),
            (&["-u"], "\"--image-url\" needs a value"),
            (&["--image-url", "a", "--image-url", "b"], "more than once"),
            (
                &["--image-url", "a", "--image-file", "b"],
                "cannot be used together",
            ),
            (
                &["--image-file=b", "--image-url", "a"],
                "\"--image-file\" and \"--image-url\" cannot be used together",
            ),
        ] {
            let e = parse(a).unwrap_err().to_string();
            assert!(e.contains(want), "{a:?}: {e}");
        }
    }
}
