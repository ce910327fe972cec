//! Go's `SetReadyState`, the invoker lookup, the install-config platform fallback (ABI
//! multi-node) and the `removeUninitializedTaint` decision: what Go's `main` decides before it
//! starts the tasks.

use anyhow::{anyhow, bail, Context, Result};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_saphyr::Spanned;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::OrLog;
use crate::clock::poll;
use crate::clock::{Clock, Stop};
use crate::controller::service::ControllerService;
use crate::kube::install_config::{
    has_valid_vsphere_credentials as overrides_have_vsphere_credentials,
    install_config_has_vsphere_server, INSTALL_CONFIG_KEY, INSTALL_CONFIG_NAME,
    INSTALL_CONFIG_NAMESPACE,
};
use crate::kube::{api_error_code, ClusterApi, NewEvent};
use crate::openshift::{
    invoker as invoker_of, INVOKER_AGENT, INVOKER_CONFIG_MAP, INVOKER_NAMESPACE,
};
use crate::service::Cluster;

/// The ready Event's name and reason.
pub(crate) const READY_EVENT_NAME: &str = "AssistedControllerIsReady";
/// How often SetReadyState tries.
pub(crate) const READY_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// SetReadyState's limit for the assisted-service invoker (the general wait timeout).
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(70 * 60);
/// SetReadyState's limit for the agent-based installer, multi-node.
pub(crate) const ABI_READY_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The version from which the agent-based installer's vSphere credentials untaint the nodes.
const ABI_VSPHERE_UNTAINT_SINCE: (u64, u64, u64) = (4, 15, 0);

/// The `AssistedControllerIsReady` Event in `namespace`, stamped `time`.
pub(crate) fn ready_event(namespace: &str, time: SystemTime) -> NewEvent {
    NewEvent {
        name: READY_EVENT_NAME.to_string(),
        reason: READY_EVENT_NAME.to_string(),
        type_: "Normal".to_string(),
        message: "Assisted controller managed to connect to assisted service and kube-apiserver \
                  and is ready to start"
            .to_string(),
        involved_namespace: namespace.to_string(),
        // The Job's name.
        involved_name: crate::openshift::CONTROLLER_JOB.to_string(),
        time,
    }
}

/// `SetReadyState`: polls every [`READY_POLL_INTERVAL`] until the service, the API and the ready Event
/// are all done, `timeout` passes or `stop` fires; returns the last cluster fetched (see the
/// module documentation).
pub(crate) fn set_ready_state(
    cluster_api: &dyn ClusterApi,
    service: &dyn ControllerService,
    clock: &dyn Clock,
    stop: &dyn Stop,
    namespace: &str,
    timeout: Duration,
) -> Option<Cluster> {
    tracing::info!("Start waiting to be ready");
    let mut last: Option<Cluster> = None;
    let result = poll(clock, stop, READY_POLL_INTERVAL, Some(timeout), || {
        match service.get_cluster(true) {
            Ok(c) => last = Some(c),
            Err(e) => {
                last = None;
                tracing::warn!("Failed to connect to assisted service: {e:#}");
                return false;
            }
        }
        tracing::info!("Connected to assisted service");
        let nodes = cluster_api.list_nodes(None);
        if nodes
            .or_warn("Failed to list nodes through the kube-apiserver")
            .is_none()
        {
            return false;
        }
        tracing::info!("Connected to kube-apiserver");
        let event = ready_event(namespace, SystemTime::now());
        match cluster_api.create_event(namespace, &event) {
            Ok(()) => {}
            Err(e) if api_error_code(&e) == Some(409) => {
                tracing::info!("Event {READY_EVENT_NAME} already exists");
            }
            Err(e) => {
                tracing::warn!("Failed to create the {READY_EVENT_NAME} event: {e:#}");
                return false;
            }
        }
        tracing::info!("Assisted controller is ready");
        true
    });
    result.or_warn("Stopped waiting to be ready");
    last
}

/// Who invoked the OpenShift installer: Go's `getInvoker`, the assisted-service when the
/// ConfigMap cannot be read.
pub(crate) fn invoker(cluster_api: &dyn ClusterApi) -> String {
    let data = cluster_api.get_config_map(INVOKER_NAMESPACE, INVOKER_CONFIG_MAP);
    let what = format_args!("Failed to get ConfigMap {INVOKER_NAMESPACE}/{INVOKER_CONFIG_MAP}");
    invoker_of(data.or_warn(what).flatten().as_ref())
}

/// The install-config YAML stored in the cluster (`kube-system/cluster-config-v1`).
pub(crate) fn read_install_config(cluster_api: &dyn ClusterApi) -> Result<String> {
    let what = format!("ConfigMap {INSTALL_CONFIG_NAMESPACE}/{INSTALL_CONFIG_NAME}");
    let data = cluster_api
        .get_config_map(INSTALL_CONFIG_NAMESPACE, INSTALL_CONFIG_NAME)
        .with_context(|| format!("getting {what}"))?
        .ok_or_else(|| anyhow!("{what} not found"))?;
    data.get(INSTALL_CONFIG_KEY)
        .cloned()
        .ok_or_else(|| anyhow!("{what} has no key {INSTALL_CONFIG_KEY}"))
}

#[derive(Deserialize)]
struct PlatformDoc {
    #[serde(default)]
    platform: Option<HashMap<Spanned<String>, IgnoredAny>>,
}

/// The platform type of an install-config YAML: the first key under `platform` in document
/// order (the map is unordered: its keys' positions give the order).
pub(crate) fn platform_of_install_config(yaml: &str) -> Result<String> {
    let doc: Option<PlatformDoc> =
        serde_saphyr::from_str(yaml).context("parsing the install-config YAML")?;
    let keys = doc.and_then(|d| d.platform).unwrap_or_default().into_keys();
    keys.min_by_key(|k| (k.referenced.line(), k.referenced.column()))
        .map(|k| k.value)
        .ok_or_else(|| anyhow!("the install-config has no platform"))
}

/// ABI multi-node without a cluster: the platform type from the install-config.
pub(crate) fn install_config_platform(cluster_api: &dyn ClusterApi) -> Result<String> {
    platform_of_install_config(&read_install_config(cluster_api)?)
}

/// An OPENSHIFT_VERSION as the vSphere check reads it: everything from the first `-` dropped,
/// `X.Y` read as `X.Y.0`, then a strict `X.Y.Z` (build metadata after `+` ignored).
pub(crate) fn parse_untaint_version(version: &str) -> Result<(u64, u64, u64)> {
    let core = version.split('-').next().unwrap_or_default();
    let core = core.split('+').next().unwrap_or_default();
    let parts: Vec<&str> = core.split('.').collect();
    let parts = match parts.len() {
        2 => vec![parts[0], parts[1], "0"],
        3 => parts,
        _ => bail!("invalid OPENSHIFT_VERSION {version:?}: want X.Y or X.Y.Z"),
    };
    let num = |s: &str| -> Result<u64> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            bail!("invalid OPENSHIFT_VERSION {version:?}: {s:?} is not a number");
        }
        s.parse()
            .map_err(|e| anyhow!("invalid OPENSHIFT_VERSION {version:?}: {e}"))
    };
    Ok((num(parts[0])?, num(parts[1])?, num(parts[2])?))
}

/// `removeUninitializedTaint` "valid vSphere credentials": from the service's `install_config_overrides` when
/// `v2GetCluster` answers (the platform must be vsphere), else from the install-config's vCenter
/// server.
pub(crate) fn has_valid_vsphere_credentials(
    cluster_api: &dyn ClusterApi,
    service: &dyn ControllerService,
) -> bool {
    match service.get_cluster(true) {
        Ok(cluster) => {
            cluster.platform_type() == "vsphere"
                && cluster
                    .install_config_overrides
                    .as_deref()
                    .is_some_and(|o| !o.is_empty() && overrides_have_vsphere_credentials(o))
        }
        Err(e) => {
            tracing::warn!(
                "Failed to get the cluster, checking the vSphere credentials in the \
                 install-config: {e:#}"
            );
            let yaml = read_install_config(cluster_api);
            let yaml = yaml.or_warn("Failed to read the install-config");
            yaml.is_some_and(|yaml| install_config_has_vsphere_server(&yaml))
        }
    }
}

/// `removeUninitializedTaint`: whether the node-status task removes the `uninitialized` taint.
pub(crate) fn remove_uninitialized_taint(
    cluster_api: &dyn ClusterApi,
    service: &dyn ControllerService,
    platform: &str,
    invoker: &str,
    openshift_version: &str,
) -> Result<bool> {
    if invoker == INVOKER_AGENT && platform == "vsphere" {
        let version = parse_untaint_version(openshift_version)?;
        if version >= ABI_VSPHERE_UNTAINT_SINCE
            && has_valid_vsphere_credentials(cluster_api, service)
        {
            tracing::info!(
                "vSphere credentials are set: the vSphere cloud controller removes the \
                 uninitialized taint"
            );
            return Ok(false);
        }
    }
    Ok(matches!(platform, "nutanix" | "vsphere"))
}

/// What Go's `main` decides before the tasks start.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ReadyPhase {
    /// The agent-based installer on a single node: no ready Event, straight to the ABI
    /// completion wait (the ABI single-node branch).
    AbiSingleNode,
    /// Every other case.
    Ready(Box<Readiness>),
}

/// The result of SetReadyState and what follows from it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Readiness {
    pub(crate) invoker: String,
    /// The cluster of the last GetCluster, if it answered.
    pub(crate) cluster: Option<Cluster>,
    /// `platform.type` of the cluster, or (ABI without a cluster) of the install-config; "" when
    /// neither is known.
    pub(crate) platform: String,
    pub(crate) remove_uninitialized_taint: bool,
}

/// The invoker, then SetReadyState with the invoker's limit, the platform
/// and the untaint decision. The assisted-service invoker without a cluster is a startup error
/// (exit 1, the Job retries); the agent-based installer then falls back to the install-config.
pub(crate) fn ready_phase(
    cluster_api: &dyn ClusterApi,
    service: &dyn ControllerService,
    clock: &dyn Clock,
    stop: &dyn Stop,
    namespace: &str,
    control_plane_count: i64,
    openshift_version: &str,
) -> Result<ReadyPhase> {
    let invoker = invoker(cluster_api);
    let abi = invoker == INVOKER_AGENT;
    if abi && control_plane_count == 1 {
        tracing::warn!("Agent-based installer on a single node: not waiting to be ready");
        return Ok(ReadyPhase::AbiSingleNode);
    }
    let timeout = if abi {
        ABI_READY_TIMEOUT
    } else {
        READY_TIMEOUT
    };
    let cluster = set_ready_state(cluster_api, service, clock, stop, namespace, timeout);
    let platform = match &cluster {
        Some(c) => c.platform_type().to_string(),
        None if abi => {
            tracing::warn!("No cluster from the assisted service, reading the platform from the install-config");
            let platform = install_config_platform(cluster_api);
            let what = "Failed to get the platform from the install-config";
            platform.or_warn(what).unwrap_or_default()
        }
        None => bail!(
            "failed to connect to the assisted service and the kube-apiserver within {} minutes",
            timeout.as_secs() / 60
        ),
    };
    let remove_uninitialized_taint =
        remove_uninitialized_taint(cluster_api, service, &platform, &invoker, openshift_version)?;
    Ok(ReadyPhase::Ready(Box::new(Readiness {
        invoker,
        cluster,
        platform,
        remove_uninitialized_taint,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{FakeClock, NeverStop};
    use crate::controller::service::testing::{MemoryService, ServiceCall};
    use crate::controller::testing::boom;
    use crate::kube::testing::FakeCluster;
    use crate::kube::ApiError;
    use crate::service::Platform;
    use std::sync::Arc;

    const NS: &str = "assisted-installer";

    fn fakes() -> (FakeCluster, MemoryService, Arc<FakeClock>) {
        let clock = Arc::new(FakeClock::new());
        let service = MemoryService::new("c-1", clock.clone());
        (FakeCluster::new(), service, clock)
    }

    fn install_config(k8s: &FakeCluster, yaml: &str) {
        k8s.set_config_map(
            "kube-system",
            "cluster-config-v1",
            &[("install-config", yaml)],
        );
    }

    #[test]
    fn set_ready_state_retries_each_step_until_the_event_is_created() {
        let (k8s, svc, clock) = fakes();
        svc.fail("v2GetCluster", 1, 500);
        k8s.fail_next("list_nodes", boom());
        k8s.fail_next("create_event", boom());
        let got = set_ready_state(&k8s, &svc, &*clock, &NeverStop, NS, READY_TIMEOUT);
        assert_eq!(got.map(|c| c.id), Some("c-1".to_string()));
        assert_eq!(
            svc.calls(),
            vec![
                ServiceCall::GetCluster {
                    exclude_hosts: true
                };
                4
            ]
        );
        assert_eq!(
            k8s.take_calls(),
            [
                "list_nodes(-)",
                "list_nodes(-)",
                "create_event(assisted-installer, AssistedControllerIsReady)",
                "list_nodes(-)",
                "create_event(assisted-installer, AssistedControllerIsReady)",
            ]
        );
        assert_eq!(clock.sleeps(), vec![READY_POLL_INTERVAL; 3]);
        let events = k8s.events();
        assert_eq!(events.len(), 1);
        let (ns, e) = &events[0];
        assert_eq!(ns, NS);
        assert_eq!(e.name, "AssistedControllerIsReady");
        assert_eq!(e.reason, "AssistedControllerIsReady");
        assert_eq!(e.type_, "Normal");
        assert_eq!(e.involved_namespace, NS);
        assert_eq!(e.involved_name, "assisted-installer-controller");
        assert_eq!(
            e.message,
            "Assisted controller managed to connect to assisted service and kube-apiserver \
             and is ready to start"
        );
        // A restarted controller: the Event is there already (409), which is success at once.
        let again = set_ready_state(&k8s, &svc, &*clock, &NeverStop, NS, READY_TIMEOUT);
        assert!(again.is_some());
        assert_eq!(k8s.count("create_event"), 1);
        assert_eq!(k8s.events().len(), 1);
        assert_eq!(clock.sleeps().len(), 3, "no new wait");
    }

    #[test]
    fn the_limit_returns_the_last_cluster_or_none() {
        // The Event never gets created: the cluster of the last GetCluster comes back anyway.
        let (k8s, svc, clock) = fakes();
        k8s.fail_always("create_event", ApiError::new(403, "Forbidden", "no"));
        let got = set_ready_state(&k8s, &svc, &*clock, &NeverStop, NS, ABI_READY_TIMEOUT);
        assert!(got.is_some());
        assert_eq!(svc.calls().len(), 300, "every second for 5 minutes");
        assert_eq!(clock.elapsed(), ABI_READY_TIMEOUT);
        // The last GetCluster failed: none, though earlier ones answered.
        struct FailLater {
            fake: FakeClock,
            svc: MemoryService,
        }
        impl Clock for FailLater {
            fn sleep(&self, d: Duration) {
                self.fake.sleep(d);
                if self.fake.sleeps().len() == 2 {
                    self.svc.fail("v2GetCluster", 100, 500);
                }
            }
            fn now(&self) -> std::time::Instant {
                self.fake.now()
            }
        }
        let (k8s, svc, _) = fakes();
        k8s.fail_always("list_nodes", boom());
        let clock = FailLater {
            fake: FakeClock::new(),
            svc: svc.clone(),
        };
        let got = set_ready_state(&k8s, &svc, &clock, &NeverStop, NS, Duration::from_secs(5));
        assert!(got.is_none());
        assert_eq!(svc.calls().len(), 5, "at 0, 1, 2, 3 and 4 s");
        assert_eq!(k8s.count("list_nodes"), 2, "after the two answers only");
    }

    #[test]
    fn a_stop_ends_the_wait() {
        let (k8s, svc, clock) = fakes();
        svc.fail("v2GetCluster", 100, 500);
        let stop = crate::image::Cancel::new();
        stop.cancel();
        let got = set_ready_state(&k8s, &svc, &*clock, &stop, NS, READY_TIMEOUT);
        assert!(got.is_none());
        assert_eq!(svc.calls().len(), 1, "one round even when stopped");
    }

    #[test]
    fn the_invoker_from_the_install_manifests_config_map() {
        let k8s = FakeCluster::new();
        assert_eq!(invoker(&k8s), "assisted-service", "no ConfigMap");
        k8s.fail_next("get_config_map", boom());
        assert_eq!(invoker(&k8s), "assisted-service", "GET error");
        k8s.set_config_map("openshift-config", "openshift-install-manifests", &[]);
        assert_eq!(invoker(&k8s), "", "no key");
        set_invoker(&k8s, "agent-installer");
        assert_eq!(invoker(&k8s), "agent-installer");
        assert_eq!(
            k8s.take_calls(),
            vec!["get_config_map(openshift-config, openshift-install-manifests)"; 4]
        );
    }

    #[test]
    fn the_platform_is_the_first_key_under_platform() {
        let yaml = "apiVersion: v1\nplatform:\n  vsphere:\n    vcenters: []\n  none: {}\n";
        assert_eq!(platform_of_install_config(yaml).unwrap(), "vsphere");
        let yaml = "platform:\n  none: {}\n  baremetal: {}\n";
        assert_eq!(platform_of_install_config(yaml).unwrap(), "none");
        assert!(platform_of_install_config("apiVersion: v1\n").is_err());
        assert!(platform_of_install_config("platform: {}\n").is_err());
        assert!(platform_of_install_config("platform: [\n").is_err());
        let k8s = FakeCluster::new();
        assert!(install_config_platform(&k8s).is_err(), "no ConfigMap");
        install_config(&k8s, "platform:\n  baremetal:\n    apiVIPs: []\n");
        assert_eq!(install_config_platform(&k8s).unwrap(), "baremetal");
        assert_eq!(
            k8s.take_calls(),
            vec!["get_config_map(kube-system, cluster-config-v1)"; 2]
        );
    }

    #[test]
    fn versions_as_the_vsphere_check_reads_them() {
        assert_eq!(parse_untaint_version("4.15").unwrap(), (4, 15, 0));
        assert_eq!(parse_untaint_version("4.15.2").unwrap(), (4, 15, 2));
        assert_eq!(parse_untaint_version("4.14.0-rc0").unwrap(), (4, 14, 0));
        assert_eq!(parse_untaint_version("4.16-ec.1").unwrap(), (4, 16, 0));
        for bad in ["", "4", "v4.15", "4.x", "4.15.0.1", "latest"] {
            assert!(parse_untaint_version(bad).is_err(), "{bad:?}");
        }
    }

    const VALID: &str = r#"{"platform":{"vsphere":{"vcenters":[{"server":"vc.example.com","user":"admin","password":"secret"}]}}}"#;
    const PLACEHOLDERS: &str = r#"{"platform":{"vsphere":{"vcenters":[{"server":"vcenterplaceholder","user":"usernameplaceholder","password":"passwordplaceholder"}]}}}"#;

    fn with_platform(svc: &MemoryService, platform: &str, overrides: Option<&str>) {
        svc.update_cluster(|c| {
            c.platform = Some(Platform {
                type_: platform.to_string(),
            });
            c.install_config_overrides = overrides.map(str::to_string);
        });
    }

    /// The overrides themselves are read by `kube::install_config` (tested there, with the
    /// deprecated fields and empty values); here, where they come from.
    #[test]
    fn vsphere_credentials_from_the_service() {
        let (k8s, svc, _) = fakes();
        for (platform, overrides, want) in [
            ("vsphere", Some(VALID), true),
            ("vsphere", Some(PLACEHOLDERS), false),
            ("vsphere", Some(""), false),
            ("vsphere", None, false),
            ("baremetal", Some(VALID), false),
        ] {
            with_platform(&svc, platform, overrides);
            assert_eq!(
                has_valid_vsphere_credentials(&k8s, &svc),
                want,
                "{platform} {overrides:?}"
            );
        }
        assert!(k8s.calls().is_empty(), "no install-config read");
    }

    #[test]
    fn vsphere_credentials_from_the_install_config_when_the_service_fails() {
        let (k8s, svc, _) = fakes();
        let ic = |server: &str| {
            format!(
                "platform:\n  vsphere:\n    vcenters:\n    - server: {server}\n      \
                 user: admin\n      password: secret\n"
            )
        };
        install_config(&k8s, &ic("vc.example.com"));
        svc.fail("v2GetCluster", 1, 500);
        assert!(has_valid_vsphere_credentials(&k8s, &svc));
        install_config(&k8s, &ic("vcenterplaceholder"));
        svc.fail("v2GetCluster", 1, 500);
        assert!(!has_valid_vsphere_credentials(&k8s, &svc));
        svc.fail("v2GetCluster", 1, 500);
        k8s.fail_next("get_config_map", boom());
        assert!(!has_valid_vsphere_credentials(&k8s, &svc));
        assert_eq!(k8s.count("get_config_map"), 3);
    }

    #[test]
    fn remove_uninitialized_taint_table() {
        let (k8s, svc, _) = fakes();
        let decide = |platform: &str, invoker: &str, version: &str| {
            remove_uninitialized_taint(&k8s, &svc, platform, invoker, version).unwrap()
        };
        // Not ABI: by platform only, whatever the version says.
        assert!(decide("nutanix", "assisted-service", "4.17"));
        assert!(decide("vsphere", "assisted-service", "4.17"));
        assert!(decide("vsphere", "", "garbage"));
        for p in ["none", "baremetal", "", "external"] {
            assert!(!decide(p, "assisted-service", "4.17"), "{p}");
            assert!(!decide(p, "agent-installer", "4.17"), "{p}");
        }
        assert!(svc.calls().is_empty());
        // ABI on vsphere.
        with_platform(&svc, "vsphere", Some(PLACEHOLDERS));
        assert!(decide("vsphere", "agent-installer", "4.14.0-rc0"));
        assert!(decide("vsphere", "agent-installer", "4.15.0"));
        with_platform(&svc, "vsphere", Some(VALID));
        assert!(decide("vsphere", "agent-installer", "4.14.0"));
        assert!(!decide("vsphere", "agent-installer", "4.15"));
        assert!(!decide("vsphere", "agent-installer", "4.16.3-rc.1"));
        assert!(decide("nutanix", "agent-installer", "4.16"));
        // Go panics on an unparsable version here; an error in the port.
        let e =
            remove_uninitialized_taint(&k8s, &svc, "vsphere", "agent-installer", "x").unwrap_err();
        assert!(e.to_string().contains("OPENSHIFT_VERSION"), "{e:#}");
    }

    fn set_invoker(k8s: &FakeCluster, invoker: &str) {
        k8s.set_config_map(
            "openshift-config",
            "openshift-install-manifests",
            &[("invoker", invoker)],
        );
    }

    /// `ready_phase` for 3 masters on `version`, which must come out Ready.
    fn ready(
        k8s: &FakeCluster,
        svc: &MemoryService,
        clock: &FakeClock,
        version: &str,
    ) -> Readiness {
        match ready_phase(k8s, svc, clock, &NeverStop, NS, 3, version).unwrap() {
            ReadyPhase::Ready(r) => *r,
            got => panic!("{got:?}"),
        }
    }

    #[test]
    fn ready_phase_assisted_service() {
        let (k8s, svc, clock) = fakes();
        with_platform(&svc, "nutanix", None);
        let r = ready(&k8s, &svc, &clock, "4.17");
        assert_eq!(r.invoker, "assisted-service");
        assert_eq!(r.platform, "nutanix");
        assert!(r.remove_uninitialized_taint);
        assert_eq!(r.cluster.unwrap().id, "c-1");
        assert_eq!(k8s.events().len(), 1);
        // No cluster in 70 minutes: a startup error, after 4200 tries.
        let (k8s, svc, clock) = fakes();
        svc.fail("v2GetCluster", 5000, 500);
        let e = ready_phase(&k8s, &svc, &*clock, &NeverStop, NS, 3, "4.17").unwrap_err();
        assert!(e.to_string().contains("within 70 minutes"), "{e:#}");
        assert_eq!(svc.calls().len(), 4200);
        assert_eq!(clock.elapsed(), READY_TIMEOUT);
    }

    #[test]
    fn ready_phase_abi_single_node_sends_no_event() {
        let (k8s, svc, clock) = fakes();
        set_invoker(&k8s, "agent-installer");
        let got = ready_phase(&k8s, &svc, &*clock, &NeverStop, NS, 1, "4.17").unwrap();
        assert_eq!(got, ReadyPhase::AbiSingleNode);
        assert!(svc.calls().is_empty());
        assert_eq!(k8s.count("create_event"), 0);
    }

    #[test]
    fn ready_phase_abi_multi_node_falls_back_to_the_install_config() {
        let (k8s, svc, clock) = fakes();
        set_invoker(&k8s, "agent-installer");
        svc.fail("v2GetCluster", 5000, 500);
        let ic = "platform:\n  vsphere:\n    vcenters:\n    - server: vc.example.com\n";
        install_config(&k8s, ic);
        let r = ready(&k8s, &svc, &clock, "4.16");
        let calls = svc.calls().len();
        assert_eq!(calls, 300 + 1, "5 minutes, then the credentials check");
        assert_eq!(clock.elapsed(), ABI_READY_TIMEOUT);
        assert_eq!(r.cluster, None);
        assert_eq!(r.platform, "vsphere");
        // The service is down, the install-config names a real vCenter: the cloud controller
        // untaints.
        assert!(!r.remove_uninitialized_taint);
        // An install-config that cannot be read is only a warning.
        let (k8s, svc, clock) = fakes();
        set_invoker(&k8s, "agent-installer");
        svc.fail("v2GetCluster", 5000, 500);
        let r = ready(&k8s, &svc, &clock, "4.16");
        assert_eq!(r.platform, "");
        assert!(!r.remove_uninitialized_taint);
    }
}
