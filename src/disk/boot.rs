//! Find the partition holding /boot: the one whose filesystem is labelled `boot` (GRUB and
//! CoreOS find it by that label too). Exactly one must match.

use anyhow::{bail, Result};

use super::device::Device;
use super::direct::AlignedBuf;
use super::partitions::PartitionSpec;
use super::probe::{probe, PROBE_LEN};

pub(crate) const BOOT_LABEL: &str = "boot";

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BootPartition {
    pub number: u32,
    /// As `mount(2)` names it.
    pub fstype: &'static str,
}

/// Probe each partition of `table` on `dev` (superblocks read at the partition's offset, no
/// partition node needed) and return the one labelled `boot`.
pub(crate) fn find_boot(dev: &Device, table: &[PartitionSpec]) -> Result<BootPartition> {
    let mut buf = AlignedBuf::new(PROBE_LEN);
    let mut found = Vec::new();
    for p in table {
        if p.length < PROBE_LEN as u64 {
            continue;
        }
        dev.read_at(buf.as_mut_slice(), p.start)?;
        if let Some((fstype, label)) = probe(buf.as_slice()) {
            tracing::debug!(
                "partition {} ({:?}): {fstype:?} labelled {label:?}",
                p.number,
                p.label
            );
            if label == BOOT_LABEL {
                found.push(BootPartition {
                    number: p.number,
                    fstype,
                });
            }
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => bail!(
            "no partition of {} has a filesystem labelled {BOOT_LABEL:?}: is it a CoreOS disk?",
            dev.path().display()
        ),
        _ => bail!(
            "several partitions of {} have a filesystem labelled {BOOT_LABEL:?} (partitions {}): refusing to guess which is /boot",
            dev.path().display(),
            found
                .iter()
                .map(|b| b.number.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
