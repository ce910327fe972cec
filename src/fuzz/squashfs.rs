//! The live root's SquashFS image, which the rebuild decodes itself: superblock, fragment
//! table, inodes, directory listings and data blocks. Seeds: two small images made by
//! mksquashfs (gzip with a tail in a fragment block, a hard link and a symbolic link; zstd with
//! uncompressed inodes).

use proptest::prelude::*;
use std::io::Write;

use super::{bounded, config, corpus, mutated};
use crate::image::osmet::squashfs::format::Inode;
use crate::image::osmet::squashfs::{Decoder, Squashfs};

/// Beyond the input: a decompressed data block (at most 1 MiB), metadata gathered across blocks
/// (a 3-byte compressed metadata block may hold 8 KiB), doubled for a vector's growth.
fn extra(len: usize) -> usize {
    2 * ((1 << 20) + 8192 / 3 * len + 8192)
}

/// Open the image, walk its tree (a few levels, a few entries each) and read every file.
fn walk_and_read(image: &std::fs::File) -> std::io::Result<usize> {
    let fs = Squashfs::open(image.try_clone()?, "fuzzed image".into())?;
    let mut lookup = fs.lookup();
    let (mut d, mut out, mut files) = (Decoder::new(), Vec::new(), 0);
    let mut dirs = vec![(lookup.root()?, 0)];
    while let Some((dir, depth)) = dirs.pop() {
        for entry in lookup.list(&dir)?.into_iter().take(16) {
            match lookup.inode(entry.inode)? {
                Inode::File(f) => {
                    out.clear();
                    fs.read(&f, (0, f.size.min(1 << 20)), &mut out, 0, &mut d)?;
                    files += 1;
                }
                sub @ Inode::Dir { .. } if depth < 4 => dirs.push((sub, depth + 1)),
                _ => {}
            }
        }
    }
    Ok(files)
}

proptest! {
    #![proptest_config(config("testdata/fuzz/regressions/squashfs.txt"))]

    #[test]
    fn a_squashfs_image(input in mutated(corpus("squashfs"))) {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&input).unwrap();
        if let Err(e) = bounded(input.len(), extra(input.len()), || walk_and_read(&file)) {
            let m = e.to_string();
            assert!(m.starts_with("squashfs: "), "an error that does not say what: {m}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_are_read_whole() {
        for seed in corpus("squashfs") {
            let mut file = tempfile::tempfile().unwrap();
            file.write_all(&seed).unwrap();
            assert!(walk_and_read(&file).unwrap() >= 4);
        }
    }
}
