//! Reading files straight from a SquashFS image, the live ISO's root, decompressed on the
//! calling thread.
//!
//! Why not through the mounted filesystem: the kernel's squashfs driver keeps only 3
//! decompressed fragment blocks (`CONFIG_SQUASHFS_FRAGMENT_CACHE_SIZE`, the default in every
//! distribution), where the tails of all files smaller than a block are packed. A rebuild reads
//! the objects in the order of the metal image, unrelated to the order of the squashfs, so
//! nearly every small object decompresses a whole fragment block again; and a kernel built with
//! one decompressor (`CONFIG_SQUASHFS_DECOMP_SINGLE`) does all of it on one core. Here every
//! reader thread decompresses with its own context, whole blocks straight from the device, and a
//! bounded cache keeps fragment blocks by when they are needed next: the rebuild knows its
//! whole order of reads in advance, so the block dropped is the one needed the latest
//! (measured on a 1 GiB live root with 1,611 fragment blocks read 14,484 times in image order:
//! 6,966 decompressions with 64 blocks kept, against 11,137 keeping the most recently used).

pub(crate) mod format;

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use format::{bad, Compression, DataBlock, FileInode, Inode, MetaRef, Superblock};

/// Decompressed fragment blocks kept, in bytes (8 at the largest block size, 64 at the
/// default 128 KiB: 6,966 decompressions in the measurement above, 3,676 with 256 kept). The
/// live ISO's osmet needs a 64 MiB xz dictionary besides: more would take the install past
/// 128 MiB of memory, for a few tenths of a second.
const FRAGMENT_CACHE_BYTES: usize = 8 << 20;
/// A fragment block's next use when it is not needed again.
pub(crate) const NEVER: u64 = u64::MAX;

/// An open SquashFS image.
pub(crate) struct Squashfs {
    dev: File,
    /// The device or file, for messages.
    pub(crate) name: String,
    sb: Superblock,
    /// The fragment blocks.
    fragments: Vec<DataBlock>,
    cache: Mutex<FragmentCache>,
    cache_len: usize,
}

/// Decompressed fragment blocks, each with when it is needed next; and buffers of dropped ones
/// to decompress into again (a fresh 128 KiB allocation per fragment, freed on another thread,
/// left the allocator's per-thread arenas holding tens of MiB).
#[derive(Default)]
struct FragmentCache {
    kept: Vec<(u32, u64, Arc<Vec<u8>>)>,
    spare: Vec<Vec<u8>>,
}

/// A thread's decompression state and scratch block.
pub(crate) struct Decoder {
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    gzip: flate2::Decompress,
    raw: Vec<u8>,
    block: Vec<u8>,
}

impl Decoder {
    pub(crate) fn new() -> Decoder {
        Decoder {
            zstd: None,
            gzip: flate2::Decompress::new(true),
            raw: Vec::new(),
            block: Vec::new(),
        }
    }

    /// Decompress `raw` into `out` (cleared), which ends up with at most `max` bytes.
    fn decompress(
        &mut self,
        how: Compression,
        raw: &[u8],
        out: &mut Vec<u8>,
        max: usize,
    ) -> io::Result<()> {
        out.clear();
        out.reserve_exact(max);
        let failed =
            |e: &dyn std::fmt::Display| bad(format_args!("a block does not decompress: {e}"));
        match how {
            Compression::Zstd => {
                let z = match &mut self.zstd {
                    Some(z) => z,
                    slot => slot.insert(zstd::bulk::Decompressor::new()?),
                };
                z.decompress_to_buffer(raw, out).map_err(|e| failed(&e))?;
            }
            Compression::Gzip => {
                self.gzip.reset(true);
                let status = self
                    .gzip
                    .decompress_vec(raw, out, flate2::FlushDecompress::Finish)
                    .map_err(|e| failed(&e))?;
                if status != flate2::Status::StreamEnd {
                    return Err(failed(&"the zlib stream does not end within a block"));
                }
            }
            Compression::Xz => {
                let mut s = liblzma::stream::Stream::new_stream_decoder(16 << 20, 0)
                    .map_err(|e| failed(&e))?;
                let status = s
                    .process_vec(raw, out, liblzma::stream::Action::Finish)
                    .map_err(|e| failed(&e))?;
                if status != liblzma::stream::Status::StreamEnd {
                    return Err(failed(&"the xz stream does not end within a block"));
                }
            }
        }
        Ok(())
    }
}

impl Squashfs {
    /// Read the superblock and the fragment table of the image in `dev`.
    pub(crate) fn open(dev: File, name: String) -> io::Result<Squashfs> {
        let mut head = [0u8; format::SUPERBLOCK_LEN];
        dev.read_exact_at(&mut head, 0)
            .map_err(|e| bad(format_args!("reading the superblock of {name}: {e}")))?;
        let sb = Superblock::parse(&head)?;
        let mut fs = Squashfs {
            dev,
            name,
            cache: Mutex::new(FragmentCache::default()),
            cache_len: (FRAGMENT_CACHE_BYTES / sb.block_size as usize).max(4),
            sb,
            fragments: Vec::new(),
        };
        fs.fragments = fs.fragment_table()?;
        Ok(fs)
    }

    pub(crate) fn block_size(&self) -> u32 {
        self.sb.block_size
    }

    /// `len` bytes at `at`, which must lie within the filesystem.
    fn read_raw(&self, at: u64, len: usize, buf: &mut Vec<u8>) -> io::Result<()> {
        if at
            .checked_add(len as u64)
            .is_none_or(|end| end > self.sb.bytes_used)
        {
            return Err(bad(format_args!(
                "{len} bytes at {at} lie past the filesystem's end ({})",
                self.sb.bytes_used
            )));
        }
        buf.resize(len, 0);
        self.dev.read_exact_at(buf, at).map_err(|e| {
            bad(format_args!(
                "reading {len} bytes at {at} of {}: {e}",
                self.name
            ))
        })
    }

    /// The metadata block at `at`: its bytes, and where the next one starts.
    fn metadata(&self, at: u64, d: &mut Decoder) -> io::Result<(Vec<u8>, u64)> {
        let mut raw = std::mem::take(&mut d.raw);
        self.read_raw(at, 2, &mut raw)?;
        let (len, compressed) = format::metadata_header(u16::from_le_bytes([raw[0], raw[1]]))?;
        self.read_raw(at + 2, len, &mut raw)?;
        let mut out = Vec::new();
        if compressed {
            d.decompress(self.sb.compression, &raw, &mut out, format::METADATA_MAX)?;
        } else {
            out.extend_from_slice(&raw);
        }
        d.raw = raw;
        Ok((out, at + 2 + len as u64))
    }

    fn fragment_table(&self) -> io::Result<Vec<DataBlock>> {
        let count = self.sb.fragment_count as usize;
        if count == 0 {
            return Ok(Vec::new());
        }
        // 16-byte entries, 512 to a metadata block; the table is the blocks' offsets.
        let blocks = count.div_ceil(512);
        if blocks as u64 * 8 > self.sb.bytes_used {
            return Err(bad(format_args!("a fragment count of {count}")));
        }
        let mut index = Vec::new();
        self.read_raw(self.sb.fragment_table, blocks * 8, &mut index)?;
        let mut d = Decoder::new();
        let mut entries = Vec::with_capacity(count);
        for pointer in index.chunks_exact(8) {
            let at = u64::from_le_bytes(pointer.try_into().expect("8 bytes"));
            let (bytes, _) = self.metadata(at, &mut d)?;
            for e in bytes.chunks_exact(16).take(count - entries.len()) {
                let (at, word) = format::parse_fragment(e)?;
                entries.push(DataBlock::new(at, word, self.sb.block_size)?);
            }
        }
        if entries.len() != count {
            return Err(bad(format_args!(
                "the fragment table holds {} of its {count} entries",
                entries.len()
            )));
        }
        Ok(entries)
    }

    /// Looking up paths: inodes and directory listings, their metadata blocks kept while it
    /// lasts (a whole directory tree reads each block many times).
    pub(crate) fn lookup(&self) -> Lookup<'_> {
        Lookup {
            fs: self,
            blocks: HashMap::new(),
            d: Decoder::new(),
        }
    }

    /// Append `len` bytes of `file` from `logical` to `out` (the file must hold them). `next`:
    /// when the file's fragment block is needed next ([`NEVER`]: not again).
    pub(crate) fn read(
        &self,
        file: &FileInode,
        (logical, len): (u64, u64),
        out: &mut Vec<u8>,
        next: u64,
        d: &mut Decoder,
    ) -> io::Result<()> {
        let end = logical + len;
        if end > file.size {
            return Err(bad(format_args!(
                "bytes {logical}..{end} of inode {} asked, it has {}",
                file.number, file.size
            )));
        }
        if len == 0 {
            return Ok(());
        }
        let bs = self.sb.block_size as u64;
        let first = (logical / bs) as usize;
        for (k, b) in file.blocks.iter().enumerate().skip(first) {
            let (start, block_end) = (k as u64 * bs, ((k as u64 + 1) * bs).min(file.size));
            let block = self.data_block(b, block_end - start, d)?;
            let from = logical.max(start) - start;
            out.extend_from_slice(&block[from as usize..(end.min(block_end) - start) as usize]);
            if block_end >= end {
                return Ok(());
            }
        }
        let Some((index, offset)) = file.fragment else {
            return Err(bad(format_args!(
                "inode {} ends before its size",
                file.number
            )));
        };
        let tail_start = file.blocks.len() as u64 * bs;
        let fragment = self.fragment(index, next, d)?;
        let (from, to) = (
            offset as u64 + logical.max(tail_start) - tail_start,
            offset as u64 + end - tail_start,
        );
        let bytes = fragment.get(from as usize..to as usize).ok_or_else(|| {
            bad(format_args!(
                "inode {}: its tail runs past fragment block {index}",
                file.number
            ))
        })?;
        out.extend_from_slice(bytes);
        Ok(())
    }

    /// One data block, decompressed into the decoder's scratch block: at least `want` bytes.
    fn data_block<'d>(
        &self,
        &DataBlock {
            at,
            stored,
            compressed,
        }: &DataBlock,
        want: u64,
        d: &'d mut Decoder,
    ) -> io::Result<&'d [u8]> {
        let mut raw = std::mem::take(&mut d.raw);
        let mut block = std::mem::take(&mut d.block);
        let done = if stored == 0 {
            // A sparse block: zeros, not stored.
            block.clear();
            block.resize(want as usize, 0);
            Ok(())
        } else {
            self.read_raw(at, stored as usize, &mut raw).and_then(|()| {
                if compressed {
                    let max = self.sb.block_size as usize;
                    d.decompress(self.sb.compression, &raw, &mut block, max)
                } else {
                    std::mem::swap(&mut raw, &mut block);
                    Ok(())
                }
            })
        };
        d.raw = raw;
        d.block = block;
        done?;
        if (d.block.len() as u64) < want {
            return Err(bad(format_args!(
                "the data block at {at} holds {} bytes, {want} expected",
                d.block.len()
            )));
        }
        Ok(&d.block)
    }

    /// Fragment block `index`, decompressed: from the cache, or read and then kept until
    /// `next` (a position in the reader's order, [`NEVER`] when it is not needed again).
    fn fragment(&self, index: u32, next: u64, d: &mut Decoder) -> io::Result<Arc<Vec<u8>>> {
        let mut cache = self.cache.lock().expect("fragment cache lock");
        if let Some(i) = cache.kept.iter().position(|(n, _, _)| *n == index) {
            if next == NEVER {
                return Ok(cache.kept.swap_remove(i).2);
            }
            cache.kept[i].1 = next;
            return Ok(cache.kept[i].2.clone());
        }
        let spare = cache.spare.pop().unwrap_or_default();
        drop(cache);
        let block = self.fragments.get(index as usize).ok_or_else(|| {
            bad(format_args!(
                "fragment block {index} asked, the table has {}",
                self.fragments.len()
            ))
        })?;
        self.data_block(block, 0, d)?;
        let bytes = Arc::new(std::mem::replace(&mut d.block, spare));
        if next != NEVER {
            let mut cache = self.cache.lock().expect("fragment cache lock");
            cache.kept.push((index, next, bytes.clone()));
            if cache.kept.len() > self.cache_len {
                let latest = (0..cache.kept.len())
                    .max_by_key(|&i| cache.kept[i].1)
                    .expect("not empty");
                let (_, _, dropped) = cache.kept.swap_remove(latest);
                // Still in use by another reader: then its buffer goes when it is done.
                if let Ok(buffer) = Arc::try_unwrap(dropped) {
                    cache.spare.push(buffer);
                }
            }
        }
        Ok(bytes)
    }
}

/// Path lookups over one image.
pub(crate) struct Lookup<'a> {
    fs: &'a Squashfs,
    blocks: HashMap<u64, (Arc<Vec<u8>>, u64)>,
    d: Decoder,
}

impl Lookup<'_> {
    /// `len` bytes from `at` in the table starting at `table`, across metadata blocks.
    fn bytes(&mut self, table: u64, at: MetaRef, len: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len.min(1 << 20));
        let (mut block, mut offset) = (table + at.block, at.offset);
        while out.len() < len {
            let (bytes, next) = match self.blocks.get(&block) {
                Some(hit) => hit.clone(),
                None => {
                    let (bytes, next) = self.fs.metadata(block, &mut self.d)?;
                    let entry = (Arc::new(bytes), next);
                    self.blocks.insert(block, entry.clone());
                    entry
                }
            };
            let rest = bytes.get(offset..).ok_or_else(|| {
                bad(format_args!(
                    "offset {offset} in a metadata block of {}",
                    bytes.len()
                ))
            })?;
            out.extend_from_slice(&rest[..rest.len().min(len - out.len())]);
            (block, offset) = (next, 0);
        }
        Ok(out)
    }

    /// The inode `at` refers to.
    pub(crate) fn inode(&mut self, at: MetaRef) -> io::Result<Inode> {
        let table = self.fs.sb.inode_table;
        let bs = self.fs.sb.block_size;
        // The fixed fields first, then, for a file, its whole block list.
        let mut len = 64;
        loop {
            let bytes = self.bytes(table, at, len)?;
            match format::inode_len(&bytes, bs)? {
                Some(need) if need <= bytes.len() => return Inode::parse(&bytes, bs),
                Some(need) => len = need,
                None => return Err(bad("an inode is truncated")),
            }
        }
    }

    pub(crate) fn root(&mut self) -> io::Result<Inode> {
        self.inode(MetaRef::inode(self.fs.sb.root_inode))
    }

    /// The entries of directory `dir`.
    pub(crate) fn list(&mut self, dir: &Inode) -> io::Result<Vec<format::DirEntry>> {
        let Inode::Dir { listing, len, .. } = *dir else {
            return Err(bad(format_args!(
                "inode {} is not a directory",
                dir.number()
            )));
        };
        let bytes = self.bytes(self.fs.sb.directory_table, listing, len)?;
        format::parse_listing(&bytes)
    }

    /// The inode at `path` (components below `from`).
    pub(crate) fn walk(&mut self, from: Inode, path: &[&str]) -> io::Result<Inode> {
        let mut here = from;
        for name in path {
            let entry = self
                .list(&here)?
                .into_iter()
                .find(|e| e.name == name.as_bytes())
                .ok_or_else(|| {
                    bad(format_args!(
                        "no {name} in directory inode {}",
                        here.number()
                    ))
                })?;
            here = self.inode(entry.inode)?;
        }
        Ok(here)
    }
}

#[cfg(test)]
pub(crate) mod tests;
