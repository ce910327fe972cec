#![allow(dead_code)]
//! Generator for CoreOS-like *metal* disk images used by integration tests and benches.
//!
//! The raw image is laid out like the real RHCOS/FCOS metal images, only smaller:
//!
//! | #  | name         | byte offset | size           | type GUID                              | content                  |
//! |----|--------------|-------------|----------------|----------------------------------------|--------------------------|
//! | -  | pMBR + GPT   | 0           | 1 MiB          |                                        | fake MBR boot code, GPT  |
//! | 1  | `BIOS-BOOT`  | 1 MiB       | 1 MiB          | 21686148-6449-6E6F-744E-656564454649   | fake GRUB core pattern   |
//! | 2  | `EFI-SYSTEM` | 2 MiB       | 8 MiB          | C12A7328-F81F-11D2-BA4B-00A0C93EC93B   | empty FAT12 (or zeros)   |
//! | 3  | `boot`       | 10 MiB      | 32 MiB         | 0FC63DAF-8483-4772-8E79-3D69D8477DE4   | ext4 `boot`, RHCOS /boot |
//! | 4  | `root`       | 42 MiB      | `root_mib` MiB | 0FC63DAF-8483-4772-8E79-3D69D8477DE4   | ext4 `root`, ostree tree |
//! | -  | backup GPT   | end - 1 MiB | 1 MiB          |                                        | zeros + backup GPT       |
//!
//! Byte offsets are identical for 512- and 4096-byte sector images; only the LBA units of the
//! GPT (and the logical sector size of the FAT) differ.  The disk GUID is
//! [`PLACEHOLDER_DISK_GUID`], like real CoreOS images ship it; all partition GUIDs, filesystem
//! UUIDs and ext4 hash seeds are fixed constants (see below).
//!
//! External tools: `mkfs.ext4` and `debugfs` (e2fsprogs, `mkfs.ext4 -d` support required) are
//! mandatory; `mkfs.fat` (dosfstools) is optional — without it the ESP stays zeroed.
//!
//! [`ImageSpec::root_fs`] can make the root XFS instead (`mkfs.xfs`, then a loop mount and
//! `cp -a`: root only; not byte-reproducible), and [`ImageSpec::boot_objects`] adds /boot's
//! kernel and initramfs to the OSTree repository; `live_fixture.rs` uses both.
//!
//! Determinism: for a given [`ImageSpec`] the output is byte-identical between runs on the same
//! host with the same e2fsprogs/dosfstools versions (fixed UUIDs/hash seeds,
//! `E2FSPROGS_FAKE_TIME`, `mkfs.fat --invariant`, all inode timestamps forced to
//! [`FIXED_EPOCH`] with `debugfs`).  `mkfs.ext4 -d` adds files in the staging directory's
//! `readdir` order, which depends on the host filesystem, so the raw bytes (and hashes) may differ
//! between hosts: never hard-code image hashes in tests, use [`ImageFile::sha256`].
//!
//! Cost (2 cores): the test spec takes ~5 s including compression, the bench spec ~1 min, mostly
//! xz and gzip.  Set `COREOS_IMAGE_VERBOSE=1` to get per-step timings on stderr.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{anyhow, bail, ensure, Context, Result};
use sha2::{Digest, Sha256};

/// Bump whenever the generated output changes; part of the cache key.
pub(crate) const GENERATOR_VERSION: u32 = 1;
/// Disk GUID shipped in CoreOS images; first boot randomises it only while it still has this value.
pub(crate) const PLACEHOLDER_DISK_GUID: &str = "00000000-0000-4000-a000-000000000001";

/// GPT partition type GUIDs.
pub(crate) const BIOS_BOOT_TYPE_GUID: &str = "21686148-6449-6E6F-744E-656564454649";
pub(crate) const ESP_TYPE_GUID: &str = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B";
pub(crate) const LINUX_FS_TYPE_GUID: &str = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";
/// The boot partition's type in bootable images: systemd-boot reads BLS entries from the
/// partition of this type (XBOOTLDR) on the ESP's disk.
pub(crate) const XBOOTLDR_TYPE_GUID: &str = "BC13C2FF-59E6-4262-A352-B275FD6F7172";

/// Fixed unique partition GUIDs.
pub(crate) const BIOS_BOOT_PARTITION_GUID: &str = "c0de0001-0000-4000-8000-000000000001";
pub(crate) const ESP_PARTITION_GUID: &str = "c0de0001-0000-4000-8000-000000000002";
pub(crate) const BOOT_PARTITION_GUID: &str = "c0de0001-0000-4000-8000-000000000003";
pub(crate) const ROOT_PARTITION_GUID: &str = "c0de0001-0000-4000-8000-000000000004";
/// Fixed filesystem UUIDs (what `blkid` reports as UUID=).
pub(crate) const BOOT_FS_UUID: &str = "c0de0002-0000-4000-8000-000000000003";
pub(crate) const ROOT_FS_UUID: &str = "c0de0002-0000-4000-8000-000000000004";
/// Fixed ext4 directory hash seeds.
pub(crate) const BOOT_HASH_SEED: &str = "c0de0003-0000-4000-8000-000000000003";
pub(crate) const ROOT_HASH_SEED: &str = "c0de0003-0000-4000-8000-000000000004";
/// FAT volume id given to `mkfs.fat -i`; `blkid` shows it as `2A2B-2C2D`.
pub(crate) const ESP_VOLUME_ID: &str = "2a2b2c2d";
/// Filesystem labels.
pub(crate) const BOOT_LABEL: &str = "boot";
pub(crate) const ROOT_LABEL: &str = "root";
pub(crate) const ESP_LABEL: &str = "EFI-SYSTEM";
/// Every timestamp in the generated filesystems (2023-11-14T22:13:20Z).
pub(crate) const FIXED_EPOCH: u64 = 1_700_000_000;

/// Kernel version used in file names and the BLS entry.
pub(crate) const KERNEL_VERSION: &str = "5.14.0-427.el9_4.x86_64";
/// ostree OS name (`ostree/deploy/<os>`, `rhcos-<csum>` boot directory).
pub(crate) const OS_NAME: &str = "rhcos";
/// Build id shown in the BLS title and the aleph file.
pub(crate) const BUILD_ID: &str = "416.94.202406111011-0";
/// The only boot loader entry a fresh image has (relative to the boot filesystem root).
pub(crate) const BLS_ENTRY_PATH: &str = "loader/entries/ostree-1-rhcos.conf";
/// GRUB config (relative to the boot filesystem root) holding the console block.
pub(crate) const GRUB_CFG_PATH: &str = "grub2/grub.cfg";
pub(crate) const CONSOLE_SETTINGS_START: &str = "# CONSOLE-SETTINGS-START";
pub(crate) const CONSOLE_SETTINGS_END: &str = "# CONSOLE-SETTINGS-END";
pub(crate) const IGNITION_FIRSTBOOT_PATH: &str = "ignition.firstboot";
pub(crate) const IGNITION_FIRSTBOOT_CONTENT: &str =
    "# Remove this file to rerun Ignition\nset ignition_network_kcmdline=\"\"\n";
pub(crate) const PLATFORMS_JSON_PATH: &str = "coreos/platforms.json";

pub(crate) const MIB: u64 = 1 << 20;
pub(crate) const BIOS_BOOT_OFFSET: u64 = MIB;
pub(crate) const BIOS_BOOT_SIZE: u64 = MIB;
pub(crate) const ESP_OFFSET: u64 = 2 * MIB;
pub(crate) const ESP_SIZE: u64 = 8 * MIB;
pub(crate) const BOOT_OFFSET: u64 = 10 * MIB;
pub(crate) const BOOT_SIZE: u64 = 32 * MIB;
pub(crate) const ROOT_OFFSET: u64 = 42 * MIB;

const KERNEL_SIZE: usize = 6 * MIB as usize;
const INITRAMFS_SIZE: usize = 12 * MIB as usize;
/// Fraction (percent) of the root partition filled with file content.
const ROOT_FILL_PERCENT: u64 = 65;

// ---------------------------------------------------------------------------------------------
// Spec and layout
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Compression {
    Gzip,
    Xz,
    Zstd,
}

impl Compression {
    pub(crate) const ALL: [Compression; 3] =
        [Compression::Gzip, Compression::Xz, Compression::Zstd];

    /// File name extension without the dot.
    pub(crate) fn extension(self) -> &'static str {
        match self {
            Compression::Gzip => "gz",
            Compression::Xz => "xz",
            Compression::Zstd => "zst",
        }
    }
}

/// Filesystem of the root partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum RootFs {
    /// ext4 built with `mkfs.ext4 -d` (no mount needed): the default.
    #[default]
    Ext4,
    /// XFS, as on real RHCOS/FCOS. Populated through a loop mount, so it needs root; at least
    /// [`XFS_MIN_ROOT_MIB`] MiB (mkfs.xfs refuses smaller filesystems).
    Xfs,
}

/// Smallest root partition mkfs.xfs (>= 5.19) accepts.
pub(crate) const XFS_MIN_ROOT_MIB: u64 = 300;

#[derive(Clone, Debug)]
pub(crate) struct ImageSpec {
    /// Logical sector size of the GPT: 512 or 4096.
    pub sector_size: u64,
    /// Size of the root partition in MiB.
    pub root_mib: u64,
    /// Seed of the content generator.
    pub seed: u64,
    /// Filesystem of the root partition.
    pub root_fs: RootFs,
    /// Whether the deployment also carries /boot's kernel and initramfs as OSTree objects
    /// (`usr/lib/modules/<kver>/vmlinuz` and `initramfs.img`, byte-identical to the copies on
    /// /boot), as real RHCOS does; an osmet packer then maps the /boot copies to those objects.
    pub boot_objects: bool,
    /// A real boot chain instead of the fake kernel and initramfs, see [`ImageSpec::with_boot`].
    pub boot: Option<BootParts>,
}

/// The files that make an image boot under UEFI (see `boot_parts.rs`, which builds them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BootParts {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    /// systemd-boot, installed as the ESP's removable-media loader.
    pub systemd_boot: PathBuf,
    /// A UEFI ext4 driver that systemd-boot loads to read the `boot` partition.
    pub ext4_driver: PathBuf,
    /// Short digest naming the parts' versions, part of the image cache key.
    pub fingerprint: String,
}

/// One GPT partition of the generated layout.
#[derive(Clone, Debug)]
pub(crate) struct PartitionInfo {
    /// 1-based partition number.
    pub number: u32,
    pub name: &'static str,
    pub type_guid: &'static str,
    pub partition_guid: &'static str,
    /// Byte offset and size (identical for both sector sizes).
    pub offset: u64,
    pub size: u64,
}

impl PartitionInfo {
    pub(crate) fn start_lba(&self, sector_size: u64) -> u64 {
        self.offset / sector_size
    }
    pub(crate) fn end_lba(&self, sector_size: u64) -> u64 {
        (self.offset + self.size) / sector_size - 1
    }
}

impl ImageSpec {
    /// Small image (91 MiB in total) for integration tests.
    pub(crate) fn test(sector_size: u64) -> Self {
        ImageSpec {
            sector_size,
            root_mib: 48,
            seed: 1,
            root_fs: RootFs::Ext4,
            boot_objects: false,
            boot: None,
        }
    }

    /// Image larger than 1 GiB (1143 MiB in total) for benches.
    pub(crate) fn bench(sector_size: u64) -> Self {
        ImageSpec {
            sector_size,
            root_mib: 1100,
            seed: 1,
            root_fs: RootFs::Ext4,
            boot_objects: false,
            boot: None,
        }
    }

    /// The image behind the live-system fixture (see `live_fixture.rs`): XFS root with the boot
    /// files as objects, like the metal image a live ISO's osmet files describe. 363 MiB in
    /// total, or 1143 MiB with `bench`.
    pub(crate) fn live(sector_size: u64, bench: bool) -> Self {
        ImageSpec {
            sector_size,
            root_mib: if bench { 1100 } else { 320 },
            seed: 1,
            root_fs: RootFs::Xfs,
            boot_objects: true,
            boot: None,
        }
    }

    /// This image with a real boot chain: the ESP holds systemd-boot and the ext4 driver, the
    /// `boot` partition has the XBOOTLDR type, and /boot (and the deployment, with
    /// `boot_objects`) holds a real kernel and the test initramfs. Firmware, systemd-boot and
    /// the kernel then read what an install wrote; the BLS entry and layout stay the same.
    pub(crate) fn with_boot(mut self, parts: BootParts) -> Self {
        self.boot = Some(parts);
        self
    }

    /// Total size of the raw image in bytes (a multiple of 1 MiB).
    pub(crate) fn total_size(&self) -> u64 {
        ROOT_OFFSET + self.root_mib * MIB + MIB
    }

    /// Name of the cache subdirectory, e.g. `v1-ss512-root48-seed1`, with `-xfs` and `-bootobj`
    /// appended for the non-default options (so the default names stay as they were).
    pub(crate) fn cache_name(&self) -> String {
        format!(
            "v{}-ss{}-root{}-seed{}{}",
            GENERATOR_VERSION,
            self.sector_size,
            self.root_mib,
            self.seed,
            self.option_suffix()
        )
    }

    fn option_suffix(&self) -> String {
        let mut s = String::new();
        if self.root_fs == RootFs::Xfs {
            s.push_str("-xfs");
        }
        if self.boot_objects {
            s.push_str("-bootobj");
        }
        if let Some(b) = &self.boot {
            s.push_str(&format!("-boot{}", b.fingerprint));
        }
        s
    }

    /// Base file name of the raw image, like the real artifacts.
    pub(crate) fn raw_file_name(&self) -> String {
        if self.sector_size == 4096 {
            "rhcos-metal4k.x86_64.raw".to_string()
        } else {
            "rhcos-metal.x86_64.raw".to_string()
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        ensure!(
            self.sector_size == 512 || self.sector_size == 4096,
            "sector size must be 512 or 4096, not {}",
            self.sector_size
        );
        ensure!(
            self.root_mib >= 16,
            "root partition must be at least 16 MiB"
        );
        ensure!(self.root_mib <= 1 << 20, "root partition too large");
        ensure!(
            self.root_fs != RootFs::Xfs || self.root_mib >= XFS_MIN_ROOT_MIB,
            "an XFS root partition must be at least {XFS_MIN_ROOT_MIB} MiB"
        );
        Ok(())
    }

    /// The four partitions, in order.
    pub(crate) fn partitions(&self) -> [PartitionInfo; 4] {
        [
            PartitionInfo {
                number: 1,
                name: "BIOS-BOOT",
                type_guid: BIOS_BOOT_TYPE_GUID,
                partition_guid: BIOS_BOOT_PARTITION_GUID,
                offset: BIOS_BOOT_OFFSET,
                size: BIOS_BOOT_SIZE,
            },
            PartitionInfo {
                number: 2,
                name: "EFI-SYSTEM",
                type_guid: ESP_TYPE_GUID,
                partition_guid: ESP_PARTITION_GUID,
                offset: ESP_OFFSET,
                size: ESP_SIZE,
            },
            PartitionInfo {
                number: 3,
                name: "boot",
                type_guid: if self.boot.is_some() {
                    XBOOTLDR_TYPE_GUID
                } else {
                    LINUX_FS_TYPE_GUID
                },
                partition_guid: BOOT_PARTITION_GUID,
                offset: BOOT_OFFSET,
                size: BOOT_SIZE,
            },
            PartitionInfo {
                number: 4,
                name: "root",
                type_guid: LINUX_FS_TYPE_GUID,
                partition_guid: ROOT_PARTITION_GUID,
                offset: ROOT_OFFSET,
                size: self.root_mib * MIB,
            },
        ]
    }

    /// ostree commit checksum of the (fake) deployment.
    pub(crate) fn ostree_commit(&self) -> String {
        hex_sha256(format!("ostree-commit:{}", self.seed).as_bytes())
    }

    /// ostree boot checksum (`/boot/ostree/rhcos-<csum>`).
    pub(crate) fn boot_checksum(&self) -> String {
        hex_sha256(format!("ostree-bootcsum:{}", self.seed).as_bytes())
    }

    /// Directory of kernel and initramfs inside the boot filesystem.
    pub(crate) fn kernel_dir(&self) -> String {
        format!("ostree/{}-{}", OS_NAME, self.boot_checksum())
    }

    /// Path of the kernel inside the boot filesystem (no leading slash).
    pub(crate) fn kernel_path(&self) -> String {
        format!("{}/vmlinuz-{}", self.kernel_dir(), KERNEL_VERSION)
    }

    /// Path of the initramfs inside the boot filesystem (no leading slash).
    pub(crate) fn initramfs_path(&self) -> String {
        format!("{}/initramfs-{}.img", self.kernel_dir(), KERNEL_VERSION)
    }

    /// The deployment directory inside the root filesystem (no leading slash).
    pub(crate) fn deployment_dir(&self) -> String {
        format!("ostree/deploy/{OS_NAME}/deploy/{}.0", self.ostree_commit())
    }

    /// Path of the kernel inside the deployment (relative to the deployment directory); only
    /// present with [`ImageSpec::boot_objects`].
    pub(crate) fn deployment_kernel_path(&self) -> String {
        format!("usr/lib/modules/{KERNEL_VERSION}/vmlinuz")
    }

    /// Path of the initramfs inside the deployment, see [`ImageSpec::deployment_kernel_path`].
    pub(crate) fn deployment_initramfs_path(&self) -> String {
        format!("usr/lib/modules/{KERNEL_VERSION}/initramfs.img")
    }

    /// The kernel and initramfs bytes on /boot: the real ones of a bootable image, else
    /// regenerated (18 MiB of PRNG output).
    pub(crate) fn boot_payloads(&self) -> (Vec<u8>, Vec<u8>) {
        if let Some(b) = &self.boot {
            let read = |p: &Path| fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            return (read(&b.kernel), read(&b.initramfs));
        }
        let mut rng = Prng::new(self.seed, 0xb007);
        let mut kernel = vec![0u8; KERNEL_SIZE];
        rng.fill(&mut kernel);
        kernel[0] = b'M';
        kernel[1] = b'Z';
        kernel[0x1fe] = 0x55;
        kernel[0x1ff] = 0xaa;
        kernel[0x202..0x206].copy_from_slice(b"HdrS");
        let mut initrd = vec![0u8; INITRAMFS_SIZE];
        rng.fill(&mut initrd);
        let hdr = b"07070100000001000041ed0000000000000000000000025c000000000000000000000000000000000000000000000000000000000800000000kernel\0\0";
        initrd[..hdr.len()].copy_from_slice(hdr);
        (kernel, initrd)
    }

    /// Object names (64 hex digits, `<2>/<62>` without the slash) of the kernel and the
    /// initramfs in the root filesystem's repository; only there with [`ImageSpec::boot_objects`].
    pub(crate) fn boot_payload_objects(&self) -> (String, String) {
        let (kernel, initrd) = self.boot_payloads();
        (hex_sha256(&kernel), hex_sha256(&initrd))
    }

    /// The `options` value of the BLS entry (everything after `options `).
    pub(crate) fn bls_options(&self) -> String {
        format!(
            "ignition.platform.id=metal $ignition_firstboot ostree=/ostree/boot.1/{}/{}/0 \
             root=UUID={} rw rootflags=prjquota boot=UUID={}",
            OS_NAME,
            self.boot_checksum(),
            ROOT_FS_UUID,
            BOOT_FS_UUID
        )
    }

    /// Full content of `loader/entries/ostree-1-rhcos.conf`.
    pub(crate) fn bls_entry(&self) -> String {
        format!(
            "title Red Hat Enterprise Linux CoreOS {} (Plow) (ostree:0)\n\
             version 1\n\
             options {}\n\
             linux /{}\n\
             initrd /{}\n",
            BUILD_ID,
            self.bls_options(),
            self.kernel_path(),
            self.initramfs_path()
        )
    }
}

/// Parse a textual GUID into the 16 on-disk (mixed-endian) bytes used by GPT and gptman.
pub(crate) fn guid_to_gpt_bytes(text: &str) -> Result<[u8; 16]> {
    let u = uuid::Uuid::parse_str(text).with_context(|| format!("invalid GUID {text:?}"))?;
    Ok(u.to_bytes_le())
}

/// Inverse of [`guid_to_gpt_bytes`]: lowercase textual form of on-disk GUID bytes.
pub(crate) fn gpt_bytes_to_guid(bytes: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes_le(*bytes).hyphenated().to_string()
}

pub(crate) fn hex_sha256(data: &[u8]) -> String {
    to_hex(&Sha256::digest(data))
}

pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Boot filesystem text content
// ---------------------------------------------------------------------------------------------

/// Console commands of the metal platform, also used inside the GRUB console block.
pub(crate) const METAL_GRUB_COMMANDS: [&str; 3] = [
    "serial --speed=115200",
    "terminal_input serial console",
    "terminal_output serial console",
];

/// Content of `grub2/grub.cfg`.
pub(crate) fn grub_cfg() -> String {
    let mut s = String::new();
    s.push_str(
        "# Boot menu for CoreOS-style systems.  Entries are generated by ostree as\n\
         # BLS snippets under /loader/entries; this file only sets up the environment.\n\
         \n\
         set pager=1\n\
         \n\
         if [ -e (md/md-boot) ]; then\n\
         \x20 # /boot lives on a RAID1 mirror; use the assembled device.\n\
         \x20 set prefix=md/md-boot\n\
         else\n\
         \x20 if [ -f ${config_directory}/bootuuid.cfg ]; then\n\
         \x20   source ${config_directory}/bootuuid.cfg\n\
         \x20 fi\n\
         \x20 if [ -n \"${BOOT_UUID}\" ]; then\n\
         \x20   search --fs-uuid \"${BOOT_UUID}\" --set prefix --no-floppy\n\
         \x20 else\n\
         \x20   search --label boot --set prefix --no-floppy\n\
         \x20 fi\n\
         fi\n\
         if [ -d ($prefix)/grub2 ]; then\n\
         \x20 set prefix=($prefix)/grub2\n\
         \x20 configfile $prefix/grub.cfg\n\
         else\n\
         \x20 set prefix=($prefix)/boot/grub2\n\
         \x20 configfile $prefix/grub.cfg\n\
         fi\n\
         boot\n\
         \n\
         set timeout=1\n\
         if [ x$feature_timeout_style = xy ] ; then\n\
         \x20 set timeout_style=menu\n\
         fi\n\
         \n\
         # Load the optional environment block (boot counting, saved entry).\n\
         if [ -f ${config_directory}/grubenv ]; then\n\
         \x20 load_env -f \"${config_directory}/grubenv\"\n\
         elif [ -s $prefix/grubenv ]; then\n\
         \x20 load_env\n\
         fi\n\
         \n\
         set ignition_firstboot=\"\"\n\
         if [ -f \"/ignition.firstboot\" ]; then\n\
         \x20 # Networking arguments for the first boot; ignition.firstboot may override them.\n\
         \x20 set ignition_network_kcmdline=\"\"\n\
         \x20 source \"/ignition.firstboot\"\n\
         \x20 set ignition_firstboot=\"ignition.firstboot ${ignition_network_kcmdline}\"\n\
         fi\n\
         \n",
    );
    s.push_str(CONSOLE_SETTINGS_START);
    s.push('\n');
    s.push_str("# Keep the console settings for the installed system between these markers.\n");
    s.push_str("# The installer rewrites this block when console arguments are given; the\n");
    s.push_str("# kernel console arguments of each platform are listed in platforms.json.\n");
    for c in METAL_GRUB_COMMANDS {
        s.push_str(c);
        s.push('\n');
    }
    s.push_str(CONSOLE_SETTINGS_END);
    s.push('\n');
    s.push_str(
        "\n\
         # Load the BLS entries from /loader/entries.\n\
         blscfg\n",
    );
    s
}

/// Content of `grub2/grubenv` (1024 bytes, '#'-padded).
pub(crate) fn grubenv() -> Vec<u8> {
    let mut v = b"# GRUB Environment Block\nboot_success=1\n".to_vec();
    v.resize(1024, b'#');
    v
}

/// (platform id, grub_commands, kernel_arguments) for `coreos/platforms.json`.
pub(crate) fn platforms() -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    let serial = METAL_GRUB_COMMANDS.to_vec();
    let tty_serial = vec!["console=tty0", "console=ttyS0,115200n8"];
    vec![
        ("aliyun", serial.clone(), vec!["console=ttyS0,115200n8"]),
        ("aws", serial.clone(), vec!["console=ttyS0,115200n8"]),
        (
            "azure",
            serial.clone(),
            vec![
                "console=tty0",
                "console=ttyS0,115200n8",
                "earlyprintk=ttyS0,115200",
                "rootdelay=300",
            ],
        ),
        (
            "azurestack",
            serial.clone(),
            vec![
                "console=tty0",
                "console=ttyS0,115200n8",
                "earlyprintk=ttyS0,115200",
                "rootdelay=300",
            ],
        ),
        ("gcp", serial.clone(), vec!["console=ttyS0,115200n8"]),
        ("ibmcloud", serial.clone(), vec!["console=ttyS0,115200n8"]),
        ("kubevirt", serial.clone(), vec!["console=ttyS0,115200n8"]),
        ("metal", serial.clone(), tty_serial.clone()),
        ("nutanix", serial.clone(), tty_serial.clone()),
        ("openstack", serial.clone(), tty_serial.clone()),
        ("qemu", serial.clone(), tty_serial.clone()),
        (
            "vmware",
            vec![],
            vec!["console=ttyS0,115200n8", "console=tty0"],
        ),
    ]
}

/// Content of `coreos/platforms.json` (pretty-printed JSON object).
pub(crate) fn platforms_json() -> String {
    fn list(items: &[&str]) -> String {
        if items.is_empty() {
            return "[]".to_string();
        }
        let inner: Vec<String> = items.iter().map(|s| format!("      \"{s}\"")).collect();
        format!("[\n{}\n    ]", inner.join(",\n"))
    }
    let entries: Vec<String> = platforms()
        .iter()
        .map(|(id, grub, kargs)| {
            format!(
                "  \"{}\": {{\n    \"grub_commands\": {},\n    \"kernel_arguments\": {}\n  }}",
                id,
                list(grub),
                list(kargs)
            )
        })
        .collect();
    format!("{{\n{}\n}}\n", entries.join(",\n"))
}

// ---------------------------------------------------------------------------------------------
// Deterministic PRNG (splitmix64 seeding + xoshiro256**)
// ---------------------------------------------------------------------------------------------

#[derive(Clone)]
pub(crate) struct Prng {
    s: [u64; 4],
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Prng {
    /// Independent stream `stream` derived from `seed`.
    pub(crate) fn new(seed: u64, stream: u64) -> Self {
        let mut st = seed ^ stream.wrapping_mul(0xd134_2543_de82_ef95);
        let mut s = [0u64; 4];
        for x in s.iter_mut() {
            *x = splitmix64(&mut st);
        }
        if s == [0; 4] {
            s[0] = 1;
        }
        Prng { s }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` (n > 0); the tiny modulo bias is irrelevant here.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `pct`/100.
    pub(crate) fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// Log-uniform size in `lo..=hi`.
    pub(crate) fn log_size(&mut self, lo: u64, hi: u64) -> u64 {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let v = (lo as f64) * ((hi as f64) / (lo as f64)).powf(u);
        (v as u64).clamp(lo, hi)
    }

    /// Fill with pseudo-random bytes (8 at a time: fast even without optimisation).
    pub(crate) fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let b = self.next_u64().to_le_bytes();
            let n = rest.len();
            rest.copy_from_slice(&b[..n]);
        }
    }

    /// Append `n` pseudo-random bytes.
    pub(crate) fn extend(&mut self, out: &mut Vec<u8>, n: usize) {
        let start = out.len();
        out.resize(start + n, 0);
        self.fill(&mut out[start..]);
    }
}

// ---------------------------------------------------------------------------------------------
// Content corpora
// ---------------------------------------------------------------------------------------------

const WORDS: &[&str] = &[
    "system",
    "service",
    "network",
    "device",
    "driver",
    "kernel",
    "module",
    "config",
    "option",
    "value",
    "default",
    "enable",
    "disable",
    "socket",
    "target",
    "mount",
    "path",
    "file",
    "directory",
    "storage",
    "volume",
    "partition",
    "cluster",
    "node",
    "control",
    "plane",
    "worker",
    "machine",
    "install",
    "update",
    "upgrade",
    "release",
    "version",
    "image",
    "container",
    "runtime",
    "pod",
    "manifest",
    "secret",
    "token",
    "certificate",
    "authority",
    "signature",
    "checksum",
    "digest",
    "stream",
    "buffer",
    "memory",
    "cache",
    "page",
    "block",
    "sector",
    "offset",
    "length",
    "size",
    "count",
    "index",
    "table",
    "entry",
    "record",
    "header",
    "footer",
    "format",
    "parse",
    "encode",
    "decode",
    "compress",
    "archive",
    "payload",
    "request",
    "response",
    "client",
    "server",
    "proxy",
    "route",
    "address",
    "interface",
    "bridge",
    "bond",
    "vlan",
    "firewall",
    "policy",
    "rule",
    "chain",
    "filter",
    "match",
    "action",
    "event",
    "signal",
    "process",
    "thread",
    "queue",
    "worker",
    "timer",
    "timeout",
    "retry",
    "error",
    "warning",
    "debug",
    "trace",
    "info",
    "notice",
    "critical",
    "failure",
    "success",
    "status",
    "state",
    "health",
    "check",
    "probe",
    "monitor",
    "metric",
    "counter",
    "gauge",
    "histogram",
    "label",
    "annotation",
    "selector",
    "namespace",
    "resource",
    "quota",
    "limit",
    "request",
    "priority",
    "schedule",
    "affinity",
    "taint",
    "toleration",
    "operator",
    "controller",
    "reconcile",
    "watch",
    "lease",
    "lock",
    "mutex",
    "atomic",
    "channel",
    "pipe",
    "descriptor",
    "handle",
    "context",
    "session",
    "user",
    "group",
    "owner",
    "permission",
    "mode",
    "access",
    "audit",
    "journal",
    "logger",
    "rotate",
    "archive",
    "backup",
    "restore",
    "snapshot",
    "clone",
    "mirror",
    "replica",
    "primary",
    "secondary",
    "backend",
    "frontend",
    "gateway",
    "endpoint",
    "service",
    "port",
    "protocol",
    "transport",
    "session",
    "handshake",
    "cipher",
    "key",
    "public",
    "private",
    "random",
    "entropy",
    "seed",
    "hash",
    "salt",
    "string",
    "integer",
    "boolean",
    "float",
    "array",
    "object",
    "struct",
    "field",
    "method",
    "function",
    "library",
    "symbol",
    "section",
    "segment",
    "loader",
    "linker",
    "binary",
    "executable",
    "shared",
    "static",
    "dynamic",
    "initialize",
    "finalize",
    "allocate",
    "release",
    "acquire",
    "register",
    "unregister",
    "attach",
    "detach",
    "open",
    "close",
    "read",
    "write",
    "seek",
    "flush",
    "sync",
    "append",
    "truncate",
    "remove",
    "rename",
    "create",
    "delete",
    "list",
    "get",
    "set",
    "put",
    "post",
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "for",
    "on",
    "with",
    "this",
    "that",
    "be",
    "by",
    "not",
    "or",
    "are",
    "from",
    "at",
    "as",
    "it",
    "an",
    "when",
    "which",
    "if",
    "will",
    "can",
    "must",
    "should",
    "may",
    "each",
    "all",
    "any",
    "only",
    "also",
    "after",
    "before",
    "then",
    "otherwise",
    "unless",
    "until",
    "while",
    "during",
    "between",
    "into",
    "over",
    "under",
    "ostree",
    "ignition",
    "coreos",
    "rpm",
    "dracut",
    "systemd",
    "grub",
    "udev",
    "dbus",
    "selinux",
    "podman",
    "crio",
    "kubelet",
    "etcd",
    "openshift",
    "fedora",
    "rhel",
    "linux",
];

const IDENT_PREFIXES: &[&str] = &[
    "g_", "ossl_", "sd_", "rpm", "ext2fs_", "xmlr", "nm_", "curl_", "_ZN4core", "_ZN3std", "json_",
    "dbus_", "udev_", "ostree_", "glib_", "crypto_", "ssl_", "archive_", "lzma_", "z",
];

/// Shared pool of pseudo-random "realistic" material files are cut from.
pub(crate) struct Corpus {
    /// Documentation, configuration and source-code like text.
    pub text: Vec<u8>,
    /// ELF-section like binary material (code, tables, strings, constants).
    pub bin: Vec<u8>,
}

const CORPUS_TEXT_SIZE: usize = 4 << 20;
const CORPUS_BIN_SIZE: usize = 4 << 20;

fn push_word(out: &mut Vec<u8>, rng: &mut Prng) {
    out.extend_from_slice(rng.pick(WORDS).as_bytes());
}

fn push_ident(out: &mut Vec<u8>, rng: &mut Prng) {
    out.extend_from_slice(rng.pick(IDENT_PREFIXES).as_bytes());
    push_word(out, rng);
    out.push(b'_');
    push_word(out, rng);
}

fn gen_prose(out: &mut Vec<u8>, rng: &mut Prng, target: usize) {
    let end = out.len() + target;
    let mut col = 0usize;
    while out.len() < end {
        let sentence = rng.range(5, 18);
        for i in 0..sentence {
            let start = out.len();
            push_word(out, rng);
            if i == 0 {
                out[start] = out[start].to_ascii_uppercase();
            }
            col += out.len() - start;
            if i + 1 == sentence {
                out.push(b'.');
                col += 1;
            }
            if col > 68 {
                out.push(b'\n');
                col = 0;
            } else {
                out.push(b' ');
                col += 1;
            }
        }
        if rng.chance(15) {
            out.extend_from_slice(b"\n\n");
            col = 0;
        }
    }
}

fn gen_config(out: &mut Vec<u8>, rng: &mut Prng, target: usize) {
    let end = out.len() + target;
    while out.len() < end {
        match rng.below(10) {
            0 => {
                out.extend_from_slice(b"\n[");
                push_word(out, rng);
                out.extend_from_slice(b"]\n");
            }
            1 | 2 => {
                out.extend_from_slice(b"# ");
                for _ in 0..rng.range(3, 10) {
                    push_word(out, rng);
                    out.push(b' ');
                }
                out.push(b'\n');
            }
            _ => {
                if rng.chance(20) {
                    out.push(b'#');
                }
                push_word(out, rng);
                if rng.chance(50) {
                    out.push(b'_');
                    push_word(out, rng);
                }
                out.extend_from_slice(b" = ");
                match rng.below(4) {
                    0 => out.extend_from_slice(rng.below(100_000).to_string().as_bytes()),
                    1 => out.extend_from_slice(if rng.chance(50) { b"true" } else { b"false" }),
                    2 => {
                        out.extend_from_slice(b"/usr/lib/");
                        push_word(out, rng);
                        out.push(b'/');
                        push_word(out, rng);
                    }
                    _ => push_word(out, rng),
                }
                out.push(b'\n');
            }
        }
    }
}

fn gen_code(out: &mut Vec<u8>, rng: &mut Prng, target: usize) {
    let end = out.len() + target;
    while out.len() < end {
        out.extend_from_slice(b"\ndef ");
        push_word(out, rng);
        out.push(b'_');
        push_word(out, rng);
        out.extend_from_slice(b"(self, ");
        push_word(out, rng);
        out.extend_from_slice(b"):\n");
        for _ in 0..rng.range(2, 9) {
            match rng.below(5) {
                0 => {
                    out.extend_from_slice(b"    if ");
                    push_word(out, rng);
                    out.extend_from_slice(b" is None:\n        raise ValueError(\"");
                    push_word(out, rng);
                    out.push(b' ');
                    push_word(out, rng);
                    out.extend_from_slice(b"\")\n");
                }
                1 => {
                    out.extend_from_slice(b"    for ");
                    push_word(out, rng);
                    out.extend_from_slice(b" in self.");
                    push_word(out, rng);
                    out.extend_from_slice(b"s:\n        self._");
                    push_word(out, rng);
                    out.extend_from_slice(b".append(");
                    push_word(out, rng);
                    out.extend_from_slice(b")\n");
                }
                2 => {
                    out.extend_from_slice(b"    # ");
                    for _ in 0..rng.range(3, 9) {
                        push_word(out, rng);
                        out.push(b' ');
                    }
                    out.push(b'\n');
                }
                _ => {
                    out.extend_from_slice(b"    ");
                    push_word(out, rng);
                    out.extend_from_slice(b" = self.");
                    push_word(out, rng);
                    out.push(b'.');
                    push_word(out, rng);
                    out.extend_from_slice(b"(");
                    push_word(out, rng);
                    out.extend_from_slice(b", ");
                    out.extend_from_slice(rng.below(4096).to_string().as_bytes());
                    out.extend_from_slice(b")\n");
                }
            }
        }
        out.extend_from_slice(b"    return ");
        push_word(out, rng);
        out.push(b'\n');
    }
}

/// x86-64 like instruction templates: (opcode bytes, immediate kind: 0 none, 1 imm8, 4 rel32).
const INSNS: &[(&[u8], u8)] = &[
    (&[0x55], 0),
    (&[0x48, 0x89, 0xe5], 0),
    (&[0x48, 0x83, 0xec], 1),
    (&[0x48, 0x83, 0xc4], 1),
    (&[0xe8], 4),
    (&[0xe8], 4),
    (&[0xff, 0x15], 4),
    (&[0x48, 0x8b, 0x45], 1),
    (&[0x48, 0x89, 0x45], 1),
    (&[0x8b, 0x45], 1),
    (&[0x89, 0x45], 1),
    (&[0x48, 0x8d, 0x3d], 4),
    (&[0x48, 0x8d, 0x35], 4),
    (&[0x48, 0x8b, 0x05], 4),
    (&[0x0f, 0x84], 4),
    (&[0x0f, 0x85], 4),
    (&[0x74], 1),
    (&[0x75], 1),
    (&[0xeb], 1),
    (&[0x31, 0xc0], 0),
    (&[0x48, 0x85, 0xc0], 0),
    (&[0x85, 0xc0], 0),
    (&[0x83, 0xf8], 1),
    (&[0x48, 0x39, 0xc3], 0),
    (&[0x48, 0x89, 0xdf], 0),
    (&[0x48, 0x89, 0xc7], 0),
    (&[0x4c, 0x89, 0xe7], 0),
    (&[0x41, 0x54], 0),
    (&[0x41, 0x55], 0),
    (&[0x53], 0),
    (&[0x5b], 0),
    (&[0x5d], 0),
    (&[0xc9], 0),
    (&[0xc3], 0),
    (&[0xb8], 4),
    (&[0xbe], 4),
    (&[0x0f, 0x1f, 0x44, 0x00, 0x00], 0),
    (&[0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00], 0),
];

fn gen_instructions(out: &mut Vec<u8>, rng: &mut Prng, target: usize) {
    let end = out.len() + target;
    while out.len() < end {
        // Skewed choice: low indices (common instructions) are picked more often.
        let r = rng.next_u64();
        let a = (r % INSNS.len() as u64) as usize;
        let b = ((r >> 20) % INSNS.len() as u64) as usize;
        let (op, imm) = INSNS[a.min(b)];
        out.extend_from_slice(op);
        match imm {
            1 => out.push(((r >> 40) as u8) & 0x78),
            4 => {
                let v = ((r >> 44) & 0xffff) as i64 - (1 << 15);
                out.extend_from_slice(&(v as i32).to_le_bytes());
            }
            _ => {}
        }
    }
}

/// Code made mostly of recurring idioms (prologues, call sequences, ...) like compiled code.
fn gen_machine_code(out: &mut Vec<u8>, rng: &mut Prng, idioms: &[Vec<u8>], target: usize) {
    let end = out.len() + target;
    while out.len() < end {
        if rng.chance(70) {
            let r = rng.next_u64();
            let a = (r % idioms.len() as u64) as usize;
            let b = ((r >> 24) % idioms.len() as u64) as usize;
            out.extend_from_slice(&idioms[a.min(b)]);
        } else {
            gen_instructions(out, rng, 1);
        }
    }
}

fn gen_string_table(out: &mut Vec<u8>, rng: &mut Prng, target: usize) {
    let end = out.len() + target;
    while out.len() < end {
        push_ident(out, rng);
        if rng.chance(30) {
            out.extend_from_slice(b"@@GLIBC_2.");
            out.extend_from_slice(rng.range(2, 34).to_string().as_bytes());
        }
        out.push(0);
    }
}

fn gen_reloc_table(out: &mut Vec<u8>, rng: &mut Prng, target: usize) {
    let end = out.len() + target;
    let mut addr = rng.range(0x1000, 0x40_0000) & !7;
    while out.len() < end {
        addr += 8 * rng.range(1, 4);
        out.extend_from_slice(&addr.to_le_bytes());
        let info = (rng.below(600) << 32) | *rng.pick(&[6u64, 7, 8, 1]);
        out.extend_from_slice(&info.to_le_bytes());
        let addend = if rng.chance(60) {
            0
        } else {
            rng.below(0x20_0000)
        };
        out.extend_from_slice(&addend.to_le_bytes());
    }
}

impl Corpus {
    pub(crate) fn new(seed: u64) -> Self {
        let mut rng = Prng::new(seed, 0xc0_4905);
        let mut text = Vec::with_capacity(CORPUS_TEXT_SIZE + 65536);
        while text.len() < CORPUS_TEXT_SIZE {
            let n = rng.range(2048, 16384) as usize;
            match rng.below(10) {
                0..=4 => gen_prose(&mut text, &mut rng, n),
                5..=7 => gen_config(&mut text, &mut rng, n),
                _ => gen_code(&mut text, &mut rng, n),
            }
        }
        text.truncate(CORPUS_TEXT_SIZE);

        let idioms: Vec<Vec<u8>> = (0..2048)
            .map(|_| {
                let mut v = Vec::new();
                let n = rng.range(6, 40) as usize;
                gen_instructions(&mut v, &mut rng, n);
                v
            })
            .collect();
        let mut bin = Vec::with_capacity(CORPUS_BIN_SIZE + 65536);
        while bin.len() < CORPUS_BIN_SIZE {
            let n = rng.range(512, 8192) as usize;
            match rng.below(20) {
                0..=8 => gen_machine_code(&mut bin, &mut rng, &idioms, n),
                9..=10 => gen_string_table(&mut bin, &mut rng, n),
                11..=13 => gen_reloc_table(&mut bin, &mut rng, n),
                14..=15 => rng.extend(&mut bin, n / 2),
                16..=18 => gen_machine_code(&mut bin, &mut rng, &idioms, n),
                _ => bin.resize(bin.len() + rng.range(16, 1024) as usize, 0),
            }
            // Align like section boundaries.
            let pad = (16 - bin.len() % 16) % 16;
            bin.resize(bin.len() + pad, 0);
        }
        bin.truncate(CORPUS_BIN_SIZE);
        Corpus { text, bin }
    }

    fn push_slices(src: &[u8], out: &mut Vec<u8>, rng: &mut Prng, n: usize, min: u64, max: u64) {
        let end = out.len() + n;
        while out.len() < end {
            let len = (rng.range(min, max) as usize).min(end - out.len());
            let off = (rng.below((src.len() - len) as u64) as usize) & !15;
            out.extend_from_slice(&src[off..off + len]);
        }
    }

    pub(crate) fn push_text(&self, out: &mut Vec<u8>, rng: &mut Prng, n: usize) {
        Self::push_slices(&self.text, out, rng, n, 1024, 16384)
    }

    pub(crate) fn push_bin(&self, out: &mut Vec<u8>, rng: &mut Prng, n: usize) {
        Self::push_slices(&self.bin, out, rng, n, 1024, 16384)
    }
}

// ---------------------------------------------------------------------------------------------
// Root filesystem content plan
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// ELF-like executable or shared library.
    Elf,
    /// Documentation / configuration / source text.
    Text,
    /// Already-compressed data (firmware, .ko.xz, .gz man pages): incompressible.
    Packed,
    /// Database-like: 4 KiB pages, partly filled with text.
    Pages,
}

struct Category {
    dir: &'static str,
    /// Number of subdirectories to spread files over (0 = flat).
    subdirs: u64,
    kind: Kind,
    min: u64,
    max: u64,
    /// Relative share of the content budget.
    weight: u64,
    mode: u32,
    name: fn(&mut Prng) -> String,
}

fn word(rng: &mut Prng) -> &'static str {
    WORDS[rng.below(WORDS.len() as u64) as usize]
}

fn name_bin(rng: &mut Prng) -> String {
    if rng.chance(50) {
        word(rng).to_string()
    } else {
        format!("{}-{}", word(rng), word(rng))
    }
}
fn name_lib(rng: &mut Prng) -> String {
    format!(
        "lib{}{}.so.{}.{}.{}",
        word(rng),
        word(rng),
        rng.below(4),
        rng.below(30),
        rng.below(10)
    )
}
fn name_doc(rng: &mut Prng) -> String {
    (*rng.pick(&[
        "README",
        "NEWS",
        "ChangeLog",
        "AUTHORS",
        "TODO",
        "CHANGES.md",
        "README.md",
    ]))
    .to_string()
}
fn name_license(rng: &mut Prng) -> String {
    (*rng.pick(&["COPYING", "LICENSE", "COPYING.LIB", "LICENSE.txt"])).to_string()
}
fn name_py(rng: &mut Prng) -> String {
    format!("{}_{}.py", word(rng), word(rng))
}
fn name_mo(rng: &mut Prng) -> String {
    format!("{}.mo", word(rng))
}
fn name_fw(rng: &mut Prng) -> String {
    format!("{}_{}-{}.bin", word(rng), word(rng), rng.below(100))
}
fn name_ko(rng: &mut Prng) -> String {
    format!("{}_{}.ko.xz", word(rng), word(rng))
}
fn name_man(rng: &mut Prng) -> String {
    format!("{}.{}.gz", word(rng), rng.range(1, 8))
}
fn name_unit(rng: &mut Prng) -> String {
    format!(
        "{}-{}.{}",
        word(rng),
        word(rng),
        rng.pick(&["service", "socket", "timer", "target"])
    )
}
fn name_conf(rng: &mut Prng) -> String {
    format!("{}.conf", word(rng))
}

const CATEGORIES: &[Category] = &[
    Category {
        dir: "usr/bin",
        subdirs: 0,
        kind: Kind::Elf,
        min: 16 << 10,
        max: 1536 << 10,
        weight: 13,
        mode: 0o755,
        name: name_bin,
    },
    Category {
        dir: "usr/sbin",
        subdirs: 0,
        kind: Kind::Elf,
        min: 16 << 10,
        max: 1024 << 10,
        weight: 4,
        mode: 0o755,
        name: name_bin,
    },
    Category {
        dir: "usr/libexec",
        subdirs: 12,
        kind: Kind::Elf,
        min: 16 << 10,
        max: 1024 << 10,
        weight: 6,
        mode: 0o755,
        name: name_bin,
    },
    Category {
        dir: "usr/lib64",
        subdirs: 0,
        kind: Kind::Elf,
        min: 32 << 10,
        max: 3 << 20,
        weight: 30,
        mode: 0o755,
        name: name_lib,
    },
    Category {
        dir: "usr/lib/python3.9/site-packages",
        subdirs: 20,
        kind: Kind::Text,
        min: 2 << 10,
        max: 96 << 10,
        weight: 7,
        mode: 0o644,
        name: name_py,
    },
    Category {
        dir: "usr/share/doc",
        subdirs: 60,
        kind: Kind::Text,
        min: 2 << 10,
        max: 256 << 10,
        weight: 8,
        mode: 0o644,
        name: name_doc,
    },
    Category {
        dir: "usr/share/licenses",
        subdirs: 60,
        kind: Kind::Text,
        min: 4 << 10,
        max: 48 << 10,
        weight: 2,
        mode: 0o644,
        name: name_license,
    },
    Category {
        dir: "usr/share/locale",
        subdirs: 24,
        kind: Kind::Text,
        min: 4 << 10,
        max: 128 << 10,
        weight: 3,
        mode: 0o644,
        name: name_mo,
    },
    Category {
        dir: "usr/lib/firmware",
        subdirs: 16,
        kind: Kind::Packed,
        min: 8 << 10,
        max: 1536 << 10,
        weight: 4,
        mode: 0o644,
        name: name_fw,
    },
    Category {
        dir: "usr/lib/modules/5.14.0-427.el9_4.x86_64/kernel/drivers",
        subdirs: 20,
        kind: Kind::Packed,
        min: 4 << 10,
        max: 384 << 10,
        weight: 3,
        mode: 0o644,
        name: name_ko,
    },
    Category {
        dir: "usr/share/man",
        subdirs: 8,
        kind: Kind::Packed,
        min: 1 << 10,
        max: 24 << 10,
        weight: 1,
        mode: 0o644,
        name: name_man,
    },
    Category {
        dir: "usr/lib/systemd/system",
        subdirs: 0,
        kind: Kind::Text,
        min: 300,
        max: 3 << 10,
        weight: 1,
        mode: 0o644,
        name: name_unit,
    },
    Category {
        dir: "usr/etc",
        subdirs: 30,
        kind: Kind::Text,
        min: 200,
        max: 16 << 10,
        weight: 1,
        mode: 0o644,
        name: name_conf,
    },
];

/// A few big files, as share of the content budget in percent.
const BIG_FILES: &[(&str, Kind, u64, u32)] = &[
    ("usr/bin/hyperkube", Kind::Elf, 4, 0o755),
    ("usr/lib64/libLLVM-17.so", Kind::Elf, 4, 0o755),
    ("usr/lib/locale/locale-archive", Kind::Text, 3, 0o644),
    ("usr/lib/sysimage/rpm/rpmdb.sqlite", Kind::Pages, 3, 0o644),
    ("usr/share/ignition/base-layers.bin", Kind::Packed, 1, 0o644),
];

struct PlannedFile {
    rel: String,
    kind: Kind,
    size: usize,
    mode: u32,
}

/// Rough ext4 metadata overhead of `mkfs.ext4 -b 4096` with the default mke2fs.conf: journal,
/// inode tables (inode_ratio 4096 below 512 MiB, else 16384; 256-byte inodes), plus ~2 MiB for
/// the directories of the generated tree.
fn ext4_overhead(bytes: u64) -> u64 {
    let blocks = bytes / 4096;
    let journal_blocks = match blocks {
        0..=32767 => 1024,
        32768..=262143 => 4096,
        262144..=524287 => 8192,
        _ => 16384,
    };
    let inode_ratio = if bytes < 512 * MIB { 4096 } else { 16384 };
    journal_blocks * 4096 + bytes / inode_ratio * 256 + 2 * MIB
}

/// Rough XFS overhead of `mkfs.xfs` 6.x: a 64 MiB log from 300 MiB on (smaller logs below),
/// ~1% for AG headers, btrees and inode chunks, plus ~2 MiB for the directories.
fn xfs_overhead(bytes: u64) -> u64 {
    (64 * MIB).min(bytes / 4) + bytes / 100 + 2 * MIB
}

/// Bytes of file content for the root filesystem: [`ROOT_FILL_PERCENT`] of the partition,
/// less for small partitions where the filesystem overhead would not leave room.
fn root_content_budget(root_bytes: u64, fs: RootFs) -> u64 {
    let wanted = root_bytes * ROOT_FILL_PERCENT / 100;
    let overhead = match fs {
        RootFs::Ext4 => ext4_overhead(root_bytes),
        RootFs::Xfs => xfs_overhead(root_bytes),
    };
    let room = root_bytes.saturating_sub(overhead) * 80 / 100;
    wanted.min(room)
}

fn plan_root_files(spec: &ImageSpec) -> Vec<PlannedFile> {
    let mut budget = root_content_budget(spec.root_mib * MIB, spec.root_fs);
    if spec.boot_objects {
        budget = budget.saturating_sub((KERNEL_SIZE + INITRAMFS_SIZE) as u64);
    }
    let mut files = Vec::new();
    let mut used: HashSet<String> = HashSet::new();
    let mut big_total = 0;
    for (rel, kind, pct, mode) in BIG_FILES {
        let size = budget * pct / 100;
        big_total += size;
        used.insert(rel.to_string());
        files.push(PlannedFile {
            rel: rel.to_string(),
            kind: *kind,
            size: size as usize,
            mode: *mode,
        });
    }
    let rest = budget - big_total;
    let total_weight: u64 = CATEGORIES.iter().map(|c| c.weight).sum();
    for (ci, cat) in CATEGORIES.iter().enumerate() {
        let cat_budget = rest * cat.weight / total_weight;
        let mut crng = Prng::new(spec.seed, 0x1000 + ci as u64);
        let subdirs: Vec<String> = (0..cat.subdirs)
            .map(|i| {
                if cat.dir == "usr/share/locale" {
                    format!(
                        "{}/LC_MESSAGES",
                        [
                            "de", "fr", "es", "it", "ja", "ko", "pt_BR", "ru", "zh_CN", "zh_TW",
                            "cs", "pl", "nl", "sv", "fi", "da", "hu", "tr", "uk", "ca", "el", "he",
                            "id", "vi"
                        ][i as usize % 24]
                    )
                } else {
                    format!("{}-{}", word(&mut crng), crng.range(1, 40))
                }
            })
            .collect();
        let mut acc = 0;
        while acc < cat_budget {
            let size = crng.log_size(cat.min, cat.max).min(cat_budget - acc).max(1);
            acc += size;
            let base = (cat.name)(&mut crng);
            let dir = if subdirs.is_empty() {
                cat.dir.to_string()
            } else {
                format!("{}/{}", cat.dir, crng.pick(&subdirs))
            };
            let mut rel = format!("{dir}/{base}");
            let mut n = 1;
            while used.contains(&rel) {
                n += 1;
                rel = format!("{dir}/{base}.{n}");
            }
            used.insert(rel.clone());
            files.push(PlannedFile {
                rel,
                kind: cat.kind,
                size: size as usize,
                mode: cat.mode,
            });
        }
    }
    files
}

fn elf_header(out: &mut Vec<u8>, shared: bool) {
    out.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&(if shared { 3u16 } else { 2u16 }).to_le_bytes());
    out.extend_from_slice(&0x3eu16.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&0x1040u64.to_le_bytes());
    out.extend_from_slice(&64u64.to_le_bytes());
    out.extend_from_slice(&0x3_2a40u64.to_le_bytes());
    out.extend_from_slice(&[0, 0, 0, 0, 64, 0, 56, 0, 13, 0, 64, 0, 30, 0, 29, 0]);
}

fn generate_content(
    corpus: &Corpus,
    rng: &mut Prng,
    kind: Kind,
    size: usize,
    rel: &str,
    out: &mut Vec<u8>,
) {
    out.clear();
    match kind {
        Kind::Elf => {
            elf_header(out, rel.contains(".so"));
            if out.len() < size {
                corpus.push_bin(out, rng, size - out.len());
            }
        }
        Kind::Text => corpus.push_text(out, rng, size),
        Kind::Packed => {
            out.extend_from_slice(&[0xfd, b'7', b'z', b'X', b'Z', 0]);
            if out.len() < size {
                rng.extend(out, size - out.len());
            }
        }
        Kind::Pages => {
            while out.len() < size {
                let start = out.len();
                out.extend_from_slice(&[0x0d, 0, 0, 0, 0x10, 0, 0x0f]);
                let used = rng.range(256, 3072) as usize;
                corpus.push_text(out, rng, used);
                out.resize(start + 4096, 0);
            }
        }
    }
    out.truncate(size);
}

// ---------------------------------------------------------------------------------------------
// Staging helpers
// ---------------------------------------------------------------------------------------------

fn write_file(root: &Path, rel: &str, data: &[u8], mode: u32) -> Result<()> {
    let p = root.join(rel);
    if let Some(parent) = p.parent() {
        fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    fs::write(&p, data).with_context(|| format!("writing {}", p.display()))?;
    fs::set_permissions(&p, fs::Permissions::from_mode(mode))?;
    Ok(())
}

fn make_dir(root: &Path, rel: &str) -> Result<()> {
    let p = root.join(rel);
    fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))
}

fn symlink(root: &Path, rel: &str, target: &str) -> Result<()> {
    let p = root.join(rel);
    if let Some(parent) = p.parent() {
        fs::create_dir_all(parent)?;
    }
    std::os::unix::fs::symlink(target, &p).with_context(|| format!("symlink {}", p.display()))
}

fn hardlink(root: &Path, existing: &str, rel: &str) -> Result<()> {
    let p = root.join(rel);
    if let Some(parent) = p.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::hard_link(root.join(existing), &p).with_context(|| format!("hard link {}", p.display()))
}

/// Walk the staged tree (sorted, depth first), normalise permissions and timestamps of every
/// entry and return one path per inode (relative, starting with '/') for the debugfs fix-ups.
fn finalize_tree(root: &Path) -> Result<Vec<String>> {
    fn walk(
        dir: &Path,
        rel: &str,
        seen: &mut HashSet<(u64, u64)>,
        out: &mut Vec<String>,
    ) -> Result<()> {
        let mut names: Vec<_> = fs::read_dir(dir)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()?;
        names.sort();
        for name in names {
            let name = name
                .to_str()
                .ok_or_else(|| anyhow!("non UTF-8 name"))?
                .to_string();
            let p = dir.join(&name);
            let crel = format!("{rel}/{name}");
            let md = fs::symlink_metadata(&p)?;
            if md.is_dir() {
                fs::set_permissions(&p, fs::Permissions::from_mode(0o755))?;
                walk(&p, &crel, seen, out)?;
            }
            if md.nlink() > 1 && !md.is_dir() && !seen.insert((md.dev(), md.ino())) {
                continue;
            }
            set_fixed_times(&p)?;
            out.push(crel);
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, "", &mut HashSet::new(), &mut out)?;
    set_fixed_times(root)?;
    out.push("/".to_string());
    Ok(out)
}

fn set_fixed_times(p: &Path) -> Result<()> {
    let ts = nix::sys::time::TimeSpec::new(FIXED_EPOCH as libc::time_t, 0);
    nix::sys::stat::utimensat(
        None,
        p,
        &ts,
        &ts,
        nix::sys::stat::UtimensatFlags::NoFollowSymlink,
    )
    .with_context(|| format!("utimensat {}", p.display()))
}

/// Find an executable in $PATH, /usr/sbin or /sbin.
pub(crate) fn find_tool(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in ["/usr/sbin", "/sbin", "/usr/bin", "/bin"] {
        dirs.push(PathBuf::from(d));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| {
        fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    })
}

fn require_tool(name: &str) -> Result<PathBuf> {
    find_tool(name).ok_or_else(|| anyhow!("{name} not found (install e2fsprogs)"))
}

pub(crate) fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("{:?} failed with {}: {}", cmd, out.status, stderr.trim());
    }
    Ok(stderr)
}

/// Build an ext4 image of `size` bytes at `img` from `stage`, with all inode times fixed.
fn make_ext4(
    stage: &Path,
    img: &Path,
    size: u64,
    label: &str,
    uuid: &str,
    hash_seed: &str,
) -> Result<()> {
    let t = Instant::now();
    let entries = finalize_tree(stage)?;
    verbose(
        t,
        &format!("{} staged entries of {label} normalised", entries.len()),
    );
    {
        let f = File::create(img)?;
        f.set_len(size)?;
    }
    let epoch = FIXED_EPOCH.to_string();
    run(Command::new(require_tool("mkfs.ext4")?)
        .env("E2FSPROGS_FAKE_TIME", &epoch)
        .args(["-q", "-F", "-L", label, "-U", uuid, "-b", "4096", "-E"])
        .arg(format!("root_owner=0:0,hash_seed={hash_seed}"))
        .arg("-d")
        .arg(stage)
        .arg(img))?;
    verbose(t, &format!("mkfs.ext4 {label} done"));
    // mkfs.ext4 -d copies the inode times from the staging files; ctime cannot be set from
    // user space, so rewrite it (and its nanosecond part) with debugfs.
    let mut script = String::with_capacity(entries.len() * 120);
    // (atime/mtime come from the staged files, which finalize_tree set to FIXED_EPOCH; mke2fs
    // takes the stat before reading a file, so its own reads don't matter.)
    for e in &entries {
        script.push_str(&format!(
            "sif \"{e}\" ctime @{epoch}\nsif \"{e}\" ctime_extra 0\n"
        ));
    }
    let script_path = img.with_extension("debugfs");
    fs::write(&script_path, script)?;
    let stderr = run(Command::new(require_tool("debugfs")?)
        .env("E2FSPROGS_FAKE_TIME", &epoch)
        .arg("-w")
        .arg("-f")
        .arg(&script_path)
        .arg(img))?;
    let _ = fs::remove_file(&script_path);
    verbose(t, &format!("debugfs fix-ups of {label} done"));
    if let Some(line) = stderr
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with("debugfs "))
    {
        bail!("debugfs fix-up of {} failed: {line}", img.display());
    }
    Ok(())
}

/// Files of an XFS root rewritten in interleaved 1 MiB pieces (see [`make_xfs`]), relative to
/// the deployment.
pub(crate) const XFS_FRAGMENTED_FILES: [&str; 2] = ["usr/bin/hyperkube", "usr/lib64/libLLVM-17.so"];

/// Build an XFS image of `size` bytes at `img` holding `stage` (label [`ROOT_LABEL`], UUID
/// [`ROOT_FS_UUID`], `sector_size`-byte sectors so it also mounts on 4Kn disks).
///
/// xfsprogs 6.1 cannot populate a filesystem from a directory (protofiles lose hard links, and
/// the objects must share inodes with the deployment), so this loop-mounts the image at
/// `mountpoint` and copies the tree with `cp -a`, which needs root. The mount lives in a private
/// mount namespace (`unshare -m`) and its loop device is auto-cleared, so a killed generator
/// leaves no mount and no loop device behind; `nouuid` lets generators of several images (same
/// UUID) run at once. Inode change/birth times are those of the copy: unlike the ext4 images,
/// the XFS bytes differ from run to run.
///
/// A fresh copy gives every file one extent. Real images have some files in several, and then
/// an osmet file maps one object at several physical places with `logical > 0`; to have that,
/// the `fragment` files (relative to `stage`) are rewritten in place after the copy, in 1 MiB
/// pieces with an fsync after each: the first file last piece first, the next ones in swapped
/// pairs (1, 0, 3, 2, ...). XFS cannot put a piece just before the next one (taken), so it
/// lands after it: extents in physical order then have decreasing logical offsets, which is
/// what a reader must cope with. `allocsize=4k` stops speculative preallocation from keeping
/// the files contiguous anyway.
///
/// An empty tmpfs hides the host's `/run` from `mount`, which would otherwise create
/// `/run/mount` (for its utab lock) on the host.
fn make_xfs(
    stage: &Path,
    img: &Path,
    size: u64,
    sector_size: u64,
    mountpoint: &Path,
    fragment: &[String],
) -> Result<()> {
    let t = Instant::now();
    let entries = finalize_tree(stage)?;
    verbose(
        t,
        &format!(
            "{} staged entries of {ROOT_LABEL} normalised",
            entries.len()
        ),
    );
    {
        let f = File::create(img)?;
        f.set_len(size)?;
    }
    run(Command::new(
        find_tool("mkfs.xfs").ok_or_else(|| anyhow!("mkfs.xfs not found (install xfsprogs)"))?,
    )
    .args(["-q", "-f", "-L", ROOT_LABEL, "-m"])
    .arg(format!("uuid={ROOT_FS_UUID}"))
    .args(["-s", &format!("size={sector_size}")])
    .arg(img))?;
    verbose(t, "mkfs.xfs root done");
    fs::create_dir_all(mountpoint)?;
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    // $1 image, $2 mountpoint, $3 stage.
    let mut script = String::from(
        r#"set -e
mount -n -t tmpfs -o size=1m,mode=0755 coreos-image-run /run
mount -n -t xfs -o loop,nouuid,allocsize=4k "$1" "$2"
trap 'umount "$2"' EXIT
cp -a "$3"/. "$2"/
"#,
    );
    for (n, f) in fragment.iter().enumerate() {
        let pieces = fs::metadata(stage.join(f))
            .with_context(|| format!("file to fragment {f}"))?
            .len()
            .div_ceil(MIB);
        let order: Vec<u64> = if n == 0 {
            (0..pieces).rev().collect()
        } else {
            (0..pieces).map(|i| (i ^ 1).min(pieces - 1)).collect()
        };
        let f = quote(f);
        script.push_str(&format!("truncate -s 0 \"$2\"/{f}\nsync -f \"$2\"\n"));
        for i in order {
            script.push_str(&format!(
                "dd if=\"$3\"/{f} of=\"$2\"/{f} bs=1M skip={i} seek={i} count=1 \
                 conv=notrunc,fsync status=none\n"
            ));
        }
        script.push_str(&format!(
            "cmp \"$3\"/{f} \"$2\"/{f}\ntouch -h -d @{FIXED_EPOCH} \"$2\"/{f}\n"
        ));
    }
    run(Command::new(
        find_tool("unshare").ok_or_else(|| anyhow!("unshare not found (install util-linux)"))?,
    )
    .args(["--mount", "--propagation", "private", "sh", "-c"])
    .arg(&script)
    .arg("sh")
    .arg(img)
    .arg(mountpoint)
    .arg(stage))
    .context("populating the XFS root (needs root and loop devices)")?;
    verbose(t, "XFS root populated");
    Ok(())
}

/// FAT ESP via mkfs.fat when available; `Ok(false)` when the tool is missing.
fn make_esp(img: &Path, sector_size: u64) -> Result<bool> {
    let Some(tool) = find_tool("mkfs.fat") else {
        return Ok(false);
    };
    let attempt = |invariant: bool| -> Result<String> {
        let f = File::create(img)?;
        f.set_len(ESP_SIZE)?;
        drop(f);
        let mut cmd = Command::new(&tool);
        cmd.env("SOURCE_DATE_EPOCH", FIXED_EPOCH.to_string());
        if invariant {
            // Must come before -i: --invariant resets the volume id.
            cmd.arg("--invariant");
        }
        cmd.args([
            "-F",
            "12",
            "-S",
            &sector_size.to_string(),
            "-i",
            ESP_VOLUME_ID,
            "-n",
            ESP_LABEL,
        ]);
        cmd.arg(img);
        run(&mut cmd)
    };
    // --invariant (dosfstools >= 4.2) makes the output reproducible; retry without if unknown.
    attempt(true).or_else(|_| attempt(false))?;
    Ok(true)
}

/// systemd-boot as the ESP's removable-media loader (what firmware runs without boot entries)
/// and the ext4 driver where systemd-boot loads drivers from, with mtools (no vfat mount here).
fn install_boot_loader(esp: &Path, parts: &BootParts) -> Result<()> {
    let image = esp
        .to_str()
        .ok_or_else(|| anyhow!("non-UTF-8 path {}", esp.display()))?;
    let mtools = |tool: &str, args: &[&std::ffi::OsStr]| -> Result<String> {
        // mtools checks the FAT's geometry against a floppy's unless told not to.
        run(Command::new(require_tool(tool)?)
            .env("MTOOLS_SKIP_CHECK", "1")
            .args(["-i", image])
            .args(args))
        .with_context(|| format!("{tool} on the ESP (mtools)"))
    };
    let dirs = [
        "::/EFI",
        "::/EFI/BOOT",
        "::/EFI/systemd",
        "::/EFI/systemd/drivers",
    ];
    mtools("mmd", &dirs.map(std::ffi::OsStr::new))?;
    for (src, dst) in [
        (&parts.systemd_boot, "::/EFI/BOOT/BOOTX64.EFI"),
        (&parts.ext4_driver, "::/EFI/systemd/drivers/ext4_x64.efi"),
    ] {
        mtools("mcopy", &[src.as_os_str(), std::ffi::OsStr::new(dst)])?;
    }
    Ok(())
}

fn stage_boot(spec: &ImageSpec, stage: &Path) -> Result<()> {
    write_file(stage, BLS_ENTRY_PATH, spec.bls_entry().as_bytes(), 0o644)?;

    let (kernel, initrd) = spec.boot_payloads();
    write_file(stage, &spec.kernel_path(), &kernel, 0o755)?;
    drop(kernel);
    write_file(stage, &spec.initramfs_path(), &initrd, 0o600)?;
    drop(initrd);

    write_file(stage, GRUB_CFG_PATH, grub_cfg().as_bytes(), 0o644)?;
    write_file(stage, "grub2/grubenv", &grubenv(), 0o644)?;
    make_dir(stage, "efi")?;
    write_file(
        stage,
        IGNITION_FIRSTBOOT_PATH,
        IGNITION_FIRSTBOOT_CONTENT.as_bytes(),
        0o644,
    )?;
    write_file(
        stage,
        PLATFORMS_JSON_PATH,
        platforms_json().as_bytes(),
        0o644,
    )?;
    write_file(
        stage,
        ".root_uuid",
        format!("{ROOT_FS_UUID}\n").as_bytes(),
        0o644,
    )?;
    Ok(())
}

fn stage_root(spec: &ImageSpec, stage: &Path) -> Result<()> {
    let commit = spec.ostree_commit();
    let deploy_rel = spec.deployment_dir();
    let t = Instant::now();
    let corpus = Corpus::new(spec.seed);
    verbose(t, "corpus generated");
    let mut rng = Prng::new(spec.seed, 0x2007);

    make_dir(stage, "boot")?;
    let aleph = format!(
        "{{\n  \"build\": \"{BUILD_ID}\",\n  \"imgid\": \"{}\",\n  \"ostree-commit\": \"{commit}\",\n  \"ref\": \"\"\n}}\n",
        spec.raw_file_name()
    );
    write_file(stage, ".coreos-aleph-version.json", aleph.as_bytes(), 0o644)?;
    write_file(
        stage,
        "ostree/repo/config",
        b"[core]\nrepo_version=1\nmode=bare\n",
        0o644,
    )?;
    make_dir(stage, "ostree/repo/tmp")?;
    make_dir(stage, "ostree/repo/refs/heads")?;
    make_dir(stage, "ostree/repo/refs/remotes")?;
    write_file(
        stage,
        &format!("ostree/deploy/{OS_NAME}/deploy/{commit}.0.origin"),
        format!("[origin]\ncontainer-image-reference=ostree-unverified-image:oci-archive:/{BUILD_ID}.ociarchive\n").as_bytes(),
        0o644,
    )?;
    make_dir(stage, &format!("ostree/deploy/{OS_NAME}/var/lib"))?;
    symlink(stage, "ostree/boot.1", "boot.1.1")?;
    symlink(
        stage,
        &format!("ostree/boot.1.1/{OS_NAME}/{}/0", spec.boot_checksum()),
        &format!("../../../deploy/{OS_NAME}/deploy/{commit}.0"),
    )?;

    let d = |rel: &str| format!("{deploy_rel}/{rel}");
    for dir in [
        "boot",
        "dev",
        "proc",
        "run",
        "sys",
        "sysroot",
        "tmp",
        "var",
        "usr/local",
    ] {
        make_dir(stage, &d(dir))?;
    }
    for (link, target) in [
        ("bin", "usr/bin"),
        ("sbin", "usr/sbin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
        ("ostree", "sysroot/ostree"),
    ] {
        symlink(stage, &d(link), target)?;
    }
    let os_release = format!(
        "NAME=\"Red Hat Enterprise Linux CoreOS\"\nVERSION=\"{BUILD_ID} (Plow)\"\nID=\"rhcos\"\nID_LIKE=\"rhel fedora\"\n\
         VERSION_ID=\"4.16\"\nPLATFORM_ID=\"platform:el9\"\nPRETTY_NAME=\"Red Hat Enterprise Linux CoreOS {BUILD_ID} (Plow)\"\n\
         OSTREE_VERSION=\"{BUILD_ID}\"\nOPENSHIFT_VERSION=\"4.16\"\nRHEL_VERSION=\"9.4\"\n"
    );
    write_file(
        stage,
        &d("usr/lib/os-release"),
        os_release.as_bytes(),
        0o644,
    )?;
    symlink(stage, &d("etc/os-release"), "../usr/lib/os-release")?;
    let mut small = Vec::new();
    for name in ["hostname", "fstab", "machine-id"] {
        write_file(stage, &d(&format!("etc/{name}")), b"", 0o644)?;
    }
    for name in [
        "ssh/sshd_config",
        "chrony.conf",
        "containers/registries.conf",
        "crio/crio.conf",
        "sysctl.conf",
        "NetworkManager/NetworkManager.conf",
        "systemd/journald.conf",
        "selinux/config",
    ] {
        small.clear();
        let n = rng.range(200, 6000) as usize;
        gen_config(&mut small, &mut rng, n);
        write_file(stage, &d(&format!("etc/{name}")), &small, 0o644)?;
    }

    let mut buf = Vec::new();
    for (i, f) in plan_root_files(spec).iter().enumerate() {
        let mut frng = Prng::new(spec.seed, 0x10_0000 + i as u64);
        generate_content(&corpus, &mut frng, f.kind, f.size, &f.rel, &mut buf);
        let rel = d(&f.rel);
        write_file(stage, &rel, &buf, f.mode)?;
        // Library symlinks: libfoo.so.1.2.3 <- libfoo.so.1
        if f.rel.starts_with("usr/lib64/lib") {
            if let Some(pos) = f.rel.find(".so.") {
                let major_end = f.rel[pos + 4..].find('.').map(|x| pos + 4 + x);
                if let Some(end) = major_end {
                    let link = &f.rel[..end];
                    if !stage.join(d(link)).exists() {
                        let target = f.rel.rsplit('/').next().unwrap_or_default();
                        symlink(stage, &d(link), target)?;
                    }
                }
            }
        }
        // ostree repo object hard link, named by content checksum.
        let csum = hex_sha256(&buf);
        let obj = format!("ostree/repo/objects/{}/{}.file", &csum[..2], &csum[2..]);
        if !stage.join(&obj).exists() {
            hardlink(stage, &rel, &obj)?;
        }
    }
    if spec.boot_objects {
        // Real repositories have the empty object too (an osmet packer skips it).
        let rel = d("usr/lib/sysimage/rpm/.rpm.lock");
        write_file(stage, &rel, b"", 0o644)?;
        let csum = hex_sha256(b"");
        hardlink(
            stage,
            &rel,
            &format!("ostree/repo/objects/{}/{}.file", &csum[..2], &csum[2..]),
        )?;
        // Real RHCOS commits the kernel and initramfs under /usr/lib/modules; /boot holds
        // copies, which is what lets an osmet packer map /boot's files to repository objects.
        let (kernel, initrd) = spec.boot_payloads();
        for (rel, data, mode) in [
            (spec.deployment_kernel_path(), kernel, 0o755),
            (spec.deployment_initramfs_path(), initrd, 0o644),
        ] {
            let rel = d(&rel);
            write_file(stage, &rel, &data, mode)?;
            let csum = hex_sha256(&data);
            let obj = format!("ostree/repo/objects/{}/{}.file", &csum[..2], &csum[2..]);
            if !stage.join(&obj).exists() {
                hardlink(stage, &rel, &obj)?;
            }
        }
    }
    write_file(
        stage,
        &format!("ostree/repo/refs/heads/{OS_NAME}"),
        format!("{commit}\n").as_bytes(),
        0o644,
    )?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Raw image assembly
// ---------------------------------------------------------------------------------------------

/// Progress output on stderr when `COREOS_IMAGE_VERBOSE` is set.
pub(crate) fn verbose(started: Instant, what: &str) {
    if std::env::var_os("COREOS_IMAGE_VERBOSE").is_some() {
        eprintln!("coreos_image: {:>7.2?} {what}", started.elapsed());
    }
}

/// Removes a directory tree when dropped.
pub(crate) struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Copy `src` into `dst` at `dst_off`, skipping holes and all-zero 64 KiB chunks (keeps `dst` sparse).
fn copy_sparse_into(src: &Path, dst: &File, dst_off: u64) -> Result<()> {
    use nix::errno::Errno;
    use nix::unistd::{lseek, Whence};
    use std::os::fd::AsRawFd;
    let s = File::open(src)?;
    let fd = s.as_raw_fd();
    let len = s.metadata()?.len();
    let mut buf = vec![0u8; 4 << 20];
    let zero = vec![0u8; 64 << 10];
    let mut pos: u64 = 0;
    while pos < len {
        let data = match lseek(fd, pos as libc::off_t, Whence::SeekData) {
            Ok(d) => d as u64,
            // No data after `pos`: the rest is a hole.
            Err(Errno::ENXIO) => break,
            Err(e) => return Err(io::Error::from(e)).context("SEEK_DATA"),
        };
        let hole =
            lseek(fd, data as libc::off_t, Whence::SeekHole).map_or(len, |h| (h as u64).min(len));
        let mut off = data;
        while off < hole {
            let n = ((hole - off) as usize).min(buf.len());
            s.read_exact_at(&mut buf[..n], off)?;
            let mut i = 0;
            while i < n {
                let m = (n - i).min(zero.len());
                if buf[i..i + m] != zero[..m] {
                    dst.write_all_at(&buf[i..i + m], dst_off + off + i as u64)?;
                }
                i += m;
            }
            off += n as u64;
        }
        pos = hole;
    }
    Ok(())
}

fn fake_bios_boot(spec: &ImageSpec) -> Vec<u8> {
    let mut rng = Prng::new(spec.seed, 0xb105);
    let mut v = vec![0u8; 64 << 10];
    rng.fill(&mut v);
    v[..16].copy_from_slice(b"FAKE GRUB CORE\0\0");
    v
}

fn fake_mbr_boot_code(spec: &ImageSpec) -> Vec<u8> {
    let mut rng = Prng::new(spec.seed, 0x3b7);
    let mut v = vec![0u8; 440];
    rng.fill(&mut v[16..400]);
    v[..3].copy_from_slice(&[0xeb, 0x63, 0x90]);
    v[3..16].copy_from_slice(b"FAKEGRUBBOOT\0");
    v
}

fn write_gpt(spec: &ImageSpec, f: &mut File) -> Result<()> {
    let ss = spec.sector_size;
    let mut gpt = gptman::GPT::new_from(f, ss, guid_to_gpt_bytes(PLACEHOLDER_DISK_GUID)?)
        .context("creating GPT")?;
    for p in spec.partitions() {
        gpt[p.number] = gptman::GPTPartitionEntry {
            partition_type_guid: guid_to_gpt_bytes(p.type_guid)?,
            unique_partition_guid: guid_to_gpt_bytes(p.partition_guid)?,
            starting_lba: p.start_lba(ss),
            ending_lba: p.end_lba(ss),
            attribute_bits: 0,
            partition_name: p.name.into(),
        };
    }
    gpt.write_into(f).context("writing GPT")?;
    gptman::GPT::write_protective_mbr_into(f, ss).context("writing protective MBR")?;
    Ok(())
}

/// Write the raw image to `out` (created/truncated). Deterministic for a given spec.
pub(crate) fn build_raw(spec: &ImageSpec, out: &Path) -> Result<()> {
    build_raw_staged(spec, out).map(drop)
}

/// What [`build_raw_staged`] leaves behind: the work directory with the staging trees the
/// filesystems were made from. Everything is deleted on drop.
pub(crate) struct RawBuild {
    work: TempDir,
    /// The boot filesystem's files, as staged (times and modes normalised).
    pub boot_stage: PathBuf,
    /// The root filesystem's files, as staged: byte-identical to the root filesystem's contents.
    pub root_stage: PathBuf,
}

impl RawBuild {
    /// The work directory (on the output's filesystem, so its trees can be renamed out).
    pub(crate) fn dir(&self) -> &Path {
        &self.work.0
    }
}

/// [`build_raw`], returning the work directory (staging trees, partition images) so the caller
/// can reuse the staged trees or delete them in the background (unlinking thousands of staged
/// files can take a while).
pub(crate) fn build_raw_staged(spec: &ImageSpec, out: &Path) -> Result<RawBuild> {
    spec.validate()?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = out.file_name().and_then(|n| n.to_str()).unwrap_or("image");
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let unique = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let work = TempDir(parent.join(format!(".{file_name}.work-{}-{unique}", std::process::id())));
    let _ = fs::remove_dir_all(&work.0);
    fs::create_dir_all(&work.0).with_context(|| format!("creating {}", work.0.display()))?;

    let t = Instant::now();
    let esp_img = work.0.join("esp.img");
    let have_esp = make_esp(&esp_img, spec.sector_size)?;
    if let Some(parts) = &spec.boot {
        ensure!(
            have_esp,
            "a bootable image needs mkfs.fat (dosfstools) for its ESP"
        );
        install_boot_loader(&esp_img, parts)?;
    }
    verbose(t, "ESP done");

    let boot_stage = work.0.join("boot-stage");
    let boot_img = work.0.join("boot.img");
    stage_boot(spec, &boot_stage)?;
    verbose(t, "boot staged");
    make_ext4(
        &boot_stage,
        &boot_img,
        BOOT_SIZE,
        BOOT_LABEL,
        BOOT_FS_UUID,
        BOOT_HASH_SEED,
    )?;
    verbose(t, "boot filesystem done");

    let root_stage = work.0.join("root-stage");
    let root_img = work.0.join("root.img");
    stage_root(spec, &root_stage)?;
    verbose(t, "root staged");
    match spec.root_fs {
        RootFs::Ext4 => make_ext4(
            &root_stage,
            &root_img,
            spec.root_mib * MIB,
            ROOT_LABEL,
            ROOT_FS_UUID,
            ROOT_HASH_SEED,
        )?,
        RootFs::Xfs => make_xfs(
            &root_stage,
            &root_img,
            spec.root_mib * MIB,
            spec.sector_size,
            &work.0.join("root-mnt"),
            &XFS_FRAGMENTED_FILES.map(|f| format!("{}/{f}", spec.deployment_dir())),
        )?,
    }
    verbose(t, "root filesystem done");

    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(out)
        .with_context(|| format!("creating {}", out.display()))?;
    f.set_len(spec.total_size())?;
    f.write_all_at(&fake_mbr_boot_code(spec), 0)?;
    write_gpt(spec, &mut f)?;
    f.write_all_at(&fake_bios_boot(spec), BIOS_BOOT_OFFSET)?;
    if have_esp {
        copy_sparse_into(&esp_img, &f, ESP_OFFSET)?;
    }
    copy_sparse_into(&boot_img, &f, BOOT_OFFSET)?;
    copy_sparse_into(&root_img, &f, ROOT_OFFSET)?;
    f.sync_all()?;
    verbose(t, "raw image assembled");
    Ok(RawBuild {
        work,
        boot_stage,
        root_stage,
    })
}

// ---------------------------------------------------------------------------------------------
// Compression
// ---------------------------------------------------------------------------------------------

struct HashingWriter<W: Write> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Read until `buf` is full or EOF; returns the number of bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// xz block size: 4 MiB for small (test) images, 32 MiB for large (bench) ones.
pub(crate) fn xz_block_size(raw_size: u64) -> u64 {
    if raw_size <= 256 * MIB {
        4 * MIB
    } else {
        32 * MIB
    }
}

/// Maximum input bytes per zstd frame.
pub(crate) const ZSTD_FRAME_SIZE: usize = 32 << 20;

fn compress_hashed(raw: &Path, c: Compression, out: &Path) -> Result<ImageFile> {
    let mut input = File::open(raw).with_context(|| format!("opening {}", raw.display()))?;
    let raw_size = input.metadata()?.len();
    let file = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut w = HashingWriter {
        inner: io::BufWriter::with_capacity(1 << 20, file),
        hasher: Sha256::new(),
        len: 0,
    };
    match c {
        Compression::Gzip => {
            let mut enc = flate2::GzBuilder::new().write(&mut w, flate2::Compression::new(6));
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = read_full(&mut input, &mut buf)?;
                if n == 0 {
                    break;
                }
                enc.write_all(&buf[..n])?;
            }
            enc.finish()?;
        }
        Compression::Xz => {
            let stream = liblzma::stream::MtStreamBuilder::new()
                .threads(2)
                .block_size(xz_block_size(raw_size))
                .preset(0)
                .check(liblzma::stream::Check::Crc64)
                .encoder()
                .context("creating xz encoder")?;
            let mut enc = liblzma::write::XzEncoder::new_stream(&mut w, stream);
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = read_full(&mut input, &mut buf)?;
                if n == 0 {
                    break;
                }
                enc.write_all(&buf[..n])?;
            }
            enc.finish()?;
        }
        Compression::Zstd => {
            let mut comp = zstd::bulk::Compressor::new(3)?;
            comp.include_checksum(true)?;
            comp.include_contentsize(true)?;
            let mut buf = vec![0u8; ZSTD_FRAME_SIZE];
            loop {
                let n = read_full(&mut input, &mut buf)?;
                if n == 0 {
                    break;
                }
                let frame = comp.compress(&buf[..n])?;
                w.write_all(&frame)?;
            }
        }
    }
    w.flush()?;
    let HashingWriter { inner, hasher, len } = w;
    let file = inner.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(ImageFile {
        path: out.to_path_buf(),
        size: len,
        sha256: to_hex(&hasher.finalize()),
    })
}

/// Compress `raw` into `out`: gzip (one member, level 6), xz (preset 0, multi-block, 2 encoder
/// threads, see [`xz_block_size`]), zstd (level 3, independent frames of at most
/// [`ZSTD_FRAME_SIZE`] input bytes each, with content size and checksum).
pub(crate) fn compress(raw: &Path, c: Compression, out: &Path) -> Result<()> {
    compress_hashed(raw, c, out).map(|_| ())
}

// ---------------------------------------------------------------------------------------------
// Cache
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub(crate) struct ImageFile {
    pub path: PathBuf,
    pub size: u64,
    /// Lowercase hex SHA-256 of the file's bytes.
    pub sha256: String,
}

#[derive(Clone, Debug)]
pub(crate) struct ImageSet {
    pub spec: ImageSpec,
    pub raw: ImageFile,
    pub gz: ImageFile,
    pub xz: ImageFile,
    pub zst: ImageFile,
}

impl ImageSet {
    /// `None` = the raw image.
    pub(crate) fn compressed(&self, c: Option<Compression>) -> &ImageFile {
        match c {
            None => &self.raw,
            Some(Compression::Gzip) => &self.gz,
            Some(Compression::Xz) => &self.xz,
            Some(Compression::Zstd) => &self.zst,
        }
    }
}

/// Cache root: $AI_TESTDATA_DIR, else $CARGO_TARGET_DIR/testdata-cache, else
/// <CARGO_MANIFEST_DIR at compile time>/target/testdata-cache.
pub(crate) fn cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os("AI_TESTDATA_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("testdata-cache");
    }
    if let Some(d) = option_env!("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("testdata-cache");
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("testdata-cache")
}

const MARKER_NAME: &str = "COMPLETE";
const MARKER_HEADER: &str = "coreos-test-image-set";

/// The spec as one line; options at their defaults are left out, so markers written before the
/// options existed still match.
pub(crate) fn marker_spec_line(spec: &ImageSpec) -> String {
    let mut s = format!(
        "spec generator_version={} sector_size={} root_mib={} seed={}",
        GENERATOR_VERSION, spec.sector_size, spec.root_mib, spec.seed
    );
    if spec.root_fs == RootFs::Xfs {
        s.push_str(" root_fs=xfs");
    }
    if spec.boot_objects {
        s.push_str(" boot_objects=1");
    }
    if let Some(b) = &spec.boot {
        s.push_str(&format!(" boot={}", b.fingerprint));
    }
    s
}

fn write_marker(dir: &Path, set: &ImageSet) -> Result<()> {
    let mut s = format!("{MARKER_HEADER}\n{}\n", marker_spec_line(&set.spec));
    for (tag, f) in [
        ("raw", &set.raw),
        ("gz", &set.gz),
        ("xz", &set.xz),
        ("zst", &set.zst),
    ] {
        let name = f
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| anyhow!("bad name"))?;
        s.push_str(&format!("{tag} {name} {} {}\n", f.size, f.sha256));
    }
    let tmp = dir.join(format!("{MARKER_NAME}.tmp"));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(s.as_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, dir.join(MARKER_NAME))?;
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// Read a completion marker; `None` if missing, for another spec, or files don't match it.
fn read_marker(dir: &Path, spec: &ImageSpec) -> Option<ImageSet> {
    let text = fs::read_to_string(dir.join(MARKER_NAME)).ok()?;
    let mut lines = text.lines();
    if lines.next()? != MARKER_HEADER || lines.next()? != marker_spec_line(spec) {
        return None;
    }
    let mut files = Vec::new();
    for (tag, line) in ["raw", "gz", "xz", "zst"].iter().zip(lines) {
        let parts: Vec<&str> = line.split(' ').collect();
        if parts.len() != 4 || parts[0] != *tag || parts[3].len() != 64 {
            return None;
        }
        let path = dir.join(parts[1]);
        let size: u64 = parts[2].parse().ok()?;
        if fs::metadata(&path).ok()?.len() != size {
            return None;
        }
        files.push(ImageFile {
            path,
            size,
            sha256: parts[3].to_string(),
        });
    }
    if files.len() != 4 {
        return None;
    }
    let zst = files.pop()?;
    let xz = files.pop()?;
    let gz = files.pop()?;
    let raw = files.pop()?;
    Some(ImageSet {
        spec: spec.clone(),
        raw,
        gz,
        xz,
        zst,
    })
}

pub(crate) fn sha256_file(path: &Path) -> Result<(u64, String)> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 4 << 20];
    let mut len = 0u64;
    loop {
        let n = read_full(&mut f, &mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        len += n as u64;
    }
    Ok((len, to_hex(&h.finalize())))
}

/// Generate the raw image and its three compressed forms into `dir` (no locking, no marker).
pub(crate) fn generate_image_set(spec: &ImageSpec, dir: &Path) -> Result<ImageSet> {
    spec.validate()?;
    fs::create_dir_all(dir)?;
    let raw_name = spec.raw_file_name();
    let raw_path = dir.join(&raw_name);
    let raw_tmp = dir.join(format!("{raw_name}.partial"));
    let work = build_raw_staged(spec, &raw_tmp)?;
    let (size, sha256) = sha256_file(&raw_tmp)?;
    fs::rename(&raw_tmp, &raw_path)?;
    let raw = ImageFile {
        path: raw_path.clone(),
        size,
        sha256,
    };

    let t = Instant::now();
    let job = |c: Compression| -> Result<ImageFile> {
        let name = format!("{raw_name}.{}", c.extension());
        let tmp = dir.join(format!("{name}.partial"));
        let mut f = compress_hashed(&raw_path, c, &tmp)?;
        let final_path = dir.join(&name);
        fs::rename(&tmp, &final_path)?;
        f.path = final_path;
        verbose(t, &format!("{c:?} compressed"));
        Ok(f)
    };
    // xz uses two encoder threads; run gzip and zstd beside it.
    let (gz, xz, zst) = std::thread::scope(|s| {
        s.spawn(move || drop(work));
        let side = s.spawn(|| -> Result<(ImageFile, ImageFile)> {
            Ok((job(Compression::Gzip)?, job(Compression::Zstd)?))
        });
        let xz = job(Compression::Xz);
        let side = side
            .join()
            .map_err(|_| anyhow!("compression thread panicked"))?;
        let (gz, zst) = side?;
        Ok::<_, anyhow::Error>((gz, xz?, zst))
    })?;
    Ok(ImageSet {
        spec: spec.clone(),
        raw,
        gz,
        xz,
        zst,
    })
}

pub(crate) fn lock_exclusive(file: File) -> Result<nix::fcntl::Flock<File>> {
    let mut file = file;
    loop {
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive) {
            Ok(l) => return Ok(l),
            Err((f, nix::errno::Errno::EINTR)) => file = f,
            Err((_, e)) => return Err(anyhow!("flock: {e}")),
        }
    }
}

/// Hold `<cache root>/<name>.lock` exclusively (across processes) while the guard lives.
pub(crate) fn lock_cache(name: &str) -> Result<nix::fcntl::Flock<File>> {
    let root = cache_root();
    fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let lock_path = root.join(format!("{name}.lock"));
    let lock_file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    lock_exclusive(lock_file)
}

/// The cache entry `<cache root>/<name>`: what `read` finds there when it is complete, else
/// what `generate` makes there (from an empty directory). Safe for concurrent callers in many
/// processes: generation holds `<name>.lock`, and `generate` writes its completion marker last.
pub(crate) fn cached<T>(
    name: &str,
    what: &str,
    read: impl Fn(&Path) -> Option<T>,
    generate: impl FnOnce(&Path) -> Result<T>,
) -> Result<T> {
    let root = cache_root();
    let dir = root.join(name);
    if let Some(t) = read(&dir) {
        return Ok(t);
    }
    let _lock = lock_cache(name)?;
    if let Some(t) = read(&dir) {
        return Ok(t);
    }
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing stale {}", dir.display()))?;
    }
    let started = Instant::now();
    eprintln!("{what}: generating {name} in {} ...", root.display());
    let t = generate(&dir)?;
    eprintln!("{what}: generated {name} in {:.1?}", started.elapsed());
    Ok(t)
}

/// The smallest CoreOS-like image with an XFS root at 512-byte sectors, raw (no compressed
/// forms), cached like the other images: its spec and the raw file.
pub(crate) fn cached_xfs_raw() -> Result<(ImageSpec, PathBuf)> {
    let spec = ImageSpec {
        root_fs: RootFs::Xfs,
        root_mib: XFS_MIN_ROOT_MIB,
        ..ImageSpec::test(512)
    };
    let name = format!("skip-mco-{}", spec.cache_name());
    let raw = cached(
        &name,
        "xfs image",
        |dir| dir.join("COMPLETE").exists().then(|| dir.join("disk.raw")),
        |dir| {
            fs::create_dir_all(dir)?;
            build_raw(&spec, &dir.join("disk.raw"))?;
            fs::write(dir.join("COMPLETE"), "")?;
            Ok(dir.join("disk.raw"))
        },
    )?;
    Ok((spec, raw))
}

/// Generate once and cache (see [`cache_root`]); subdirectory [`ImageSpec::cache_name`]
/// (files are generated under temporary names and renamed; the `COMPLETE` marker is written
/// last).
pub(crate) fn cached_image_set(spec: &ImageSpec) -> Result<ImageSet> {
    spec.validate()?;
    cached(
        &spec.cache_name(),
        "coreos_image",
        |dir| read_marker(dir, spec),
        |dir| {
            let set = generate_image_set(spec, dir)?;
            write_marker(dir, &set)?;
            Ok(set)
        },
    )
}

/// Read the GPT of an image file (for tests): disk GUID and used partitions.
pub(crate) fn read_gpt(path: &Path, sector_size: u64) -> Result<gptman::GPT> {
    let mut f = File::open(path)?;
    f.seek(SeekFrom::Start(0))?;
    gptman::GPT::read_from(&mut f, sector_size).context("reading GPT")
}
