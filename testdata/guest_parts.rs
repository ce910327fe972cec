#![allow(dead_code)]
//! The kernel and base initramfs of the QEMU guests that run our binary against real disks
//! (tests/common/vm.rs), built at test time and cached like the other test data.
//!
//! | part                          | comes from                                              |
//! |-------------------------------|---------------------------------------------------------|
//! | `vmlinux` (see [`elf_kernel`]) | the kernel package `linux-image-amd64` points to       |
//! | `bzImage` (the same kernel as shipped, for a boot through firmware) | the kernel package |
//! | busybox                       | `busybox-static`                                        |
//! | kernel modules ([`ROOT_MODULES`] and their dependencies, in load order) | the kernel package |
//! | `/boot/config-<release>` (the kernel's build configuration) | the kernel package |
//! | [`HOST_TOOLS`] and every shared library `ldd` names for them | this host, at the same paths |
//!
//! The packages come from `apt-get download` (see testdata/boot_parts.rs, whose download,
//! module and cpio code this reuses); nothing is installed. The host tools come from this
//! host (`bash .ci/install-deps` installs them), so the cache entry records what they were and
//! is rebuilt when they change. The rig adds our binary per run in a second archive, so a
//! rebuilt binary needs no new parts.
//!
//! The initramfs's `/init` ([`INIT_SCRIPT`]) mounts the share, waits for the disks, runs the
//! case script and powers the machine off; see its comments for what it prints.

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::boot_parts::{
    download, first_match, kernel_package, modules_in_load_order, unpack, Cpio,
};
use crate::coreos_image::{cached, find_tool, hex_sha256};

/// Bump whenever the parts or the initramfs change; part of the cache key.
pub(crate) const GUEST_PARTS_VERSION: u32 = 6;

/// The modules `/init` loads, dependencies added (names as the kernel spells them; those built
/// into the kernel are left out). The crypto algorithms come first: ext4, jbd2 and libcrc32c
/// (XFS) ask the crypto API for crc32c, and t10-pi (sd, NVMe) for crct10dif and crc64-rocksoft,
/// which no `depends=` names and which nothing can load on demand without modprobe. squashfs
/// is the live ISO's root file system (Debian builds its zstd decompressor into the kernel).
/// Under firmware (see [`GuestParts::bzimage`]): efivarfs for the UEFI variables, and vfat with
/// the code page and character set a plain `mount` of an EFI system partition asks for.
pub(crate) const ROOT_MODULES: [&str; 26] = [
    "crc32c_generic",
    "crct10dif_generic",
    "crc64_rocksoft_generic",
    "virtio_pci",
    "virtio_blk",
    "virtio_scsi",
    "sd_mod",
    "nvme",
    "ahci",
    "dm_mod",
    "dm_multipath",
    "dm_round_robin",
    "dm_flakey",
    "md_mod",
    "raid1",
    "loop",
    "9pnet_virtio",
    "9p",
    "ext4",
    "libcrc32c",
    "xfs",
    "squashfs",
    "efivarfs",
    "vfat",
    "nls_cp437",
    "nls_ascii",
];

/// Host programs the guest gets, at the paths they have here, with their libraries. `kexec`
/// (kexec-tools) starts the kernel `write-image --kexec` loaded (`kexec -e`: what `systemctl
/// kexec` ends in on a host), as busybox has no kexec applet. LVM's commands (links to `lvm`)
/// and `wipefs`: the install-disk cleanup's, and those that build the earlier LVM system it
/// cleans. `efibootmgr`: the UEFI boot entries of a real install, under firmware.
pub(crate) const HOST_TOOLS: [&str; 18] = [
    "dmsetup",
    "mdadm",
    "lsblk",
    "rsync",
    "partx",
    "sgdisk",
    "blkid",
    "kexec",
    "wipefs",
    "lvm",
    "vgs",
    "pvs",
    "vgremove",
    "pvremove",
    "pvcreate",
    "vgcreate",
    "lvcreate",
    "efibootmgr",
];

/// What `/init` prefixes its own lines with.
pub(crate) const MARKER: &str = "AI-GUEST";

/// `/init` of the guest (busybox sh). It prints `AI-GUEST init <kernel release> <uptime>`, loads the
/// modules (`AI-GUEST modules <uptime>`), mounts efivarfs where the kernel was started by UEFI
/// firmware (as systemd does on a host), mounts the 9p share `share` at /share, waits up to
/// 30 s for every disk named in /share/disks (kernel names, one a line), prints
/// `AI-GUEST ready <uptime>` and runs /share/case.sh
/// with `sh`, its output to the console and to /share/case.log; then syncs, prints
/// `AI-GUEST exit <status>` and powers off. Problems are `AI-GUEST error ...` lines; status 253
/// means disks were missing (the case did not run), 255 that the share could not be mounted.
/// With `ai.probe` on the kernel command line it powers off right after `AI-GUEST probe ok`.
pub(crate) const INIT_SCRIPT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
exec </dev/console >/dev/console 2>&1
ln -sf /proc/self/mounts /etc/mtab
say() { echo "AI-GUEST $*"; }
uptime() { cut -d' ' -f1 /proc/uptime; }
finish() { sync; say exit "$1"; poweroff -f; }
say init "$(uname -r) $(uptime)"
case " $(cat /proc/cmdline) " in *" ai.probe "*) say probe ok; poweroff -f ;; esac
ip link set lo up || say error "cannot bring up lo"
for m in /modules/*.ko; do
  # efivarfs refuses to load (ENODEV) on a kernel that no UEFI firmware started.
  case "$m" in *-efivarfs.ko) [ -d /sys/firmware/efi ] || continue ;; esac
  insmod "$m" || say error "insmod $m failed"
done
say modules "$(uptime)"
if [ -d /sys/firmware/efi/efivars ] && ! mount -t efivarfs efivarfs /sys/firmware/efi/efivars; then
  say error "cannot mount efivarfs"
fi
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 share /share; then
  say error "cannot mount the 9p share"
  finish 255
fi
n=0
while :; do
  missing=
  for d in $(cat /share/disks 2>/dev/null); do
    [ -e "/sys/block/$d" ] || missing="$missing $d"
  done
  [ -z "$missing" ] || [ $n -ge 300 ] && break
  sleep 0.1
  n=$((n + 1))
done
if [ -n "$missing" ]; then
  say error "disks missing after 30 s:$missing (have: $(ls /sys/block | tr '\n' ' '))"
  finish 253
fi
say ready "$(uptime)"
{ sh /share/case.sh; echo $? >/tmp/case.rc; } 2>&1 | tee /share/case.log
finish "$(cat /tmp/case.rc 2>/dev/null || echo 255)"
"#;

const MARKER_NAME: &str = "COMPLETE";
const MARKER_HEADER: &str = "guest-parts";

/// The cached kernel and base initramfs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GuestParts {
    /// The uncompressed ELF kernel, booted at its PVH entry (see [`elf_kernel`]).
    pub kernel: PathBuf,
    /// The same kernel as the package ships it, for a guest under UEFI firmware (OVMF), which
    /// starts it through its EFI stub: a PVH entry has no firmware, so no UEFI variables.
    pub bzimage: PathBuf,
    /// gzip'd newc cpio.
    pub initramfs: PathBuf,
    /// The kernel's release (`6.1.0-26-amd64`).
    pub kernel_release: String,
    /// Short digest of the parts' origins.
    pub fingerprint: String,
}

/// The host tools' paths, resolved here.
fn host_tools() -> Result<Vec<PathBuf>> {
    HOST_TOOLS
        .iter()
        .map(|t| {
            find_tool(t).ok_or_else(|| {
                anyhow!("{t} not found: the guest needs it (bash .ci/install-deps installs it)")
            })
        })
        .collect()
}

/// What the host tools and their libraries are now: path, size and change time of each file
/// (links followed), digested; the cache entry is rebuilt when it differs.
fn host_tools_fingerprint() -> Result<String> {
    let mut text = String::new();
    for tool in host_tools()? {
        let mut files = vec![tool.clone()];
        files.extend(crate::boot_parts::cpio::libraries(&tool)?);
        for f in files {
            let m = fs::metadata(&f).with_context(|| format!("{}", f.display()))?;
            text.push_str(&format!(
                "{} {} {}.{}\n",
                f.display(),
                m.len(),
                m.ctime(),
                m.ctime_nsec()
            ));
        }
    }
    Ok(hex_sha256(text.as_bytes()))
}

/// Module names as the kernel spells them from a `modules.builtin` (one path a line).
fn builtin_modules(text: &str) -> HashSet<String> {
    text.lines()
        .filter_map(|l| {
            Path::new(l.trim())
                .file_name()?
                .to_str()?
                .strip_suffix(".ko")
        })
        .map(|n| n.replace('-', "_"))
        .collect()
}

/// The kernel as an ELF file, taken out of the package's bzImage (Debian compresses it with
/// xz). QEMU starts such a kernel at its PVH entry point, in 32-bit protected mode: no real-mode
/// setup and no decompressor, which take about 6 s under software emulation, and which this
/// host's KVM cannot run at all.
pub(crate) fn elf_kernel(bzimage: &[u8]) -> Result<Vec<u8>> {
    let at = bzimage
        .windows(6)
        .position(|w| w == b"\xfd7zXZ\0")
        .ok_or_else(|| anyhow!("no xz-compressed kernel in the bzImage"))?;
    let mut elf = Vec::new();
    // One xz stream; the bzImage goes on after it.
    liblzma::read::XzDecoder::new(&bzimage[at..])
        .read_to_end(&mut elf)
        .context("decompressing the kernel")?;
    ensure!(
        elf.starts_with(b"\x7fELF"),
        "the bzImage's payload is not an ELF file"
    );
    Ok(elf)
}

/// The gzip'd base initramfs: busybox, the modules (numbered in load order), the host tools
/// with their libraries, the kernel's configuration where distributions keep it (`config`:
/// (release, text); a case can tell what the kernel was built with), a minimal /etc and
/// `/init`.
fn initramfs(
    busybox: &[u8],
    modules: &[(String, Vec<u8>)],
    tools: &[PathBuf],
    config: (&str, &[u8]),
) -> Result<Vec<u8>> {
    let mut c = Cpio::new();
    for d in [
        "bin", "boot", "dev", "etc", "proc", "sys", "run", "tmp", "mnt", "share", "root", "modules",
    ] {
        c.dir(d);
    }
    // The kernel opens /dev/console for init before anything is mounted.
    c.entry("dev/console", 0o020600, (5, 1), &[]);
    c.file("bin/busybox", 0o755, busybox);
    c.file("etc/passwd", 0o644, b"root:x:0:0:root:/root:/bin/sh\n");
    c.file("etc/group", 0o644, b"root:x:0:\n");
    c.file(&format!("boot/config-{}", config.0), 0o644, config.1);
    for (i, (name, ko)) in modules.iter().enumerate() {
        c.file(&format!("modules/{i:03}-{name}.ko"), 0o644, ko);
    }
    for tool in tools {
        c.host_program(tool)
            .with_context(|| format!("copying {} into the initramfs", tool.display()))?;
    }
    c.file("init", 0o755, INIT_SCRIPT.as_bytes());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&c.finish())?;
    Ok(gz.finish()?)
}

fn generate(dir: &Path) -> Result<GuestParts> {
    fs::create_dir_all(dir)?;
    let work = dir.join("work");
    fs::create_dir_all(&work)?;
    let tools_fingerprint = host_tools_fingerprint()?;
    let packages = vec!["busybox-static".to_string(), kernel_package()?];
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
    let modules_dir = tree.join(format!("lib/modules/{kver}"));
    let builtin = builtin_modules(
        &fs::read_to_string(modules_dir.join("modules.builtin")).unwrap_or_default(),
    );
    let roots: Vec<&str> = ROOT_MODULES
        .iter()
        .copied()
        .filter(|m| !builtin.contains(*m))
        .collect();
    let skipped: Vec<&str> = ROOT_MODULES
        .iter()
        .copied()
        .filter(|m| builtin.contains(*m))
        .collect();
    let modules = modules_in_load_order(&modules_dir.join("kernel"), &roots)?;
    let busybox = fs::read(tree.join("bin/busybox")).context("busybox-static's /bin/busybox")?;
    let config_path = tree.join(format!("boot/config-{kver}"));
    let config =
        fs::read(&config_path).with_context(|| format!("reading {}", config_path.display()))?;
    let parts = parts_in(dir, String::new(), kver.clone());
    fs::write(&parts.kernel, elf_kernel(&fs::read(&kernel_src)?)?)?;
    fs::copy(&kernel_src, &parts.bzimage)
        .with_context(|| format!("copying {}", kernel_src.display()))?;
    fs::write(
        &parts.initramfs,
        initramfs(&busybox, &modules, &host_tools()?, (&kver, &config))?,
    )?;
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
        "{MARKER_HEADER}\nversion {GUEST_PARTS_VERSION}\ninit {}\ntools {tools_fingerprint}\n\
         kernel {kver}\ndebs {}\nmodules {}\nbuiltin {}\n",
        hex_sha256(INIT_SCRIPT.as_bytes()),
        debs.join(" "),
        modules.join(" "),
        skipped.join(" ")
    );
    fs::write(dir.join(format!("{MARKER_NAME}.tmp")), &text)?;
    fs::rename(
        dir.join(format!("{MARKER_NAME}.tmp")),
        dir.join(MARKER_NAME),
    )?;
    read_marker(dir).ok_or_else(|| anyhow!("{} unreadable right after writing", dir.display()))
}

fn parts_in(dir: &Path, fingerprint: String, kernel_release: String) -> GuestParts {
    GuestParts {
        kernel: dir.join("vmlinux"),
        bzimage: dir.join("bzImage"),
        initramfs: dir.join("initramfs.img"),
        kernel_release,
        fingerprint,
    }
}

fn read_marker(dir: &Path) -> Option<GuestParts> {
    let text = fs::read_to_string(dir.join(MARKER_NAME)).ok()?;
    let mut lines = text.lines();
    if lines.next()? != MARKER_HEADER
        || lines.next()? != format!("version {GUEST_PARTS_VERSION}")
        || lines.next()? != format!("init {}", hex_sha256(INIT_SCRIPT.as_bytes()))
        || lines.next()? != format!("tools {}", host_tools_fingerprint().ok()?)
    {
        return None;
    }
    let kver = lines.next()?.strip_prefix("kernel ")?.to_string();
    let parts = parts_in(dir, hex_sha256(text.as_bytes())[..12].to_string(), kver);
    let files = [&parts.kernel, &parts.bzimage, &parts.initramfs];
    files.iter().all(|f| f.is_file()).then_some(parts)
}

/// The guest's kernel and base initramfs, built once (about 10 s, 70 MB of packages)
/// and cached under `guest-parts-v<N>`.
pub(crate) fn cached_guest_parts() -> Result<GuestParts> {
    for tool in ["apt-get", "apt-cache", "dpkg-deb", "ldd"] {
        if find_tool(tool).is_none() {
            bail!(
                "{tool} not found: the guest parts are built from Debian packages and host tools"
            );
        }
    }
    cached(
        &format!("guest-parts-v{GUEST_PARTS_VERSION}"),
        "guest_parts",
        read_marker,
        generate,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_modules_are_named_as_the_kernel_spells_them() {
        let b = builtin_modules("kernel/lib/crc32.ko\nkernel/drivers/md/dm-mod.ko\n");
        assert!(b.contains("crc32") && b.contains("dm_mod"), "{b:?}");
    }

    #[test]
    fn ldd_output_names_the_libraries_and_the_loader() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibblkid.so.1 => /lib/x86_64-linux-gnu/libblkid.so.1 (0x00007f1)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f2)\n";
        let libs = crate::boot_parts::cpio::parse_ldd(text).unwrap();
        assert_eq!(
            libs,
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libblkid.so.1"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
        assert!(crate::boot_parts::cpio::parse_ldd("\tlibx.so => not found\n").is_err());
    }
}
