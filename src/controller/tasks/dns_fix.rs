//! The DNS ".10" fix (Go's `HackDNSAddressConflict`): the cluster DNS Service
//! `openshift-dns/dns-default` must get the service network's `.10` address; when another
//! Service holds it, that Service is deleted and the DNS operator's pods are restarted, so the
//! operator creates its Service again and gets the address.
//!
//! Like Go, it ignores cancellation: it is started at startup and ends on its own (at worst
//! after about 45 × 20 s, or 45 × 5 × 10 s when deletes keep failing), or with the process.

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use std::net::IpAddr;
use std::time::Duration;

use super::ready::read_install_config;
use super::OrLog;
use crate::clock::retry_attempts;
use crate::clock::{Clock, NeverStop};
use crate::controller::hosts::cidr_address;
use crate::kube::ClusterApi;

/// How many times the fix looks for the address.
pub(crate) const DNS_FIX_ATTEMPTS: u32 = 45;
/// The wait after an attempt that found nothing to do (or could not list).
pub(crate) const DNS_FIX_INTERVAL: Duration = Duration::from_secs(20);
pub(crate) const DELETE_ATTEMPTS: u32 = 5;
pub(crate) const DELETE_INTERVAL: Duration = Duration::from_secs(10);
/// The Service that must hold the address.
pub(crate) const DNS_NAMESPACE: &str = "openshift-dns";
pub(crate) const DNS_SERVICE: &str = "dns-default";
/// The namespace whose pods are deleted after a conflicting Service is.
pub(crate) const DNS_OPERATOR_NAMESPACE: &str = "openshift-dns-operator";

/// How the fix ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DnsFixOutcome {
    /// `dns-default` holds the address.
    Done,
    /// No target address (the reason, as logged).
    NoTarget(String),
    /// The attempts ran out.
    GaveUp,
}

#[derive(Deserialize)]
struct Doc {
    #[serde(default)]
    networking: Option<Networking>,
}

#[derive(Deserialize)]
struct Networking {
    #[serde(rename = "serviceNetwork", default)]
    service_network: Vec<String>,
}

/// The `.10` address of a CIDR, as canonical text (an IPv4-mapped address as IPv4, as Go
/// prints it).
pub(crate) fn dns_address(cidr: &str) -> Result<String> {
    let ip = cidr_address(cidr)
        .ok()
        .and_then(|a| a.parse::<IpAddr>().ok());
    Ok(match ip {
        Some(IpAddr::V4(v4)) => {
            let mut o = v4.octets();
            o[3] = 10;
            std::net::Ipv4Addr::from(o).to_string()
        }
        Some(IpAddr::V6(v6)) => {
            let mut o = v6.octets();
            o[15] = 10;
            std::net::Ipv6Addr::from(o).to_string()
        }
        None => bail!("invalid service network CIDR {cidr:?}"),
    })
}

/// `HackDNSAddressConflict` on `cluster_api`, sleeping on `clock`.
pub(crate) fn hack_dns_address_conflict(
    cluster_api: &dyn ClusterApi,
    clock: &dyn Clock,
) -> DnsFixOutcome {
    let target = read_install_config(cluster_api)
        .and_then(|yaml| {
            let doc: Option<Doc> =
                serde_saphyr::from_str(&yaml).context("parsing the install-config YAML")?;
            doc.and_then(|d| d.networking)
                .and_then(|n| n.service_network.into_iter().next())
                .ok_or_else(|| anyhow!("the install-config has no networking.serviceNetwork"))
        })
        .and_then(|cidr| dns_address(&cidr));
    let target = match target {
        Ok(t) => t,
        Err(e) => {
            tracing::error!("DNS address fix: no service network address to check: {e:#}");
            return DnsFixOutcome::NoTarget(format!("{e:#}"));
        }
    };
    for attempt in 1..=DNS_FIX_ATTEMPTS {
        let services = cluster_api.list_services();
        let Some(services) = services.or_warn("DNS address fix: failed to list services") else {
            clock.sleep(DNS_FIX_INTERVAL);
            continue;
        };
        let Some(holder) = services.iter().find(|s| s.cluster_ip == target) else {
            tracing::info!("DNS address fix: no service has IP {target} yet (attempt {attempt})");
            clock.sleep(DNS_FIX_INTERVAL);
            continue;
        };
        if holder.namespace == DNS_NAMESPACE && holder.name == DNS_SERVICE {
            tracing::info!("DNS address fix: {DNS_NAMESPACE}/{DNS_SERVICE} has IP {target}");
            return DnsFixOutcome::Done;
        }
        tracing::warn!(
            "DNS address fix: service {}/{} holds the DNS IP {target}, deleting it",
            holder.namespace,
            holder.name
        );
        let deleted = retry_attempts(clock, &NeverStop, DELETE_ATTEMPTS, DELETE_INTERVAL, || {
            cluster_api.delete_service(&holder.namespace, &holder.name)
        });
        let (ns, name) = (&holder.namespace, &holder.name);
        let what = format_args!("DNS address fix: failed to delete service {ns}/{name}");
        if deleted.or_warn(what).is_none() {
            continue;
        }
        let restarted = retry_attempts(clock, &NeverStop, DELETE_ATTEMPTS, DELETE_INTERVAL, || {
            cluster_api.delete_pods(DNS_OPERATOR_NAMESPACE, None)
        });
        let what =
            format_args!("DNS address fix: failed to delete the pods of {DNS_OPERATOR_NAMESPACE}");
        restarted.or_warn(what);
    }
    tracing::warn!("DNS address fix: gave up after {DNS_FIX_ATTEMPTS} attempts");
    DnsFixOutcome::GaveUp
}

/// The fix on its own thread, as Go's `main` starts it (not in dry mode; the caller decides). Nothing needs
/// to join it: like Go's goroutine, it ends on its own or with the process.
pub(crate) fn spawn(
    cluster_api: std::sync::Arc<dyn ClusterApi>,
    clock: std::sync::Arc<dyn Clock>,
) -> Result<std::thread::JoinHandle<DnsFixOutcome>> {
    std::thread::Builder::new()
        .name("dns-fix".to_string())
        .spawn(move || hack_dns_address_conflict(&*cluster_api, &*clock))
        .context("starting the DNS address fix")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::controller::testing::boom;
    use crate::kube::testing::FakeCluster;
    use crate::kube::Service;

    fn cluster_with_network(cidr: &str) -> FakeCluster {
        let k8s = FakeCluster::new();
        let ic = format!("apiVersion: v1\nnetworking:\n  serviceNetwork:\n  - {cidr}\n");
        k8s.set_config_map(
            "kube-system",
            "cluster-config-v1",
            &[("install-config", &ic)],
        );
        k8s
    }

    fn svc(namespace: &str, name: &str, ip: &str) -> Service {
        Service {
            namespace: namespace.into(),
            name: name.into(),
            cluster_ip: ip.into(),
        }
    }

    fn dns_default(ip: &str) -> Service {
        svc("openshift-dns", "dns-default", ip)
    }

    #[test]
    fn the_dot_ten_address() {
        assert_eq!(dns_address("172.30.0.0/16").unwrap(), "172.30.0.10");
        assert_eq!(dns_address("10.56.20.0/24").unwrap(), "10.56.20.10");
        assert_eq!(dns_address("10.56.20.7/24").unwrap(), "10.56.20.10");
        assert_eq!(dns_address("fd02::/112").unwrap(), "fd02::a");
        assert_eq!(dns_address("2002:db8::/64").unwrap(), "2002:db8::a");
        assert_eq!(dns_address("2002:0db8:0:0::0/64").unwrap(), "2002:db8::a");
        assert_eq!(dns_address("::ffff:10.1.0.0/112").unwrap(), "10.1.0.10");
        let bad = [
            "172.30.0.0",
            "172.30.0.0/33",
            "fd02::/129",
            "x/16",
            "1.2.3.4/",
            "",
        ];
        for bad in bad {
            assert!(dns_address(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn no_service_network_ends_at_once() {
        let clock = FakeClock::new();
        let k8s = FakeCluster::new();
        k8s.fail_next("get_config_map", boom());
        let out = hack_dns_address_conflict(&k8s, &clock);
        assert!(matches!(out, DnsFixOutcome::NoTarget(_)), "{out:?}");
        assert_eq!(
            k8s.take_calls(),
            ["get_config_map(kube-system, cluster-config-v1)"]
        );
        for ic in [
            "networking:\n  serviceNetwork: []\n",
            "networking:\n  serviceNetwork:\n  - bad\n",
        ] {
            k8s.set_config_map(
                "kube-system",
                "cluster-config-v1",
                &[("install-config", ic)],
            );
            let out = hack_dns_address_conflict(&k8s, &clock);
            assert!(matches!(out, DnsFixOutcome::NoTarget(_)), "{out:?}");
            assert_eq!(k8s.count("list_services"), 0);
        }
        assert!(clock.sleeps().is_empty());
    }

    /// IPv6 and IPv4: the service at the `.10` address (not the other one) is deleted, the DNS
    /// operator's pods restarted, and then dns-default holds the address.
    #[test]
    fn a_conflict_is_deleted_then_dns_default_holds_the_address() {
        for (cidr, other, dot_ten) in [
            ("2002:db8::/64", "2002:db8::1", "2002:db8::a"),
            ("10.56.20.0/24", "10.56.20.1", "10.56.20.10"),
        ] {
            let clock = FakeClock::new();
            let k8s = cluster_with_network(cidr);
            k8s.add_service(svc("default", "other", other));
            k8s.add_service(svc("testing", "conflict", dot_ten));
            k8s.add_service(dns_default(dot_ten));
            assert_eq!(hack_dns_address_conflict(&k8s, &clock), DnsFixOutcome::Done);
            assert_eq!(
                k8s.take_calls(),
                [
                    "get_config_map(kube-system, cluster-config-v1)",
                    "list_services()",
                    "delete_service(testing, conflict)",
                    "delete_pods(openshift-dns-operator, -)",
                    "list_services()",
                ],
                "{cidr}"
            );
            assert!(clock.sleeps().is_empty(), "no wait after a delete");
        }
    }

    type Setup<'a> = &'a dyn Fn(&FakeCluster);

    /// Each case on a 172.30.0.0/16 cluster: the outcome, the list/delete-service/delete-pods
    /// calls and the waits.
    #[test]
    fn attempts_and_waits() {
        use DnsFixOutcome::*;
        let conflict = |k: &FakeCluster| k.add_service(svc("testing", "conflict", "172.30.0.10"));
        let dns = |k: &FakeCluster, ip| k.add_service(dns_default(ip));
        let cases: [(&str, Setup, _, [usize; 3], _); 5] = [
            (
                "a failed list",
                &|k| {
                    dns(k, "172.30.0.10");
                    k.fail_next("list_services", boom());
                },
                Done,
                [2, 0, 0],
                vec![DNS_FIX_INTERVAL],
            ),
            (
                "deletes failing 4 times",
                &|k| {
                    conflict(k);
                    dns(k, "172.30.0.10");
                    for _ in 0..4 {
                        k.fail_next("delete_service", boom());
                        k.fail_next("delete_pods", boom());
                    }
                },
                Done,
                [2, 5, 5],
                vec![DELETE_INTERVAL; 8],
            ),
            (
                "lists always failing",
                &|k| k.fail_always("list_services", boom()),
                GaveUp,
                [45, 0, 0],
                vec![DNS_FIX_INTERVAL; 45],
            ),
            (
                "the address never found",
                &|k| dns(k, "172.30.0.11"),
                GaveUp,
                [45, 0, 0],
                vec![DNS_FIX_INTERVAL; 45],
            ),
            // No 20 s waits: each attempt ends with the failed deletes.
            (
                "service deletes always failing",
                &|k| {
                    conflict(k);
                    k.fail_always("delete_service", boom());
                },
                GaveUp,
                [45, 225, 0],
                vec![DELETE_INTERVAL; 45 * 4],
            ),
        ];
        for (name, setup, outcome, calls, sleeps) in cases {
            let (clock, k8s) = (FakeClock::new(), cluster_with_network("172.30.0.0/16"));
            setup(&k8s);
            assert_eq!(hack_dns_address_conflict(&k8s, &clock), outcome, "{name}");
            let counts = ["list_services", "delete_service", "delete_pods"].map(|c| k8s.count(c));
            assert_eq!((counts, clock.sleeps()), (calls, sleeps), "{name}");
        }
    }

    #[test]
    fn pod_deletion_always_failing() {
        let k8s = cluster_with_network("172.30.0.0/16");
        // A conflict that comes back after each delete (the fake removes it).
        let conflict = svc("testing", "conflict", "172.30.0.10");
        k8s.add_service(conflict.clone());
        k8s.fail_always("delete_pods", boom());
        struct Recreate<'a> {
            fake: FakeClock,
            k8s: &'a FakeCluster,
            svc: Service,
        }
        impl Clock for Recreate<'_> {
            fn sleep(&self, d: Duration) {
                self.fake.sleep(d);
                if self.k8s.services().is_empty() {
                    self.k8s.add_service(self.svc.clone());
                }
            }
            fn now(&self) -> std::time::Instant {
                self.fake.now()
            }
        }
        let clock = Recreate {
            fake: FakeClock::new(),
            k8s: &k8s,
            svc: conflict,
        };
        assert_eq!(
            hack_dns_address_conflict(&k8s, &clock),
            DnsFixOutcome::GaveUp
        );
        assert_eq!(k8s.count("list_services"), 45);
        assert_eq!(k8s.count("delete_service"), 45);
        assert_eq!(k8s.count("delete_pods"), 225);
    }

    #[test]
    fn spawned_on_its_own_thread() {
        let k8s = cluster_with_network("172.30.0.0/16");
        k8s.add_service(dns_default("172.30.0.10"));
        let clock = std::sync::Arc::new(FakeClock::new());
        let handle = spawn(std::sync::Arc::new(k8s.clone()), clock).unwrap();
        assert_eq!(handle.join().unwrap(), DnsFixOutcome::Done);
        assert_eq!(k8s.count("list_services"), 1);
    }
}
