//! What `lsblk --bytes --json <disk>` says about a disk: its partitions' node paths and sizes.
//! The Go installer reads partitions this way (boot order, skip-MCO, registry copy), by
//! position among the disk's children, so we do too: on a multipath disk the children are
//! device-mapper nodes under /dev/mapper, which sysfs partition numbers would not name.

use anyhow::{bail, Context};
use serde::{Deserialize, Deserializer};

use super::commands::CommandRunner;

#[derive(Debug, Deserialize)]
struct Lsblk {
    #[serde(default)]
    blockdevices: Vec<LsblkDevice>,
}

#[derive(Debug, Deserialize)]
struct LsblkDevice {
    #[serde(default)]
    name: String,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    /// Bytes. util-linux before 2.33 printed every value as a string, later ones a number.
    #[serde(default, deserialize_with = "number_or_string")]
    size: Option<u64>,
    #[serde(default)]
    children: Option<Vec<LsblkDevice>>,
}

/// The path of partition `index` (1-based, by position among the children) of the first
/// device in `lsblk --bytes --json <device>` output: `/dev/<child name>`, or
/// `/dev/mapper/<child name>` when the disk is a device-mapper disk of type `mpath` or `dm` (a
/// linear map). `device` is only used in error
/// messages.
pub(crate) fn partition_path_from_lsblk_json(
    lsblk_json: &str,
    device: &str,
    index: u32,
) -> anyhow::Result<String> {
    let parsed: Lsblk =
        serde_json::from_str(lsblk_json).context("failed to unmarshal lsblk output")?;
    let Some(disk) = parsed.blockdevices.first() else {
        bail!("no block device information returned for {device}");
    };
    let children = match &disk.children {
        Some(c) if !c.is_empty() => c,
        _ => bail!("device {device} has no partitions"),
    };
    let Some(part) = (index as usize)
        .checked_sub(1)
        .and_then(|i| children.get(i))
    else {
        bail!("partition {index} not found on device {device}");
    };
    if part.name.is_empty() {
        bail!("partition {index} of device {device} has no name in lsblk output");
    }
    // lsblk names device-mapper devices by their map name, whose node is /dev/mapper/<name>.
    // Go does this for multipath disks only; the appliance's linear `agent` disk (type `dm`)
    // has its partition maps there too (`/dev/agent4` does not exist).
    Ok(if matches!(disk.kind.as_deref(), Some("mpath" | "dm")) {
        format!("/dev/mapper/{}", part.name)
    } else {
        format!("/dev/{}", part.name)
    })
}

/// Runs `lsblk --bytes --json <device>` and returns the path of partition `index`.
pub(crate) fn partition_path(
    runner: &dyn CommandRunner,
    device: &str,
    index: u32,
) -> anyhow::Result<String> {
    let out = runner
        .run("lsblk", &["--bytes", "--json", device])
        .context("failed to run lsblk command")?;
    partition_path_from_lsblk_json(&out, device, index)
}

fn number_or_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Number(u64),
        Text(String),
    }
    Ok(match Option::<Size>::deserialize(d)? {
        Some(Size::Number(n)) => Some(n),
        Some(Size::Text(t)) => t.trim().parse().ok(),
        None => None,
    })
}

/// A disk's size and its partitions' sizes, in lsblk's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DiskSizes {
    pub disk: u64,
    pub partitions: Vec<u64>,
}

/// The sizes in `lsblk --bytes --json <device>` output (`device` names it in errors).
pub(crate) fn sizes_from_lsblk_json(lsblk_json: &str, device: &str) -> anyhow::Result<DiskSizes> {
    let parsed: Lsblk =
        serde_json::from_str(lsblk_json).context("failed to unmarshal lsblk output")?;
    let Some(disk) = parsed.blockdevices.first() else {
        bail!("no block device information returned for {device}");
    };
    let Some(size) = disk.size else {
        bail!("lsblk gave no size for {device}");
    };
    let partitions = disk
        .children
        .iter()
        .flatten()
        .map(|p| {
            p.size
                .with_context(|| format!("lsblk gave no size for partition {} of {device}", p.name))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(DiskSizes {
        disk: size,
        partitions,
    })
}

/// Runs `lsblk --bytes --json <device>` and returns the sizes.
pub(crate) fn disk_sizes(runner: &dyn CommandRunner, device: &str) -> anyhow::Result<DiskSizes> {
    let out = runner
        .run("lsblk", &["--bytes", "--json", device])
        .context("failed to run lsblk command")?;
    sizes_from_lsblk_json(&out, device)
}

/// lsblk of Go's fixture: a 100 GB `kind` device `disk` with the CoreOS partitions as written
/// (1 MiB, 127 MiB, 384 MiB, 3.05 GiB), named `parts`.
#[cfg(test)]
pub(crate) fn lsblk_json(disk: &str, kind: &str, parts: &[&str]) -> String {
    let sizes = [1_048_576u64, 133_169_152, 402_653_184, 3_272_588_800];
    let children: Vec<String> = parts
        .iter()
        .zip(sizes)
        .map(|(p, size)| format!(r#"{{"name":"{p}","size":{size},"type":"part"}}"#))
        .collect();
    format!(
        r#"{{"blockdevices":[{{"name":"{disk}","size":100000000000,"type":"{kind}","children":[{}]}}]}}"#,
        children.join(",")
    )
}

/// [`lsblk_json`] of the disk `sda`.
#[cfg(test)]
pub(crate) fn sda_json() -> String {
    lsblk_json("sda", "disk", &["sda1", "sda2", "sda3", "sda4"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_paths() {
        let path = |json: &str, device, index| {
            partition_path_from_lsblk_json(json, device, index).unwrap()
        };
        let sda = sda_json();
        assert_eq!(path(&sda, "/dev/sda", 3), "/dev/sda3");
        assert_eq!(path(&sda, "/dev/sda", 4), "/dev/sda4");
        let nvme = lsblk_json(
            "nvme0n1",
            "disk",
            &["nvme0n1p1", "nvme0n1p2", "nvme0n1p3", "nvme0n1p4"],
        );
        assert_eq!(path(&nvme, "/dev/nvme0n1", 3), "/dev/nvme0n1p3");
        let mmc = lsblk_json(
            "mmcblk1",
            "disk",
            &["mmcblk1P1", "mmcblk1P2", "mmcblk1P3", "mmcblk1P4"],
        );
        assert_eq!(path(&mmc, "/dev/mmcblk1", 4), "/dev/mmcblk1P4");
        let dm = lsblk_json("dm-0", "mpath", &["dm-1", "dm-2", "dm-3", "dm-4"]);
        assert_eq!(path(&dm, "/dev/dm-0", 3), "/dev/mapper/dm-3");
        assert_eq!(path(&dm, "/dev/dm-0", 4), "/dev/mapper/dm-4");
        let dm127 = lsblk_json("dm-127", "mpath", &["dm-128", "dm-129", "dm-130", "dm-131"]);
        assert_eq!(path(&dm127, "/dev/dm-127", 3), "/dev/mapper/dm-130");
        // The appliance's linear disk and its kpartx-style partition maps, as lsblk names them.
        let agent = lsblk_json("agent", "dm", &["agent1", "agent2", "agent3", "agent4"]);
        assert_eq!(path(&agent, "/dev/dm-0", 4), "/dev/mapper/agent4");
        // An LVM volume keeps /dev/<name>, as in Go.
        let lvm = lsblk_json("dm-5", "lvm", &["dm-6", "dm-7"]);
        assert_eq!(path(&lvm, "/dev/dm-5", 2), "/dev/dm-7");
    }

    #[test]
    fn partition_path_errors() {
        let err = |json: &str, dev: &str, idx: u32| {
            format!(
                "{:#}",
                partition_path_from_lsblk_json(json, dev, idx).unwrap_err()
            )
        };
        assert!(err("invalid json", "/dev/sda", 3).contains("failed to unmarshal lsblk output"));
        assert!(err(r#"{"blockdevices": []}"#, "/dev/sdb", 1)
            .contains("no block device information returned for /dev/sdb"));
        for children in [r#", "children": []"#, r#", "children": null"#, ""] {
            let json =
                format!(r#"{{"blockdevices": [{{"name": "sda", "type": "disk"{children}}}]}}"#);
            assert!(err(&json, "/dev/sda", 1).contains("device /dev/sda has no partitions"));
        }
        let one = lsblk_json("sda", "disk", &["sda1"]);
        assert!(err(&one, "/dev/sda", 0).contains("partition 0 not found on device /dev/sda"));
        let two = lsblk_json("sda", "disk", &["sda1", "sda2"]);
        assert!(err(&two, "/dev/sda", 5).contains("partition 5 not found on device /dev/sda"));
    }

    #[test]
    fn sizes_as_numbers_and_as_strings() {
        let json = r#"{"blockdevices":[{"name":"sda","size":"1000","type":"disk","children":[
            {"name":"sda1","size":"10","type":"part"},{"name":"sda2","size":20,"type":"part"}]}]}"#;
        assert_eq!(
            sizes_from_lsblk_json(json, "/dev/sda").unwrap(),
            DiskSizes {
                disk: 1000,
                partitions: vec![10, 20]
            }
        );
        let no_size = r#"{"blockdevices":[{"name":"sda","type":"disk"}]}"#;
        assert!(format!(
            "{:#}",
            sizes_from_lsblk_json(no_size, "/dev/sda").unwrap_err()
        )
        .contains("lsblk gave no size for /dev/sda"));
        let bare = r#"{"blockdevices":[{"name":"sda","size":5,"type":"disk"}]}"#;
        assert_eq!(
            sizes_from_lsblk_json(bare, "/dev/sda").unwrap().partitions,
            Vec::<u64>::new()
        );
    }
}
