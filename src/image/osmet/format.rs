//! The osmet file format, version 1, as `coreos-installer pack osmet` (0.27) writes it: a header,
//! a body, then an xz stream holding the *packed* image (the raw image with every mapped extent
//! cut out). Header and body are bincode 1.x with variable-length integers, little-endian.
//!
//! Pure: parsing reads from any `Read`, so tests feed it byte slices. Every error says what was
//! being read and at which byte of the file, so "which file, what is wrong" fits in one line.

use std::fmt;
use std::io::{self, Read};

use crate::image::digest::Sha256Sum;

const MAGIC: [u8; 8] = *b"OSMET\0\0\0";
const VERSION: u32 = 1;

/// Longest string we accept in a header (descriptions are a line of text; a huge length means
/// the file is not an osmet file, and we must not allocate for it).
const MAX_STRING: u64 = 64 << 10;

/// What identifies an osmet file: enough to choose one, before reading its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The packer's version (informational).
    pub app_version: String,
    /// Logical sector size of the packed disk image (512 or 4096).
    pub sector_size: u32,
    /// The OS, e.g. its `PRETTY_NAME`.
    pub os_description: String,
    /// `uname -m` of the packing machine, e.g. `x86_64`.
    pub os_architecture: String,
}

/// One extent of an OSTree object inside a partition of the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Offset inside the object file.
    pub logical: u64,
    /// Offset of the extent relative to the partition's start.
    pub physical: u64,
    /// Extent length as FIEMAP reported it: rounded up to the filesystem block, so it may run
    /// past the end of the object file (the rest is zeros on disk).
    pub length: u64,
    pub object: ObjectId,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Absolute byte offsets in the image.
    pub start_offset: u64,
    pub end_offset: u64,
    pub mappings: Vec<Mapping>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Body {
    pub partitions: Vec<Partition>,
    /// SHA-256 of the whole rebuilt image.
    pub checksum: [u8; 32],
    /// Length of the rebuilt image in bytes.
    pub size: u64,
}

/// An OSTree object's checksum (its name), stored as 32 binary bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectId(pub [u8; 32]);

impl ObjectId {
    /// Where the object lives inside a repo: `objects/<2 hex>/<62 hex>.file`.
    pub fn relative_path(&self) -> String {
        let hex = self.to_string();
        format!("objects/{}/{}.file", &hex[..2], &hex[2..])
    }
}

impl fmt::Display for ObjectId {
    /// The 64 hex digits: an OSTree checksum is a SHA-256.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Sha256Sum(self.0), f)
    }
}

impl fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectId({self})")
    }
}

/// A malformed osmet file: what was wrong, and at which byte.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("not an osmet file (its first bytes are {0:02x?}, not \"OSMET\\0\\0\\0\")")]
    BadMagic(Vec<u8>),
    #[error("osmet version {0} is not supported (only version {VERSION})")]
    Version(u32),
    #[error("truncated: the file ends inside the {section} while reading {what} at byte {at}")]
    Truncated {
        section: &'static str,
        what: &'static str,
        at: u64,
    },
    #[error("invalid integer tag {tag} for {what} at byte {at} (valid: 0-250 or 251/252/253)")]
    BadVarint {
        tag: u8,
        what: &'static str,
        at: u64,
    },
    #[error("{what} at byte {at} is {value}, more than a {bits}-bit value can hold")]
    Overflow {
        what: &'static str,
        at: u64,
        value: u64,
        bits: u32,
    },
    #[error("{what} at byte {at} is {len} bytes long; longer than any valid osmet string")]
    StringTooLong {
        what: &'static str,
        at: u64,
        len: u64,
    },
    #[error("{what} at byte {at} is not UTF-8")]
    NotUtf8 { what: &'static str, at: u64 },
    #[error("reading the osmet file at byte {at}: {source}")]
    Io { at: u64, source: io::Error },
}

/// A bincode (varint) decoder that counts the bytes it consumed.
pub struct Decoder<R> {
    r: R,
    pos: u64,
    section: &'static str,
}

impl<R: Read> Decoder<R> {
    pub fn new(r: R) -> Self {
        Decoder {
            r,
            pos: 0,
            section: "header",
        }
    }

    /// Bytes consumed so far: where the next part of the file starts.
    pub fn position(&self) -> u64 {
        self.pos
    }

    pub fn into_inner(self) -> R {
        self.r
    }

    fn exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), FormatError> {
        let at = self.pos;
        match self.r.read_exact(buf) {
            Ok(()) => {
                self.pos += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(FormatError::Truncated {
                section: self.section,
                what,
                at,
            }),
            Err(source) => Err(FormatError::Io { at, source }),
        }
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], FormatError> {
        let mut b = [0u8; N];
        self.exact(&mut b, what)?;
        Ok(b)
    }

    /// bincode's varint: ≤ 250 in one byte, else a tag (251/252/253) and 2/4/8 bytes LE.
    pub fn varint(&mut self, what: &'static str) -> Result<u64, FormatError> {
        let at = self.pos;
        let [tag] = self.array::<1>(what)?;
        Ok(match tag {
            0..=250 => u64::from(tag),
            251 => u64::from(u16::from_le_bytes(self.array(what)?)),
            252 => u64::from(u32::from_le_bytes(self.array(what)?)),
            253 => u64::from_le_bytes(self.array(what)?),
            _ => return Err(FormatError::BadVarint { tag, what, at }),
        })
    }

    /// A u32 is decoded like a u64, then range-checked (as bincode does).
    pub fn u32(&mut self, what: &'static str) -> Result<u32, FormatError> {
        let at = self.pos;
        let v = self.varint(what)?;
        u32::try_from(v).map_err(|_| FormatError::Overflow {
            what,
            at,
            value: v,
            bits: 32,
        })
    }

    fn string(&mut self, what: &'static str) -> Result<String, FormatError> {
        let at = self.pos;
        let len = self.varint(what)?;
        if len > MAX_STRING {
            return Err(FormatError::StringTooLong { what, at, len });
        }
        let mut b = vec![0u8; len as usize];
        self.exact(&mut b, what)?;
        String::from_utf8(b).map_err(|_| FormatError::NotUtf8 { what, at })
    }

    pub fn header(&mut self) -> Result<Header, FormatError> {
        self.section = "header";
        let magic = self.array::<8>("the magic")?;
        if magic != MAGIC {
            return Err(FormatError::BadMagic(magic.to_vec()));
        }
        let version = self.u32("the version")?;
        if version != VERSION {
            return Err(FormatError::Version(version));
        }
        Ok(Header {
            app_version: self.string("the packer version")?,
            sector_size: self.u32("the sector size")?,
            os_description: self.string("the OS description")?,
            os_architecture: self.string("the architecture")?,
        })
    }

    /// The body; call after [`Decoder::header`]. Counts are not trusted for allocation: a
    /// garbage count runs into the end of the file instead of exhausting memory.
    pub fn body(&mut self) -> Result<Body, FormatError> {
        self.section = "body";
        let n = self.varint("the partition count")?;
        let mut partitions = Vec::with_capacity(n.min(16) as usize);
        for _ in 0..n {
            let start_offset = self.varint("a partition start")?;
            let end_offset = self.varint("a partition end")?;
            let m = self.varint("a mapping count")?;
            // At most 1024 ahead (57 KiB): past that the vector grows with what is actually
            // read, so a count of 2^16 in a short file cannot reserve megabytes.
            let mut mappings = Vec::with_capacity(m.min(1024) as usize);
            for _ in 0..m {
                mappings.push(Mapping {
                    logical: self.varint("an extent's object offset")?,
                    physical: self.varint("an extent's partition offset")?,
                    length: self.varint("an extent length")?,
                    object: ObjectId(self.array("an object name")?),
                });
            }
            partitions.push(Partition {
                start_offset,
                end_offset,
                mappings,
            });
        }
        Ok(Body {
            partitions,
            checksum: self.array("the image checksum")?,
            size: self.varint("the image size")?,
        })
    }
}

/// Serialise a header and body the way the packer does (tests build malformed files from it).
pub fn encode(header: &Header, body: &Body) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, v: u64) {
        if v <= 250 {
            out.push(v as u8);
        } else if v <= u64::from(u16::MAX) {
            out.push(251);
            out.extend_from_slice(&(v as u16).to_le_bytes());
        } else if v <= u64::from(u32::MAX) {
            out.push(252);
            out.extend_from_slice(&(v as u32).to_le_bytes());
        } else {
            out.push(253);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    fn string(out: &mut Vec<u8>, s: &str) {
        varint(out, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
    }
    let mut out = MAGIC.to_vec();
    varint(&mut out, u64::from(VERSION));
    string(&mut out, &header.app_version);
    varint(&mut out, u64::from(header.sector_size));
    string(&mut out, &header.os_description);
    string(&mut out, &header.os_architecture);
    varint(&mut out, body.partitions.len() as u64);
    for p in &body.partitions {
        varint(&mut out, p.start_offset);
        varint(&mut out, p.end_offset);
        varint(&mut out, p.mappings.len() as u64);
        for m in &p.mappings {
            varint(&mut out, m.logical);
            varint(&mut out, m.physical);
            varint(&mut out, m.length);
            out.extend_from_slice(&m.object.0);
        }
    }
    out.extend_from_slice(&body.checksum);
    varint(&mut out, body.size);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            app_version: "0.27.0".into(),
            sector_size: 512,
            os_description: "Red Hat Enterprise Linux CoreOS 416.94 (Plow)".into(),
            os_architecture: "x86_64".into(),
        }
    }

    fn body() -> Body {
        Body {
            partitions: vec![
                Partition {
                    start_offset: 10 << 20,
                    end_offset: 42 << 20,
                    mappings: vec![Mapping {
                        logical: 0,
                        physical: 4096,
                        length: 8192,
                        object: ObjectId([0xab; 32]),
                    }],
                },
                Partition {
                    start_offset: 42 << 20,
                    end_offset: 400 << 20,
                    mappings: vec![],
                },
            ],
            checksum: [7; 32],
            size: 401 << 20,
        }
    }

    fn varint_of(bytes: &[u8]) -> Result<u64, FormatError> {
        Decoder::new(bytes).varint("x")
    }

    #[test]
    fn varints_of_each_width() {
        assert_eq!(varint_of(&[0]).unwrap(), 0);
        assert_eq!(varint_of(&[250]).unwrap(), 250);
        assert_eq!(varint_of(&[251, 0x00, 0x02]).unwrap(), 512);
        assert_eq!(varint_of(&[251, 0xff, 0xff]).unwrap(), 65535);
        assert_eq!(varint_of(&[252, 0, 0, 1, 0]).unwrap(), 65536);
        assert_eq!(
            varint_of(&[253, 1, 2, 3, 4, 5, 6, 7, 8]).unwrap(),
            0x0807_0605_0403_0201
        );
        let mut d = Decoder::new(&[251, 0, 2, 7][..]);
        assert_eq!(d.varint("x").unwrap(), 512);
        assert_eq!(d.position(), 3);
    }

    #[test]
    fn invalid_tags_and_short_varints() {
        for tag in [254u8, 255] {
            let e = varint_of(&[tag, 0, 0]).unwrap_err();
            assert!(
                matches!(e, FormatError::BadVarint { tag: t, at: 0, .. } if t == tag),
                "{e}"
            );
        }
        for short in [
            &[251u8, 1][..],
            &[252, 1, 2, 3],
            &[253, 0, 0, 0, 0, 0, 0, 0],
            &[],
        ] {
            let e = varint_of(short).unwrap_err();
            assert!(matches!(e, FormatError::Truncated { .. }), "{e}");
        }
    }

    #[test]
    fn u32_overflow_is_refused() {
        let e = Decoder::new(&[253, 0, 0, 0, 0, 1, 0, 0, 0][..])
            .u32("the sector size")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("the sector size at byte 0 is 4294967296, more than a 32-bit"),
            "{e}"
        );
        assert_eq!(
            Decoder::new(&[252, 0xff, 0xff, 0xff, 0xff][..])
                .u32("x")
                .unwrap(),
            u32::MAX
        );
    }

    #[test]
    fn header_and_body_round_trip() {
        let bytes = encode(&header(), &body());
        // 512 is `fb 00 02`, right after the packer-version string.
        let mut d = Decoder::new(&bytes[..]);
        assert_eq!(d.header().unwrap(), header());
        assert_eq!(d.body().unwrap(), body());
        assert_eq!(d.position(), bytes.len() as u64);
        let ss_at = 8 + 1 + 1 + "0.27.0".len();
        assert_eq!(&bytes[ss_at..ss_at + 3], &[0xfb, 0x00, 0x02]);
    }

    #[test]
    fn bad_magic_and_version() {
        let mut bytes = encode(&header(), &body());
        bytes[0] = b'X';
        let e = Decoder::new(&bytes[..]).header().unwrap_err();
        assert!(matches!(e, FormatError::BadMagic(_)), "{e}");
        assert!(e.to_string().contains("not an osmet file"), "{e}");
        let mut bytes = encode(&header(), &body());
        bytes[8] = 2;
        let e = Decoder::new(&bytes[..]).header().unwrap_err();
        assert_eq!(
            e.to_string(),
            "osmet version 2 is not supported (only version 1)"
        );
    }

    #[test]
    fn every_truncation_is_named() {
        let bytes = encode(&header(), &body());
        for cut in 0..bytes.len() {
            let mut d = Decoder::new(&bytes[..cut]);
            let e = match d.header() {
                Err(e) => e,
                Ok(_) => d.body().unwrap_err(),
            };
            assert!(
                matches!(e, FormatError::Truncated { at, .. } if at <= cut as u64),
                "cut at {cut}: {e}"
            );
        }
        let e = Decoder::new(&bytes[..12]).header().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("truncated: the file ends inside the header while reading"),
            "{e}"
        );
    }

    #[test]
    fn absurd_lengths_do_not_allocate() {
        let mut bytes = MAGIC.to_vec();
        bytes.push(1);
        bytes.extend_from_slice(&[253, 0, 0, 0, 0, 0, 0, 0, 1]);
        let e = Decoder::new(&bytes[..]).header().unwrap_err();
        assert!(matches!(e, FormatError::StringTooLong { .. }), "{e}");
        let mut bytes = encode(&header(), &body());
        let mut d = Decoder::new(&bytes[..]);
        d.header().unwrap();
        let body_at = d.position() as usize;
        bytes.truncate(body_at);
        // A partition count of 2^63 - 1: the parser must hit the end, not reserve memory.
        bytes.extend_from_slice(&[253, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
        let mut d = Decoder::new(&bytes[..]);
        d.header().unwrap();
        assert!(matches!(
            d.body().unwrap_err(),
            FormatError::Truncated { .. }
        ));
    }

    #[test]
    fn non_utf8_strings_are_refused() {
        let mut h = header();
        h.os_description = "é".into();
        let mut bytes = encode(&h, &body());
        let at = bytes.iter().position(|&b| b == 0xc3).unwrap();
        bytes[at] = 0xff;
        let e = Decoder::new(&bytes[..]).header().unwrap_err();
        assert!(e.to_string().contains("the OS description at byte"), "{e}");
    }

    #[test]
    fn object_paths() {
        let mut id = [0u8; 32];
        id[0] = 0x3a;
        id[31] = 0xff;
        let p = ObjectId(id).relative_path();
        assert_eq!(p, format!("objects/3a/{}ff.file", "0".repeat(60)));
        assert_eq!(p.len(), "objects/".len() + 2 + 1 + 62 + ".file".len());
    }
}
