//! Choosing the osmet file for the target: the first, in name order, whose architecture is this
//! machine's and whose sector size is the target's. Unlike coreos-installer, a file that does
//! not parse is skipped with a warning (one bad file must not block an install that another
//! file serves); when nothing matches, the error lists what was found and what was needed.

use anyhow::{Context, Result};
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use super::format::{Body, Decoder, Header};
use super::objects::MAX_READ;
use super::plan::{plan, Piece};

/// What we learnt of one file in the osmet directory.
#[derive(Debug)]
pub(crate) struct Found {
    pub path: PathBuf,
    /// The header, or why the file could not be used.
    pub header: Result<Header, String>,
}

/// What the target needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub architecture: String,
    pub sector_size: u64,
}

impl Wanted {
    pub(crate) fn matches(&self, h: &Header) -> bool {
        h.os_architecture == self.architecture && u64::from(h.sector_size) == self.sector_size
    }
}

/// The chosen file, parsed and planned, positioned at its packed stream.
pub(crate) struct Chosen {
    pub path: PathBuf,
    pub header: Header,
    pub body: Body,
    pub pieces: Vec<Piece>,
    pub packed: BufReader<File>,
}

/// The regular files of `dir` (one level, symlinks followed), in name order so the choice does
/// not depend on the directory's on-disk order.
pub(crate) fn list(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = std::fs::read_dir(dir)
        .and_then(|entries| {
            entries
                .map(|e| Ok(e?.path()))
                .collect::<std::io::Result<Vec<_>>>()
        })
        .with_context(|| format!("reading the osmet directory {}", dir.display()))?;
    files.retain(|path| std::fs::metadata(path).is_ok_and(|m| m.is_file()));
    files.sort();
    Ok(files)
}

/// Parse one file as far as needed: the header always; the body (and its plan) only when the
/// header matches.
fn open(path: &Path, wanted: &Wanted) -> Result<(Header, Option<Chosen>), String> {
    let f = File::open(path).map_err(|e| format!("cannot be opened: {e}"))?;
    let mut d = Decoder::new(BufReader::with_capacity(1 << 20, f));
    let header = d.header().map_err(|e| e.to_string())?;
    if !wanted.matches(&header) {
        return Ok((header, None));
    }
    let body = d.body().map_err(|e| e.to_string())?;
    let pieces = plan(&body, MAX_READ).map_err(|e| format!("its table is invalid: {e}"))?;
    Ok((
        header.clone(),
        Some(Chosen {
            path: path.to_path_buf(),
            header,
            body,
            pieces,
            packed: d.into_inner(),
        }),
    ))
}

/// Choose among `files` (in order) for `wanted`. Files that cannot be parsed are skipped with
/// a warning naming them.
pub(crate) fn choose(dir: &Path, files: &[PathBuf], wanted: &Wanted) -> Result<Chosen> {
    let mut found = Vec::new();
    for path in files {
        let header = match open(path, wanted) {
            Ok((_, Some(chosen))) => return Ok(chosen),
            Ok((header, None)) => Ok(header),
            Err(why) => {
                tracing::warn!("skipping {}: {why}", path.display());
                Err(why)
            }
        };
        let path = path.clone();
        found.push(Found { path, header });
    }
    Err(nothing_matches(dir, &found, wanted))
}

/// The error when no file serves the target: what was needed, and each file found.
pub(crate) fn nothing_matches(dir: &Path, found: &[Found], wanted: &Wanted) -> anyhow::Error {
    let needed = format!(
        "{} with {}-byte sectors",
        wanted.architecture, wanted.sector_size
    );
    if found.is_empty() {
        return anyhow::anyhow!(
            "no osmet file in {}: the live image for {needed} is not there (pass --image-url or --image-file to install another image)",
            dir.display()
        );
    }
    let list: Vec<String> = found
        .iter()
        .map(|f| match &f.header {
            Ok(h) => format!(
                "{} ({} {}, {}-byte sectors)",
                f.path.display(),
                h.os_description,
                h.os_architecture,
                h.sector_size
            ),
            Err(why) => format!("{} (unusable: {why})", f.path.display()),
        })
        .collect();
    anyhow::anyhow!(
        "no osmet file in {} is for {needed}; found: {}. Nothing was written (pass --image-url or --image-file to install another image)",
        dir.display(),
        list.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::super::format::{encode, Partition};
    use super::*;

    fn header(arch: &str, ss: u32) -> Header {
        Header {
            app_version: "0.27.0".into(),
            sector_size: ss,
            os_description: format!("CoreOS {ss}"),
            os_architecture: arch.into(),
        }
    }

    fn body() -> Body {
        Body {
            partitions: vec![Partition {
                start_offset: 100,
                end_offset: 200,
                mappings: vec![],
            }],
            checksum: [1; 32],
            size: 300,
        }
    }

    fn wanted(arch: &str, ss: u64) -> Wanted {
        Wanted {
            architecture: arch.into(),
            sector_size: ss,
        }
    }

    fn dir_with(files: &[(&str, Vec<u8>)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (name, bytes) in files {
            std::fs::write(d.path().join(name), bytes).unwrap();
        }
        std::fs::create_dir(d.path().join("zz-subdir.osmet")).unwrap();
        d
    }

    fn pick(d: &tempfile::TempDir, w: &Wanted) -> Result<Chosen> {
        choose(d.path(), &list(d.path()).unwrap(), w)
    }

    /// Unparsable files (garbage, a table past the image's end) are skipped on the way.
    #[test]
    fn first_match_by_name_wins_and_is_positioned_at_the_packed_stream() {
        let mut good = encode(&header("x86_64", 512), &body());
        good.extend_from_slice(b"XZDATA");
        let mut bad_table = body();
        bad_table.partitions[0].end_offset = 1000;
        let d = dir_with(&[
            ("c-512.osmet", encode(&header("x86_64", 512), &body())),
            ("b-512.osmet", good),
            ("a-garbage.osmet", b"<html>404</html>".to_vec()),
            (
                "a-badtable.osmet",
                encode(&header("x86_64", 512), &bad_table),
            ),
            ("a-4k.osmet", encode(&header("x86_64", 4096), &body())),
            ("0-arm.osmet", encode(&header("aarch64", 512), &body())),
        ]);
        let mut c = pick(&d, &wanted("x86_64", 512)).unwrap();
        assert!(c.path.ends_with("b-512.osmet"));
        assert_eq!(c.body, body());
        assert_eq!(c.pieces, vec![Piece::Packed(300)]);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut c.packed, &mut rest).unwrap();
        assert_eq!(rest, "XZDATA");
        let c = pick(&d, &wanted("x86_64", 4096)).unwrap();
        assert!(c.path.ends_with("a-4k.osmet"));
        let c = pick(&d, &wanted("aarch64", 512)).unwrap();
        assert!(c.path.ends_with("0-arm.osmet"));
    }

    #[test]
    fn nothing_matching_lists_what_was_found() {
        let d = dir_with(&[
            ("a-4k.osmet", encode(&header("x86_64", 4096), &body())),
            ("b-garbage", b"nope".to_vec()),
        ]);
        let e = pick(&d, &wanted("x86_64", 512)).err().unwrap().to_string();
        assert!(e.contains("is for x86_64 with 512-byte sectors"), "{e}");
        assert!(
            e.contains("a-4k.osmet (CoreOS 4096 x86_64, 4096-byte sectors)"),
            "{e}"
        );
        assert!(e.contains("b-garbage (unusable: "), "{e}");
        assert!(e.contains("Nothing was written"), "{e}");
        let empty = tempfile::tempdir().unwrap();
        let e = pick(&empty, &wanted("x86_64", 512))
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("no osmet file in "), "{e}");
        let e = list(&empty.path().join("missing")).unwrap_err();
        assert!(format!("{e:#}").contains("No such file"), "{e:#}");
    }
}
