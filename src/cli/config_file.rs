//! `-c/--config-file`: a YAML mapping whose keys are `write-image`'s long option names, turned
//! into the arguments it stands for, as coreos-installer's config files: a string or number is
//! `--key=value`, `true` is `--key` (`false` nothing), a list repeats the option; `dest-device`
//! is the target. The keys and their types come from the clap definitions of the command, so an
//! option added there works in a config file with no code here.

use anyhow::{bail, Context, Result};
use clap::{ArgAction, Command};
use serde_json::Value;
use std::path::Path;

/// The key naming the target (the positional DEVICE), as coreos-installer spells it.
pub(crate) const DEST_DEVICE: &str = "dest-device";

/// Options that say where the options come from: meaningless inside a config file.
const NOT_IN_FILES: &[&str] = &[
    "config-file",
    "from-kernel-args",
    "cmdline",
    "installer-config-dir",
    "help",
];

/// What a config file stands for: options (each `--key` or `--key=value`), and the target.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct FileArgs {
    pub args: Vec<String>,
    pub device: Option<String>,
}

/// The arguments of the config file `file` (its text `yaml`), for the options of `command`.
/// An unknown key or a value of the wrong type is an error naming the file and the key.
pub(crate) fn file_args(command: &Command, file: &Path, yaml: &str) -> Result<FileArgs> {
    let name = || format!("config file {}", file.display());
    let doc: Value =
        serde_saphyr::from_str(yaml).with_context(|| format!("parsing the {}", name()))?;
    let map = match doc {
        // An empty file sets nothing.
        Value::Null => return Ok(FileArgs::default()),
        Value::Object(map) => map,
        _ => bail!("{}: expected a mapping of option names to values", name()),
    };
    let mut out = FileArgs::default();
    for (key, value) in &map {
        option_args(command, key, value, &mut out)
            .with_context(|| format!("{}: key {key:?}", name()))?;
    }
    Ok(out)
}

/// Adds what `key: value` stands for to `out`.
fn option_args(command: &Command, key: &str, value: &Value, out: &mut FileArgs) -> Result<()> {
    if key == DEST_DEVICE {
        out.device = Some(scalar(value).context("expected the target device's path")?);
        return Ok(());
    }
    let arg = command
        .get_arguments()
        .filter(|a| !a.is_positional() && !NOT_IN_FILES.contains(&key))
        .find(|a| a.get_long() == Some(key));
    let Some(arg) = arg else {
        bail!("unknown option (keys are write-image's long option names without \"--\", and {DEST_DEVICE})");
    };
    match arg.get_action() {
        ArgAction::SetTrue => match value {
            Value::Bool(true) => out.args.push(format!("--{key}")),
            Value::Bool(false) => {}
            _ => bail!("expected true or false"),
        },
        ArgAction::Set => {
            let v = scalar(value).context("expected a string or a number")?;
            out.args.push(format!("--{key}={v}"));
        }
        ArgAction::Append => {
            let values = match value {
                Value::Array(items) => items.iter().map(scalar).collect::<Option<Vec<_>>>(),
                v => scalar(v).map(|v| vec![v]),
            };
            let values = values.context("expected a list of strings (or one string)")?;
            out.args
                .extend(values.iter().map(|v| format!("--{key}={v}")));
        }
        _ => bail!("unknown option"),
    }
    Ok(())
}

/// A string, or a number as written.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::write_image::WriteImageArgs;
    use clap::Args;

    fn args(yaml: &str) -> Result<FileArgs> {
        let command = WriteImageArgs::augment_args(Command::new("write-image"));
        file_args(&command, Path::new("/etc/c.yaml"), yaml)
    }

    #[test]
    fn keys_are_long_options_of_every_kind() {
        let yaml = "dest-device: /dev/vda\nimage-url: https://m/i.raw.xz\ninsecure: true\n\
                    preserve-on-error: false\nfetch-retries: 3\nappend-karg: [a=1, b]\n\
                    save-partindex: 5\nignition-url: https://h/c.ign\nplatform: metal\n";
        let got = args(yaml).unwrap();
        assert_eq!(got.device.as_deref(), Some("/dev/vda"));
        // serde_json's map is sorted by key.
        assert_eq!(
            got.args,
            [
                "--append-karg=a=1",
                "--append-karg=b",
                "--fetch-retries=3",
                "--ignition-url=https://h/c.ign",
                "--image-url=https://m/i.raw.xz",
                "--insecure",
                "--platform=metal",
                "--save-partindex=5",
            ]
        );
        assert_eq!(args("").unwrap(), FileArgs::default());
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_file_and_the_key() {
        for (yaml, want) in [
            ("image-ur: x", "key \"image-ur\": unknown option"),
            ("u: x", "key \"u\": unknown option"),
            ("config-file: x", "key \"config-file\": unknown option"),
            ("from-kernel-args: true", "unknown option"),
            ("device: /dev/sda", "key \"device\": unknown option"),
            (
                "insecure: yes-please",
                "key \"insecure\": expected true or false",
            ),
            (
                "platform: [a, b]",
                "key \"platform\": expected a string or a number",
            ),
            (
                "append-karg: [a, [b]]",
                "key \"append-karg\": expected a list",
            ),
            (
                "dest-device: true",
                "key \"dest-device\": expected the target",
            ),
            ("- a\n- b", "expected a mapping"),
        ] {
            let e = format!("{:#}", args(yaml).unwrap_err());
            assert!(e.starts_with("config file /etc/c.yaml"), "{yaml}: {e}");
            assert!(e.contains(want), "{yaml}: {e}");
        }
        let e = format!("{:#}", args("a: [").unwrap_err());
        assert!(e.contains("parsing the config file /etc/c.yaml"), "{e}");
    }
}
