//! The machine-config-server's log (which hosts fetched their Ignition config) and the host
//! inventory's addresses it is matched against. Both parsers only search: bad text yields no
//! address rather than an error, so what is checked is that whatever they return is an address
//! the text holds. Seeds: log lines of both MCS formats, a host inventory.

use proptest::prelude::*;
use std::net::IpAddr;

use super::{bounded, config, corpus, mutated_text};
use crate::openshift::mcs_logs::{host_ips, ignition_fetch_addresses};

proptest! {
    #![proptest_config(config("testdata/fuzz/regressions/mcs.txt"))]

    #[test]
    fn mcs_log_lines_and_inventory_addresses(input in mutated_text(corpus("mcs"))) {
        let fetched = bounded(input.len(), 0, || ignition_fetch_addresses(&input));
        // At most one address per Ignition request.
        assert!(fetched.len() <= input.matches("User-Agent:\"Ignition").count());
        let ips = bounded(input.len(), 0, || host_ips(&input));
        for ip in &ips {
            assert!(ip.parse::<IpAddr>().is_ok(), "{ip}");
        }
    }
}
