//! Post-install embedding, replacing what `coreos-installer install` does after writing the
//! image: the Ignition config, kernel arguments (platform, console, first-boot, append/delete),
//! the GRUB console block and the NetworkManager keyfiles, all on the written disk's /boot.
//!
//! Everything works on the root directory of an already-mounted boot filesystem, so it is
//! testable on a tempdir; mounting is the caller's business (`disk::mount`).

pub(crate) mod console;
mod files;
pub(crate) mod firstboot;
pub(crate) mod ignition;
pub(crate) mod kargs;
pub(crate) mod network;
pub(crate) mod platform;

use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};

/// What to embed. Build it from the command line, call `validate` before touching the disk, then
/// `apply` on the mounted /boot.
#[derive(Clone, Debug, Default)]
pub struct PostInstall {
    pub ignition: Option<crate::ignition::IgnitionConfig>,
    pub append_kargs: Vec<String>,
    pub delete_kargs: Vec<String>,
    /// `--platform` ID; `metal` (what the image already has) changes nothing.
    pub platform: Option<String>,
    /// `--console` specs, in the order given (repeatable).
    pub consoles: Vec<console::Console>,
    /// `--firstboot-args`.
    pub firstboot_args: Option<String>,
    /// Set when `--copy-network` was given: the directory to copy from.
    pub network_dir: Option<PathBuf>,
}

impl PostInstall {
    /// Whether anything needs /boot mounted at all (coreos-installer mounts it only then).
    pub fn is_empty(&self) -> bool {
        self.ignition.is_none()
            && self.append_kargs.is_empty()
            && self.delete_kargs.is_empty()
            && self.platform.is_none()
            && self.consoles.is_empty()
            && self.firstboot_args.is_none()
            && self.network_dir.is_none()
    }

    /// Validate everything that can be validated before the disk is touched. Errors name the
    /// option.
    ///
    /// The Ignition config needs no check here: an `IgnitionConfig` only exists once its digest
    /// and shape were checked (`IgnitionConfig::from_file` / `from_bytes`).
    pub fn validate(&self) -> Result<()> {
        for (option, kargs) in [
            ("--append-karg", &self.append_kargs),
            ("--delete-karg", &self.delete_kargs),
        ] {
            // The editor's matching is word-based (see `kargs::KargsEditor`), so a karg with
            // whitespace (typically a quoted value) could never be matched or appended faithfully.
            for karg in kargs {
                let why = if karg.is_empty() {
                    "a kernel argument must not be empty"
                } else if karg.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    "a kernel argument must not contain whitespace (quoted values are not supported)"
                } else {
                    continue;
                };
                bail!("{option} {karg:?}: {why}");
            }
        }
        if let Some(platform) = &self.platform {
            platform::check_platform_id(platform).map_err(|e| anyhow!("--platform: {e}"))?;
        }
        for console in &self.consoles {
            console
                .check()
                .map_err(|e| anyhow!("--console {console}: {e:#}"))?;
        }
        if let Some(args) = &self.firstboot_args {
            firstboot::check_args(args).map_err(|e| anyhow!("--firstboot-args: {e}"))?;
        }
        if let Some(dir) = &self.network_dir {
            match std::fs::metadata(dir) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => bail!("--network-dir {}: not a directory", dir.display()),
                Err(e) => bail!("--network-dir {}: {e}", dir.display()),
            }
        }
        Ok(())
    }

    /// A platform other than metal: the BLS entry's platform ID must change.
    fn changed_platform(&self) -> Option<&str> {
        self.platform.as_deref().filter(|p| *p != platform::METAL)
    }
}

/// Apply, in coreos-installer's order: the Ignition config; then the kernel arguments (platform
/// ID, console kargs and append/delete in one edit of the BLS entry, then the first-boot args in
/// `ignition.firstboot`); then the GRUB console block; then the network copy. Each step's error
/// names the step and the file.
///
/// Any error leaves /boot half-edited: the caller must then treat the install as failed (and
/// reset the disk), exactly as for a failed image write.
pub(crate) fn apply(boot_root: &Path, p: &PostInstall) -> Result<()> {
    p.validate()?;

    if let Some(config) = &p.ignition {
        ignition::write_config(boot_root, config)?;
    }

    // The platform table is needed only to change console defaults.
    let console_change = p.changed_platform().is_some() || !p.consoles.is_empty();
    let table = if console_change {
        let table = platform::read_table(boot_root)?;
        if table.is_none() {
            tracing::warn!(
                "{} is missing (an older image?): the image's default console settings stay, \
                 only --platform's ID and --console's settings are applied",
                platform::PLATFORMS_JSON
            );
        }
        table
    } else {
        None
    };
    let (console_kargs, grub_commands) =
        platform::console_plan(table.as_ref(), p.platform.as_deref(), &p.consoles);

    let user_kargs = kargs::KargsEditor {
        delete: p.delete_kargs.clone(),
        append: p.append_kargs.clone(),
    };
    if console_change || user_kargs != kargs::KargsEditor::default() {
        edit_bls_entry(boot_root, p.changed_platform(), &console_kargs, &user_kargs)?;
    }

    // A separate file, not the BLS entry: its place among the karg steps does not matter.
    if let Some(args) = &p.firstboot_args {
        firstboot::write_args(boot_root, args)?;
    }

    if let Some(commands) = &grub_commands {
        // s390x boots with zipl, not GRUB: there is no console block to edit.
        if cfg!(target_arch = "s390x") {
            tracing::info!("not editing GRUB console settings on s390x");
        } else {
            let path = console::write_console_block(boot_root, commands)?;
            tracing::info!("wrote GRUB console settings to {}", path.display());
        }
    }

    if let Some(dir) = &p.network_dir {
        let names = network::copy_network_dir(dir, boot_root)?;
        tracing::info!(
            count = names.len(),
            "copied network config from {}",
            dir.display()
        );
    }
    Ok(())
}

/// One read-modify-write of the default BLS entry's options line: platform ID, then the console
/// kargs (delete metal's console kargs, append the new ones), then the user's delete/append.
fn edit_bls_entry(
    boot_root: &Path,
    platform: Option<&str>,
    console_kargs: &kargs::KargsEditor,
    user_kargs: &kargs::KargsEditor,
) -> Result<()> {
    let path = kargs::bls_entry_path(boot_root).context("finding the BLS entry to edit")?;
    let edit = || -> Result<String> {
        let entry = std::fs::read_to_string(&path).context("reading the file")?;
        let mut options = kargs::options_line(&entry)?.to_string();
        if let Some(platform) = platform {
            options = platform::replace_platform_id(&options, platform)?;
        }
        options = console_kargs.apply(&options);
        options = user_kargs.apply(&options);
        let new_entry = kargs::replace_options(&entry, &options)?;
        if new_entry != entry {
            files::rewrite(&path, new_entry.as_bytes())?;
        }
        Ok(options)
    };
    let options =
        edit().with_context(|| format!("editing kernel arguments in {}", path.display()))?;
    tracing::info!("kernel arguments in {}: {options}", path.display());
    Ok(())
}

#[cfg(test)]
mod testdata;

#[cfg(test)]
mod tests {
    use super::console::Console;
    use super::testdata::*;
    use super::*;
    use crate::ignition::IgnitionConfig;

    const CONFIG: &[u8] = br#"{"ignition":{"version":"3.4.0"},"storage":{"files":[]}}"#;

    fn read(root: &Path, rel: &str) -> String {
        std::fs::read_to_string(root.join(rel)).unwrap()
    }

    fn options(root: &Path) -> String {
        let entry = read(root, &format!("loader/entries/{BLS_ENTRY_NAME}"));
        kargs::options_line(&entry).unwrap().to_string()
    }

    fn boot(with_platforms: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        make_boot(dir.path(), with_platforms);
        dir
    }

    fn consoles(specs: &[&str]) -> Vec<Console> {
        specs.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn empty_changes_nothing() {
        let p = PostInstall::default();
        assert!(p.is_empty());
        p.validate().unwrap();
        // Nothing is read: an empty directory is fine.
        let root = tempfile::tempdir().unwrap();
        apply(root.path(), &p).unwrap();
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);

        for p in [
            PostInstall {
                platform: Some("metal".into()),
                ..Default::default()
            },
            PostInstall {
                firstboot_args: Some(String::new()),
                ..Default::default()
            },
            PostInstall {
                delete_kargs: vec!["x".into()],
                ..Default::default()
            },
        ] {
            assert!(!p.is_empty(), "{p:?}");
        }
    }

    #[test]
    fn everything_on_an_rhcos_boot() {
        let root = boot(true);
        let r = root.path();
        let net = tempfile::tempdir().unwrap();
        for name in ["bond0", "ens3"] {
            let path = net.path().join(format!("{name}.nmconnection"));
            std::fs::write(path, format!("[connection]\nid={name}\n")).unwrap();
        }
        std::fs::create_dir(net.path().join("conf.d")).unwrap();
        let p = PostInstall {
            ignition: Some(IgnitionConfig::from_bytes(CONFIG.to_vec(), None).unwrap()),
            append_kargs: vec!["nosmt".into(), "rd.multipath=default".into()],
            delete_kargs: vec!["rw".into(), "absent".into()],
            platform: Some("aws".into()),
            consoles: vec![],
            firstboot_args: Some("rd.neednet=1 ip=dhcp".into()),
            network_dir: Some(net.path().to_path_buf()),
        };
        apply(r, &p).unwrap();

        assert_eq!(
            std::fs::read(r.join("ignition/config.ign")).unwrap(),
            CONFIG
        );

        assert_eq!(
            options(r),
            "ignition.platform.id=aws $ignition_firstboot ostree=/ostree/boot.1/rhcos/abc/0 \
             root=UUID=910678ff-f77e-4a7d-8d53-86f2ac47a823 rootflags=prjquota \
             boot=UUID=3e0ac4c5-6f7d-4f7b-9b8e-2a1b0c9d8e7f console=ttyS0,115200n8 \
             nosmt rd.multipath=default"
        );
        // Only the options line changed.
        let entry = read(r, &format!("loader/entries/{BLS_ENTRY_NAME}"));
        assert_eq!(entry.replace(&options(r), OPTIONS), bls_entry());

        // aws has metal's GRUB commands: GRUB untouched.
        assert_eq!(read(r, "grub2/grub.cfg"), grub_cfg(GRUB_METAL_BLOCK));

        assert_eq!(
            read(r, "ignition.firstboot"),
            format!("{FIRSTBOOT}set ignition_network_kcmdline=\"rd.neednet=1 ip=dhcp\"\n")
        );

        // Modes and what is copied: the `network` and `ignition` tests.
        for name in ["bond0", "ens3"] {
            assert_eq!(
                read(r, &format!("coreos-firstboot-network/{name}.nmconnection")),
                format!("[connection]\nid={name}\n")
            );
        }
    }

    /// The options line and grub.cfg after `--platform` and `--console` on a boot partition
    /// with or without `platforms.json`.
    #[test]
    fn platform_and_console_set_the_kargs_and_grub_commands() {
        let serial = "serial --speed=115200\nterminal_input console serial\n\
                      terminal_output console serial\n";
        let unit1 = "serial --unit=1 --speed=115200 --word=8 --parity=no\n\
                     terminal_input console serial\nterminal_output console serial\n";
        let defaults = " console=tty0 console=ttyS0,115200n8";
        let ttys1 = "serial --unit=1 --speed=57600 --word=8 --parity=no\n\
                     terminal_input serial\nterminal_output serial\n";
        let id = |platform: &str| OPTIONS.replace("id=metal", &format!("id={platform}"));
        // (platform, with platforms.json, consoles, options line, GRUB console block)
        type Case<'a> = (Option<&'a str>, bool, &'a [&'a str], String, &'a str);
        let cases: [Case; 9] = [
            // metal changes nothing
            (Some("metal"), true, &[], OPTIONS.into(), GRUB_METAL_BLOCK),
            // a platform with its own GRUB commands and console kargs
            (
                Some("vmware"),
                true,
                &[],
                id("vmware").replace(defaults, " console=ttyS0,115200n8 console=tty0"),
                serial,
            ),
            // metal's kargs but no GRUB commands listed: the block is emptied
            (Some("qemu"), true, &[], id("qemu"), ""),
            // missing from the table: metal's consoles removed, none added
            (Some("gcp"), true, &[], id("gcp").replace(defaults, ""), ""),
            // without platforms.json only the ID changes
            (
                Some("openstack"),
                false,
                &[],
                id("openstack"),
                GRUB_METAL_BLOCK,
            ),
            // --console overrides the platform's defaults, or metal's
            (
                Some("vmware"),
                true,
                &["tty0", "ttyS1,115200n8"],
                id("vmware").replace(defaults, " console=tty0 console=ttyS1,115200n8"),
                unit1,
            ),
            (
                Some("metal"),
                true,
                &["ttyS1,57600"],
                OPTIONS.replace(defaults, " console=ttyS1,57600n8"),
                ttys1,
            ),
            (
                None,
                true,
                &["ttyS1,57600"],
                OPTIONS.replace(defaults, " console=ttyS1,57600n8"),
                ttys1,
            ),
            // without platforms.json the image's console kargs stay
            (
                None,
                false,
                &["tty0"],
                format!("{OPTIONS} console=tty0"),
                "terminal_input console\nterminal_output console\n",
            ),
        ];
        for (platform, with_platforms, console, options_line, grub) in cases {
            let root = boot(with_platforms);
            let p = PostInstall {
                platform: platform.map(String::from),
                consoles: consoles(console),
                ..Default::default()
            };
            apply(root.path(), &p).unwrap();
            let entry = read(root.path(), &format!("loader/entries/{BLS_ENTRY_NAME}"));
            assert_eq!(entry.replace(&options(root.path()), OPTIONS), bls_entry());
            assert_eq!(
                options(root.path()),
                options_line,
                "{platform:?} {console:?}"
            );
            assert_eq!(read(root.path(), "grub2/grub.cfg"), grub_cfg(grub));
        }
    }

    /// The console block goes to console.cfg when present; the user's deletes run after the
    /// console kargs were appended.
    #[test]
    fn console_cfg_and_user_kargs() {
        let root = boot(true);
        let console_cfg = grub_cfg(GRUB_METAL_BLOCK);
        std::fs::write(root.path().join("grub2/console.cfg"), &console_cfg).unwrap();
        let p = PostInstall {
            consoles: consoles(&["ttyS0,115200n8", "tty0"]),
            delete_kargs: vec!["console=tty0".into()],
            append_kargs: vec!["console=hvc0".into()],
            ..Default::default()
        };
        apply(root.path(), &p).unwrap();
        assert_eq!(
            read(root.path(), "grub2/console.cfg"),
            grub_cfg(
                "serial --unit=0 --speed=115200 --word=8 --parity=no\n\
                 terminal_input serial console\nterminal_output serial console\n"
            )
        );
        assert_eq!(
            read(root.path(), "grub2/grub.cfg"),
            grub_cfg(GRUB_METAL_BLOCK)
        );
        assert_eq!(
            options(root.path()),
            OPTIONS.replace(
                " console=tty0 console=ttyS0,115200n8",
                " console=ttyS0,115200n8 console=hvc0"
            )
        );
    }

    fn apply_err(root: &Path, p: &PostInstall) -> String {
        format!("{:#}", apply(root, p).unwrap_err())
    }

    #[test]
    fn errors_name_the_step_and_the_file() {
        let root = boot(true);
        let r = root.path();
        let entry = r.join("loader/entries").join(BLS_ENTRY_NAME);

        // The platform ID is already gone.
        std::fs::write(&entry, bls_entry().replace("id=metal", "id=aws")).unwrap();
        let p = PostInstall {
            platform: Some("gcp".into()),
            ..Default::default()
        };
        assert_eq!(
            apply_err(r, &p),
            format!(
                "editing kernel arguments in {}: couldn't locate the platform ID \
                 `ignition.platform.id=metal` in the options line",
                entry.display()
            )
        );

        // No options line.
        std::fs::write(&entry, "title x\n").unwrap();
        let p = PostInstall {
            append_kargs: vec!["a".into()],
            ..Default::default()
        };
        assert_eq!(
            apply_err(r, &p),
            format!(
                "editing kernel arguments in {}: the BLS entry has no `options` line",
                entry.display()
            )
        );

        // No BLS entry at all.
        std::fs::remove_file(&entry).unwrap();
        assert!(
            apply_err(r, &p).starts_with("finding the BLS entry to edit: found no BLS entries"),
            "{}",
            apply_err(r, &p)
        );

        // Missing console markers.
        make_boot(r, true);
        std::fs::write(r.join("grub2/grub.cfg"), "set timeout=1\n").unwrap();
        let p = PostInstall {
            consoles: consoles(&["ttyS0"]),
            ..Default::default()
        };
        assert_eq!(
            apply_err(r, &p),
            format!(
                "writing the GRUB console settings to {}: missing marker line `# CONSOLE-SETTINGS-START`",
                r.join("grub2/grub.cfg").display()
            )
        );

        // A missing ignition.firstboot and an Ignition config already present: the
        // `firstboot` and `ignition` tests.

        // A broken platform table.
        std::fs::write(r.join("coreos/platforms.json"), "{\"metal\": 1}").unwrap();
        let p = PostInstall {
            platform: Some("aws".into()),
            ..Default::default()
        };
        assert!(apply_err(r, &p).starts_with(&format!(
            "parsing the platform table {}: ",
            r.join("coreos/platforms.json").display()
        )));
    }

    #[test]
    fn validate_names_the_option() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let cases: Vec<(PostInstall, &str)> =
            vec![
            (
                PostInstall { append_kargs: vec!["".into()], ..Default::default() },
                "--append-karg \"\": a kernel argument must not be empty",
            ),
            (
                PostInstall { append_kargs: vec!["foo=\"a b\"".into()], ..Default::default() },
                "--append-karg \"foo=\\\"a b\\\"\": a kernel argument must not contain whitespace",
            ),
            (
                PostInstall { delete_kargs: vec!["a\nb".into()], ..Default::default() },
                "--delete-karg \"a\\nb\": a kernel argument must not contain whitespace",
            ),
            (
                PostInstall { platform: Some("AWS".into()), ..Default::default() },
                "--platform: invalid platform ID \"AWS\"",
            ),
            (
                PostInstall {
                    consoles: vec![Console::Graphical("ttyS0".into())],
                    ..Default::default()
                },
                "--console ttyS0: inconsistent console value",
            ),
            (
                PostInstall { firstboot_args: Some("ip=dhcp\"".into()), ..Default::default() },
                "--firstboot-args: '\"' is not allowed",
            ),
            (
                PostInstall { network_dir: Some("/nonexistent/nm".into()), ..Default::default() },
                "--network-dir /nonexistent/nm: No such file or directory",
            ),
            (
                PostInstall { network_dir: Some(file.path().to_path_buf()), ..Default::default() },
                "not a directory",
            ),
        ];
        for (p, expected) in cases {
            let err = p.validate().unwrap_err().to_string();
            assert!(err.contains(expected), "expected {expected:?} in {err:?}");
            // apply validates first, so a bad option fails before anything is written.
            let root = boot(true);
            assert!(apply(root.path(), &p).is_err());
            assert_eq!(options(root.path()), OPTIONS);
        }

        let ok = PostInstall {
            append_kargs: vec!["a=b,c".into()],
            delete_kargs: vec!["$ignition_firstboot".into()],
            platform: Some("ibmcloud".into()),
            consoles: consoles(&["ttyS0,115200n8", "tty0"]),
            firstboot_args: Some("rd.neednet=1 ip=dhcp".into()),
            network_dir: Some(std::env::temp_dir()),
            ..Default::default()
        };
        ok.validate().unwrap();
    }
}
