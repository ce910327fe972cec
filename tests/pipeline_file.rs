//! The streaming write onto regular files used as disks (no root needed): odd tails, digest and
//! stream errors that must leave an empty valid GPT, a refusal that must leave the file
//! untouched, cancellation, progress, and the first MiB written last. Every format at both
//! sector sizes, end to end, is in `write_image_loop.rs`.

mod common;

use anyhow::Result;
use assisted_installer::disk::Device;
use assisted_installer::image::digest::{DigestMismatch, Expected, Sha256Sum};
use assisted_installer::image::progress::ProgressSink;
use assisted_installer::image::progress::{NoProgress, PercentCallback};
use assisted_installer::image::source::{FileSource, ImageSource};
use assisted_installer::image::{
    stream_image, Cancel, Input, Interrupted, WriteOptions, WriteSummary,
};
use common::images::{assert_image_on_disk, gpt_image, sha256_hex};
use common::root::assert_empty_gpt;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A source over bytes in memory, with hooks to observe or disturb the stream.
struct MemSource {
    data: Vec<u8>,
    pos: usize,
    chunk: usize,
    /// Called before each chunk with the offset about to be delivered.
    before: Box<dyn FnMut(usize) + Send>,
}

impl MemSource {
    fn new(data: Vec<u8>) -> MemSource {
        MemSource {
            data,
            pos: 0,
            chunk: 64 << 10,
            before: Box::new(|_| {}),
        }
    }
}

impl ImageSource for MemSource {
    fn describe(&self) -> String {
        "memory".into()
    }
    fn total_len(&self) -> Option<u64> {
        Some(self.data.len() as u64)
    }
    fn read_more(&mut self, buf: &mut Vec<u8>, _c: &Cancel) -> Result<usize> {
        (self.before)(self.pos);
        let n = self.chunk.min(self.data.len() - self.pos);
        buf.extend_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

fn disk_file(size: u64) -> tempfile::NamedTempFile {
    // Under target/: a real filesystem with O_DIRECT (tmpfs has none).
    let f = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    f.as_file().set_len(size).unwrap();
    f
}

fn opts(expected: Expected) -> WriteOptions {
    WriteOptions {
        expected,
        ..WriteOptions::default()
    }
}

fn sha(data: &[u8]) -> Sha256Sum {
    Sha256Sum::parse(&sha256_hex(data), "test").unwrap()
}

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zst(data: &[u8]) -> Vec<u8> {
    let mut e = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
    e.include_checksum(true).unwrap();
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// The stream, then the partition table, with no post-install step in between.
fn stream_and_commit(
    input: impl Into<Input>,
    dev: &Device,
    o: &WriteOptions,
    progress: &dyn ProgressSink,
    stop: &Cancel,
) -> Result<WriteSummary> {
    stream_image(input, dev, o, progress, stop)?.commit(dev, &o.saved)
}

fn write(src: Box<dyn ImageSource>, disk: &Path, o: &WriteOptions) -> Result<WriteSummary> {
    let dev = Device::open_for_write(disk)?;
    stream_and_commit(src, &dev, o, &NoProgress, &Cancel::new())
}

/// A stream error can surface before the disk is wiped (then it is untouched: still all
/// zeroes here) or after (then it holds an empty GPT); either way no image is bootable.
fn assert_untouched_or_empty_gpt(disk: &Path, ss: u64) {
    let data = std::fs::read(disk).unwrap();
    if !data.iter().all(|&b| b == 0) {
        assert_empty_gpt(disk, ss);
    }
}

#[test]
fn a_digest_mismatch_fails_and_leaves_an_empty_gpt() {
    for (which, ss) in [("compressed", 512), ("uncompressed", 4096)] {
        let img = gpt_image(4 << 20, ss, 8);
        let bytes = if ss == 512 { gz(&img) } else { zst(&img) };
        let (wrong, right) = (
            Some(Sha256Sum([7; 32])),
            sha(if ss == 512 { &bytes } else { &img }),
        );
        let expected = match which {
            "compressed" => Expected {
                compressed: wrong,
                uncompressed: None,
            },
            _ => Expected {
                compressed: None,
                uncompressed: wrong,
            },
        };
        let disk = disk_file(6 << 20);
        let src = Box::new(MemSource::new(bytes));
        let err = write(src, disk.path(), &opts(expected)).unwrap_err();
        let e = err
            .chain()
            .find_map(|c| c.downcast_ref::<DigestMismatch>())
            .unwrap_or_else(|| panic!("{err:#}"));
        assert_eq!((e.which, &e.actual), (which, &right));
        assert!(format!("{err:#}").contains(which), "{err:#}");
        assert_empty_gpt(disk.path(), ss);
    }
}

#[test]
fn truncated_and_trailing_streams_fail_and_leave_an_empty_gpt() {
    let img = gpt_image(4 << 20, 512, 10);
    for (what, bytes, needle) in [
        (
            "truncated gz",
            {
                let c = gz(&img);
                c[..c.len() * 3 / 4].to_vec()
            },
            "truncated",
        ),
        // The decoder's end (and its check for trailing data) is the same for every format:
        // `image::format`'s damaged_streams_are_errors has each format's.
        (
            "trailing after gz",
            {
                let mut c = gz(&img);
                c.extend_from_slice(b"junk");
                c
            },
            "trailing data",
        ),
        (
            "raw shorter than its GPT",
            img[..3 << 20].to_vec(),
            "truncated",
        ),
    ] {
        let disk = disk_file(6 << 20);
        let err = write(
            Box::new(MemSource::new(bytes)),
            disk.path(),
            &opts(Expected::default()),
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains(needle), "{what}: {err:#}");
        assert_untouched_or_empty_gpt(disk.path(), 512);
    }
}

/// A disk too small for the image is refused the same way: `write_image_loop.rs`.
#[test]
fn an_image_that_is_not_a_gpt_is_refused_leaving_the_disk_untouched() {
    let disk = disk_file(6 << 20);
    let before = vec![0x5au8; 6 << 20];
    std::fs::write(disk.path(), &before).unwrap();
    let not_gpt = Box::new(MemSource::new(common::images::pattern(3 << 20, 12)));
    let err = write(not_gpt, disk.path(), &opts(Expected::default())).unwrap_err();
    assert!(
        format!("{err:#}").contains("not a CoreOS metal disk image"),
        "{err:#}"
    );
    assert!(
        std::fs::read(disk.path()).unwrap() == before,
        "disk was modified"
    );
}

#[test]
fn the_first_mib_is_written_only_after_the_stream_is_verified() {
    let img = gpt_image(24 << 20, 512, 13);
    let disk = disk_file(32 << 20);
    let path = disk.path().to_path_buf();
    let seen_head = Arc::new(Mutex::new(Vec::new()));
    let (len, head_log) = (img.len(), seen_head.clone());
    let mut src = MemSource::new(img.clone());
    // Before each chunk, look at what the disk's sector 1 holds right now.
    src.before = Box::new(move |pos| {
        if pos > (1 << 20) && pos < len {
            let head = std::fs::read(&path).unwrap()[512..1024].to_vec();
            head_log.lock().unwrap().push(head);
        }
    });
    write(
        Box::new(src),
        disk.path(),
        &opts(Expected {
            compressed: Some(sha(&img)),
            uncompressed: None,
        }),
    )
    .unwrap();
    let seen = seen_head.lock().unwrap();
    // The source may run ahead of the wipe (the disk is still untouched then), but from the
    // wipe on, sector 1 holds an empty GPT, and never the image's own header until the end.
    assert!(
        seen.iter().any(|h| &h[..8] == b"EFI PART"),
        "the empty GPT was seen"
    );
    for h in seen.iter() {
        assert!(
            h.iter().all(|&b| b == 0) || &h[..8] == b"EFI PART",
            "unexpected sector 1"
        );
        assert_ne!(
            &h[..],
            &img[512..1024],
            "the image's own GPT header appeared before the end"
        );
    }
    assert_image_on_disk(&std::fs::read(disk.path()).unwrap(), &img, 512);
}

#[test]
fn cancellation_mid_stream_stops_with_interrupted_and_an_empty_gpt() {
    let img = gpt_image(6 << 20, 512, 14);
    let disk = disk_file(8 << 20);
    let stop = Cancel::new();
    let s2 = stop.clone();
    let mut src = MemSource::new(img);
    let path = disk.path().to_path_buf();
    // Cancel mid-stream, once the disk has been wiped (the coordinator does that on its own
    // thread; the source can run ahead of it).
    src.before = Box::new(move |pos| {
        if pos >= 3 << 20 && !s2.is_cancelled() {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while &std::fs::read(&path).unwrap()[512..520] != b"EFI PART" {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the disk was never wiped"
                );
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            s2.cancel();
        }
    });
    let dev = Device::open_for_write(disk.path()).unwrap();
    let err = stream_and_commit(
        Box::new(src),
        &dev,
        &opts(Expected::default()),
        &NoProgress,
        &stop,
    )
    .unwrap_err();
    assert!(err.chain().any(|c| c.is::<Interrupted>()), "{err:#}");
    assert_empty_gpt(disk.path(), 512);
}

#[test]
fn progress_reaches_one_hundred_percent_in_order() {
    let img = gpt_image(12 << 20, 512, 15);
    let disk = disk_file(16 << 20);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let cb = PercentCallback::new(move |p| s2.lock().unwrap().push(p));
    let mut src = MemSource::new(img);
    src.chunk = 32 << 10;
    src.before = Box::new(|_| std::thread::sleep(std::time::Duration::from_millis(3)));
    let dev = Device::open_for_write(disk.path()).unwrap();
    stream_and_commit(
        Box::new(src),
        &dev,
        &opts(Expected::default()),
        &cb,
        &Cancel::new(),
    )
    .unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.last(), Some(&100), "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    assert!(seen.len() > 2, "intermediate percentages: {seen:?}");
}

/// From a local file (sized by its length), an image of 3 MiB + 3 sectors, whose last buffer
/// (1536 bytes) is not a multiple of 4096, onto a disk full of other bytes.
#[test]
fn a_tail_that_is_not_a_whole_buffer_is_written_exactly_from_a_local_file() {
    let img = gpt_image((3 << 20) + 3 * 512, 512, 7);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img.zst");
    std::fs::write(&path, zst(&img)).unwrap();
    let src = FileSource::open(&path).unwrap();
    assert_eq!(
        src.total_len(),
        Some(std::fs::metadata(&path).unwrap().len())
    );
    let disk = disk_file(6 << 20);
    std::fs::write(disk.path(), vec![0xeeu8; 6 << 20]).unwrap();
    let expected = Expected {
        compressed: None,
        uncompressed: Some(sha(&img)),
    };
    write(Box::new(src), disk.path(), &opts(expected)).unwrap();
    assert_image_on_disk(&std::fs::read(disk.path()).unwrap(), &img, 512);
}
