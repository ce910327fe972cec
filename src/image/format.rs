//! Image formats, recognised by their magic bytes only (never by file name or Content-Type), and
//! their streaming decoders. A stream that ends early, or that has bytes after its end, is an
//! error: trailing data is how a tampered download hid behind a valid prefix in CVE-2021-20319.

use crossbeam_channel::{select, Receiver};
use std::fmt;
use std::io::{self, BufRead, Read};

use super::cancel::Cancel;

const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];
const XZ_MAGIC: &[u8] = &[0xfd, b'7', b'z', b'X', b'Z', 0x00];
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// How many leading bytes [`sniff`] needs to decide.
pub const SNIFF_LEN: usize = 6;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Gzip,
    Xz,
    Zstd,
    Raw,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Gzip => "gzip",
            Format::Xz => "xz",
            Format::Zstd => "zstd",
            Format::Raw => "raw",
        })
    }
}

/// The format of a stream from its first bytes. Skippable zstd frames (magic 0x184D2A5?) start
/// zstd streams too.
pub fn sniff(head: &[u8]) -> Format {
    let is_skippable_zstd =
        head.len() >= 4 && head[0] & 0xf0 == 0x50 && head[1..4] == [0x2a, 0x4d, 0x18];
    if head.starts_with(GZIP_MAGIC) {
        Format::Gzip
    } else if head.starts_with(XZ_MAGIC) {
        Format::Xz
    } else if head.starts_with(ZSTD_MAGIC) || is_skippable_zstd {
        Format::Zstd
    } else {
        Format::Raw
    }
}

/// Settings for the multithreaded xz decoder.
#[derive(Clone, Copy, Debug)]
pub struct XzSettings {
    pub threads: u32,
    /// Memory the threaded decoder may use; past it liblzma decodes on one thread rather than
    /// fail (FCOS images use 192 MiB blocks: ~800 MB on two threads).
    pub memlimit_threading: u64,
}

impl Default for XzSettings {
    fn default() -> Self {
        XzSettings {
            threads: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1),
            memlimit_threading: default_xz_memlimit(),
        }
    }
}

/// A quarter of the memory available now (the live system runs from RAM), at least 256 MiB.
fn default_xz_memlimit() -> u64 {
    let available_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(1 << 20);
    (available_kib * 1024 / 4).max(256 << 20)
}

enum Inner<R: BufRead> {
    Gzip(flate2::bufread::GzDecoder<R>),
    Xz(liblzma::bufread::XzDecoder<R>),
    Zstd(zstd::stream::read::Decoder<'static, R>),
    Raw(R),
    /// The last gzip member or xz stream has ended; what is left is for `finish` to judge.
    Ended(R),
    /// Transient, while switching between the states above.
    Switching,
}

/// A decoding reader that yields the uncompressed image and fails on truncation. Call
/// [`Decompressor::finish`] after EOF to reject trailing data.
pub struct Decompressor<R: BufRead> {
    inner: Inner<Peek<R>>,
    xz: XzSettings,
}

impl<R: BufRead> Inner<R> {
    /// A decoder of one gzip member, xz stream or zstd frame of `format` (or the raw bytes).
    /// Members are decoded one at a time, so that after the last one we can tell "more of the
    /// same format" from "trailing data" ourselves.
    fn start(format: Format, input: R, xz: XzSettings) -> io::Result<Inner<R>> {
        Ok(match format {
            Format::Gzip => Inner::Gzip(flate2::bufread::GzDecoder::new(input)),
            Format::Xz => {
                let stream = liblzma::stream::MtStreamBuilder::new()
                    .threads(xz.threads.max(1))
                    // Without an explicit threading limit liblzma 0.4.9 stays on one thread.
                    .memlimit_threading(xz.memlimit_threading)
                    .memlimit_stop(u64::MAX)
                    .decoder()
                    .map_err(|e| io::Error::other(format!("starting the xz decoder: {e}")))?;
                Inner::Xz(liblzma::bufread::XzDecoder::new_stream(input, stream))
            }
            Format::Zstd => {
                Inner::Zstd(zstd::stream::read::Decoder::with_buffer(input)?.single_frame())
            }
            Format::Raw => Inner::Raw(input),
        })
    }

    /// The input after an ended member, and the member's format; `None` for a raw stream.
    fn into_rest(self) -> Option<(R, Format)> {
        match self {
            Inner::Gzip(d) => Some((d.into_inner(), Format::Gzip)),
            Inner::Xz(d) => Some((d.into_inner(), Format::Xz)),
            Inner::Zstd(d) => Some((d.finish(), Format::Zstd)),
            Inner::Ended(r) => Some((r, Format::Raw)),
            Inner::Raw(_) | Inner::Switching => None,
        }
    }
}

impl<R: BufRead> Decompressor<R> {
    pub fn new(format: Format, input: R, xz: XzSettings) -> io::Result<Self> {
        let inner = Inner::start(format, Peek::new(input), xz)?;
        Ok(Decompressor { inner, xz })
    }

    /// After the decoder reached EOF: fail if any input is left after the compressed stream.
    pub fn finish(self) -> io::Result<()> {
        let Some((mut rest, _)) = self.inner.into_rest() else {
            return Ok(());
        };
        if rest.fill_buf()?.is_empty() {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "found trailing data after the end of the compressed stream",
            ))
        }
    }
}

fn classify(e: io::Error, format: &str) -> io::Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the {format} stream is truncated: {e}"),
        )
    } else if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::Other {
        e
    } else {
        io::Error::new(e.kind(), format!("corrupt {format} stream: {e}"))
    }
}

impl<R: BufRead> Decompressor<R> {
    /// One gzip member, xz stream or zstd frame ended: start the next if the input holds one
    /// of the same format, else end.
    fn next_member(&mut self) -> io::Result<bool> {
        let (mut input, format) = std::mem::replace(&mut self.inner, Inner::Switching)
            .into_rest()
            .expect("only compressed formats have members");
        let more = sniff(input.peek(SNIFF_LEN)?) == format;
        self.inner = if more {
            Inner::start(format, input, self.xz)?
        } else {
            Inner::Ended(input)
        };
        Ok(more)
    }
}

/// A `BufRead` that can look `n` bytes ahead even when they straddle the inner reader's buffer
/// boundary (a member can end a few bytes before a network chunk does).
pub struct Peek<R: BufRead> {
    inner: R,
    carry: Vec<u8>,
    carry_pos: usize,
}

impl<R: BufRead> Peek<R> {
    fn new(inner: R) -> Self {
        Peek {
            inner,
            carry: Vec::new(),
            carry_pos: 0,
        }
    }

    /// Up to `n` upcoming bytes, fewer only at the end of the input.
    fn peek(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.carry_pos == self.carry.len() {
            self.carry.clear();
            self.carry_pos = 0;
            if self.inner.fill_buf()?.len() >= n {
                let b = self.inner.fill_buf()?;
                return Ok(&b[..n]);
            }
        }
        while self.carry.len() - self.carry_pos < n {
            let b = self.inner.fill_buf()?;
            if b.is_empty() {
                break;
            }
            let take = b.len().min(n - (self.carry.len() - self.carry_pos));
            self.carry.extend_from_slice(&b[..take]);
            self.inner.consume(take);
        }
        let end = self.carry.len().min(self.carry_pos + n);
        Ok(&self.carry[self.carry_pos..end])
    }
}

/// Read until `buf` is full or the stream ends; the count read.
pub(crate) fn fill(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// `Read::read` for a type whose buffer is the source of truth (`BufRead` first).
fn read_from_buf(r: &mut impl BufRead, out: &mut [u8]) -> io::Result<usize> {
    let avail = r.fill_buf()?;
    let n = avail.len().min(out.len());
    out[..n].copy_from_slice(&avail[..n]);
    r.consume(n);
    Ok(n)
}

impl<R: BufRead> Read for Peek<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        read_from_buf(self, out)
    }
}

impl<R: BufRead> BufRead for Peek<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.carry_pos < self.carry.len() {
            Ok(&self.carry[self.carry_pos..])
        } else {
            self.inner.fill_buf()
        }
    }

    fn consume(&mut self, n: usize) {
        if self.carry_pos < self.carry.len() {
            self.carry_pos += n;
        } else {
            self.inner.consume(n);
        }
    }
}

impl<R: BufRead> Read for Decompressor<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = match &mut self.inner {
                Inner::Gzip(d) => d.read(buf).map_err(|e| classify(e, "gzip"))?,
                Inner::Xz(d) => d.read(buf).map_err(|e| classify(e, "xz"))?,
                Inner::Zstd(d) => d.read(buf).map_err(|e| {
                    // libzstd reports a cut-off frame as a generic error at EOF.
                    if e.to_string().contains("incomplete frame") {
                        io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the zstd stream is truncated (incomplete frame)",
                        )
                    } else {
                        classify(e, "zstd")
                    }
                })?,
                Inner::Raw(r) => return r.read(buf),
                Inner::Ended(_) | Inner::Switching => return Ok(0),
            };
            if n > 0 || buf.is_empty() || !self.next_member()? {
                return Ok(n);
            }
        }
    }
}

/// Chunks of a stream received from a channel (`None` at its end) as a `BufRead`, stopped by
/// `cancel`: the decoder's input, and the signature verifier's.
pub(crate) struct ChannelReader {
    rx: Receiver<Option<Vec<u8>>>,
    cancel: Cancel,
    cur: Vec<u8>,
    pos: usize,
    ended: bool,
}

impl ChannelReader {
    pub(crate) fn new(rx: Receiver<Option<Vec<u8>>>, cancel: Cancel) -> ChannelReader {
        ChannelReader {
            rx,
            cancel,
            cur: Vec::new(),
            pos: 0,
            ended: false,
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        read_from_buf(self, out)
    }
}

impl BufRead for ChannelReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.pos == self.cur.len() && !self.ended {
            select! {
                recv(self.rx) -> m => match m {
                    Ok(Some(v)) => (self.cur, self.pos) = (v, 0),
                    Ok(None) => self.ended = true,
                    Err(_) => return Err(io::Error::other("the image download stopped")),
                },
                recv(self.cancel.receiver()) -> _ => return Err(io::Error::other("cancelled")),
            }
        }
        Ok(&self.cur[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn sample(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| ((i * 7) % 251) as u8 ^ (i >> 12) as u8)
            .collect()
    }

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn xz(data: &[u8], block: u64) -> Vec<u8> {
        let stream = liblzma::stream::MtStreamBuilder::new()
            .threads(2)
            .block_size(block)
            .preset(0)
            .encoder()
            .unwrap();
        let mut e = liblzma::write::XzEncoder::new_stream(Vec::new(), stream);
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// With a content checksum, as the zstd CLI writes by default: without one, zstd cannot
    /// notice a flipped byte in literal data (the image digests catch that).
    fn zst(data: &[u8]) -> Vec<u8> {
        let mut e = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
        e.include_checksum(true).unwrap();
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn decode(bytes: &[u8]) -> io::Result<Vec<u8>> {
        let format = sniff(bytes);
        let mut d = Decompressor::new(format, io::BufReader::new(bytes), XzSettings::default())?;
        let mut out = Vec::new();
        d.read_to_end(&mut out)?;
        d.finish()?;
        Ok(out)
    }

    #[test]
    fn sniffing_uses_magic_bytes_only() {
        let data = sample(10_000);
        assert_eq!(sniff(&gz(&data)), Format::Gzip);
        assert_eq!(sniff(&xz(&data, 4096)), Format::Xz);
        assert_eq!(sniff(&zst(&data)), Format::Zstd);
        assert_eq!(sniff(&[0x50, 0x2a, 0x4d, 0x18, 0, 0]), Format::Zstd);
        assert_eq!(sniff(b"EFI PART"), Format::Raw);
        assert_eq!(sniff(&[0x1f]), Format::Raw, "too short for any magic");
        assert_eq!(sniff(&[]), Format::Raw);
    }

    /// Hands out its data a few bytes at a time, like a network stream with unlucky chunking.
    struct Dribble<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Dribble<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.data.len().min(self.step).min(out.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    /// Concatenated gzip members, zstd frames and xz streams decode whole, also when a boundary
    /// falls inside a tiny chunk.
    #[test]
    fn concatenated_members_decode_whole_in_any_chunking() {
        let (a, b) = (sample(30_000), sample(20_000));
        let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
        for (x, y) in [
            (gz(&a), gz(&b)),
            (zst(&a), zst(&b)),
            (xz(&a, 8192), xz(&b, 8192)),
        ] {
            let cat: Vec<u8> = x.into_iter().chain(y).collect();
            for step in [1, 3, 5, 7, 1 << 20] {
                let r = io::BufReader::with_capacity(step, Dribble { data: &cat, step });
                let mut d = Decompressor::new(sniff(&cat), r, XzSettings::default()).unwrap();
                let mut out = Vec::new();
                d.read_to_end(&mut out).unwrap();
                d.finish().unwrap();
                assert_eq!(out, whole, "{:?} step {step}", sniff(&cat));
            }
        }
    }

    /// A truncated stream, data after it, or a flipped byte in it: each an error that says so.
    #[test]
    fn damaged_streams_are_errors() {
        let (data, small) = (sample(400_000), sample(200_000));
        for (c, s) in [
            (gz(&data), gz(&small)),
            (xz(&data, 64 << 10), xz(&small, 64 << 10)),
            (zst(&data), zst(&small)),
        ] {
            let mut damaged: Vec<(Vec<u8>, &str)> = [c.len() / 2, c.len() - 1]
                .map(|cut| (c[..cut].to_vec(), "truncated"))
                .to_vec();
            for junk in [&b"x"[..], &[0u8; 4][..], b"garbage after the stream"] {
                damaged.push(([&c[..], junk].concat(), "trailing data"));
            }
            let mut flipped = s.clone();
            flipped[s.len() / 2] ^= 0xff;
            damaged.push((flipped, ""));
            for (bytes, what) in damaged {
                let msg = decode(&bytes).unwrap_err().to_string();
                assert!(
                    msg.contains(what) || msg.contains("corrupt"),
                    "{:?} {what}: {msg}",
                    sniff(&c)
                );
            }
        }
    }

    #[test]
    fn multi_block_xz_decodes_on_several_threads() {
        let data = sample(2 << 20);
        let c = xz(&data, 256 << 10);
        let settings = XzSettings {
            threads: 2,
            memlimit_threading: 256 << 20,
        };
        let mut d = Decompressor::new(Format::Xz, io::BufReader::new(&c[..]), settings).unwrap();
        let mut out = Vec::new();
        d.read_to_end(&mut out).unwrap();
        assert_eq!(out, data);
    }
}
