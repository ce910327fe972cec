//! Which hosts fetched their ignition from the machine-config-server (Go's
//! `updateConfiguringStatus`): a host whose address appears in a request line made by Ignition
//! has booted its installed disk and pulled its rendered config. The MCS logs requests in two
//! shapes:
//!
//! ```text
//! … api.go:102] Pool master requested by 192.168.126.12:32780 User-Agent:"Ignition/2.6.0"
//! … api.go:117] Pool master requested by address:"[fe80::1%ens3]:40548" User-Agent:"Ignition/2.19.0" Accept-Header: "…"
//! ```
//!
//! Go's regex `(<ips>\b)(%zone)?(])?:\d+"? User-Agent:"Ignition`, made exact: every
//! `User-Agent:"Ignition` must be preceded by the client address as `<ip>:<port>` or
//! `[<ipv6>(%<zone>)]:<port>`, optionally inside `"…"` or after `address:"`, and it is compared
//! with the host's addresses as IP values: `192.168.126.10` never matches `192.168.126.100`,
//! dots are not wildcards (Go's were), zones are ignored, IPv6 spellings are equal whatever
//! their case or zero compression, and an IPv4-mapped client counts as IPv4.

use serde_json::Value;
use std::collections::HashSet;
use std::net::IpAddr;

use crate::config::cluster_hosts::ClusterHost;
use crate::config::Role;
use crate::service::stages::HostStage;

/// What follows the client address on an MCS request line made by Ignition.
const IGNITION_USER_AGENT: &str = "User-Agent:\"Ignition";

/// A host still watched: its id, its role and its inventory addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct McsHost {
    pub id: String,
    /// `None` when the service sent no role.
    pub role: Option<Role>,
    /// Addresses as the inventory gives them; a `/prefix` or a `%zone` is tolerated and ignored.
    pub ips: Vec<String>,
}

/// The stage the bootstrap reports for a host of `role` once it fetched its ignition: workers
/// wait for the control plane to serve them, everything else is configuring.
pub(crate) fn status_for(role: Option<&Role>) -> HostStage {
    if role == Some(&Role::Worker) {
        HostStage::WaitingForIgnition
    } else {
        HostStage::Configuring
    }
}

/// The stages after which the bootstrap stops watching a host (`None`: none yet, or unknown).
pub(crate) fn is_past_ignition_fetch(stage: Option<HostStage>) -> bool {
    matches!(
        stage,
        Some(
            HostStage::Configuring
                | HostStage::Joined
                | HostStage::Done
                | HostStage::WaitingForIgnition
        )
    )
}

/// The hosts of `hosts` that fetched their ignition according to `mcs_log`, in input order.
pub(crate) fn hosts_that_fetched_ignition<'a>(
    mcs_log: &str,
    hosts: &'a [McsHost],
) -> Vec<&'a McsHost> {
    let fetched = ignition_fetch_addresses(mcs_log);
    hosts
        .iter()
        .filter(|host| any_address_in(&host.ips, &fetched))
        .collect()
}

/// Every client address of an Ignition request in `mcs_log`, in canonical form.
pub(crate) fn ignition_fetch_addresses(mcs_log: &str) -> HashSet<IpAddr> {
    let mut addresses = HashSet::new();
    for line in mcs_log.lines() {
        let mut searched = 0;
        while let Some(found) = line[searched..].find(IGNITION_USER_AGENT) {
            let at = searched + found;
            if let Some(address) = client_address_before(&line[..at]) {
                addresses.insert(address.to_canonical());
            }
            searched = at + IGNITION_USER_AGENT.len();
        }
    }
    addresses
}

fn any_address_in<S: AsRef<str>>(ips: &[S], fetched: &HashSet<IpAddr>) -> bool {
    ips.iter()
        .filter_map(|ip| parse_inventory_ip(ip.as_ref()))
        .any(|ip| fetched.contains(&ip.to_canonical()))
}

/// The `ip:port` token that ends `before` (the text in front of `User-Agent:"Ignition`).
fn client_address_before(before: &str) -> Option<IpAddr> {
    let trimmed = before.trim_end();
    let trimmed = trimmed.strip_suffix('"').unwrap_or(trimmed);
    let token = trimmed.rsplit(char::is_whitespace).next()?;
    // `address:"[v6]:port`, `address:"v4:port`, `"v4:port` or a bare `v4:port`.
    let token = match (token.rfind('['), token.rfind('"')) {
        (Some(bracket), _) => &token[bracket..],
        (None, Some(quote)) => &token[quote + 1..],
        (None, None) => token,
    };
    parse_host_port(token)
}

/// `[v6%zone]:port`, `[v6]:port` or `v4:port`; the port must be all digits.
fn parse_host_port(token: &str) -> Option<IpAddr> {
    let (host, port) = match token.strip_prefix('[') {
        Some(rest) => {
            let (host, after) = rest.split_once(']')?;
            (host, after.strip_prefix(':')?)
        }
        None => token.rsplit_once(':')?,
    };
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    strip_zone(host).parse().ok()
}

fn strip_zone(host: &str) -> &str {
    host.split_once('%')
        .map_or(host, |(address, _zone)| address)
}

/// An inventory address: `192.168.126.10`, `192.168.126.10/24`, `fe80::1%eth0`, `[fe80::1]`.
fn parse_inventory_ip(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    let text = text
        .split_once('/')
        .map_or(text, |(address, _prefix)| address);
    let text = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    strip_zone(text).parse().ok()
}

/// The host's addresses from its inventory JSON (`interfaces[].ipv4_addresses` then
/// `ipv6_addresses`, CIDR strings), canonical, in order, once each; what is not an address, or
/// an inventory that is not JSON, gives none.
pub(crate) fn host_ips(inventory_json: &str) -> Vec<String> {
    let inventory: Value = match serde_json::from_str(inventory_json) {
        Ok(value) => value,
        Err(err) => {
            tracing::debug!("host inventory is not valid JSON ({err}); it gives no addresses");
            return Vec::new();
        }
    };
    let mut ips: Vec<String> = Vec::new();
    let interfaces = inventory.get("interfaces").and_then(Value::as_array);
    for interface in interfaces.into_iter().flatten() {
        for family in ["ipv4_addresses", "ipv6_addresses"] {
            let cidrs = interface.get(family).and_then(Value::as_array);
            for cidr in cidrs.into_iter().flatten().filter_map(Value::as_str) {
                if let Some(ip) = parse_inventory_ip(cidr).map(|ip| ip.to_string()) {
                    if !ips.contains(&ip) {
                        ips.push(ip);
                    }
                }
            }
        }
    }
    ips
}

/// One MCS log line for an Ignition request from `ip` (bracketed when IPv6), in the 4.12+ shape.
pub(crate) fn ignition_request_line(ip: &str) -> String {
    let address = match ip.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => format!("[{ip}]"),
        _ => ip.to_string(),
    };
    format!(
        "I0101 00:00:00.000000       1 api.go:117] Pool master requested by \
         address:\"{address}:40548\" {IGNITION_USER_AGENT}/2.16.2\" \
         Accept-Header: \"application/vnd.coreos.ignition+json;version=3.4.0\"\n"
    )
}

/// Dry run: the machine-config-server log, one Ignition request line per host of the
/// cluster-hosts file whose reboot marker exists. (Go writes `<ip>.(Ignition)`, a shape its own
/// matcher stopped recognizing, so Go's dry run never reports anyone `Configuring`.)
pub(crate) fn dry_run_mcs_log(hosts: &[ClusterHost]) -> String {
    let rebooted = hosts.iter().filter(|h| h.rebooted());
    rebooted.map(|h| ignition_request_line(&h.ip)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether any of `ips` fetched its ignition according to `mcs_log`.
    fn fetched_ignition<S: AsRef<str>>(mcs_log: &str, ips: &[S]) -> bool {
        any_address_in(ips, &ignition_fetch_addresses(mcs_log))
    }

    /// MCS log lines in the 4.5 (bare `ip:port`) and 4.12+ (`address:"…"`) shapes, with a curl
    /// request and an address mentioned outside a request line.
    const MCS_LOG: &str = include_str!("testdata/mcs.log");

    fn host(id: &str, role: &str, ips: &[&str]) -> McsHost {
        McsHost {
            id: id.into(),
            role: Some(role.into()),
            ips: ips.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn ids(hosts: Vec<&McsHost>) -> Vec<&str> {
        hosts.iter().map(|h| h.id.as_str()).collect()
    }

    #[test]
    fn fixture_hosts() {
        let hosts = [
            // .10 is a prefix of .100, which did fetch: node0 must not match.
            host("node0", "master", &["192.168.126.10"]),
            host("node1", "master", &["192.168.126.11/24", "fd00::11/64"]),
            // IPv6 with a zone in the log; the inventory has no zone.
            host(
                "node2",
                "master",
                &["192.168.140.12", "fe80::5054:ff:fe9a:4739"],
            ),
            // IPv6 without a zone.
            host("worker0", "worker", &["2620:52:0:1351:67c2:adb3:cfd6:83"]),
            // Only requested with curl.
            host("worker1", "worker", &["192.168.126.13"]),
            // Only mentioned in a warning, not a request by Ignition.
            host("worker2", "worker", &["192.168.126.14"]),
            // The 4.5 log shape: `requested by ip:port User-Agent:"Ignition/…"`.
            host("worker3", "worker", &["10.0.0.5", "192.168.126.51"]),
            host("no-ips", "worker", &[]),
        ];
        assert_eq!(
            ids(hosts_that_fetched_ignition(MCS_LOG, &hosts)),
            ["node1", "node2", "worker0", "worker3"]
        );
    }

    #[test]
    fn the_client_address_right_before_the_ignition_user_agent_is_compared_as_an_ip() {
        let v4 = r#"I1121 10:00:00.000000       1 api.go:117] Pool master requested by address:"192.168.126.100:52428" User-Agent:"Ignition/2.16.2" Accept-Header: "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1""#;
        let zoned = r#"I0701 api.go:102] Pool master requested by [fe80::5054:ff:fe9a:4739%ens3]:40548 User-Agent:"Ignition/2.6.0""#;
        let v6 = r#"I0206 api.go:109] Pool master requested by address:"[2620:52:0:1351:67c2:adb3:cfd6:83]:47018" User-Agent:"Ignition/2.14.0" Accept-Header: "application/vnd.coreos.ignition+json;version=3.3.0, */*;q=0.1""#;
        let punctuated_zone =
            r#"x requested by address:"[fe80::1%br-ex.100]:1234" User-Agent:"Ignition/2.19.0""#;
        let mapped =
            r#"x requested by address:"[::ffff:192.168.126.10]:1234" User-Agent:"Ignition/2.19.0""#;
        for (log, ip, fetched) in [
            (v4, "192.168.126.100", true),
            // A prefix of the address, or a longer one, does not match.
            (v4, "192.168.126.10", false),
            (v4, "192.168.126.1", false),
            (v4, "2.168.126.100", false),
            // The Go regex did not escape the dots; here they are literal.
            (v4, "192x168.126.100", false),
            // The zone is ignored on both sides.
            (zoned, "fe80::5054:ff:fe9a:4739", true),
            (zoned, "fe80::5054:ff:fe9a:4739/64", true),
            (zoned, "fe80::5054:ff:fe9a:4739%eth9", true),
            (zoned, "fe80::5054:ff:fe9a:473", false),
            (punctuated_zone, "fe80::1", true),
            // The same address spelled differently in the inventory.
            (v6, "2620:52:0:1351:67c2:adb3:cfd6:83", true),
            (v6, "2620:52:0:1351:67C2:ADB3:CFD6:0083", true),
            (v6, "2620:52:0:1351:67c2:adb3:cfd6:8", false),
            // An IPv4-mapped IPv6 client counts as its IPv4 address.
            (mapped, "192.168.126.10", true),
            (mapped, "192.168.126.1", false),
        ] {
            assert_eq!(fetched_ignition(log, &[ip]), fetched, "{ip} in {log}");
        }

        // The address must be right before the Ignition user agent.
        for log in [
            // No port.
            r#"requested by address:"192.168.126.10" User-Agent:"Ignition/2.19.0""#,
            // Another user agent.
            r#"requested by address:"192.168.126.10:1" User-Agent:"curl/8.6.0""#,
            // Something else between the address and the user agent.
            r#"requested by 192.168.126.10:1 pool=master User-Agent:"Ignition/2.19.0""#,
            // The user agent on the next line.
            "requested by 192.168.126.10:1\nUser-Agent:\"Ignition/2.19.0\"",
            // Not a port.
            r#"requested by 192.168.126.10:http User-Agent:"Ignition/2.19.0""#,
            "",
        ] {
            assert!(!fetched_ignition(log, &["192.168.126.10"]), "{log:?}");
        }

        // Several requests on one line, and CRLF line ends.
        let log = "a 10.0.0.1:1 User-Agent:\"Ignition/2.19.0\" b 10.0.0.2:2 User-Agent:\"Ignition/2.19.0\"\r\n\
                   c address:\"10.0.0.3:3\" User-Agent:\"Ignition/2.19.0\"\r\n";
        let expected = ["10.0.0.1", "10.0.0.2", "10.0.0.3"].map(|s| s.parse().unwrap());
        assert_eq!(ignition_fetch_addresses(log), HashSet::from(expected));
    }

    #[test]
    fn stages_by_role_and_the_settled_ones() {
        use HostStage::*;
        assert_eq!(status_for(Some(&Role::Worker)), WaitingForIgnition);
        for role in [
            Some(Role::Master),
            Some(Role::Arbiter),
            Some(Role::Bootstrap),
            None,
        ] {
            assert_eq!(status_for(role.as_ref()), Configuring, "{role:?}");
        }
        for stage in [Configuring, Joined, Done, WaitingForIgnition] {
            assert!(is_past_ignition_fetch(Some(stage)), "{stage}");
        }
        for stage in [
            Rebooting,
            Installing,
            WritingImageToDisk,
            WaitingForControlPlane,
        ] {
            assert!(!is_past_ignition_fetch(Some(stage)), "{stage}");
        }
        assert!(!is_past_ignition_fetch(None));
    }

    #[test]
    fn host_ips_from_good_and_bad_inventories() {
        let inventory = r#"{
            "hostname": "master-1",
            "interfaces": [
                {"name": "ens3", "ipv4_addresses": ["192.168.126.11/24"],
                 "ipv6_addresses": ["fe80::5054:ff:fe9a:4739/64", "2620:52:0:1351:67C2:ADB3:CFD6:0083/64"]},
                {"name": "ens4", "ipv4_addresses": ["192.168.140.11/24", "192.168.126.11/24", "bogus"],
                 "ipv6_addresses": []},
                {"name": "lo"}
            ]
        }"#;
        assert_eq!(
            host_ips(inventory),
            [
                "192.168.126.11",
                "fe80::5054:ff:fe9a:4739",
                "2620:52:0:1351:67c2:adb3:cfd6:83",
                "192.168.140.11"
            ]
        );
        let bad_ips = r#"{"interfaces": [{"ipv4_addresses": [1, null]}]}"#;
        for inventory in ["", "not json", "{}", r#"{"interfaces": "eth0"}"#, bad_ips] {
            assert!(host_ips(inventory).is_empty(), "{inventory}");
        }
    }
}
