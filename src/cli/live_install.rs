//! `write-image --from-kernel-args`: the install the live system's `coreos.inst.*` kernel
//! arguments describe, as the arguments coreos-installer's live install service would pass
//! (`coreos.inst.install_dev`, `ignition_url`, `image_url`, `platform_id`, `stream`,
//! `save_partlabel`, `save_partindex`, `insecure`), plus the network and s390x arguments it
//! carries over to the installed system. Pure: the command line in, arguments out.

use anyhow::{bail, Result};

use crate::config::kernel_options::words;

/// Network arguments of the live system that the installed system's first boot gets too
/// (with `rd.neednet=1`), so it comes up on the same network: the kernel's, and dracut's
/// network options but `rd.neednet`.
const NETWORK: &[&str] = &[
    "ipv6.disable",
    "net.ifnames",
    "net.naming-scheme",
    "ip",
    "ifname",
    "rd.route",
    "bootdev",
    "BOOTIF",
    "rd.bootif",
    "nameserver",
    "rd.peerdns",
    "biosdevname",
    "vlan",
    "bond",
    "team",
    "bridge",
    "rd.net.timeout.carrier",
    "coreos.no_persist_ip",
    "coreos.force_persist_ip",
];

/// IBM Z device arguments, which the installed system needs on every boot.
const S390X: &[&str] = &[
    "rd.dasd",
    "rd.zfcp",
    "rd.znet",
    "zfcp.allow_lun_scan",
    "cio_ignore",
];

/// The `coreos.inst.<name>` keys read below, besides [`COPIED`]'s.
const READ: &[&str] = &["install_dev", "ignition_url", "insecure", "secure_ipl"];

/// Every `coreos.inst.<name>` key this install reads (its documentation is checked for each).
pub(super) fn keys() -> impl Iterator<Item = &'static str> {
    READ.iter()
        .copied()
        .chain(COPIED.iter().map(|(name, _)| *name))
}

/// `coreos.inst.<name>` → the option taking its value as is.
const COPIED: &[(&str, &str)] = &[
    ("image_url", "--image-url"),
    ("platform_id", "--platform"),
    ("stream", "--stream"),
    ("save_partlabel", "--save-partlabel"),
    ("save_partindex", "--save-partindex"),
];

/// What the kernel arguments stand for.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct KargArgs {
    /// `--key=value` or `--key` arguments.
    pub args: Vec<String>,
    /// `coreos.inst.install_dev`, with `/dev/` before a bare name.
    pub device: Option<String>,
    /// Deprecated forms seen, to log.
    pub warnings: Vec<String>,
}

/// The install `cmdline` (the text of `/proc/cmdline`) describes. An argument given twice
/// takes its last value, as the live install service reads them.
pub(crate) fn karg_args(cmdline: &str) -> Result<KargArgs> {
    // The value of the last `coreos.inst.<name>`: `Some(None)` for the bare key.
    let last = |name: &str| {
        // Every key read is listed, so that its documentation is checked.
        debug_assert!(
            keys().any(|k| k == name),
            "coreos.inst.{name} is missing from READ"
        );
        let key = format!("coreos.inst.{name}");
        let found = words(cmdline).filter(|(_, k, _)| *k == key).last();
        found.map(|(_, _, v)| v)
    };
    let set = |name: &str| last(name).flatten().filter(|v| !v.is_empty());
    // A bare boolean key is on, as the service reads it.
    let on = |name: &str| last(name).is_some_and(|v| v.is_none_or(on));
    let mut out = KargArgs::default();
    if words(cmdline).any(|(_, k, v)| k == "coreos.inst" && v == Some("yes")) {
        out.warnings
            .push("\"coreos.inst=yes\" is deprecated and has no effect".into());
    }
    if let Some(dev) = set("install_dev") {
        out.device = Some(if dev.contains('/') {
            dev.to_string()
        } else {
            out.warnings.push(format!(
                "\"coreos.inst.install_dev={dev}\" is deprecated: write \"coreos.inst.install_dev=/dev/{dev}\""
            ));
            format!("/dev/{dev}")
        });
    }
    // Plain http is allowed for compatibility with the live install service: the kernel
    // command line has no room for a digest.
    if let Some(url) = set("ignition_url").filter(|u| *u != "skip") {
        out.args.push(format!("--ignition-url={url}"));
        out.args.push("--insecure-ignition".into());
    }
    for (name, option) in COPIED {
        if let Some(v) = set(name) {
            out.args.push(format!("{option}={v}"));
        }
    }
    if on("insecure") {
        out.args.push("--insecure".into());
    }
    if on("secure_ipl") {
        bail!(
            "coreos.inst.secure_ipl asks for IBM Z secure IPL, which this installer does not \
             support (it installs no s390x boot record): remove it, or install with coreos-installer"
        );
    }
    let matches = |names: &[&str], key: &str| names.contains(&key);
    let network: Vec<&str> = words(cmdline)
        .filter(|(_, k, _)| matches(NETWORK, k))
        .map(|(arg, _, _)| arg)
        .collect();
    if !network.is_empty() {
        out.args.push(format!(
            "--firstboot-args=rd.neednet=1 {}",
            network.join(" ")
        ));
    }
    for (arg, _, _) in words(cmdline).filter(|(_, k, _)| matches(S390X, k)) {
        out.args.push(format!("--append-karg={arg}"));
    }
    Ok(out)
}

/// A boolean karg's value as the live install service reads it: empty, 0, no and off are
/// false.
fn on(value: &str) -> bool {
    !matches!(value, "" | "0" | "no" | "off")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_coreos_inst_argument_maps_to_its_option() {
        let k = karg_args(
            "BOOT_IMAGE=/images/vmlinuz coreos.inst.install_dev=/dev/sdb ro \
             coreos.inst.ignition_url=http://u:pw@h/c.ign coreos.inst.image_url=https://m/i.xz \
             coreos.inst.platform_id=qemu coreos.inst.stream=stable \
             coreos.inst.save_partlabel=data* coreos.inst.save_partindex=5- \
             coreos.inst.insecure ip=dhcp rd.neednet=1 nameserver=192.0.2.53 ipv6.disable \
             rd.dasd=0.0.0100 cio_ignore=all,!condev bootdevx=1 quiet",
        )
        .unwrap();
        assert_eq!(k.device.as_deref(), Some("/dev/sdb"));
        assert_eq!(
            k.args,
            [
                "--ignition-url=http://u:pw@h/c.ign",
                "--insecure-ignition",
                "--image-url=https://m/i.xz",
                "--platform=qemu",
                "--stream=stable",
                "--save-partlabel=data*",
                "--save-partindex=5-",
                "--insecure",
                "--firstboot-args=rd.neednet=1 ip=dhcp nameserver=192.0.2.53 ipv6.disable",
                "--append-karg=rd.dasd=0.0.0100",
                "--append-karg=cio_ignore=all,!condev",
            ]
        );
        assert!(k.warnings.is_empty(), "{:?}", k.warnings);
    }

    #[test]
    fn last_wins_skip_bare_names_booleans_and_nothing() {
        let k = karg_args(
            "coreos.inst.install_dev=sda coreos.inst.install_dev=vdb coreos.inst=yes \
             coreos.inst.ignition_url=skip coreos.inst.image_url=https://a \
             coreos.inst.image_url=https://b coreos.inst.insecure=1 coreos.inst.insecure=off \
             coreos.inst.platform_id=",
        )
        .unwrap();
        assert_eq!(k.device.as_deref(), Some("/dev/vdb"));
        assert_eq!(k.args, ["--image-url=https://b"]);
        assert_eq!(k.warnings.len(), 2, "{:?}", k.warnings);
        assert!(
            k.warnings[0].contains("coreos.inst=yes"),
            "{:?}",
            k.warnings
        );
        assert!(k.warnings[1].contains("/dev/vdb"), "{:?}", k.warnings);
        for (value, want) in [
            ("", false),
            ("0", false),
            ("no", false),
            ("yes", true),
            ("1", true),
        ] {
            let k = karg_args(&format!("coreos.inst.insecure={value}")).unwrap();
            assert_eq!(
                k.args.contains(&"--insecure".to_string()),
                want,
                "{value:?}"
            );
        }
        assert_eq!(
            karg_args("coreos.inst.insecure").unwrap().args,
            ["--insecure"]
        );
        assert_eq!(karg_args("ro quiet").unwrap(), KargArgs::default());
        let e = karg_args("coreos.inst.secure_ipl=1")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("secure IPL") && e.contains("coreos-installer"),
            "{e}"
        );
        assert!(karg_args("coreos.inst.secure_ipl=0").is_ok());
    }
}
