//! What the boot loader would start from a written /boot, as pure functions over text: the BLS
//! entry's `linux`, `initrd` and `options` lines, and the first-boot arguments GRUB's
//! `ignition.firstboot` script sets, expanded where the entry says `$ignition_firstboot`.

use anyhow::{bail, Context, Result};

/// The lines of a Boot Loader Specification entry that a kexec load needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BlsEntry {
    /// The kernel, as a path on the boot partition (`/ostree/…/vmlinuz-…`).
    pub linux: String,
    /// The initramfs, as a path on the boot partition; `None` when the entry has none.
    pub initrd: Option<String>,
    /// The `options` lines joined by one space (the specification allows several), unexpanded.
    pub options: String,
}

/// The variable CoreOS entries carry in `options`: GRUB's grub.cfg sets it to
/// `ignition.firstboot <network arguments>` while `/ignition.firstboot` exists, else to nothing.
const FIRSTBOOT_VAR: &str = "ignition_firstboot";
/// What `ignition.firstboot` sets (`set ignition_network_kcmdline="…"`).
const NETWORK_VAR: &str = "ignition_network_kcmdline";

/// Parse an entry: `key value` lines, `#` comments, blank lines.
pub(crate) fn parse_entry(text: &str) -> Result<BlsEntry> {
    let mut linux = None;
    let mut initrds = Vec::new();
    let mut options = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line
            .split_once(char::is_whitespace)
            .map_or((line, ""), |(k, v)| (k, v.trim()));
        match key {
            "linux" if linux.is_some() => bail!("the entry has several `linux` lines"),
            "linux" => linux = Some(value.to_string()),
            // Several initramfs images would have to be concatenated into one descriptor;
            // CoreOS entries have one.
            "initrd" => initrds.extend(value.split_whitespace().map(str::to_string)),
            "options" => options.push(value),
            _ => {}
        }
    }
    let Some(linux) = linux.filter(|l| !l.is_empty()) else {
        bail!("the entry has no `linux` line");
    };
    if initrds.len() > 1 {
        bail!(
            "the entry has {} initramfs images ({}); kexec_file_load takes one",
            initrds.len(),
            initrds.join(", ")
        );
    }
    Ok(BlsEntry {
        linux,
        initrd: initrds.pop(),
        options: options.join(" "),
    })
}

/// The network arguments `ignition.firstboot` sets: the value of its last
/// `set ignition_network_kcmdline=…` (double-, single- or unquoted), empty without one. Any other
/// command is refused: we cannot know what GRUB would make of it.
pub(crate) fn firstboot_network_args(script: &str) -> Result<String> {
    let mut args = String::new();
    for line in script.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some(value) = line
            .strip_prefix("set ")
            .and_then(|rest| rest.trim_start().strip_prefix(NETWORK_VAR))
            .and_then(|rest| rest.strip_prefix('='))
        else {
            bail!("unexpected line {line:?} (only `set {NETWORK_VAR}=…` is understood)");
        };
        args = unquote(value).ok_or_else(|| anyhow::anyhow!("unbalanced quotes in {line:?}"))?;
    }
    Ok(args)
}

/// GRUB's value of one word: the text inside matching `"…"` or `'…'`, or the bare word.
fn unquote(value: &str) -> Option<String> {
    for q in ['"', '\''] {
        if let Some(rest) = value.strip_prefix(q) {
            return rest.strip_suffix(q).map(str::to_string);
        }
    }
    (!value.contains(['"', '\''])).then(|| value.to_string())
}

/// The kernel command line GRUB would pass: `options` with `$ignition_firstboot` (or
/// `${ignition_firstboot}`) replaced by `ignition.firstboot <network>` when the first-boot file
/// exists (`firstboot` is its network arguments), by nothing otherwise; whitespace collapsed.
/// Any other variable is refused: only GRUB's environment knows its value.
pub(crate) fn expand_options(options: &str, firstboot: Option<&str>) -> Result<String> {
    let value = firstboot.map_or_else(String::new, |n| format!("ignition.firstboot {n}"));
    let mut out = Vec::new();
    for word in options.split_whitespace() {
        let mut expanded = String::new();
        let mut rest = word;
        while let Some(at) = rest.find('$') {
            expanded.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let (name, tail) = match after.strip_prefix('{') {
                Some(braced) => braced
                    .split_once('}')
                    .with_context(|| format!("unterminated ${{ in the option {word:?}"))?,
                None => {
                    let end = after
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(after.len());
                    after.split_at(end)
                }
            };
            if name != FIRSTBOOT_VAR {
                bail!("the option {word:?} uses ${name}, which only GRUB's environment defines");
            }
            expanded.push_str(&value);
            rest = tail;
        }
        expanded.push_str(rest);
        out.extend(expanded.split_whitespace().map(str::to_string));
    }
    Ok(out.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENTRY: &str = "\
title Red Hat Enterprise Linux CoreOS 417.94 (ostree:0)
version 1
# a comment
linux /ostree/rhcos-abc/vmlinuz-5.14.0-427.el9.x86_64
initrd /ostree/rhcos-abc/initramfs-5.14.0-427.el9.x86_64.img
options $ignition_firstboot ostree=/ostree/boot.1/rhcos/abc/0 ignition.platform.id=metal console=ttyS0,115200n8
";

    #[test]
    fn an_entry_gives_its_kernel_initramfs_and_options() {
        let e = parse_entry(ENTRY).unwrap();
        assert_eq!(e.linux, "/ostree/rhcos-abc/vmlinuz-5.14.0-427.el9.x86_64");
        assert_eq!(
            e.initrd.as_deref(),
            Some("/ostree/rhcos-abc/initramfs-5.14.0-427.el9.x86_64.img")
        );
        assert_eq!(
            e.options,
            "$ignition_firstboot ostree=/ostree/boot.1/rhcos/abc/0 ignition.platform.id=metal console=ttyS0,115200n8"
        );
        let two = parse_entry("linux /k\noptions a b\noptions  c\n").unwrap();
        assert_eq!((two.initrd, two.options.as_str()), (None, "a b c"));
    }

    #[test]
    fn an_entry_without_one_kernel_or_with_two_initramfs_is_refused() {
        for (text, why) in [
            ("options a\n", "no `linux` line"),
            ("linux\noptions a\n", "no `linux` line"),
            ("linux /a\nlinux /b\n", "several `linux` lines"),
            (
                "linux /a\ninitrd /i1 /i2\n",
                "2 initramfs images (/i1, /i2)",
            ),
            ("linux /a\ninitrd /i1\ninitrd /i2\n", "2 initramfs images"),
        ] {
            let e = parse_entry(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_firstboot_script_gives_its_last_network_arguments() {
        let original = "# Remove this file to rerun Ignition\nset ignition_network_kcmdline=\"\"\n";
        assert_eq!(firstboot_network_args(original).unwrap(), "");
        assert_eq!(firstboot_network_args("").unwrap(), "");
        let ours = format!("{original}set ignition_network_kcmdline=\"rd.neednet=1 ip=dhcp\"\n");
        assert_eq!(
            firstboot_network_args(&ours).unwrap(),
            "rd.neednet=1 ip=dhcp"
        );
        assert_eq!(
            firstboot_network_args("set ignition_network_kcmdline='ip=eth0:dhcp'").unwrap(),
            "ip=eth0:dhcp"
        );
        assert_eq!(
            firstboot_network_args("set ignition_network_kcmdline=ip=dhcp").unwrap(),
            "ip=dhcp"
        );
        for bad in [
            "set other=1",
            "source /x",
            "set ignition_network_kcmdline=\"ip=dhcp",
        ] {
            assert!(firstboot_network_args(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ignition_firstboot_expands_to_the_first_boot_arguments_or_nothing() {
        let opts = "$ignition_firstboot  ostree=/o  ${ignition_firstboot} x";
        assert_eq!(
            expand_options(opts, Some("rd.neednet=1 ip=dhcp")).unwrap(),
            "ignition.firstboot rd.neednet=1 ip=dhcp ostree=/o ignition.firstboot rd.neednet=1 ip=dhcp x"
        );
        assert_eq!(
            expand_options(opts, Some("")).unwrap(),
            "ignition.firstboot ostree=/o ignition.firstboot x"
        );
        assert_eq!(expand_options(opts, None).unwrap(), "ostree=/o x");
        assert_eq!(
            expand_options("a=$ignition_firstboot,b", None).unwrap(),
            "a=,b"
        );
        for bad in ["$kernelopts", "a=${tuned_params}", "${ignition_firstboot"] {
            let e = expand_options(bad, None).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }
}
