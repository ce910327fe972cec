//! JSON from outside: the assisted-service's answers (the models the installer and the
//! controller decode, and the reason of an error answer), `lsblk --bytes --json` and the
//! `-installer-args` array with the coreos-installer arguments it holds. Seeds: answers in the
//! shapes of the service's swagger, lsblk output, installer arguments the service passes.

use proptest::prelude::*;

use super::{bounded, config, corpus, mutated, mutated_text};
use crate::cli::go_flags::{parse, ParseOutcome};
use crate::host::lsblk::{partition_path_from_lsblk_json, sizes_from_lsblk_json};
use crate::service::client::{decode_body, reason_from_bytes};
use crate::service::models::{Cluster, Host, MonitoredOperator};
use crate::write::parse_installer_args;

/// serde_json names the line and column of what it could not read (and a field's name when one
/// is missing or of the wrong type).
fn assert_located(e: &anyhow::Error) {
    let m = format!("{e:#}");
    assert!(m.starts_with("decoding the response body: "), "{m}");
    assert!(m.contains(" line ") && m.contains(" column "), "{m}");
}

proptest! {
    #![proptest_config(config("testdata/fuzz/regressions/json.txt"))]

    #[test]
    fn the_services_answers(input in mutated(corpus("service"))) {
        let (cluster, hosts, operators, reason) = bounded(input.len(), 0, || {
            (
                decode_body::<Cluster>(&input),
                decode_body::<Vec<Host>>(&input),
                decode_body::<Vec<MonitoredOperator>>(&input),
                reason_from_bytes(&input),
            )
        });
        let hosts = match (cluster, hosts) {
            (Ok(c), _) => c.hosts,
            (_, Ok(h)) => h,
            (Err(a), Err(b)) => {
                assert_located(&a);
                assert_located(&b);
                vec![]
            }
        };
        for h in &hosts {
            h.stage();
            h.is_disabled();
        }
        if let Err(e) = operators {
            assert_located(&e);
        }
        // An excerpt of a body that is not an error document stays short.
        let from_json = serde_json::from_slice::<serde_json::Value>(&input).is_ok();
        assert!(from_json || reason.chars().count() <= 201, "{reason}");
    }

    #[test]
    fn lsblk_output(input in mutated_text(corpus("lsblk")), index in 0..5u32) {
        let (path, sizes) = bounded(input.len(), 0, || {
            (
                partition_path_from_lsblk_json(&input, "/dev/sda", index),
                sizes_from_lsblk_json(&input, "/dev/sda"),
            )
        });
        for e in [path.err(), sizes.err()].into_iter().flatten() {
            let m = format!("{e:#}");
            let named = m.contains("/dev/sda")
                || (m.starts_with("failed to unmarshal lsblk output") && m.contains(" line "));
            assert!(named, "{m}");
        }
    }

    #[test]
    fn installer_args(input in mutated_text(corpus("installer-args"))) {
        let args = vec!["--installer-args".to_string(), input.clone()];
        let no_env = |_: &str| None;
        match bounded(input.len(), 0, || parse(&args, &no_env)) {
            Err(e) => assert!(
                e.message.starts_with("invalid value for -installer-args: expected a JSON array of strings"),
                "{}", e.message
            ),
            Ok(ParseOutcome::Run(cfg)) => {
                let total: usize = cfg.installer_args.iter().map(String::len).sum();
                let parsed = bounded(total, 0, || parse_installer_args(&cfg.installer_args));
                if let Err(e) = parsed {
                    // The argument is named, quoted, after the option's name.
                    let m = e.to_string();
                    assert!(m.starts_with("--installer-args: ") && m.contains('"'), "{m}");
                }
            }
            Ok(_) => {}
        }
    }
}
