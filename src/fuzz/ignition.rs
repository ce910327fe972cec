//! Ignition configs: the shape check every reader shares, and the single-node merge of the
//! host's config into the SNO master config. Seeds: the bootstrap config of the tests and two
//! host configs of other spec versions.

use proptest::prelude::*;

use super::{bounded, config, corpus, mutated};
use crate::ignition::config::parse;
use crate::ignition::merge::merge_host_into_sno;

proptest! {
    #![proptest_config(config("testdata/fuzz/regressions/ignition.txt"))]

    #[test]
    fn an_ignition_config_and_its_merge(input in mutated(corpus("ignition"))) {
        if let Err(e) = bounded(input.len(), 0, || parse(&input)) {
            let m = format!("{e:#}");
            let named = (m.starts_with("not valid JSON (") && m.contains(" line "))
                || m.contains("not an object")
                || m.contains("ignition.version");
            assert!(named, "{m}");
        }
        let sno = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/fuzz/ignition/bootstrap.ign")).unwrap();
        match bounded(sno.len() + input.len(), 0, || merge_host_into_sno(&sno, &input)) {
            // What the merge writes is a config every reader accepts.
            Ok(merged) => { parse(&merged).unwrap(); }
            Err(e) => {
                let m = format!("{e:#}");
                assert!(m.contains("host ignition") || m.starts_with("cannot merge"), "{m}");
            }
        }
    }
}
