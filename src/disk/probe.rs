//! Filesystem labels from superblocks, read straight from the disk at a partition's offset: we
//! find /boot by its filesystem label (`boot`), as GRUB and coreos-installer do, without
//! libblkid or partition nodes.

/// Bytes of a partition's start that cover the superblocks we know.
pub(crate) const PROBE_LEN: usize = 64 << 10;

fn label(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end])
        .trim_end()
        .to_string()
}

/// The filesystem type (as `mount(2)` names it) and label found at the start of a partition, if
/// any.
pub(crate) fn probe(head: &[u8]) -> Option<(&'static str, String)> {
    // ext2/3/4: superblock at 1024, magic 0xEF53 at +0x38, volume name at +0x78 (16 bytes).
    if head.len() >= 1024 + 0x88 && head[1024 + 0x38..1024 + 0x3a] == [0x53, 0xef] {
        return Some(("ext4", label(&head[1024 + 0x78..1024 + 0x88])));
    }
    // XFS: "XFSB" at 0, sb_fname at 108 (12 bytes).
    if head.len() >= 120 && &head[..4] == b"XFSB" {
        return Some(("xfs", label(&head[108..120])));
    }
    // FAT: boot signature 55 AA; FAT32 has "FAT32   " at 82 and its label at 71, FAT12/16
    // have "FAT" at 54 and the label at 43.
    if head.len() >= 512 && head[510..512] == [0x55, 0xaa] {
        if &head[82..87] == b"FAT32" {
            return Some(("vfat", label(&head[71..82])));
        }
        if &head[54..57] == b"FAT" {
            return Some(("vfat", label(&head[43..54])));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ext4_label() {
        let mut b = vec![0u8; PROBE_LEN];
        b[1024 + 0x38] = 0x53;
        b[1024 + 0x39] = 0xef;
        b[1024 + 0x78..1024 + 0x7c].copy_from_slice(b"boot");
        assert_eq!(probe(&b), Some(("ext4", "boot".into())));
    }

    #[test]
    fn xfs_label() {
        let mut b = vec![0u8; PROBE_LEN];
        b[..4].copy_from_slice(b"XFSB");
        b[108..112].copy_from_slice(b"root");
        assert_eq!(probe(&b), Some(("xfs", "root".into())));
    }

    #[test]
    fn fat_labels() {
        let mut b = vec![0u8; PROBE_LEN];
        b[510] = 0x55;
        b[511] = 0xaa;
        b[54..59].copy_from_slice(b"FAT16");
        b[43..54].copy_from_slice(b"EFI-SYSTEM ");
        assert_eq!(probe(&b), Some(("vfat", "EFI-SYSTEM".into())));
    }

    #[test]
    fn nothing_recognised() {
        assert_eq!(probe(&vec![0u8; PROBE_LEN]), None);
        assert_eq!(probe(&[]), None);
    }
}
