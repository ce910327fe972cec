//! From an osmet body to the sequence of reads that rebuilds the image: bytes from the packed
//! stream, and extents of OSTree objects, in image order. Pure; this is also where the table is
//! validated (monotonic, inside its partition, inside the image), so a bad table fails before
//! any byte is written.

use anyhow::{bail, Result};

use super::format::{Body, ObjectId};

/// One extent of an object: `len` bytes from `logical`, needed at image offset `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Extent {
    pub object: ObjectId,
    pub logical: u64,
    pub len: u64,
    pub at: u64,
}

/// One step of the rebuild, in image order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// The next `n` bytes come from the packed stream.
    Packed(u64),
    /// An extent of an object, zeros past the object's end.
    Object(Extent),
}

/// The largest image a table may describe. The plan holds one piece per MAX_READ of the image,
/// so a table claiming an image of 2^60 bytes (a few bytes in the file) would otherwise make the
/// plan allocate gigabytes before any object is read; CoreOS metal images are a few GiB, and
/// 1 TiB keeps the plan under 64 MiB.
pub(crate) const MAX_IMAGE: u64 = 1 << 40;

/// The object extents of `pieces`, in order: what the object readers are given.
pub(crate) fn object_extents(pieces: &[Piece]) -> Vec<Extent> {
    pieces
        .iter()
        .filter_map(|p| match *p {
            Piece::Object(e) => Some(e),
            Piece::Packed(_) => None,
        })
        .collect()
}

/// The pieces that rebuild the image described by `body`; object extents are cut into reads of
/// at most `max_read` bytes (so memory in flight stays bounded whatever the object size).
pub(crate) fn plan(body: &Body, max_read: u64) -> Result<Vec<Piece>> {
    assert!(max_read > 0);
    if body.size > MAX_IMAGE {
        bail!(
            "the image it describes is {} bytes, more than the {MAX_IMAGE} bytes (1 TiB) of any CoreOS image",
            body.size
        );
    }
    let mut out = Vec::new();
    let mut cursor = 0u64;
    // Consecutive packed runs (a gap before a partition, then one before its first extent)
    // are one read of the packed stream.
    let packed = |out: &mut Vec<Piece>, from: u64, to: u64| {
        if to > from {
            match out.last_mut() {
                Some(Piece::Packed(n)) => *n += to - from,
                _ => out.push(Piece::Packed(to - from)),
            }
        }
    };
    for (i, p) in body.partitions.iter().enumerate() {
        let n = i + 1;
        if p.start_offset < cursor {
            bail!(
                "partition {n} starts at byte {}, before the end of what precedes it (byte {cursor}): the table is not in order",
                p.start_offset
            );
        }
        if p.end_offset < p.start_offset {
            bail!(
                "partition {n} ends at byte {} before it starts (byte {})",
                p.end_offset,
                p.start_offset
            );
        }
        if p.end_offset > body.size {
            bail!(
                "partition {n} ends at byte {}, past the end of the image ({} bytes)",
                p.end_offset,
                body.size
            );
        }
        packed(&mut out, cursor, p.start_offset);
        cursor = p.start_offset;
        for (j, m) in p.mappings.iter().enumerate() {
            let what = || format!("extent {} of partition {n} (object {})", j + 1, m.object);
            let Some(start) = p.start_offset.checked_add(m.physical) else {
                bail!("{}: its offset overflows", what());
            };
            let Some(end) = start.checked_add(m.length) else {
                bail!("{}: its length overflows", what());
            };
            if start < cursor {
                bail!(
                    "{} starts at byte {start}, before the previous extent ends (byte {cursor}): the table is not in order",
                    what()
                );
            }
            if end > p.end_offset {
                bail!(
                    "{} ends at byte {end}, past the end of its partition (byte {})",
                    what(),
                    p.end_offset
                );
            }
            packed(&mut out, cursor, start);
            let mut done = 0;
            while done < m.length {
                let len = (m.length - done).min(max_read);
                let Some(logical) = m.logical.checked_add(done) else {
                    bail!("{}: its object offset overflows", what());
                };
                out.push(Piece::Object(Extent {
                    object: m.object,
                    logical,
                    len,
                    at: start + done,
                }));
                done += len;
            }
            cursor = end;
        }
        packed(&mut out, cursor, p.end_offset);
        cursor = p.end_offset;
    }
    // After the last partition: the backup GPT and whatever else the image ends with.
    packed(&mut out, cursor, body.size);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::format::{Mapping, ObjectId, Partition};
    use super::*;

    const A: ObjectId = ObjectId([0xaa; 32]);
    const B: ObjectId = ObjectId([0xbb; 32]);

    fn m(logical: u64, physical: u64, length: u64, object: ObjectId) -> Mapping {
        Mapping {
            logical,
            physical,
            length,
            object,
        }
    }

    fn body(parts: Vec<(u64, u64, Vec<Mapping>)>, size: u64) -> Body {
        Body {
            partitions: parts
                .into_iter()
                .map(|(start_offset, end_offset, mappings)| Partition {
                    start_offset,
                    end_offset,
                    mappings,
                })
                .collect(),
            checksum: [0; 32],
            size,
        }
    }

    fn obj(object: ObjectId, logical: u64, len: u64, at: u64) -> Piece {
        Piece::Object(Extent {
            object,
            logical,
            len,
            at,
        })
    }

    #[test]
    fn pieces_interleave_packed_bytes_and_cut_extents() {
        let cases = [
            (
                body(
                    vec![
                        (100, 200, vec![m(0, 10, 20, A), m(4096, 30, 5, B)]),
                        (200, 300, vec![m(0, 0, 100, A)]),
                    ],
                    350,
                ),
                1 << 20,
                vec![
                    Piece::Packed(110),
                    obj(A, 0, 20, 110),
                    obj(B, 4096, 5, 130),
                    Piece::Packed(65),
                    obj(A, 0, 100, 200),
                    // After the last partition: everything comes from the packed stream.
                    Piece::Packed(50),
                ],
            ),
            // Long extents are cut into bounded reads.
            (
                body(vec![(0, 1000, vec![m(7, 0, 250, A)])], 1000),
                100,
                vec![
                    obj(A, 7, 100, 0),
                    obj(A, 107, 100, 100),
                    obj(A, 207, 50, 200),
                    Piece::Packed(750),
                ],
            ),
            // Empty extents and partitions add nothing.
            (
                body(vec![(0, 0, vec![]), (0, 10, vec![m(0, 0, 0, A)])], 10),
                4,
                vec![Piece::Packed(10)],
            ),
            (body(vec![], 0), 4, vec![]),
        ];
        for (b, max_read, want) in cases {
            assert_eq!(plan(&b, max_read).unwrap(), want, "{b:?}");
        }
    }

    #[test]
    fn tables_out_of_order_or_past_their_bounds_are_refused() {
        for (parts, want) in [
            (
                vec![(100, 200, vec![m(0, 50, 20, A), m(0, 60, 5, B)])],
                "starts at byte 160, before the previous extent ends (byte 170)",
            ),
            (
                vec![(100, 200, vec![]), (150, 250, vec![])],
                "partition 2 starts at byte 150, before the end of what precedes it (byte 200)",
            ),
            (
                vec![(100, 50, vec![])],
                "partition 1 ends at byte 50 before it starts",
            ),
            (
                vec![(100, 400, vec![])],
                "partition 1 ends at byte 400, past the end of the image (300 bytes)",
            ),
            (
                vec![(100, 200, vec![m(0, 90, 20, A)])],
                "ends at byte 210, past the end of its partition (byte 200)",
            ),
            (vec![(100, 200, vec![m(0, u64::MAX, 1, A)])], "overflows"),
            (vec![(100, 200, vec![m(0, 0, u64::MAX, A)])], "overflows"),
        ] {
            let e = plan(&body(parts, 300), 1 << 20).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        let e = plan(
            &body(vec![(0, 100, vec![m(0, 50, 20, A), m(0, 60, 5, B)])], 300),
            1,
        );
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("extent 2 of partition 1 (object "));
    }
}
