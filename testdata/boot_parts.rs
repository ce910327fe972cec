#![allow(dead_code)]
//! The real boot chain for the bootable test images (`ImageSpec::with_boot`), built at test time
//! from Debian packages and cached like the other test data; nothing prebuilt is committed.
//!
//! | part                       | package              | goes to                                    |
//! |----------------------------|----------------------|--------------------------------------------|
//! | `systemd-bootx64.efi`      | `systemd-boot-efi`   | ESP `EFI/BOOT/BOOTX64.EFI` (removable path) |
//! | `ext4_x64.efi`             | `refind`             | ESP `EFI/systemd/drivers/` (systemd-boot loads it, then reads the XBOOTLDR `boot` partition) |
//! | `vmlinuz-<ver>`            | `linux-image-<ver>`  | /boot, where the BLS entry points          |
//! | initramfs (built here)     | `busybox-static` + the kernel's virtio and ext4 modules | /boot |
//!
//! The initramfs's `/init` ([`INIT_SCRIPT`]) prints what the boot tests check on the serial
//! console, one `AI-BOOT <key> <value>` line each, then powers the machine off.
//!
//! The packages come from `apt-get download` (so the apt lists must be current: `apt-get
//! update`), unpacked with `dpkg-deb`; the cache entry keeps only the four files and records
//! which package files they came from. No package is installed and nothing on the host changes.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};

use crate::coreos_image::{cached, hex_sha256, run, BootParts};

#[path = "cpio.rs"]
pub(crate) mod cpio;
pub(crate) use cpio::Cpio;

/// Bump whenever the parts or the initramfs change; part of the cache key.
pub(crate) const BOOT_PARTS_VERSION: u32 = 1;

/// The kernel modules the initramfs loads (their dependencies are added, in order): the virtio
/// disk, ext4 to read /boot, and crc32c, which ext4 and jbd2 ask the crypto API for (there is
/// no modprobe in the initramfs to load it on demand).
const ROOT_MODULES: [&str; 4] = ["crc32c_generic", "virtio_pci", "virtio_blk", "ext4"];

/// `/init` of the test initramfs (busybox sh). Every line the tests read starts with `AI-BOOT `;
/// the rest of the console (firmware, systemd-boot, kernel) is kept for failure messages.
pub(crate) const INIT_SCRIPT: &str = r#"#!/bin/busybox sh
/bin/busybox mkdir -p /bin /proc /sys /dev /mnt
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec >/dev/ttyS0 2>&1
say() { echo "AI-BOOT $*"; }
for m in /modules/*.ko; do insmod "$m" || say error "insmod $m failed"; done
n=0
while [ ! -e /sys/block/vda ] && [ $n -lt 200 ]; do sleep 0.05; n=$((n+1)); done
say cmdline "$(cat /proc/cmdline)"
if [ -e /sys/block/vda ]; then
  say disk "$(cat /sys/block/vda/size) $(cat /sys/block/vda/queue/logical_block_size)"
else
  say error "no virtio disk vda"
fi
boot=
for d in /sys/block/vda/vda*; do
  [ -e "$d/partition" ] || continue
  PARTNAME=
  . "$d/uevent"
  say partition "$(cat $d/partition) $(cat $d/start) $(cat $d/size) $PARTNAME"
  [ "$PARTNAME" = boot ] && boot=/dev/$DEVNAME
done
dmesg | grep -e GPT -e ' vda' -e 'partition' | while read -r line; do say kmsg "$line"; done
if [ -n "$boot" ] && mount -t ext4 -o ro "$boot" /mnt; then
  f=/mnt/ignition/config.ign
  if [ -f "$f" ]; then
    say ignition "$(sha256sum "$f" | cut -d' ' -f1) $(stat -c '%a %u:%g' "$f")"
  else
    say ignition missing
  fi
  for f in /mnt/coreos-firstboot-network/*; do
    [ -f "$f" ] && say network "$(basename "$f") $(sha256sum "$f" | cut -d' ' -f1) $(stat -c '%a' "$f")"
  done
  [ -f /mnt/ignition.firstboot ] && say firstboot present
  umount /mnt
else
  say error "cannot mount the boot partition ($boot)"
fi
say end
poweroff -f
"#;

const MARKER_NAME: &str = "COMPLETE";
const MARKER_HEADER: &str = "boot-parts";

/// The kernel package `linux-image-amd64` currently depends on (`linux-image-<version>`).
pub(crate) fn kernel_package() -> Result<String> {
    let out = Command::new("apt-cache")
        .args(["depends", "linux-image-amd64"])
        .output()
        .context("running apt-cache (the boot parts come from Debian packages)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let kernel = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .ok_or_else(|| {
            anyhow!(
                "apt-cache depends linux-image-amd64 names no kernel package (run apt-get update?)"
            )
        })?;
    Ok(kernel.to_string())
}

/// The Debian packages the parts come from: the three fixed ones and the kernel.
fn package_names() -> Result<Vec<String>> {
    Ok(vec![
        "systemd-boot-efi".into(),
        "refind".into(),
        "busybox-static".into(),
        kernel_package()?,
    ])
}

/// `apt-get download` the packages into `dir`; returns the .deb paths, in the given order.
pub(crate) fn download(packages: &[String], dir: &Path) -> Result<Vec<PathBuf>> {
    run(Command::new("apt-get")
        .arg("download")
        .args(packages)
        .current_dir(dir))
    .context("the boot tests need the Debian archive (run apt-get update)")?;
    packages
        .iter()
        .map(|name| first_match(dir, &format!("{name}_")))
        .collect()
}

pub(crate) fn unpack(deb: &Path, into: &Path) -> Result<()> {
    run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(into))?;
    Ok(())
}

/// Module name as the kernel spells it (`-` and `_` are the same).
fn module_name(file: &Path) -> Option<String> {
    let name = file.file_name()?.to_str()?.strip_suffix(".ko")?;
    Some(name.replace('-', "_"))
}

/// The `depends=` field of a module's `.modinfo` section (a NUL-separated list of `key=value`).
pub(crate) fn module_depends(ko: &[u8]) -> Vec<String> {
    ko.split(|&b| b == 0)
        .filter_map(|field| field.strip_prefix(b"depends="))
        .flat_map(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|d| !d.is_empty())
        .map(|d| d.replace('-', "_"))
        .collect()
}

/// The modules `roots` (names as the kernel spells them) and their dependencies, dependencies
/// first, with their files under `tree` (a kernel's `lib/modules/<ver>/kernel`).
pub(crate) fn modules_in_load_order(tree: &Path, roots: &[&str]) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = std::collections::HashMap::new();
    let mut stack = vec![tree.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Some(name) = module_name(&path) {
                files.insert(name, path);
            }
        }
    }
    fn visit(
        name: &str,
        files: &std::collections::HashMap<String, PathBuf>,
        order: &mut Vec<(String, Vec<u8>)>,
        seen: &mut Vec<String>,
    ) -> Result<()> {
        if seen.iter().any(|s| s == name) {
            return Ok(());
        }
        seen.push(name.to_string());
        let path = files
            .get(name)
            .ok_or_else(|| anyhow!("kernel module {name} not found (is it compressed?)"))?;
        let ko = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        for dep in module_depends(&ko) {
            visit(&dep, files, order, seen)?;
        }
        order.push((name.to_string(), ko));
        Ok(())
    }
    let mut order = Vec::new();
    let mut seen = Vec::new();
    for m in roots {
        visit(m, &files, &mut order, &mut seen)?;
    }
    Ok(order)
}

/// The gzip-compressed initramfs: busybox, the modules and `/init`. Compressed also because
/// mkfs.ext4 -d leaves all-zero blocks of a file as holes, which the ext4 UEFI driver cannot read.
fn initramfs(busybox: &[u8], modules: &[(String, Vec<u8>)]) -> Result<Vec<u8>> {
    let mut c = Cpio::new();
    for d in ["bin", "dev", "proc", "sys", "mnt", "modules"] {
        c.dir(d);
    }
    // The kernel opens /dev/console for init before anything is mounted.
    c.entry("dev/console", 0o020600, (5, 1), &[]);
    c.file("bin/busybox", 0o755, busybox);
    for (i, (name, ko)) in modules.iter().enumerate() {
        c.file(&format!("modules/{:02}-{name}.ko", i + 10), 0o644, ko);
    }
    c.file("init", 0o755, INIT_SCRIPT.as_bytes());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&c.finish())?;
    Ok(gz.finish()?)
}

pub(crate) fn first_match(dir: &Path, prefix: &str) -> Result<PathBuf> {
    fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .ok_or_else(|| anyhow!("no {prefix}* in {}", dir.display()))
}

fn generate(dir: &Path) -> Result<BootParts> {
    fs::create_dir_all(dir)?;
    let work = dir.join("work");
    fs::create_dir_all(&work)?;
    let packages = package_names()?;
    let debs = download(&packages, &work)?;
    let tree = work.join("tree");
    for deb in &debs {
        unpack(deb, &tree)?;
    }
    let kernel_src = first_match(&tree.join("boot"), "vmlinuz-")?;
    let kver = kernel_src
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("vmlinuz-"))
        .ok_or_else(|| anyhow!("odd kernel name {}", kernel_src.display()))?
        .to_string();
    let modules = modules_in_load_order(
        &tree.join(format!("lib/modules/{kver}/kernel")),
        &ROOT_MODULES,
    )?;
    let busybox = fs::read(tree.join("bin/busybox")).context("busybox-static's /bin/busybox")?;
    // The fingerprint comes from the marker, written last.
    let parts = parts_in(dir, String::new());
    fs::copy(&kernel_src, &parts.kernel)?;
    fs::write(&parts.initramfs, initramfs(&busybox, &modules)?)?;
    fs::copy(
        tree.join("usr/lib/systemd/boot/efi/systemd-bootx64.efi"),
        &parts.systemd_boot,
    )
    .context("systemd-boot-efi's systemd-bootx64.efi")?;
    fs::copy(
        tree.join("usr/share/refind/refind/drivers_x64/ext4_x64.efi"),
        &parts.ext4_driver,
    )
    .context("refind's ext4_x64.efi")?;
    fs::remove_dir_all(&work)?;

    let debs: Vec<String> = debs
        .iter()
        .map(|d| {
            d.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let modules: Vec<&str> = modules.iter().map(|(n, _)| n.as_str()).collect();
    let text = format!(
        "{MARKER_HEADER}\nversion {BOOT_PARTS_VERSION}\ninit {}\ndebs {}\nkernel {kver}\nmodules {}\n",
        hex_sha256(INIT_SCRIPT.as_bytes()),
        debs.join(" "),
        modules.join(" ")
    );
    fs::write(dir.join(format!("{MARKER_NAME}.tmp")), &text)?;
    fs::rename(
        dir.join(format!("{MARKER_NAME}.tmp")),
        dir.join(MARKER_NAME),
    )?;
    read_marker(dir).ok_or_else(|| anyhow!("{} unreadable right after writing", dir.display()))
}

/// Where the cache entry `dir` keeps the parts.
fn parts_in(dir: &Path, fingerprint: String) -> BootParts {
    BootParts {
        kernel: dir.join("vmlinuz"),
        initramfs: dir.join("initramfs.img"),
        systemd_boot: dir.join("systemd-bootx64.efi"),
        ext4_driver: dir.join("ext4_x64.efi"),
        fingerprint,
    }
}

fn read_marker(dir: &Path) -> Option<BootParts> {
    let text = fs::read_to_string(dir.join(MARKER_NAME)).ok()?;
    let mut lines = text.lines();
    if lines.next()? != MARKER_HEADER
        || lines.next()? != format!("version {BOOT_PARTS_VERSION}")
        || lines.next()? != format!("init {}", hex_sha256(INIT_SCRIPT.as_bytes()))
    {
        return None;
    }
    // The image cache keys on the fingerprint: new packages or a new /init make new images.
    let parts = parts_in(dir, hex_sha256(text.as_bytes())[..12].to_string());
    [
        &parts.kernel,
        &parts.initramfs,
        &parts.systemd_boot,
        &parts.ext4_driver,
    ]
    .iter()
    .all(|p| p.is_file())
    .then_some(parts)
}

/// The boot parts, downloaded and built once (a few seconds, 75 MB of packages) and cached.
pub(crate) fn cached_boot_parts() -> Result<BootParts> {
    for tool in ["apt-get", "apt-cache", "dpkg-deb"] {
        if crate::coreos_image::find_tool(tool).is_none() {
            bail!("{tool} not found: the boot parts are built from Debian packages");
        }
    }
    cached(
        &format!("boot-parts-v{BOOT_PARTS_VERSION}"),
        "boot_parts",
        read_marker,
        generate,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_depends_reads_the_modinfo_field() {
        let ko = b"\x7fELF junk\0license=GPL\0depends=jbd2,mbcache,crc16\0name=ext4\0";
        assert_eq!(module_depends(ko), ["jbd2", "mbcache", "crc16"]);
        assert!(module_depends(b"\0depends=\0name=x\0").is_empty());
    }

    #[test]
    fn cpio_entries_are_aligned_and_end_with_the_trailer() {
        let mut c = Cpio::new();
        c.file("init", 0o755, b"abc");
        let out = c.finish();
        assert_eq!(out.len() % 4, 0);
        assert!(out.starts_with(b"070701"));
        let trailer = out.windows(10).position(|w| w == b"TRAILER!!!").unwrap();
        assert_eq!((trailer - 110) % 4, 0);
    }
}
