//! The parts of the SquashFS 4.0 on-disk format needed to read regular files by path: the
//! superblock, metadata-block headers, directory and file inodes, directory listings and
//! fragment entries. Pure parsers over byte slices (all little-endian); each error names the
//! structure and the field that was wrong.

use std::io;

pub(crate) const MAGIC: u32 = 0x7371_7368; // "hsqs"
pub(crate) const SUPERBLOCK_LEN: usize = 96;
/// A metadata block holds at most this many bytes once decompressed.
pub(crate) const METADATA_MAX: usize = 8192;
/// A file without a tail in a fragment block.
const NO_FRAGMENT: u32 = 0xffff_ffff;
/// In a data block's size word: the block is stored uncompressed.
const DATA_UNCOMPRESSED: u32 = 1 << 24;
/// In a metadata block's header: the block is stored uncompressed.
const META_UNCOMPRESSED: u16 = 1 << 15;
/// The kernel reads files of up to 2^63 bytes, but no live root holds one over 1 TiB: larger
/// sizes are corruption, and would make block lists of billions of entries.
const MAX_FILE: u64 = 1 << 40;

pub(crate) fn bad(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("squashfs: {what}"))
}

/// A little-endian cursor that fails, naming `what`, when the bytes run out.
struct Le<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Le<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Le<'a> {
        Le { bytes, what }
    }
    /// The next `n` bytes.
    fn slice(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(bad(format_args!("{} is truncated", self.what)));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn take<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        Ok(self.slice(N)?.try_into().expect("N bytes"))
    }
    fn u16(&mut self) -> io::Result<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> io::Result<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> io::Result<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn skip(&mut self, n: usize) -> io::Result<()> {
        self.slice(n).map(drop)
    }
}

/// The compressors we decode in user space; the others (lzo, lz4, legacy lzma) are left to the
/// kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compression {
    Gzip,
    Xz,
    Zstd,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub(crate) block_size: u32,
    pub(crate) fragment_count: u32,
    pub(crate) compression: Compression,
    pub(crate) root_inode: u64,
    pub(crate) bytes_used: u64,
    pub(crate) inode_table: u64,
    pub(crate) directory_table: u64,
    pub(crate) fragment_table: u64,
}

impl Superblock {
    pub(crate) fn parse(bytes: &[u8]) -> io::Result<Superblock> {
        let mut r = Le::new(bytes, "the superblock");
        if r.u32()? != MAGIC {
            return Err(bad("no superblock (wrong magic number)"));
        }
        r.skip(8)?; // inode count, modification time
        let block_size = r.u32()?;
        let fragment_count = r.u32()?;
        let compressor = r.u16()?;
        let block_log = r.u16()?;
        r.skip(4)?; // flags, id count
        let version = (r.u16()?, r.u16()?);
        if version != (4, 0) {
            return Err(bad(format_args!(
                "version {}.{}, only 4.0 is read",
                version.0, version.1
            )));
        }
        if !(4096..=1 << 20).contains(&block_size) || 1u32 << block_log.min(31) != block_size {
            return Err(bad(format_args!(
                "block size {block_size} (log {block_log}) is not a power of two from 4 KiB to 1 MiB"
            )));
        }
        let compression = match compressor {
            1 => Compression::Gzip,
            4 => Compression::Xz,
            6 => Compression::Zstd,
            2 => return Err(bad("compression lzma is not decoded here")),
            3 => return Err(bad("compression lzo is not decoded here")),
            5 => return Err(bad("compression lz4 is not decoded here")),
            n => return Err(bad(format_args!("unknown compression {n}"))),
        };
        let root_inode = r.u64()?;
        let bytes_used = r.u64()?;
        r.skip(16)?; // id and xattr tables
        let (inode_table, directory_table, fragment_table) = (r.u64()?, r.u64()?, r.u64()?);
        for (name, at) in [
            ("inode table", inode_table),
            ("directory table", directory_table),
        ] {
            if at >= bytes_used {
                return Err(bad(format_args!(
                    "the {name} starts at {at}, past the filesystem's end ({bytes_used})"
                )));
            }
        }
        Ok(Superblock {
            block_size,
            fragment_count,
            compression,
            root_inode,
            bytes_used,
            inode_table,
            directory_table,
            fragment_table,
        })
    }
}

/// A metadata block's header: its stored length and whether it is compressed.
pub(crate) fn metadata_header(h: u16) -> io::Result<(usize, bool)> {
    let len = (h & !META_UNCOMPRESSED) as usize;
    if len == 0 || len > METADATA_MAX {
        return Err(bad(format_args!(
            "a metadata block of {len} bytes (at most {METADATA_MAX})"
        )));
    }
    Ok((len, h & META_UNCOMPRESSED == 0))
}

/// A data block's stored length (0: a sparse block of zeros) and whether it is compressed.
fn data_size(word: u32, block_size: u32) -> io::Result<(u32, bool)> {
    let len = word & !DATA_UNCOMPRESSED;
    if len > block_size {
        return Err(bad(format_args!(
            "a data block of {len} bytes stored, larger than the block size {block_size}"
        )));
    }
    Ok((len, word & DATA_UNCOMPRESSED == 0))
}

/// Where an inode or a directory listing starts: a metadata block (its offset from the start
/// of the table) and an offset in its decompressed bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MetaRef {
    pub(crate) block: u64,
    pub(crate) offset: usize,
}

impl MetaRef {
    /// An inode reference as the superblock and exports store it.
    pub(crate) fn inode(reference: u64) -> MetaRef {
        MetaRef {
            block: reference >> 16,
            offset: (reference & 0xffff) as usize,
        }
    }
}

/// A data block (of a file, or a fragment block) as stored: where, how many bytes (0: a sparse
/// block of zeros), compressed or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DataBlock {
    pub(crate) at: u64,
    pub(crate) stored: u32,
    pub(crate) compressed: bool,
}

impl DataBlock {
    /// The block at `at` whose size word is `word`.
    pub(crate) fn new(at: u64, word: u32, block_size: u32) -> io::Result<DataBlock> {
        let (stored, compressed) = data_size(word, block_size)?;
        Ok(DataBlock {
            at,
            stored,
            compressed,
        })
    }
}

/// A regular file: its blocks, located once here (a read then starts at the block it needs,
/// without summing the sizes before it), and its tail in a fragment block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileInode {
    pub(crate) number: u32,
    pub(crate) size: u64,
    /// Its whole blocks (and a last partial block when it has no tail), stored one after the
    /// other.
    pub(crate) blocks: Vec<DataBlock>,
    /// The fragment block holding its tail, and the tail's offset in it.
    pub(crate) fragment: Option<(u32, u32)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Inode {
    Dir {
        number: u32,
        listing: MetaRef,
        /// The listing's length in bytes (the stored size counts 3 more).
        len: usize,
    },
    File(FileInode),
    /// Symbolic links, devices, sockets: nothing a rebuild reads.
    Other {
        number: u32,
        kind: u16,
    },
}

impl Inode {
    pub(crate) fn number(&self) -> u32 {
        match self {
            Inode::Dir { number, .. } | Inode::Other { number, .. } => *number,
            Inode::File(f) => f.number,
        }
    }

    /// Parse the inode at the start of `bytes`. The bytes of its block list may be more than
    /// a metadata block: the caller passes enough (see [`Inode::file_blocks_len`]).
    pub(crate) fn parse(bytes: &[u8], block_size: u32) -> io::Result<Inode> {
        let mut r = Le::new(bytes, "an inode");
        let kind = r.u16()?;
        r.skip(10)?; // permissions, uid and gid indexes, mtime
        let number = r.u32()?;
        let (blocks_start, fragment, offset, size) = match kind {
            1 => {
                let block = r.u32()? as u64;
                r.skip(4)?; // link count
                let (size, offset) = (r.u16()? as usize, r.u16()? as usize);
                return Ok(Inode::dir(number, block, offset, size));
            }
            8 => {
                r.skip(4)?; // link count
                let (size, block) = (r.u32()? as usize, r.u32()? as u64);
                r.skip(6)?; // parent inode, index count
                let offset = r.u16()? as usize;
                return Ok(Inode::dir(number, block, offset, size));
            }
            2 => (r.u32()? as u64, r.u32()?, r.u32()?, r.u32()? as u64),
            9 => {
                let (blocks_start, size) = (r.u64()?, r.u64()?);
                r.skip(12)?; // sparse bytes, link count
                let (fragment, offset) = (r.u32()?, r.u32()?);
                r.skip(4)?; // xattr index
                (blocks_start, fragment, offset, size)
            }
            3..=7 | 10..=14 => return Ok(Inode::Other { number, kind }),
            _ => return Err(bad(format_args!("inode {number} has unknown type {kind}"))),
        };
        // The rest of a file inode: its list of block sizes.
        let count = block_count(size, fragment, block_size)?;
        if r.bytes.len() / 4 < count {
            return Err(bad(format_args!(
                "file inode {number}: its list of {count} blocks is truncated"
            )));
        }
        let mut at = blocks_start;
        let blocks = (0..count)
            .map(|_| {
                let block = DataBlock::new(at, r.u32()?, block_size)?;
                at += block.stored as u64;
                Ok(block)
            })
            .collect::<io::Result<_>>()?;
        let fragment = (fragment != NO_FRAGMENT).then_some((fragment, offset));
        if let Some((_, offset)) = fragment {
            let tail = size % block_size as u64;
            if offset as u64 + tail > block_size as u64 {
                return Err(bad(format_args!(
                    "file inode {number}: its tail of {tail} bytes at offset {offset} runs past its fragment block"
                )));
            }
        }
        Ok(Inode::File(FileInode {
            number,
            size,
            blocks,
            fragment,
        }))
    }

    fn dir(number: u32, block: u64, offset: usize, size: usize) -> Inode {
        Inode::Dir {
            number,
            listing: MetaRef { block, offset },
            len: size.saturating_sub(3),
        }
    }
}

/// How many whole blocks (and a last partial one when there is no tail) a file has.
fn block_count(size: u64, fragment: u32, block_size: u32) -> io::Result<usize> {
    if size > MAX_FILE {
        return Err(bad(format_args!("a file of {size} bytes (at most 1 TiB)")));
    }
    let bs = block_size as u64;
    Ok(if fragment == NO_FRAGMENT {
        size.div_ceil(bs)
    } else {
        size / bs
    } as usize)
}

/// The bytes an inode at the start of `head` needs, block list included; `None` when `head`
/// is too short to tell (fewer than its fixed fields).
pub(crate) fn inode_len(head: &[u8], block_size: u32) -> io::Result<Option<usize>> {
    let at = |offset: usize| Le::new(&head[offset..], "an inode");
    let Ok(kind) = at(0).u16() else {
        return Ok(None);
    };
    let (fixed, at_size, at_fragment, wide) = match kind {
        2 => (32, 28, 20, false),
        9 => (56, 24, 44, true),
        1 => return Ok((head.len() >= 32).then_some(32)),
        8 => return Ok((head.len() >= 40).then_some(40)),
        // Other kinds are not read past their common header.
        _ => return Ok((head.len() >= 16).then_some(16)),
    };
    if head.len() < fixed {
        return Ok(None);
    }
    let size = if wide {
        at(at_size).u64()?
    } else {
        at(at_size).u32()? as u64
    };
    let fragment = at(at_fragment).u32()?;
    Ok(Some(fixed + 4 * block_count(size, fragment, block_size)?))
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DirEntry {
    pub(crate) name: Vec<u8>,
    pub(crate) inode: MetaRef,
    pub(crate) number: u32,
}

/// A directory's listing: runs of entries, each run after a header naming the inode block
/// they share and the inode number they count from.
pub(crate) fn parse_listing(bytes: &[u8]) -> io::Result<Vec<DirEntry>> {
    let mut r = Le::new(bytes, "a directory listing");
    let mut entries = Vec::new();
    while !r.bytes.is_empty() {
        let count = r.u32()? as usize + 1;
        let block = r.u32()? as u64;
        let base = r.u32()?;
        // Each entry is at least 9 bytes: a count beyond what is left is corruption.
        if count > 256 || count * 9 > r.bytes.len() {
            return Err(bad(format_args!(
                "a directory listing header counts {count} entries in {} bytes",
                r.bytes.len()
            )));
        }
        for _ in 0..count {
            let offset = r.u16()? as usize;
            let delta = r.u16()? as i16;
            let _kind = r.u16()?;
            let len = r.u16()? as usize + 1;
            let name = r
                .slice(len)
                .map_err(|_| bad("a directory entry's name is truncated"))?;
            entries.push(DirEntry {
                name: name.to_vec(),
                inode: MetaRef { block, offset },
                number: base.wrapping_add_signed(delta as i32),
            });
        }
    }
    Ok(entries)
}

/// A fragment block: where it is stored, and its size word.
pub(crate) fn parse_fragment(bytes: &[u8]) -> io::Result<(u64, u32)> {
    let mut r = Le::new(bytes, "a fragment entry");
    Ok((r.u64()?, r.u32()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn superblock() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(MAGIC.to_le_bytes());
        b.extend(10u32.to_le_bytes()); // inodes
        b.extend(0u32.to_le_bytes()); // mtime
        b.extend((128u32 << 10).to_le_bytes());
        b.extend(3u32.to_le_bytes()); // fragments
        b.extend(6u16.to_le_bytes()); // zstd
        b.extend(17u16.to_le_bytes());
        b.extend(0u16.to_le_bytes()); // flags
        b.extend(1u16.to_le_bytes()); // ids
        b.extend(4u16.to_le_bytes());
        b.extend(0u16.to_le_bytes());
        for v in [
            0x20u64 << 16 | 0x40,
            10_000,
            9_000,
            u64::MAX,
            5_000,
            6_000,
            7_000,
            8_000,
        ] {
            b.extend(v.to_le_bytes());
        }
        assert_eq!(b.len(), SUPERBLOCK_LEN);
        b
    }

    #[test]
    fn a_superblock_is_read_and_each_bad_field_is_named() {
        let s = Superblock::parse(&superblock()).unwrap();
        assert_eq!(
            s,
            Superblock {
                block_size: 128 << 10,
                fragment_count: 3,
                compression: Compression::Zstd,
                root_inode: 0x20 << 16 | 0x40,
                bytes_used: 10_000,
                inode_table: 5_000,
                directory_table: 6_000,
                fragment_table: 7_000,
            }
        );
        assert_eq!(
            MetaRef::inode(s.root_inode),
            MetaRef {
                block: 0x20,
                offset: 0x40
            }
        );
        let cases: [(usize, &[u8], &str); 5] = [
            (0, b"hsqt", "wrong magic"),
            (28, &[3, 0], "version 3.0"),
            (12, &[0, 0, 3, 0], "block size 196608"),
            (20, &[3, 0], "compression lzo"),
            (64, &[0x10, 0x27, 0, 0], "inode table starts at 10000"),
        ];
        for (at, bytes, says) in cases {
            let mut b = superblock();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            let e = Superblock::parse(&b).unwrap_err().to_string();
            assert!(e.contains(says), "{e} should say {says}");
        }
        let e = Superblock::parse(&superblock()[..50]).unwrap_err();
        assert_eq!(e.to_string(), "squashfs: the superblock is truncated");
    }

    fn file_inode(size: u32, fragment: u32, blocks: &[u32]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(2u16.to_le_bytes());
        b.extend([0u8; 10]);
        b.extend(77u32.to_le_bytes());
        b.extend(4096u32.to_le_bytes()); // blocks start
        b.extend(fragment.to_le_bytes());
        b.extend(100u32.to_le_bytes()); // offset in the fragment
        b.extend(size.to_le_bytes());
        for w in blocks {
            b.extend(w.to_le_bytes());
        }
        b
    }

    #[test]
    fn a_file_inode_gives_its_blocks_and_tail() {
        let bs = 4096;
        // Two whole blocks, the second stored uncompressed, and a tail in fragment 5.
        let b = file_inode(2 * 4096 + 10, 5, &[1000, 4096 | DATA_UNCOMPRESSED]);
        assert_eq!(inode_len(&b, bs).unwrap(), Some(b.len()));
        let Inode::File(f) = Inode::parse(&b, bs).unwrap() else {
            panic!("not a file")
        };
        assert_eq!((f.number, f.size), (77, 8202));
        let block = |at, stored, compressed| DataBlock {
            at,
            stored,
            compressed,
        };
        // Located one after the other from the blocks' start.
        assert_eq!(
            f.blocks,
            [block(4096, 1000, true), block(5096, 4096, false)]
        );
        assert_eq!(f.fragment, Some((5, 100)));
        assert!(data_size(4097, bs).is_err());
        let e = Inode::parse(&file_inode(4096 + 10, 1, &[4097]), bs).unwrap_err();
        assert!(
            e.to_string().contains("a data block of 4097 bytes stored"),
            "{e}"
        );
        // Without a fragment the last partial block is a block of its own.
        let b = file_inode(4096 + 10, NO_FRAGMENT, &[900, 9]);
        let Inode::File(f) = Inode::parse(&b, bs).unwrap() else {
            panic!("not a file")
        };
        assert_eq!((f.blocks.len(), f.fragment), (2, None));
        // A short block list, and a tail that would run past its fragment block.
        let e = Inode::parse(&file_inode(3 * 4096, NO_FRAGMENT, &[1, 2]), bs).unwrap_err();
        assert!(
            e.to_string().contains("list of 3 blocks is truncated"),
            "{e}"
        );
        let mut b = file_inode(4000, 1, &[]);
        b[20..24].copy_from_slice(&200u32.to_le_bytes());
        let e = Inode::parse(&b, bs).unwrap_err();
        assert!(
            e.to_string().contains("runs past its fragment block"),
            "{e}"
        );
        assert_eq!(inode_len(&b[..20], bs).unwrap(), None);
    }

    #[test]
    fn a_listing_gives_names_inodes_and_numbers() {
        let mut b = Vec::new();
        b.extend(1u32.to_le_bytes()); // two entries
        b.extend(3u32.to_le_bytes()); // inode block
        b.extend(100u32.to_le_bytes()); // base number
        for (offset, delta, name) in [(16u16, 0i16, "ab"), (64, -2, "c")] {
            b.extend(offset.to_le_bytes());
            b.extend(delta.to_le_bytes());
            b.extend(2u16.to_le_bytes());
            b.extend((name.len() as u16 - 1).to_le_bytes());
            b.extend(name.as_bytes());
        }
        let entries = parse_listing(&b).unwrap();
        assert_eq!(
            entries,
            [
                DirEntry {
                    name: b"ab".to_vec(),
                    inode: MetaRef {
                        block: 3,
                        offset: 16
                    },
                    number: 100
                },
                DirEntry {
                    name: b"c".to_vec(),
                    inode: MetaRef {
                        block: 3,
                        offset: 64
                    },
                    number: 98
                },
            ]
        );
        let e = parse_listing(&b[..b.len() - 1]).unwrap_err();
        assert!(e.to_string().contains("name is truncated"), "{e}");
        b[0] = 200;
        let e = parse_listing(&b).unwrap_err();
        assert!(e.to_string().contains("counts 201 entries"), "{e}");
    }

    #[test]
    fn metadata_headers_give_length_and_compression() {
        assert_eq!(metadata_header(0x8000 | 8192).unwrap(), (8192, false));
        assert_eq!(metadata_header(100).unwrap(), (100, true));
        for h in [0, 8193, 0x8000] {
            assert!(metadata_header(h).is_err(), "{h:#x}");
        }
    }
}
