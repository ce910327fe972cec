//! Rebuilding the image: a `Read` that yields the raw disk image, byte for byte, from the packed
//! stream ([`packed`](super::packed), xz-decoded on its own thread) and the OSTree objects
//! ([`objects`](super::objects), read ahead by a pool of threads), following a
//! [`plan`](super::plan). The caller (the pipeline's decode stage) only copies bytes into its
//! aligned buffers; the pipeline hashes them on yet another thread.
//!
//! Memory is bounded by the object read-ahead, the packed buffers and the xz dictionary,
//! whatever the image and object sizes. Errors name the object's path and the image offset it
//! was needed at, or the offset where the packed stream fell short.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use super::objects::Objects;
use super::packed::Packed;
use super::plan::{object_extents, Piece};
use super::store::Store;

/// The rebuilt image as a `Read`. It returns `Ok(0)` only once exactly the planned number of
/// bytes was produced and the packed stream ended there; the SHA-256 is the caller's to check.
pub(crate) struct Rebuild {
    pieces: Vec<Piece>,
    /// The next piece to emit.
    next: usize,
    packed: Packed,
    objects: Objects,
    /// Bytes left of the current piece, and whether it comes from the packed stream.
    left: u64,
    from_packed: bool,
    produced: u64,
    size: u64,
    done: bool,
}

impl Rebuild {
    /// Start rebuilding: `xz` is the osmet file positioned at its packed stream, `repo` the
    /// OSTree repository holding the objects (`<repo>/objects/..`, see [`Store`] for how they
    /// are read), read on `readers` threads (`None`: the store's default).
    pub(crate) fn start(
        pieces: Vec<Piece>,
        size: u64,
        xz: BufReader<File>,
        osmet_name: String,
        (repo, through_mount): (&Path, bool),
        readers: Option<usize>,
    ) -> io::Result<Rebuild> {
        let extents = object_extents(&pieces);
        let store = Store::open(repo, &extents, through_mount);
        let readers = readers.unwrap_or_else(|| store.default_readers());
        tracing::info!("live image: reading the objects on {readers} threads");
        let objects = Objects::start(extents, store, readers)?;
        let packed = Packed::spawn(xz, osmet_name)?;
        Ok(Rebuild {
            pieces,
            next: 0,
            packed,
            objects,
            left: 0,
            from_packed: false,
            produced: 0,
            size,
            done: false,
        })
    }

    /// At the end of the plan: the packed stream must end exactly here.
    fn check_end(&mut self) -> io::Result<()> {
        let mut probe = [0u8; 1];
        if self.packed.read(&mut probe)? != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the packed image in {} holds more data than its table accounts for (the image should end at byte {})",
                    self.packed.name, self.size
                ),
            ));
        }
        debug_assert_eq!(self.produced, self.size);
        Ok(())
    }
}

impl Read for Rebuild {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() || self.done {
            return Ok(0);
        }
        loop {
            if self.left > 0 {
                let want = out
                    .len()
                    .min(usize::try_from(self.left).unwrap_or(usize::MAX));
                let n = if self.from_packed {
                    self.packed.read(&mut out[..want])?
                } else {
                    self.objects.read(&mut out[..want])?
                };
                if n == 0 && self.from_packed {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "the packed image in {} ends early: image offset {} should come from it, {} bytes short of the image's {} bytes",
                            self.packed.name,
                            self.produced,
                            self.size - self.produced,
                            self.size
                        ),
                    ));
                }
                if n == 0 {
                    return Err(io::Error::other(format!(
                        "the object data ended at image offset {} (this is a bug)",
                        self.produced
                    )));
                }
                self.left -= n as u64;
                self.produced += n as u64;
                return Ok(n);
            }
            let Some(&piece) = self.pieces.get(self.next) else {
                self.check_end()?;
                self.done = true;
                return Ok(0);
            };
            self.next += 1;
            (self.left, self.from_packed) = match piece {
                Piece::Packed(n) => (n, true),
                Piece::Object(e) => (e.len, false),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::format::{Body, Mapping, ObjectId, Partition};
    use super::super::objects::MAX_READ;
    use super::super::plan::plan;
    use super::super::store::READERS;
    use super::*;
    use std::io::{Seek, SeekFrom, Write};

    /// An image, its objects in a repo, and the packed stream (the image without the extents).
    struct Fixture {
        dir: tempfile::TempDir,
        image: Vec<u8>,
        body: Body,
    }

    fn xz(data: &[u8]) -> Vec<u8> {
        let mut e = liblzma::write::XzEncoder::new(Vec::new(), 0);
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn id(n: u8) -> ObjectId {
        ObjectId([n; 32])
    }

    /// Two partitions; object 1 is shorter than its extent (zeros follow on disk), object 2
    /// is mapped twice from different offsets and is longer than MAX_READ.
    fn fixture() -> Fixture {
        let size = 5 * MAX_READ as usize + 3000;
        let mut image: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let put = |o: ObjectId, bytes: &[u8]| {
            let p = dir.path().join(o.relative_path());
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        };
        // Object 1: 1000 bytes, mapped as a 4096-byte extent at 8192 (partition 1 at 4096).
        let obj1: Vec<u8> = (0..1000).map(|i| (i % 13) as u8 + 1).collect();
        image[12288..13288].copy_from_slice(&obj1);
        image[13288..16384].fill(0);
        put(id(1), &obj1);
        // Object 2: 1.5 MiB, its second half mapped at the start of partition 2, and all of
        // it further on.
        let big = (MAX_READ as usize) * 3 / 2;
        let obj2: Vec<u8> = (0..big).map(|i| (i % 97) as u8 ^ 0x5a).collect();
        let p2 = 2 * MAX_READ as usize;
        let half = big / 2;
        image[p2..p2 + half].copy_from_slice(&obj2[half..]);
        image[p2 + half + 512..p2 + half + 512 + big].copy_from_slice(&obj2);
        put(id(2), &obj2);
        let body = Body {
            partitions: vec![
                Partition {
                    start_offset: 4096,
                    end_offset: p2 as u64,
                    mappings: vec![Mapping {
                        logical: 0,
                        physical: 8192,
                        length: 4096,
                        object: id(1),
                    }],
                },
                Partition {
                    start_offset: p2 as u64,
                    end_offset: size as u64 - 1000,
                    mappings: vec![
                        Mapping {
                            logical: half as u64,
                            physical: 0,
                            length: half as u64,
                            object: id(2),
                        },
                        Mapping {
                            logical: 0,
                            physical: (half + 512) as u64,
                            length: big as u64,
                            object: id(2),
                        },
                    ],
                },
            ],
            checksum: [0; 32],
            size: size as u64,
        };
        Fixture { dir, image, body }
    }

    impl Fixture {
        fn packed(&self) -> Vec<u8> {
            let mut out = Vec::new();
            let mut at = 0usize;
            for piece in plan(&self.body, MAX_READ).unwrap() {
                match piece {
                    Piece::Packed(n) => out.extend_from_slice(&self.image[at..at + n as usize]),
                    Piece::Object(_) => {}
                }
                at += match piece {
                    Piece::Packed(n) => n as usize,
                    Piece::Object(e) => e.len as usize,
                };
            }
            out
        }

        /// Start a rebuild whose packed stream is `stream`, stored after a 5-byte prefix (the
        /// header's place) in a file, with `readers` object reader threads.
        fn start(&self, stream: &[u8], readers: usize) -> Rebuild {
            let path = self.dir.path().join("image.osmet");
            let mut bytes = b"HEAD!".to_vec();
            bytes.extend_from_slice(stream);
            std::fs::write(&path, bytes).unwrap();
            let mut f = File::open(&path).unwrap();
            f.seek(SeekFrom::Start(5)).unwrap();
            Rebuild::start(
                plan(&self.body, MAX_READ).unwrap(),
                self.body.size,
                BufReader::new(f),
                path.display().to_string(),
                (self.dir.path(), false),
                Some(readers),
            )
            .unwrap()
        }
    }

    /// Read everything in reads of `step` bytes.
    fn read_all(r: &mut Rebuild, step: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; step];
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    #[test]
    fn rebuilds_the_image_byte_for_byte_whatever_the_read_size() {
        let f = fixture();
        let stream = xz(&f.packed());
        for (step, readers) in [(1 << 20, 1), (1 << 20, READERS), (4096, 3), (777, 1)] {
            let got = read_all(&mut f.start(&stream, readers), step).unwrap();
            assert!(
                got == f.image,
                "read size {step}, {readers} readers: the rebuilt image differs"
            );
        }
    }

    /// A packed stream cut short, longer than the table, or whose xz is cut or followed by junk.
    #[test]
    fn a_bad_packed_stream_is_an_error_that_says_why() {
        let f = fixture();
        let packed = f.packed();
        let stream = xz(&packed);
        let cases: [(Vec<u8>, &[&str]); 4] = [
            (
                xz(&packed[..packed.len() - 10]),
                &["image.osmet ends early", "10 bytes short"],
            ),
            (
                xz(&[&packed[..], b"extra"].concat()),
                &["more data than its table accounts for"],
            ),
            (
                stream[..stream.len() / 2].to_vec(),
                &["the packed image in", "is damaged"],
            ),
            ([&stream[..], b"trailing"].concat(), &["trailing data"]),
        ];
        for (bytes, needles) in cases {
            let e = read_all(&mut f.start(&bytes, READERS), 1 << 20).unwrap_err();
            let text = e.to_string();
            for needle in needles {
                assert!(text.contains(needle), "{needle:?} in {text}");
            }
            if needles[0].contains("ends early") {
                assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
            }
        }
    }

    #[test]
    fn dropping_a_rebuild_midway_stops_its_threads() {
        let f = fixture();
        let mut r = f.start(&xz(&f.packed()), READERS);
        let mut buf = vec![0u8; 5000];
        assert!(r.read(&mut buf).unwrap() > 0);
        drop(r);
    }
}
