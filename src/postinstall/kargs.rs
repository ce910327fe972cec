//! The BLS entry on /boot and the kernel-argument edits made to its `options` line.
//!
//! Parsing and editing are pure functions over strings; `bls_entry_path` is the only I/O.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where ostree keeps its Boot Loader Specification entries, relative to the /boot root.
pub(crate) const BLS_ENTRIES_DIR: &str = "loader/entries";

const OPTIONS_PREFIX: &str = "options ";

/// The BLS entry to edit: the last `loader/entries/*.conf` by file name.
///
/// ostree numbers its entries so that the default deployment sorts last (entries are ordered in
/// reverse by GRUB's blscfg), so this is the entry that boots. The sort is a plain byte-wise sort
/// of the names, exactly as coreos-installer does: `ostree-10-…` sorts before `ostree-2-…`. A
/// freshly written image has a single entry, so this never matters in practice, and matching
/// coreos-installer is safer than being clever.
pub(crate) fn bls_entry_path(boot_root: &Path) -> Result<PathBuf> {
    let dir = boot_root.join(BLS_ENTRIES_DIR);
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let path = entry.path();
        if path.extension().is_none_or(|ext| ext != "conf") {
            continue;
        }
        let is_dir = entry
            .file_type()
            .with_context(|| format!("reading the type of {}", path.display()))?
            .is_dir();
        if !is_dir {
            names.push(entry.file_name());
        }
    }
    names.sort();
    match names.pop() {
        Some(name) => Ok(dir.join(name)),
        None => bail!("found no BLS entries (*.conf) in {}", dir.display()),
    }
}

/// The value of the entry's single `options` line, trimmed.
pub(crate) fn options_line(entry: &str) -> Result<&str> {
    let mut found = entry
        .lines()
        .filter_map(|line| line.strip_prefix(OPTIONS_PREFIX));
    let first = found.next();
    let extra = found.count();
    match first {
        None => bail!("the BLS entry has no `options` line"),
        Some(_) if extra > 0 => bail!(
            "the BLS entry has {} `options` lines, expected exactly one",
            extra + 1
        ),
        Some(options) => Ok(options.trim()),
    }
}

/// The entry with its `options` line replaced by `new_options`.
///
/// Every other line is kept, minus trailing whitespace (as coreos-installer does), and every line,
/// including the last, ends with a newline.
pub(crate) fn replace_options(entry: &str, new_options: &str) -> Result<String> {
    // Reuse the single-line check so the two functions agree on what a valid entry is.
    options_line(entry)?;
    let mut out = String::with_capacity(entry.len() + new_options.len());
    for line in entry.lines() {
        if line.starts_with(OPTIONS_PREFIX) {
            out.push_str(OPTIONS_PREFIX);
            out.push_str(new_options.trim());
        } else {
            out.push_str(line.trim_end());
        }
        out.push('\n');
    }
    Ok(out)
}

/// coreos-installer's deliberately naive kernel-argument editor.
///
/// The options string is treated as text, not parsed: whitespace runs are collapsed, the string
/// is padded with one space on each side, and each karg is matched as ` karg `. Quoting is not
/// understood, so `foo="a b"` is two words to this editor, and a karg inside a quoted value can
/// be matched. That is acceptable because we only ever edit the image's own BLS entry, whose
/// options are plain words; callers reject kargs containing whitespace before getting here.
///
/// Because matching is on whole space-delimited words, deleting `console=tty0` never touches
/// `console=tty0,115200`, and deleting `foo` never touches `foobar`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct KargsEditor {
    /// Every occurrence is deleted.
    pub delete: Vec<String>,
    /// Appended, even when already present.
    pub append: Vec<String>,
}

impl KargsEditor {
    /// Apply the edits in coreos-installer's order: delete, then append. The result has single
    /// spaces between kargs and none at either end.
    pub(crate) fn apply<'a>(&'a self, options: &str) -> String {
        let mut s = padded(options);
        let words = |kargs: &'a [String]| kargs.iter().map(|k| k.trim()).filter(|k| !k.is_empty());
        for karg in words(&self.delete) {
            s = replace_word(&s, karg, None);
        }
        for karg in words(&self.append) {
            s.push_str(karg);
            s.push(' ');
        }
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

/// `options` with whitespace runs collapsed and one space at either end.
pub(crate) fn padded(options: &str) -> String {
    format!(
        " {} ",
        options.split_whitespace().collect::<Vec<_>>().join(" ")
    )
}

/// Replace every ` word ` in a space-padded string by ` with ` (or by a single space when `with`
/// is None).
///
/// `str::replace` would miss adjacent repeats (in ` a a `, the two matches share the middle
/// space), so scan by hand and resume each search at the trailing space of the previous match.
/// The output is never rescanned, so a replacement that contains the word cannot loop.
pub(crate) fn replace_word(padded: &str, word: &str, with: Option<&str>) -> String {
    let pattern = format!(" {word} ");
    let mut out = String::with_capacity(padded.len());
    let mut rest = padded;
    while let Some(at) = rest.find(&pattern) {
        out.push_str(&rest[..at]);
        if let Some(with) = with {
            out.push(' ');
            out.push_str(with);
        }
        // Resume at the match's trailing space: it is the leading space of the next word.
        rest = &rest[at + pattern.len() - 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits() {
        let ed = |delete: &[&str], append: &[&str]| KargsEditor {
            delete: delete.iter().map(|k| k.to_string()).collect(),
            append: append.iter().map(|k| k.to_string()).collect(),
        };
        let cases = [
            // Every occurrence, adjacent ones too.
            (ed(&["foo"], &[]), "foo bar foo foo baz foo", "bar baz"),
            (ed(&["foo"], &[]), "foo", ""),
            // Whole words only.
            (
                ed(&["console=tty0"], &[]),
                "console=tty0,x console=tty0 xconsole=tty0 console=tty01",
                "console=tty0,x xconsole=tty0 console=tty01",
            ),
            (
                ed(&["foo"], &[]),
                "foo bar foobar barfoo",
                "bar foobar barfoo",
            ),
            // Trimmed, empty ones ignored.
            (
                ed(&["  foo=val ", "", "   "], &[]),
                "foo=val bar baz=val",
                "bar baz=val",
            ),
            // Naive on purpose: a multi-word "karg" deletes that exact sequence.
            (ed(&["foo bar"], &[]), "foo bar foobar", "foobar"),
            // At the end, even when present.
            (ed(&[], &["foo", "quux=1"]), "foo bar", "foo bar foo quux=1"),
            // Delete, then append; whitespace collapsed.
            (
                ed(
                    &["console=ttyS0,115200n8", "console=ttyS1,115200n8"],
                    &["console=ttyS1,115200n8  "],
                ),
                "  foo console=tty0 \t bar console=ttyS0,115200n8 baz",
                "foo console=tty0 bar baz console=ttyS1,115200n8",
            ),
            (ed(&[], &[]), "  a \t b   c  ", "a b c"),
        ];
        for (editor, options, want) in cases {
            assert_eq!(editor.apply(options), want, "{options}");
        }
        // A replacement containing the word does not loop.
        assert_eq!(
            replace_word(" k=v k=v ", "k=v", Some("v k=v")),
            " v k=v v k=v "
        );
    }

    const ENTRY: &str = "title Red Hat Enterprise Linux CoreOS 418.94 (ostree:0)  \n\
        version 1\n\
        options ignition.platform.id=metal $ignition_firstboot root=UUID=abc rw   \n\
        linux /ostree/rhcos-abc/vmlinuz\t\n\
        initrd /ostree/rhcos-abc/initramfs.img";

    #[test]
    fn options_line_is_found_and_replaced_or_refused() {
        let err = options_line("title x\nlinux /vmlinuz\n").unwrap_err();
        assert_eq!(err.to_string(), "the BLS entry has no `options` line");
        // `optionsfoo` and an indented line are not options lines.
        assert!(options_line("optionsfoo a\n  options b\n").is_err());
        let err = options_line("options a\nlinux x\noptions b\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the BLS entry has 2 `options` lines, expected exactly one"
        );
        assert!(replace_options("options a\noptions b\n", "c").is_err());
        assert!(replace_options("title x\n", "c").is_err());
        // Found and replaced, the other lines kept and trimmed.
        assert_eq!(
            options_line(ENTRY).unwrap(),
            "ignition.platform.id=metal $ignition_firstboot root=UUID=abc rw"
        );
        assert_eq!(
            replace_options(ENTRY, " a b ").unwrap(),
            "title Red Hat Enterprise Linux CoreOS 418.94 (ostree:0)\n\
             version 1\n\
             options a b\n\
             linux /ostree/rhcos-abc/vmlinuz\n\
             initrd /ostree/rhcos-abc/initramfs.img\n"
        );
    }

    fn entries_dir(names: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(BLS_ENTRIES_DIR);
        std::fs::create_dir_all(&dir).unwrap();
        for name in names {
            std::fs::write(dir.join(name), "options x\n").unwrap();
        }
        root
    }

    #[test]
    fn bls_entry_is_the_last_by_byte_wise_name() {
        let root = entries_dir(&["ostree-1-rhcos.conf", "ostree-0-rhcos.conf", "README"]);
        let path = bls_entry_path(root.path()).unwrap();
        assert_eq!(path, root.path().join("loader/entries/ostree-1-rhcos.conf"));

        // String order, like coreos-installer: "ostree-2" > "ostree-10".
        let root = entries_dir(&["ostree-10-rhcos.conf", "ostree-2-rhcos.conf", "zz.conf.bak"]);
        // A directory named *.conf is not an entry.
        std::fs::create_dir(root.path().join("loader/entries/zz.conf")).unwrap();
        let path = bls_entry_path(root.path()).unwrap();
        assert_eq!(path, root.path().join("loader/entries/ostree-2-rhcos.conf"));

        // No entries directory (no *.conf entry: postinstall's errors_name_the_step_and_the_file).
        let empty = tempfile::tempdir().unwrap();
        let err = bls_entry_path(empty.path()).unwrap_err();
        assert!(format!("{err:#}").contains("loader/entries"), "{err:#}");
    }
}
