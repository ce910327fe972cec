//! A small osmet packer for tests that need no root: it cuts object extents out of an image in
//! memory and writes the objects, the osmet file (our encoder, the real format) and the packed
//! xz stream. The real packer's files are covered by the loop-device tests (`offline_loop.rs`);
//! this one exists to build the odd cases (extents past an object's end, objects in several
//! extents, bad tables) quickly.

use assisted_installer::image::osmet::format::{
    encode, Body, Header, Mapping, ObjectId, Partition,
};
use sha2::Digest;
use std::io::Write;
use std::path::{Path, PathBuf};

pub(crate) struct Packed {
    pub osmet: PathBuf,
    pub repo: PathBuf,
    /// Image offset and path of every object extent, in image order.
    pub extents: Vec<(u64, PathBuf)>,
}

/// Pack `image` as an osmet file `<osmet_dir>/<name>` for `arch` and `ss`-byte sectors, with
/// the objects under `<repo>/objects`. The image is changed where an object's last extent runs
/// past its end: those bytes become zeros, as a filesystem block's slack is.
pub(crate) fn pack(
    image: &mut [u8],
    ss: u32,
    arch: &str,
    osmet_dir: &Path,
    name: &str,
    repo: &Path,
) -> Packed {
    let size = image.len() as u64;
    // Two "partitions", as the packer maps boot and root; objects in the second half of each.
    let parts = [(2u64 << 20, size / 2), (size / 2, size - (1 << 20))];
    let mut partitions = Vec::new();
    let mut extents = Vec::new();
    let mut rng = 0x9e37_79b9_u64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    for (start, end) in parts {
        let mut mappings = Vec::new();
        let mut at = start + 65536;
        let mut first = true;
        while at + (1 << 20) < end {
            // One or two extents per object, 4 KiB-aligned, 4 KiB to 384 KiB long; the first
            // object of a partition is one 1.5 MiB extent (longer than one read).
            let pieces = if first { 1 } else { 1 + next(2) };
            let lens: Vec<u64> = (0..pieces)
                .map(|_| {
                    if first {
                        384 * 4096
                    } else {
                        4096 * (1 + next(96))
                    }
                })
                .collect();
            first = false;
            let gaps: Vec<u64> = (0..pieces).map(|_| 4096 * next(4)).collect();
            let total: u64 = lens.iter().sum::<u64>() + gaps.iter().sum::<u64>();
            if at + total + (1 << 20) > end {
                break;
            }
            // The object's bytes: its extents in order, the last one cut short (slack).
            let slack = next(4096);
            let mut content = Vec::new();
            let mut places = Vec::new();
            let mut cursor = at;
            for (len, gap) in lens.iter().zip(&gaps) {
                cursor += gap;
                places.push((cursor, *len));
                cursor += len;
            }
            let (last_at, last_len) = *places.last().unwrap();
            let cut = (last_at + last_len - slack) as usize;
            image[cut..(last_at + last_len) as usize].fill(0);
            for (p, len) in &places {
                let end = (p + len).min(cut as u64);
                content.extend_from_slice(&image[*p as usize..end as usize]);
            }
            let id = ObjectId(sha2::Sha256::digest(&content).into());
            let path = repo.join(id.relative_path());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &content).unwrap();
            let mut logical = 0;
            for (p, len) in places {
                mappings.push(Mapping {
                    logical,
                    physical: p - start,
                    length: len,
                    object: id,
                });
                extents.push((p, path.clone()));
                logical += len;
            }
            at = cursor;
        }
        partitions.push(Partition {
            start_offset: start,
            end_offset: end,
            mappings,
        });
    }
    let body = Body {
        partitions,
        checksum: sha2::Sha256::digest(&*image).into(),
        size,
    };
    // The packed stream: the image with every extent cut out.
    let mut packed = Vec::new();
    let mut cursor = 0u64;
    for p in &body.partitions {
        for m in &p.mappings {
            let s = p.start_offset + m.physical;
            packed.extend_from_slice(&image[cursor as usize..s as usize]);
            cursor = s + m.length;
        }
    }
    packed.extend_from_slice(&image[cursor as usize..]);
    let header = Header {
        app_version: "0.27.0".into(),
        sector_size: ss,
        os_description: format!("Test CoreOS {ss}"),
        os_architecture: arch.into(),
    };
    let mut file = encode(&header, &body);
    let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 0);
    xz.write_all(&packed).unwrap();
    file.extend_from_slice(&xz.finish().unwrap());
    std::fs::create_dir_all(osmet_dir).unwrap();
    let osmet = osmet_dir.join(name);
    std::fs::write(&osmet, file).unwrap();
    Packed {
        osmet,
        repo: repo.to_path_buf(),
        extents,
    }
}
