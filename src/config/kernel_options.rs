//! Options the assisted-service cannot pass to the installer (its agent lets only a few
//! coreos-installer flags through `--installer-args`), read from the live system's kernel
//! command line, which users set through the infra-env's kernel arguments. Every such option is
//! `ai.<name>`; all are on/off switches: `ai.<name>=1|0|true|false`, or the bare key for on.
//! An unknown `ai.` key or a bad value is a warning, never a failure: a typo on a kernel command
//! line must not stop an install.

use std::path::Path;

/// The namespace of the installer's kernel command-line options.
pub const PREFIX: &str = "ai.";

/// Declares [`KernelOptions`]: one line per option (field, key, what it does).
macro_rules! kernel_options {
    ($($field:ident = $key:literal: $doc:literal,)*) => {
        /// The installer's `ai.*` options of the live kernel command line; all off by default.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct KernelOptions {
            $(#[doc = $doc] pub $field: bool,)*
        }

        impl KernelOptions {
            /// Every key known, for messages.
            pub const KEYS: &[&str] = &[$($key),*];

            /// Set `key` (one of [`Self::KEYS`]) to `on`.
            fn set(&mut self, key: &str, on: bool) {
                match key {
                    $($key => self.$field = on,)*
                    _ => {}
                }
            }
        }
    };
}

kernel_options! {
    verify_write = "ai.verify-write": "Read the image back after the write and check it (`write-image --verify`).",
    kexec = "ai.kexec": "Reboot into the installed system with kexec, skipping the firmware (`write-image --kexec`); a firmware reboot when it cannot load.",
}

/// The words of a kernel command line (the text of `/proc/cmdline`), each with its key and
/// value: `key=value`, or the bare key (`None`). Split at whitespace: quoted values with spaces
/// are not understood. The `ai.*` options here and the `coreos.inst.*` ones of
/// `write-image --from-kernel-args` both read the command line this way.
pub fn words(cmdline: &str) -> impl Iterator<Item = (&str, &str, Option<&str>)> {
    cmdline
        .split_whitespace()
        .map(|arg| match arg.split_once('=') {
            Some((k, v)) => (arg, k, Some(v)),
            None => (arg, arg, None),
        })
}

impl KernelOptions {
    /// The options in `cmdline` (the text of `/proc/cmdline`), and one warning per unknown `ai.`
    /// key or bad value. A key given twice takes its last value, as the kernel's own do.
    pub fn parse(cmdline: &str) -> (KernelOptions, Vec<String>) {
        let mut options = KernelOptions::default();
        let mut warnings = Vec::new();
        for (arg, key, value) in words(cmdline) {
            if !key.starts_with(PREFIX) {
                continue;
            }
            let on = match value {
                None => Some(true),
                Some(v) if v == "1" || v.eq_ignore_ascii_case("true") => Some(true),
                Some(v) if v == "0" || v.eq_ignore_ascii_case("false") => Some(false),
                Some(_) => None,
            };
            let why = match on {
                _ if !KernelOptions::KEYS.contains(&key) => "is not an installer option",
                Some(on) => {
                    options.set(key, on);
                    continue;
                }
                None => "takes 1, 0, true or false, or no value for on",
            };
            let known = KernelOptions::KEYS.join(", ");
            warnings.push(format!(
                "ignoring {arg} on the kernel command line: {key} {why} (known: {known})"
            ));
        }
        (options, warnings)
    }

    /// The options of the kernel command line in `path` (the host's `/proc/cmdline`), each
    /// warning logged; none when it cannot be read.
    pub fn read(path: &Path) -> KernelOptions {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let (options, warnings) = KernelOptions::parse(&text);
                warnings.iter().for_each(|w| tracing::warn!("{w}"));
                options
            }
            Err(e) => {
                tracing::warn!(
                    "reading the kernel command line {}: {e}; no {PREFIX}* options apply",
                    path.display()
                );
                KernelOptions::default()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_unknown_keys_and_bad_values() {
        let on = KernelOptions {
            verify_write: true,
            ..KernelOptions::default()
        };
        let kexec = KernelOptions {
            kexec: true,
            ..KernelOptions::default()
        };
        let off = KernelOptions::default();
        // (command line, options, warnings naming these)
        let cases: &[(&str, KernelOptions, &[&str])] = &[
            ("", off, &[]),
            ("BOOT_IMAGE=/vmlinuz ro ai.verify-write=1 quiet", on, &[]),
            ("ai.verify-write", on, &[]),
            ("ai.verify-write=true", on, &[]),
            ("ai.verify-write=TRUE", on, &[]),
            ("ai.verify-write=0", off, &[]),
            ("ai.verify-write=false", off, &[]),
            ("ai.verify-write=1 ai.verify-write=0", off, &[]),
            ("xai.verify-write=1 verify-write=1", off, &[]),
            (
                "ai.verify-write=yes",
                off,
                &["ai.verify-write=yes", "takes 1, 0, true or false"],
            ),
            (
                "ai.verify-write=1 ai.verfy-write=1",
                on,
                &["ai.verfy-write", "not an installer option"],
            ),
            ("ai.kexec=1", kexec, &[]),
            ("ai.kexec ai.kexec=0", off, &[]),
            (
                "ai.kexek=1",
                off,
                &["ai.kexek", "known: ai.verify-write, ai.kexec"],
            ),
        ];
        for (cmdline, want, warned) in cases {
            let (got, warnings) = KernelOptions::parse(cmdline);
            assert_eq!(got, *want, "{cmdline:?}");
            assert_eq!(
                warnings.len(),
                warned.len().min(1),
                "{cmdline:?}: {warnings:?}"
            );
            for w in *warned {
                assert!(
                    warnings[0].contains(w),
                    "{cmdline:?}: {warnings:?} lacks {w:?}"
                );
            }
        }
    }

    #[test]
    fn an_unreadable_command_line_sets_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            KernelOptions::read(&dir.path().join("none")),
            KernelOptions::default()
        );
        let path = dir.path().join("cmdline");
        std::fs::write(&path, "ro ai.verify-write\n").unwrap();
        assert!(KernelOptions::read(&path).verify_write);
    }
}
