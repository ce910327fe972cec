//! Images made by `mksquashfs` (squashfs-tools) from a tree of every kind of file the reader
//! meets, read back here and compared with the tree.

use super::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Bytes that do not compress (a xorshift stream), so mksquashfs stores their blocks raw.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Bytes that compress, different for each seed.
fn text(len: usize, seed: u64) -> Vec<u8> {
    format!("line {seed} of a file that compresses well\n")
        .bytes()
        .cycle()
        .take(len)
        .collect()
}

/// The tree's regular files, by path, for blocks of `bs` bytes: empty, one byte, a tail only,
/// whole blocks only, blocks and a tail, a block of zeros (stored sparse), incompressible
/// blocks (stored raw), and a directory of 300 files (a listing needs a new header every 256
/// entries).
fn files(bs: usize) -> Vec<(String, Vec<u8>)> {
    let mut sparse = vec![0; bs];
    sparse.extend(text(bs + 10, 9));
    sparse.extend(vec![0; bs]);
    let mut files = vec![
        ("empty".to_string(), Vec::new()),
        ("one".to_string(), vec![7]),
        ("small".to_string(), text(5000, 1)),
        ("block".to_string(), text(bs, 2)),
        ("blocks-and-tail".to_string(), text(3 * bs + 777, 3)),
        ("sparse".to_string(), sparse),
        ("noise".to_string(), noise(2 * bs + 100, 4)),
    ];
    for n in 0..300 {
        files.push((
            format!("many/f{n:03}.file"),
            text(n * 37 % 3000 + 1, n as u64),
        ));
    }
    files
}

fn squashfs(dir: &Path, name: &str, bs: usize, args: &[&str]) -> PathBuf {
    let tree = dir.join(format!("tree-{bs}"));
    if !tree.exists() {
        for (path, bytes) in files(bs) {
            let p = tree.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
        std::fs::hard_link(tree.join("small"), tree.join("hardlink")).unwrap();
        std::os::unix::fs::symlink("small", tree.join("symlink")).unwrap();
    }
    let image = dir.join(name);
    mksquashfs(&tree, &image, &[&["-b", &bs.to_string()], args].concat());
    image
}

/// `mksquashfs tree image args` (quietly, on one thread).
pub(crate) fn mksquashfs(tree: &Path, image: &Path, args: &[&str]) {
    let status = Command::new("mksquashfs")
        .arg(tree)
        .arg(image)
        .args(["-noappend", "-quiet", "-no-progress", "-processors", "1"])
        .args(args)
        .status()
        .expect("mksquashfs not found: install squashfs-tools (.ci/install-deps does)");
    assert!(status.success(), "mksquashfs {args:?}");
}

fn file_at(fs: &Squashfs, path: &str) -> FileInode {
    let mut lookup = fs.lookup();
    let root = lookup.root().unwrap();
    let parts: Vec<&str> = path.split('/').collect();
    match lookup.walk(root, &parts).unwrap() {
        Inode::File(f) => f,
        other => panic!("{path} is {other:?}"),
    }
}

/// The fragment blocks cached, with their next use, in block order.
fn kept(fs: &Squashfs) -> Vec<(u32, u64)> {
    let mut kept: Vec<_> = fs
        .cache
        .lock()
        .unwrap()
        .kept
        .iter()
        .map(|k| (k.0, k.1))
        .collect();
    kept.sort();
    kept
}

fn read(fs: &Squashfs, f: &FileInode, range: (u64, u64), d: &mut Decoder) -> Vec<u8> {
    let mut out = b"before".to_vec();
    fs.read(f, range, &mut out, 0, d).unwrap();
    assert_eq!(&out[..6], b"before", "read() appends");
    out.split_off(6)
}

#[test]
fn every_kind_of_file_reads_back_whole_and_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(usize, &[&str])] = &[
        (4096, &["-comp", "gzip"]),
        (4096, &["-comp", "xz"]),
        (4096, &["-comp", "zstd"]),
        (131072, &["-comp", "zstd"]),
        (131072, &["-comp", "gzip", "-noI", "-noD", "-noF"]),
        (4096, &["-comp", "zstd", "-no-fragments"]),
        (4096, &["-comp", "zstd", "-always-use-fragments"]),
    ];
    for (n, &(bs, args)) in cases.iter().enumerate() {
        let image = squashfs(dir.path(), &format!("{n}.squashfs"), bs, args);
        let fs = Squashfs::open(File::open(&image).unwrap(), format!("{args:?}")).unwrap();
        assert_eq!(fs.block_size() as usize, bs);
        let mut d = Decoder::new();
        for (path, want) in files(bs)
            .iter()
            .chain([&("hardlink".into(), text(5000, 1))])
        {
            let f = file_at(&fs, path);
            assert_eq!(f.size, want.len() as u64, "{args:?} {path}");
            let got = read(&fs, &f, (0, f.size), &mut d);
            assert!(got == *want, "{args:?} {path}: the bytes differ");
            // Pieces that start and end inside blocks, across block and tail boundaries.
            let len = want.len() as u64;
            for (from, to) in [(1, len), (len / 3, len / 2), (len.saturating_sub(1), len)] {
                if from < to {
                    let got = read(&fs, &f, (from, to - from), &mut d);
                    assert!(
                        got == want[from as usize..to as usize],
                        "{args:?} {path} {from}..{to}"
                    );
                }
            }
        }
        // The cases the tree is made for are really in the image.
        assert!(
            file_at(&fs, "sparse").blocks.iter().any(|b| b.stored == 0),
            "{args:?}: no sparse block"
        );
        let raw = |b: &format::DataBlock| !b.compressed;
        assert!(
            file_at(&fs, "noise").blocks.iter().all(raw),
            "{args:?}: noise compressed"
        );
        let mut lookup = fs.lookup();
        let root = lookup.root().unwrap();
        let many = lookup.walk(root.clone(), &["many"]).unwrap();
        assert_eq!(lookup.list(&many).unwrap().len(), 300, "{args:?}");
        let link = lookup.walk(root, &["symlink"]).unwrap();
        assert!(matches!(link, Inode::Other { kind: 3, .. }), "{link:?}");
    }
}

#[test]
fn fragment_blocks_are_kept_until_their_last_use_then_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let image = squashfs(dir.path(), "f.squashfs", 4096, &["-comp", "zstd"]);
    let fs = Squashfs::open(File::open(&image).unwrap(), "f".into()).unwrap();
    let (mut d, mut out) = (Decoder::new(), Vec::new());
    // Files smaller than a block have their bytes in a fragment block.
    let one = file_at(&fs, "one");
    let index = one.fragment.expect("a tail in a fragment block").0;
    fs.read(&one, (0, 1), &mut out, 100, &mut d).unwrap();
    assert_eq!(kept(&fs), [(index, 100)]);
    // A hit moves its next use; at its last use it is dropped.
    fs.read(&one, (0, 1), &mut out, 200, &mut d).unwrap();
    assert_eq!(kept(&fs), [(index, 200)]);
    fs.read(&one, (0, 1), &mut out, NEVER, &mut d).unwrap();
    assert_eq!(kept(&fs), []);
    // Read once and never again: not kept.
    fs.read(&one, (0, 1), &mut out, NEVER, &mut d).unwrap();
    assert_eq!(kept(&fs), []);
    assert_eq!(out, [7; 4]);
}

#[test]
fn a_full_cache_drops_the_block_needed_latest() {
    let dir = tempfile::tempdir().unwrap();
    let image = squashfs(dir.path(), "c.squashfs", 4096, &["-comp", "gzip"]);
    let mut fs = Squashfs::open(File::open(&image).unwrap(), "c".into()).unwrap();
    fs.cache_len = 2;
    let mut d = Decoder::new();
    // Three files with tails in three different fragment blocks.
    let mut seen = Vec::new();
    let mut tails = Vec::new();
    for n in 0..300 {
        let f = file_at(&fs, &format!("many/f{n:03}.file"));
        let index = f.fragment.unwrap().0;
        if !seen.contains(&index) {
            seen.push(index);
            tails.push(f);
        }
        if tails.len() == 3 {
            break;
        }
    }
    assert_eq!(tails.len(), 3, "the tree spans three fragment blocks");
    let mut out = Vec::new();
    for (f, next) in tails.iter().zip([50, 900, 70]) {
        fs.read(f, (0, 1), &mut out, next, &mut d).unwrap();
    }
    let mut want = vec![(seen[0], 50), (seen[2], 70)];
    want.sort();
    assert_eq!(kept(&fs), want);
    assert_eq!(
        fs.cache.lock().unwrap().spare.len(),
        1,
        "the dropped block's buffer is reused"
    );
}

#[test]
fn damaged_images_fail_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let image = squashfs(dir.path(), "d.squashfs", 4096, &["-comp", "zstd"]);
    let bytes = std::fs::read(&image).unwrap();
    let fs = Squashfs::open(File::open(&image).unwrap(), "d".into()).unwrap();
    let f = file_at(&fs, "blocks-and-tail");
    drop(fs);
    // The first data block's bytes overwritten: it no longer decompresses.
    let mut damaged = bytes.clone();
    let at = f.blocks[0].at as usize;
    damaged[at..at + 64].fill(0x55);
    let path = dir.path().join("damaged");
    std::fs::write(&path, &damaged).unwrap();
    let fs = Squashfs::open(File::open(&path).unwrap(), "damaged".into()).unwrap();
    let e = fs
        .read(&f, (0, 10), &mut Vec::new(), 0, &mut Decoder::new())
        .unwrap_err();
    assert!(e.to_string().contains("a block does not decompress"), "{e}");
    // Cut short: the tables lie past the end.
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let e = Squashfs::open(File::open(&path).unwrap(), "cut".into())
        .and_then(|fs| fs.lookup().root().map(|_| ()))
        .unwrap_err();
    assert!(
        e.to_string().contains("fill whole buffer") || e.to_string().contains("past"),
        "{e}"
    );
    // More than the file holds.
    let fs = Squashfs::open(File::open(&image).unwrap(), "d".into()).unwrap();
    let e = fs
        .read(&f, (f.size - 1, 2), &mut Vec::new(), 0, &mut Decoder::new())
        .unwrap_err();
    assert!(e.to_string().contains("asked, it has"), "{e}");
}
