//! Where the rebuild reads the OSTree objects from: the files of the repository (through the
//! kernel's filesystem), or, when the repository lies on a SquashFS (the live ISO's root), that
//! filesystem's image decoded here (see [`super::squashfs`] for why).
//!
//! The image is only used once it is proven to be the mounted filesystem: the block device is
//! the one the repository's directory lives on, and the repository's inode number in the image
//! is the one the kernel reports. Anything else, and any read from the image that fails, falls
//! back to the files: the objects' digest checks the result either way.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::format::ObjectId;
use super::plan::Extent;
use super::squashfs::format::{FileInode, Inode};
use super::squashfs::{Decoder, Squashfs, NEVER};

/// `statfs`'s type of a SquashFS mount ("hsqs").
const SQUASHFS_MAGIC: u64 = 0x7371_7368;

/// Threads reading objects through the kernel, by default (`--read-threads`).
pub const READERS: usize = 8;
/// The most threads decoding the squashfs image, whatever `--read-threads` asks: each holds its
/// own decompression context and blocks (about 0.7 MiB with its allocator arena, measured),
/// and the work is the CPU's, so more threads than this only take memory.
pub(crate) const DECODING_READERS: usize = 16;

pub(crate) struct Store {
    /// `<repo>/objects/..`, read through the kernel when there is no image, or for what the
    /// image cannot give.
    repo: PathBuf,
    image: Option<Image>,
}

pub(crate) struct Image {
    fs: Squashfs,
    objects: HashMap<ObjectId, FileInode>,
    /// For each extent that reads a tail from a fragment block (by its image offset): the image
    /// offset of the next extent reading from the same block.
    next_use: HashMap<u64, u64>,
    /// A read from the image failed: the rest go through the kernel.
    failed: AtomicBool,
}

impl Store {
    /// The objects of `repo` read through the kernel.
    pub(crate) fn files(repo: &Path) -> Store {
        Store {
            repo: repo.to_path_buf(),
            image: None,
        }
    }

    /// The store for the objects `wanted` of `repo`: the SquashFS image under it unless
    /// `through_mount` or it cannot be used (then the log says why).
    pub(crate) fn open(repo: &Path, wanted: &[Extent], through_mount: bool) -> Store {
        if through_mount {
            tracing::info!(
                "live image: reading the objects through the mounted filesystem, as asked"
            );
            return Store::files(repo);
        }
        let image = match Image::open(repo, wanted) {
            Ok(image) => image,
            Err(e) => {
                tracing::warn!(
                    "live image: {} is on a squashfs whose image cannot be read here ({e}); reading the objects through the mounted filesystem",
                    repo.display()
                );
                None
            }
        };
        if let Some(image) = &image {
            tracing::info!(
                "live image: decoding the objects from the squashfs image on {} ({} objects)",
                image.fs.name,
                image.objects.len()
            );
        }
        Store {
            repo: repo.to_path_buf(),
            image,
        }
    }

    /// Reader threads when `--read-threads` is not given. Through the kernel, [`READERS`]:
    /// besides decompressing they wait on the media (a live ISO on virtual media). From the
    /// image, one per core up to [`READERS`]: the image is in memory (the live system copies
    /// its root into RAM so the ISO can go), the work is decompression, and each thread holds
    /// a decompression context and blocks (2.3 MiB each in the offline bench).
    pub(crate) fn default_readers(&self) -> usize {
        match self.image {
            None => READERS,
            Some(_) => {
                std::thread::available_parallelism().map_or(READERS, |n| n.get().min(READERS))
            }
        }
    }

    /// The most reader threads worth running from this store: [`DECODING_READERS`] when they
    /// decode the image (each holds its decompression state); `None` through the kernel, where
    /// they mostly wait and only the reader's own limit applies.
    pub(crate) fn reader_cap(&self) -> Option<usize> {
        self.image.as_ref().map(|_| DECODING_READERS)
    }

    /// Append one extent to `buf`, zeros where the object ends first (an extent is rounded up
    /// to the filesystem block, and the block's slack is zero on disk).
    pub(crate) fn read_extent(
        &self,
        e: &Extent,
        buf: &mut Vec<u8>,
        d: &mut Decoder,
    ) -> io::Result<()> {
        if self
            .image
            .as_ref()
            .is_some_and(|i| i.read_extent(e, buf, d))
        {
            return Ok(());
        }
        read_file_extent(&self.repo, e, buf)
    }
}

/// An I/O error that names the object and where in the image it was needed.
fn object_error(e: io::Error, path: &Path, at: u64, doing: &str) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "OSTree object {} (needed at image offset {at}) {doing}: {e}",
            path.display()
        ),
    )
}

/// [`Store::read_extent`] through the kernel. The bytes are read into the buffer's spare
/// capacity: nothing is zeroed that is then overwritten.
fn read_file_extent(repo: &Path, e: &Extent, buf: &mut Vec<u8>) -> io::Result<()> {
    let path = repo.join(e.object.relative_path());
    let mut f =
        File::open(&path).map_err(|err| object_error(err, &path, e.at, "cannot be opened"))?;
    let end = buf.len() + e.len as usize;
    f.seek(SeekFrom::Start(e.logical))
        .and_then(|_| f.take(e.len).read_to_end(buf))
        .map_err(|err| object_error(err, &path, e.at, "cannot be read"))?;
    buf.resize(end, 0);
    Ok(())
}

impl Image {
    /// [`Store::read_extent`] from the image: false, `buf` as it was, when the object must be
    /// read through the kernel (not in the image, or the image failed once: then one warning).
    fn read_extent(&self, e: &Extent, buf: &mut Vec<u8>, d: &mut Decoder) -> bool {
        let Some(file) = self.objects.get(&e.object) else {
            return false;
        };
        if self.failed.load(Ordering::Relaxed) {
            return false;
        }
        let start = buf.len();
        let len = file.size.saturating_sub(e.logical).min(e.len);
        let next = self.next_use.get(&e.at).copied().unwrap_or(NEVER);
        match self.fs.read(file, (e.logical, len), buf, next, d) {
            Ok(()) => {
                buf.resize(start + e.len as usize, 0);
                true
            }
            Err(err) => {
                buf.truncate(start);
                if !self.failed.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "live image: OSTree object {} cannot be decoded from the squashfs image on {} ({err}); reading the objects through the mounted filesystem from now on",
                        e.object,
                        self.fs.name
                    );
                }
                false
            }
        }
    }

    /// The image under `repo` with the `wanted` objects looked up; `None` when `repo` is not on
    /// a SquashFS.
    fn open(repo: &Path, wanted: &[Extent]) -> io::Result<Option<Image>> {
        let fs_type = nix::sys::statfs::statfs(repo)?.filesystem_type().0 as u64;
        if fs_type != SQUASHFS_MAGIC {
            return Ok(None);
        }
        let meta = std::fs::metadata(repo)?;
        let (dev, path) = device_of(meta.dev())?;
        let fs = Squashfs::open(dev, path.display().to_string())?;
        let below = components_below_mount(repo, meta.dev())?;
        let mut lookup = fs.lookup();
        let root = lookup.root()?;
        let repo_inode =
            lookup.walk(root, &below.iter().map(String::as_str).collect::<Vec<_>>())?;
        if repo_inode.number() as u64 != meta.ino() {
            return Err(super::squashfs::format::bad(format_args!(
                "{} is inode {} in the image on {}, the kernel says {}: not the mounted filesystem",
                below.join("/"),
                repo_inode.number(),
                path.display(),
                meta.ino()
            )));
        }
        let objects = lookup_objects(&mut lookup, repo_inode, wanted)?;
        drop(lookup);
        let next_use = next_fragment_use(wanted, &objects, fs.block_size());
        Ok(Some(Image {
            fs,
            objects,
            next_use,
            failed: AtomicBool::new(false),
        }))
    }
}

/// The inodes of the objects `wanted`, listing each `objects/xx` directory once. An object not
/// found is left out: reading it through the kernel then names what is missing.
fn lookup_objects(
    lookup: &mut super::squashfs::Lookup,
    repo: Inode,
    wanted: &[Extent],
) -> io::Result<HashMap<ObjectId, FileInode>> {
    let mut by_dir: HashMap<String, Vec<(String, ObjectId)>> = HashMap::new();
    for e in wanted {
        let hex = e.object.to_string();
        by_dir
            .entry(hex[..2].to_string())
            .or_default()
            .push((format!("{}.file", &hex[2..]), e.object));
    }
    let objects_dir = lookup.walk(repo, &["objects"])?;
    let subdirs = lookup.list(&objects_dir)?;
    let mut found = HashMap::new();
    for entry in subdirs {
        let Some(names) = std::str::from_utf8(&entry.name)
            .ok()
            .and_then(|n| by_dir.get(n))
        else {
            continue;
        };
        let dir = lookup.inode(entry.inode)?;
        let files: HashMap<Vec<u8>, _> = lookup
            .list(&dir)?
            .into_iter()
            .map(|e| (e.name, e.inode))
            .collect();
        for (name, id) in names {
            if found.contains_key(id) {
                continue;
            }
            if let Some(&at) = files.get(name.as_bytes()) {
                if let Inode::File(f) = lookup.inode(at)? {
                    found.insert(*id, f);
                }
            }
        }
    }
    Ok(found)
}

/// For each extent of `wanted` that reads a file's tail, the image offset of the next extent
/// reading the same fragment block ([`NEVER`] for the last).
fn next_fragment_use(
    wanted: &[Extent],
    objects: &HashMap<ObjectId, FileInode>,
    block_size: u32,
) -> HashMap<u64, u64> {
    let mut later: HashMap<u32, u64> = HashMap::new();
    let mut next_use = HashMap::new();
    for e in wanted.iter().rev() {
        let Some(f) = objects.get(&e.object) else {
            continue;
        };
        let Some((fragment, _)) = f.fragment else {
            continue;
        };
        let tail = f.blocks.len() as u64 * block_size as u64;
        if (e.logical + e.len).min(f.size) > tail {
            next_use.insert(e.at, later.insert(fragment, e.at).unwrap_or(NEVER));
        }
    }
    next_use
}

/// The block device whose number is `dev`, opened read-only, and its path.
fn device_of(dev: u64) -> io::Result<(File, PathBuf)> {
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let uevent = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"))?;
    let name = uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .ok_or_else(|| io::Error::other(format!("block device {major}:{minor} has no DEVNAME")))?;
    let path = Path::new("/dev").join(name);
    let file = File::open(&path)?;
    if file.metadata()?.rdev() != dev {
        return Err(io::Error::other(format!(
            "{} is not block device {major}:{minor}",
            path.display()
        )));
    }
    Ok((file, path))
}

/// The names leading from the root of the filesystem numbered `dev` down to `path`: its
/// ancestors are climbed while they are on the same filesystem.
fn components_below_mount(path: &Path, dev: u64) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    let mut here = path;
    while let (Some(parent), Some(name)) = (here.parent(), here.file_name()) {
        if std::fs::metadata(parent)?.dev() != dev {
            break;
        }
        names.push(name.to_string_lossy().into_owned());
        here = parent;
    }
    names.reverse();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::super::squashfs::format::DataBlock;
    use super::*;

    fn id(n: u8) -> ObjectId {
        let mut b = [0u8; 32];
        b[0] = 0xab;
        b[31] = n;
        ObjectId(b)
    }

    fn extent(object: ObjectId, logical: u64, len: u64, at: u64) -> Extent {
        Extent {
            object,
            logical,
            len,
            at,
        }
    }

    /// A repository of three objects (one of two 4 KiB blocks and a tail, two smaller than a
    /// block) and its squashfs image, gzip with 4 KiB blocks; the extents reading all of them.
    fn repo(dir: &Path) -> (PathBuf, PathBuf, Vec<(ObjectId, Vec<u8>)>) {
        let repo = dir.join("repo");
        let objects: Vec<_> = [(1, 9000), (2, 100), (3, 3000)]
            .into_iter()
            .map(|(n, len)| {
                (
                    id(n),
                    (0..len).map(|i| (i % 251) as u8 ^ n).collect::<Vec<_>>(),
                )
            })
            .collect();
        for (object, bytes) in &objects {
            let path = repo.join(object.relative_path());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
        let image = dir.join("repo.squashfs");
        let args = ["-b", "4096", "-comp", "gzip", "-always-use-fragments"];
        super::super::squashfs::tests::mksquashfs(&repo, &image, &args);
        (repo, image, objects)
    }

    /// The store of `repo` with its squashfs image `image` (a file here, a mounted device in
    /// use), the `wanted` objects looked up.
    fn image_store(repo: &Path, image: &Path, wanted: &[Extent]) -> Store {
        let fs = Squashfs::open(File::open(image).unwrap(), image.display().to_string()).unwrap();
        let mut lookup = fs.lookup();
        let root = lookup.root().unwrap();
        let objects = lookup_objects(&mut lookup, root, wanted).unwrap();
        drop(lookup);
        let next_use = next_fragment_use(wanted, &objects, fs.block_size());
        let image = Image {
            fs,
            objects,
            next_use,
            failed: AtomicBool::new(false),
        };
        Store {
            repo: repo.to_path_buf(),
            image: Some(image),
        }
    }

    /// Every object whole, each rounded up to 4 KiB as the plan cuts extents.
    fn all(objects: &[(ObjectId, Vec<u8>)]) -> (Vec<Extent>, Vec<u8>) {
        let (mut extents, mut want, mut at) = (Vec::new(), Vec::new(), 0);
        for (object, bytes) in objects {
            let len = (bytes.len() as u64).next_multiple_of(4096);
            extents.push(extent(*object, 0, len, at));
            want.extend_from_slice(bytes);
            want.resize(want.len() + (len as usize - bytes.len()), 0);
            at += len;
        }
        (extents, want)
    }

    fn read_all(store: &Store, extents: &[Extent]) -> Vec<u8> {
        let (mut buf, mut d) = (Vec::new(), Decoder::new());
        for e in extents {
            store.read_extent(e, &mut buf, &mut d).unwrap();
        }
        buf
    }

    #[test]
    fn objects_read_from_the_image_as_from_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, image, objects) = repo(dir.path());
        let (extents, want) = all(&objects);
        let store = image_store(&repo, &image, &extents);
        let i = store.image.as_ref().unwrap();
        assert_eq!(i.objects.len(), 3);
        assert!(read_all(&store, &extents) == want);
        assert!(!i.failed.load(Ordering::Relaxed));
        // Decoding threads are capped, whatever is asked; the files' readers are not.
        assert_eq!(store.reader_cap(), Some(DECODING_READERS));
        assert!(store.default_readers() <= DECODING_READERS);
        // Not on a squashfs: the files.
        let files = Store::open(&repo, &extents, false);
        assert!(files.image.is_none());
        assert_eq!(files.reader_cap(), None);
    }

    #[test]
    fn an_image_that_fails_to_decode_falls_back_to_the_files_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, image, objects) = repo(dir.path());
        let (extents, want) = all(&objects);
        let good = image_store(&repo, &image, &extents);
        // The first object's first data block overwritten in the image.
        let at = good.image.unwrap().objects[&id(1)].blocks[0].at;
        let mut bytes = std::fs::read(&image).unwrap();
        bytes[at as usize..at as usize + 32].fill(0x55);
        std::fs::write(&image, bytes).unwrap();
        let store = image_store(&repo, &image, &extents);
        assert!(
            read_all(&store, &extents) == want,
            "the bytes come from the files"
        );
        assert!(store.image.unwrap().failed.load(Ordering::Relaxed));
    }

    #[test]
    fn each_tail_read_knows_the_next_read_of_its_fragment_block() {
        let file = |fragment: Option<u32>, blocks: usize, size: u64| FileInode {
            number: 0,
            size,
            blocks: vec![
                DataBlock {
                    at: 0,
                    stored: 1,
                    compressed: true
                };
                blocks
            ],
            fragment: fragment.map(|f| (f, 0)),
        };
        let objects = HashMap::from([
            (id(1), file(Some(7), 0, 100)),
            (id(2), file(Some(7), 2, 8192 + 10)),
            (id(3), file(None, 1, 4000)),
        ]);
        let wanted = [
            extent(id(1), 0, 4096, 0),
            extent(id(3), 0, 4096, 4096),
            extent(id(2), 0, 8192, 8192), // whole blocks only: no tail
            extent(id(2), 8192, 4096, 16384),
            extent(id(1), 0, 4096, 20480),
        ];
        let next = next_fragment_use(&wanted, &objects, 4096);
        assert_eq!(
            next,
            HashMap::from([(0, 16384), (16384, 20480), (20480, NEVER)])
        );
    }
}
