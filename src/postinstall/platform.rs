//! `--platform` and the console defaults that come with it, from the image's
//! `coreos/platforms.json`, and how `--console` overrides them.
//!
//! Everything except `read_table` is pure: the caller applies the resulting karg edits to the BLS
//! options line and the GRUB commands to the console block.

use super::console::{self, Console};
use super::kargs::{padded, replace_word, KargsEditor};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

/// Relative to the /boot root. coreos-assembler writes it for the image's architecture.
pub(crate) const PLATFORMS_JSON: &str = "coreos/platforms.json";

/// The platform every metal image is built for; `--platform metal` changes nothing.
pub(crate) const METAL: &str = "metal";

const PLATFORM_ID_KEY: &str = "ignition.platform.id";

/// One platform's console defaults.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub(crate) struct PlatformSpec {
    #[serde(default)]
    pub grub_commands: Vec<String>,
    #[serde(default)]
    pub kernel_arguments: Vec<String>,
}

/// `coreos/platforms.json`: platform ID → console defaults.
pub(crate) type PlatformTable = HashMap<String, PlatformSpec>;

/// Read `coreos/platforms.json` from /boot. None if the image has none (older images).
pub(crate) fn read_table(boot_root: &Path) -> Result<Option<PlatformTable>> {
    let path = boot_root.join(PLATFORMS_JSON);
    let json = match std::fs::read_to_string(&path) {
        Ok(json) => json,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(e).with_context(|| format!("reading the platform table {}", path.display()))
        }
    };
    serde_json::from_str(&json)
        .map(Some)
        .with_context(|| format!("parsing the platform table {}", path.display()))
}

/// A platform ID as Ignition knows them: `metal`, `aws`, `openstack`, `ibmcloud`, `qemu`, …
pub(crate) fn check_platform_id(platform: &str) -> Result<()> {
    let ok = !platform.is_empty()
        && platform
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !ok {
        bail!("invalid platform ID {platform:?}: expected lowercase letters, digits, '_' and '-'");
    }
    Ok(())
}

/// Replace `ignition.platform.id=metal` by `ignition.platform.id=<platform>` in an options line.
///
/// Metal images always carry `ignition.platform.id=metal`; if it is missing we are not looking
/// at a metal image (or at an already-edited one), so fail rather than guess.
pub(crate) fn replace_platform_id(options: &str, platform: &str) -> Result<String> {
    let (options, metal) = (padded(options), format!("{PLATFORM_ID_KEY}={METAL}"));
    if !options.contains(&format!(" {metal} ")) {
        bail!("couldn't locate the platform ID `{metal}` in the options line");
    }
    let new = format!("{PLATFORM_ID_KEY}={platform}");
    Ok(replace_word(&options, &metal, Some(&new))
        .trim()
        .to_string())
}

/// Work out the console changes, as coreos-installer does:
/// - `--console` given: its kargs and GRUB commands replace the platform's defaults entirely;
/// - otherwise a non-metal `--platform`: that platform's `kernel_arguments` and `grub_commands`
///   from the table (a platform missing from the table has none: no console kargs, empty block);
/// - otherwise nothing.
///
/// In the first two cases metal's `kernel_arguments` (baked into the image's BLS entry) are
/// deleted, and GRUB is rewritten only if the new commands differ from metal's (which the image
/// already has). Without a table there are no defaults to delete or compare against.
///
/// Returns the karg edits (metal's console kargs deleted, then the new ones appended) and the new
/// contents of the GRUB console block, `None` to leave it alone.
pub(crate) fn console_plan(
    table: Option<&PlatformTable>,
    platform: Option<&str>,
    consoles: &[Console],
) -> (KargsEditor, Option<Vec<String>>) {
    let (append_kargs, grub_commands) = if !consoles.is_empty() {
        let kargs = consoles.iter().map(Console::karg).collect();
        (kargs, console::grub_commands(consoles))
    } else {
        match platform {
            Some(platform) if platform != METAL => {
                let spec = table.and_then(|t| t.get(platform));
                if spec.is_none() && table.is_some() {
                    tracing::warn!(
                        "platform {platform:?} is not in {PLATFORMS_JSON}: \
                         removing metal's console settings and adding none"
                    );
                }
                let spec = spec.cloned().unwrap_or_default();
                (spec.kernel_arguments, spec.grub_commands)
            }
            _ => return (KargsEditor::default(), None),
        }
    };
    let metal = table
        .and_then(|t| t.get(METAL))
        .cloned()
        .unwrap_or_default();
    let kargs = KargsEditor {
        delete: metal.kernel_arguments,
        append: append_kargs,
    };
    let grub_commands = (grub_commands != metal.grub_commands).then_some(grub_commands);
    (kargs, grub_commands)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table_errors() {
        let parse = serde_json::from_str::<PlatformTable>;
        assert!(parse(r#"{"metal": {"grub_commands": "x"}}"#).is_err());
        assert!(parse("[]").is_err());
    }

    #[test]
    fn platform_ids() {
        for ok in ["metal", "aws", "ibmcloud", "powervs", "azurestack", "a_b-9"] {
            check_platform_id(ok).unwrap();
        }
        for bad in ["", "AWS", "a b", "a=b", "aws\n", "ä"] {
            assert!(check_platform_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn platform_id_not_found() {
        for missing in [
            "root=x rw",
            "ignition.platform.id=aws rw",
            "ignition.platform.id=metal2",
        ] {
            let err = replace_platform_id(missing, "aws").unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("couldn't locate the platform ID"),
                "{err}"
            );
        }
        // Every occurrence, whole words only.
        let options = "ignition.platform.id=metal  x.ignition.platform.id=metal \
                       ignition.platform.id=metal2 ignition.platform.id=metal";
        assert_eq!(
            replace_platform_id(options, "aws").unwrap(),
            "ignition.platform.id=aws x.ignition.platform.id=metal \
             ignition.platform.id=metal2 ignition.platform.id=aws"
        );
    }
}
