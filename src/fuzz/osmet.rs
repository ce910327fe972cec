//! The live image's osmet files: header, then the table (body) and the plan of reads made from
//! it. Seeds: the first 4 KiB of a file packed by coreos-installer (its table cut short) and a
//! small complete file.

use proptest::prelude::*;

use super::{bounded, config, corpus, mutated};
use crate::image::osmet::format::{Body, Decoder};
use crate::image::osmet::objects::MAX_READ;
use crate::image::osmet::plan::{plan, Piece, MAX_IMAGE};

/// What the plan may allocate beyond the input: one piece per MAX_READ of the image the table
/// describes (which the plan limits to MAX_IMAGE), one more per extent and partition for the cut
/// ends and the packed runs between them; twice that for the vector's growth.
fn plan_allowance(body: &Body) -> usize {
    let extents: usize = body.partitions.iter().map(|p| p.mappings.len()).sum();
    let pieces =
        (body.size.min(MAX_IMAGE) / MAX_READ) as usize + 2 * (extents + body.partitions.len()) + 1;
    2 * pieces * std::mem::size_of::<Piece>()
}

proptest! {
    #![proptest_config(config("testdata/fuzz/regressions/osmet.txt"))]

    #[test]
    fn an_osmet_file(input in mutated(corpus("osmet"))) {
        let mut d = Decoder::new(&input[..]);
        match bounded(input.len(), 0, || d.header().and_then(|_| d.body())) {
            Err(e) => {
                let m = e.to_string();
                let named = m.contains(" at byte ")
                    || m.starts_with("not an osmet file")
                    || m.starts_with("osmet version");
                assert!(named, "an error that says neither what nor where: {m}");
            }
            Ok(body) => {
                let extra = plan_allowance(&body);
                if let Err(e) = bounded(input.len(), extra, || plan(&body, MAX_READ)) {
                    let m = e.to_string();
                    assert!(m.contains("partition") || m.contains("image"), "{m}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of 130 bytes describing an image of 2^60 bytes with one extent spanning it: the
    /// plan cut it into 2^40 reads (memory and time without end) before the image size was
    /// checked.
    #[test]
    fn a_table_of_a_2_to_the_60_byte_image_is_refused_before_planning() {
        let path = "testdata/fuzz/osmet/regression-extent-of-2^60-bytes.osmet";
        let input =
            std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
        let mut d = Decoder::new(&input[..]);
        d.header().unwrap();
        let body = d.body().unwrap();
        let e = bounded(input.len(), 0, || plan(&body, MAX_READ)).unwrap_err();
        assert!(
            e.to_string()
                .contains("is 1152921504606846976 bytes, more than the 1099511627776 bytes"),
            "{e}"
        );
    }
}
