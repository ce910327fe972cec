//! The host map and Node matching, as pure functions over the `v2GetCluster`
//! (`exclude-hosts=false`) answer.
//!
//! - Hosts whose status is in the caller's skip list are left out.
//! - Each host's `inventory` (a JSON document in a string) is parsed; **any** parse failure,
//!   an absent inventory included, fails the whole map.
//! - The key is `requested_hostname` lowercased; of hosts with the same name, the last wins.
//! - A host's IPs are every interface's `ipv4_addresses` then `ipv6_addresses`, CIDR strings
//!   with the prefix stripped. When one of them does not parse, the host has no IPs at all
//!   (logged), as in Go.
//! - The IP index maps each IP to its host (for an IP two hosts share, the later host in key
//!   order).
//!
//! A Node matches a host by its lowercased name in one map, else by any `InternalIP` address in
//! the IP index of another (the last matching address wins): the node-status task looks names
//! up among the unfinished hosts only, and IPs among all of them.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

use super::service::ControllerService;
use crate::service::{Host, HostStatus, StageOrder};

/// Skipped by the node-status task (`WaitAndUpdateNodesStatus`).
pub(crate) const NODE_STATUS_SKIP: &[HostStatus] = &[HostStatus::Disabled];
/// Skipped by the node-labels task (`UpdateNodeLabels`).
pub(crate) const NODE_LABELS_SKIP: &[HostStatus] = &[HostStatus::Disabled, HostStatus::Error];

/// A Node address type that takes part in IP matching.
pub(crate) const INTERNAL_IP: &str = "InternalIP";

/// One host of the map: the service's record and its IPs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HostInfo {
    pub(crate) host: Host,
    /// Without prefixes, in inventory order (IPv4 before IPv6 per interface).
    pub(crate) ips: Vec<String>,
}

/// The inventory fields the map reads (Go's model parse: unknown fields ignored, `null` is
/// empty, a wrong type fails).
#[derive(Debug, Default, Deserialize)]
struct Inventory {
    #[serde(default, deserialize_with = "null_as_default")]
    interfaces: Vec<Interface>,
}

#[derive(Debug, Default, Deserialize)]
struct Interface {
    #[serde(default, deserialize_with = "null_as_default")]
    ipv4_addresses: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    ipv6_addresses: Vec<String>,
}

fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The address of a CIDR string (`192.168.126.10/24` → `192.168.126.10`), written as Go's
/// `net.IP.String()` does (an IPv4-mapped IPv6 address as IPv4).
pub(crate) fn cidr_address(cidr: &str) -> Result<String> {
    let (addr, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| anyhow!("{cidr:?} is not a CIDR address (no prefix length)"))?;
    let ip: IpAddr = addr
        .parse()
        .with_context(|| format!("{cidr:?} is not a CIDR address"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let valid_prefix = !prefix.starts_with('+') && prefix.parse::<u8>().is_ok_and(|b| b <= max);
    if !valid_prefix {
        bail!("{cidr:?} has an invalid prefix length");
    }
    Ok(ip.to_canonical().to_string())
}

/// The hosts of a cluster by lowercased requested hostname; see the module documentation.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct HostMap {
    hosts: BTreeMap<String, HostInfo>,
    /// Whether the cluster has one control-plane node (as the service says when fetched).
    single_node: bool,
}

impl HostMap {
    /// Builds the map from `hosts`, leaving out those whose status is in `skip`.
    pub(crate) fn from_hosts<'a>(
        hosts: impl IntoIterator<Item = &'a Host>,
        skip: &[HostStatus],
    ) -> Result<HostMap> {
        let mut map = BTreeMap::new();
        for host in hosts {
            if host.status.as_ref().is_some_and(|s| skip.contains(s)) {
                continue;
            }
            let text = host.inventory.as_deref().unwrap_or("");
            let inventory: Option<Inventory> = serde_json::from_str(text).with_context(|| {
                format!(
                    "parsing the inventory of host {} ({})",
                    host.id, host.requested_hostname
                )
            })?;
            // The first address that does not parse fails them all.
            let interfaces = inventory.unwrap_or_default().interfaces;
            let cidrs = interfaces
                .iter()
                .flat_map(|i| i.ipv4_addresses.iter().chain(&i.ipv6_addresses));
            let ips: Result<Vec<String>> = cidrs.map(|cidr| cidr_address(cidr)).collect();
            let ips = match ips {
                Ok(ips) => ips,
                Err(e) => {
                    tracing::warn!(host = %host.id, hostname = %host.requested_hostname, "failed to get the IPs of the host, matching it by name only: {e:#}");
                    Vec::new()
                }
            };
            map.insert(
                host.requested_hostname.to_lowercase(),
                HostInfo {
                    host: host.clone(),
                    ips,
                },
            );
        }
        Ok(HostMap {
            hosts: map,
            single_node: false,
        })
    }

    /// `v2GetCluster` with hosts, then the map.
    pub(crate) fn fetch(service: &dyn ControllerService, skip: &[HostStatus]) -> Result<HostMap> {
        let cluster = service.get_cluster(false)?;
        if cluster.hosts.is_empty() {
            tracing::debug!("the cluster has no hosts");
        }
        let map = Self::from_hosts(&cluster.hosts, skip)?;
        Ok(HostMap {
            single_node: cluster.is_single_node(),
            ..map
        })
    }

    /// The stage order the service checks `host`'s reports against.
    pub(crate) fn stage_order(&self, host: &Host) -> Option<StageOrder> {
        StageOrder::for_host(host.role.as_ref(), host.bootstrap, self.single_node)
    }

    /// The host named `name` (any case).
    pub(crate) fn get(&self, name: &str) -> Option<&HostInfo> {
        self.hosts.get(&name.to_lowercase())
    }

    /// (lowercased name, host), by name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &HostInfo)> {
        self.hosts.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub(crate) fn len(&self) -> usize {
        self.hosts.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The hosts for which `keep` holds (e.g. the unfinished ones).
    pub(crate) fn filter(&self, mut keep: impl FnMut(&HostInfo) -> bool) -> HostMap {
        HostMap {
            hosts: self
                .hosts
                .iter()
                .filter(|(_, h)| keep(h))
                .map(|(k, h)| (k.clone(), h.clone()))
                .collect(),
            single_node: self.single_node,
        }
    }

    /// Every IP of every host → that host's key.
    pub(crate) fn ip_index(&self) -> HashMap<&str, &str> {
        let mut index = HashMap::new();
        for (name, host) in &self.hosts {
            for ip in &host.ips {
                index.insert(ip.as_str(), name.as_str());
            }
        }
        index
    }

    /// The host of a Node: its lowercased `name` in `self`, else the last of its `InternalIP`
    /// `addresses` (type, address) that is in `by_ip`'s IP index.
    pub(crate) fn match_node<'a>(
        &'a self,
        by_ip: &'a HostMap,
        name: &str,
        addresses: &[(&str, &str)],
    ) -> Option<&'a HostInfo> {
        if let Some(host) = self.get(name) {
            return Some(host);
        }
        let index = by_ip.ip_index();
        addresses
            .iter()
            .filter(|(kind, _)| *kind == INTERNAL_IP)
            .filter_map(|(_, ip)| index.get(ip))
            .next_back()
            .and_then(|key| by_ip.hosts.get(*key))
    }

    /// The Node's first `InternalIP` when it is not in the IP index (Go warns that the node's
    /// IP changed); `None` when it is, or when the Node has no InternalIP.
    pub(crate) fn changed_ip<'n>(&self, addresses: &[(&str, &'n str)]) -> Option<&'n str> {
        let (_, first) = addresses.iter().find(|(kind, _)| *kind == INTERNAL_IP)?;
        (!self.ip_index().contains_key(first)).then_some(*first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn host(id: &str, name: &str, status: &str, inventory: Option<&str>) -> Host {
        let mut v = json!({
            "id": id,
            "infra_env_id": "ie",
            "cluster_id": "c",
            "status": status,
            "role": "master",
            "requested_hostname": name,
            "progress": {"current_stage": "Rebooting", "progress_info": "info"},
            "node_labels": "{\"a\":\"b\"}",
            "machine_config_pool_name": "infra",
        });
        if let Some(inv) = inventory {
            v["inventory"] = json!(inv);
        }
        serde_json::from_value(v).unwrap()
    }

    /// An inventory of `v4` and `v6` on one interface, and 10.0.0.9 on a second one.
    fn inv(v4: &[&str], v6: &[&str]) -> String {
        json!({"interfaces": [
            {"name": "ens3", "ipv4_addresses": v4, "ipv6_addresses": v6},
            {"name": "ens4", "ipv4_addresses": ["10.0.0.9/8"], "ipv6_addresses": null},
        ]})
        .to_string()
    }

    /// A host named `id`, `installing`, with `ip` (and 10.0.0.9).
    fn at(id: &str, status: &str, ip: &str) -> Host {
        named(id, id, status, ip)
    }

    fn named(id: &str, name: &str, status: &str, ip: &str) -> Host {
        host(id, name, status, Some(&inv(&[ip], &[])))
    }

    #[test]
    fn builds_keys_ips_and_fields() {
        let i = inv(
            &["192.168.126.10/24"],
            &["fe80::1/64", "2620:52:0:1eb::83/64"],
        );
        let hosts = [host(
            "h0",
            "Master-0.Example",
            "installing-in-progress",
            Some(&i),
        )];
        let map = HostMap::from_hosts(&hosts, NODE_STATUS_SKIP).unwrap();
        assert_eq!(map.len(), 1);
        let (key, h) = map.iter().next().unwrap();
        assert_eq!(key, "master-0.example");
        assert_eq!(
            h.ips,
            ["192.168.126.10", "fe80::1", "2620:52:0:1eb::83", "10.0.0.9"]
        );
        assert_eq!(h.host, hosts[0], "the service's record, as it came");
        assert!(map.get("MASTER-0.example").is_some());
    }

    #[test]
    fn skips_listed_statuses_and_the_last_duplicate_name_wins() {
        let hosts = [("a", "disabled"), ("b", "error"), ("c", "installed")]
            .map(|(id, status)| at(id, status, "1.1.1.1/32"));
        let names = |skip| -> Vec<String> {
            let m = HostMap::from_hosts(&hosts, skip).unwrap();
            m.iter().map(|(k, _)| k.to_string()).collect()
        };
        assert_eq!(names(NODE_STATUS_SKIP), ["b", "c"]);
        assert_eq!(names(NODE_LABELS_SKIP), ["c"]);
        assert_eq!(names(&[]), ["a", "b", "c"]);
        let first = named("first", "Node-1", "installing", "1.1.1.1/32");
        let second = named("second", "node-1", "installing", "2.2.2.2/32");
        let map = HostMap::from_hosts(&[first, second], &[]).unwrap();
        assert_eq!(map.len(), 1);
        assert_eq!(map.get("node-1").unwrap().host.id, "second");
        assert!(!map.ip_index().contains_key("1.1.1.1"));
    }

    #[test]
    fn any_inventory_parse_failure_fails_the_map() {
        let bad_json = r#"{"interfaces":[{"ipv4_addresses":"x"}]}"#;
        for bad in [None, Some(""), Some("{not json"), Some(bad_json)] {
            let hosts = [
                at("a", "installing", "1.1.1.1/32"),
                host("b", "b", "installing", bad),
            ];
            let err = HostMap::from_hosts(&hosts, NODE_STATUS_SKIP).unwrap_err();
            assert!(
                format!("{err:#}").contains("inventory of host b"),
                "{err:#}"
            );
        }
        // A skipped host's inventory is not read.
        let hosts = [
            at("a", "installing", "1.1.1.1/32"),
            host("b", "b", "disabled", Some("{")),
        ];
        assert_eq!(
            HostMap::from_hosts(&hosts, NODE_STATUS_SKIP).unwrap().len(),
            1
        );
        // `null` and an inventory without interfaces give no IPs.
        for empty in ["null", "{}", r#"{"interfaces":null}"#] {
            let hosts = [host("a", "a", "installing", Some(empty))];
            let map = HostMap::from_hosts(&hosts, &[]).unwrap();
            assert!(map.get("a").unwrap().ips.is_empty(), "{empty}");
        }
    }

    #[test]
    fn a_bad_address_leaves_the_host_without_ips() {
        for bad in [
            "192.168.1.1",
            "192.168.1.300/24",
            "10.0.0.1/33",
            "fe80::1/129",
            "x/24",
        ]
        .into_iter()
        .chain(["10.0.0.1/"])
        {
            let i = inv(&["192.168.126.10/24", bad], &[]);
            let hosts = [host("a", "a", "installing", Some(&i))];
            let map = HostMap::from_hosts(&hosts, &[]).unwrap();
            assert!(map.get("a").unwrap().ips.is_empty(), "{bad}");
        }
        assert_eq!(cidr_address("::ffff:10.1.2.3/96").unwrap(), "10.1.2.3");
        assert_eq!(cidr_address("FE80:0:0::1/64").unwrap(), "fe80::1");
    }

    #[test]
    fn matching_by_name_then_by_internal_ip() {
        let h1 = host(
            "h1",
            "node1",
            "installed",
            Some(&inv(&["192.168.39.249/24"], &["fd00::9/64"])),
        );
        let hosts = [named("h0", "node0", "installing", "192.168.39.248/24"), h1];
        let all = HostMap::from_hosts(&hosts, NODE_STATUS_SKIP).unwrap();
        let unfinished = all.filter(|h| h.host.status != Some(HostStatus::Installed));
        assert_eq!(unfinished.len(), 1);
        // Index: 192.168.39.248, 192.168.39.249, fd00::9, 10.0.0.9 (shared: the later host).
        let index = all.ip_index();
        assert_eq!(index.len(), 4);
        assert_eq!(index["10.0.0.9"], "node1");

        let m = |name: &str, addrs: &[(&str, &str)]| {
            let found = unfinished.match_node(&all, name, addrs);
            found.map(|h| h.host.id.clone())
        };
        let (v4, v6) = (("InternalIP", "192.168.39.248"), ("InternalIP", "fd00::9"));
        assert_eq!(m("NODE0", &[]).as_deref(), Some("h0"));
        // Name lookup covers only the unfinished hosts; IPs cover all of them.
        assert_eq!(m("node1", &[]), None);
        assert_eq!(m("some-fake-name", &[v4]).as_deref(), Some("h0"));
        let last = m("x", &[v4, v6]);
        assert_eq!(
            last.as_deref(),
            Some("h1"),
            "the last matching address wins"
        );
        assert_eq!(
            m(
                "x",
                &[("ExternalIP", "192.168.39.248"), ("Hostname", "node0")]
            ),
            None
        );
        assert_eq!(m("x", &[("InternalIP", "10.9.9.9")]), None);

        assert_eq!(all.changed_ip(&[v4]), None);
        let changed = [("Hostname", "n"), ("InternalIP", "10.9.9.9"), v4];
        assert_eq!(all.changed_ip(&changed), Some("10.9.9.9"));
        assert_eq!(all.changed_ip(&[("Hostname", "n")]), None);
    }
}
