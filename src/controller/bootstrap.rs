//! The controller's connections, in Go's order, as a library function over trait objects so
//! that the order of its effects is tested with the fakes: the Kubernetes client, the proxy
//! environment from the cluster's Proxy status, then the service client, built only once the
//! proxy environment is set, because the REST client reads `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY`
//! when it is built. Every failure is a startup error (exit 1: the Job restarts the container).
//!
//! [`connect`] takes the two clients as constructors and the environment as a setter;
//! [`kube_cluster`], [`service_client`] and [`set_process_env`] are the real ones.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::config::ControllerConfig;
use super::service::{ControllerClient, ControllerService};
use crate::clock::Clock;
use crate::config::cluster_hosts::ClusterHost;
use crate::kube::client::{KubeClient, BOOTSTRAP_KUBECONFIG};
use crate::kube::dry::DryCluster;
use crate::kube::ClusterApi;
use crate::openshift::PROXY_NAME;
use crate::service::{ClientConfig, ClientRetry};

/// The variables set from the cluster Proxy.
pub(crate) const PROXY_VARIABLES: [&str; 3] = ["HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"];

/// The proxy variables for the commands the controller runs (`oc`, `bash`): their values at
/// startup, before the cluster Proxy sets them, "" for unset (a Go client reads "" as no proxy).
/// Go's executor snapshots the environment before that, so its children never see the cluster
/// proxy; `oc` then reaches the API server directly, as the controller's own client does.
pub(crate) fn command_proxy_snapshot(
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    PROXY_VARIABLES
        .iter()
        .map(|name| (name.to_string(), env(name).unwrap_or_default()))
        .collect()
}

/// The Kubernetes client, the proxy environment, then the service client.
pub(crate) fn connect(
    build_cluster: impl FnOnce() -> Result<Arc<dyn ClusterApi>>,
    set_env: &mut dyn FnMut(&str, &str),
    build_service: impl FnOnce() -> Result<Arc<dyn ControllerService>>,
) -> Result<(Arc<dyn ClusterApi>, Arc<dyn ControllerService>)> {
    let cluster = build_cluster().context("creating the Kubernetes client")?;
    // Each non-empty field of Proxy `cluster` sets its variable; the others are left as they are.
    let proxy = cluster
        .get_proxy(PROXY_NAME)
        .with_context(|| format!("getting the cluster proxy settings (Proxy {PROXY_NAME})"))?;
    let values = [&proxy.http_proxy, &proxy.https_proxy, &proxy.no_proxy];
    for (name, value) in PROXY_VARIABLES.into_iter().zip(values) {
        if !value.is_empty() {
            tracing::info!("Setting {name} from the cluster proxy settings");
            set_env(name, value);
        }
    }
    let service = build_service().context("creating the assisted-service client")?;
    Ok((cluster, service))
}

/// The real Kubernetes client: the SNO kubeconfig if present, else the pod's service account in
/// `service_account_dir`; in dry mode, the pretend cluster of `dry_hosts` (parsed at startup),
/// with no API server.
pub(crate) fn kube_cluster(
    config: &ControllerConfig,
    service_account_dir: &Path,
    dry_hosts: &[ClusterHost],
) -> Result<Arc<dyn ClusterApi>> {
    if config.dry_enable {
        tracing::info!(
            "dry mode: a pretend Kubernetes API over {} hosts",
            dry_hosts.len()
        );
        return Ok(Arc::new(DryCluster::new(dry_hosts.to_vec())));
    }
    Ok(Arc::new(KubeClient::for_controller(
        Path::new(BOOTSTRAP_KUBECONFIG),
        service_account_dir,
    )?))
}

/// The REST client's configuration: the controller's retry budget, and `CA_CERT_PATH` only when
/// certificates are verified (Go ignores it otherwise, even when unreadable) and not "".
pub(crate) fn service_config(config: &ControllerConfig) -> ClientConfig {
    let ca = !config.skip_cert_verification && !config.ca_cert_path.is_empty();
    ClientConfig {
        url: config.inventory_url.clone(),
        token: config.pull_secret_token.clone(),
        insecure: config.skip_cert_verification,
        cacert: ca.then(|| PathBuf::from(&config.ca_cert_path)),
        retry: ClientRetry::controller(),
    }
}

/// The real service client: the REST client for `CLUSTER_ID`.
pub(crate) fn service_client(
    config: &ControllerConfig,
    clock: Arc<dyn Clock>,
) -> Result<Arc<dyn ControllerService>> {
    let client = ControllerClient::new(service_config(config), &config.cluster_id, clock)?;
    Ok(Arc::new(client))
}

/// Sets a variable of the process environment (before any thread that reads it starts).
pub(crate) fn set_process_env(name: &str, value: &str) {
    std::env::set_var(name, value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::controller::service::testing::MemoryService;
    use crate::kube::testing::FakeCluster;
    use crate::kube::{ApiError, ProxyStatus};
    use anyhow::{anyhow, bail};
    use std::sync::Mutex;

    #[test]
    fn commands_keep_the_proxy_variables_of_before_the_cluster_proxy() {
        let env = |name: &str| (name == "NO_PROXY").then(|| ".example.com".to_string());
        let snapshot = command_proxy_snapshot(&env);
        let names: Vec<_> = snapshot.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            names,
            ["HTTP_PROXY=", "HTTPS_PROXY=", "NO_PROXY=.example.com"]
        );
    }

    /// Connects over `k8s`, the steps (each client built, each variable set) in order, and the
    /// error.
    fn connect_steps(k8s: &FakeCluster, service: Result<()>) -> (Option<String>, Vec<String>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (l1, l2, l3, k) = (log.clone(), log.clone(), log.clone(), k8s.clone());
        let connected = connect(
            move || {
                l1.lock().unwrap().push("cluster".to_string());
                Ok(Arc::new(k))
            },
            &mut |name, value| l2.lock().unwrap().push(format!("{name}={value}")),
            move || {
                l3.lock().unwrap().push("service".to_string());
                service?;
                Ok(Arc::new(MemoryService::new(
                    "c-1",
                    Arc::new(FakeClock::new()),
                )))
            },
        );
        let steps = log.lock().unwrap().clone();
        (connected.err().map(|e| format!("{e:#}")), steps)
    }

    #[test]
    fn the_proxy_env_is_set_before_the_service_client_is_built() {
        let k8s = FakeCluster::new();
        k8s.set_proxy(ProxyStatus {
            http_proxy: "http://proxy:3128".into(),
            https_proxy: String::new(),
            no_proxy: ".cluster.local,10.0.0.0/8".into(),
        });
        let (err, steps) = connect_steps(&k8s, Ok(()));
        let want = [
            "cluster",
            "HTTP_PROXY=http://proxy:3128",
            "NO_PROXY=.cluster.local,10.0.0.0/8",
            "service",
        ];
        assert_eq!((err, steps), (None, want.map(String::from).to_vec()));
        assert_eq!(k8s.take_calls(), ["get_proxy(cluster)"]);
        // An empty proxy status sets nothing.
        let (err, steps) = connect_steps(&FakeCluster::new(), Ok(()));
        assert_eq!(
            (err, steps),
            (None, vec!["cluster".into(), "service".into()])
        );
    }

    #[test]
    fn each_failure_is_a_startup_error_that_stops_there() {
        let k8s = FakeCluster::new();
        k8s.fail_next("get_proxy", ApiError::new(403, "Forbidden", "no"));
        let (err, steps) = connect_steps(&k8s, Ok(()));
        let want = "getting the cluster proxy settings (Proxy cluster)";
        assert!(err.unwrap().starts_with(want));
        assert_eq!(steps, ["cluster"]);
        let (err, _) = connect_steps(&FakeCluster::new(), Err(anyhow!("bad CA file")));
        let want = "creating the assisted-service client: bad CA file";
        assert_eq!(err.as_deref(), Some(want));
        let connected = connect(
            || bail!("no in-cluster config"),
            &mut |_, _| panic!("no env"),
            || panic!("no service"),
        );
        let e = format!("{:#}", connected.err().unwrap());
        assert_eq!(e, "creating the Kubernetes client: no in-cluster config");
    }

    fn config(extra: &[(&str, &str)]) -> ControllerConfig {
        let env = |k: &str| match k {
            "CLUSTER_ID" => Some("c-1".to_string()),
            "INVENTORY_URL" => Some("https://svc:8090".to_string()),
            "OPENSHIFT_VERSION" => Some("4.17".to_string()),
            _ => extra.iter().find(|e| e.0 == k).map(|e| e.1.to_string()),
        };
        ControllerConfig::from_env(&env).unwrap()
    }

    /// The token never shows in the configuration's `Debug`; `CA_CERT_PATH` is read only when
    /// certificates are verified (an unreadable file is then fatal, Go's exit 1) and "" is none.
    #[test]
    fn the_service_client_from_the_environment() {
        let missing = "/nonexistent/ca.pem";
        let client = |extra: &[(&str, &str)]| {
            let mut config = config(extra);
            config.pull_secret_token = "super-secret-token".into();
            let s = service_config(&config);
            let text = format!("{s:?}");
            assert!(
                !text.contains("super-secret") && text.contains("<SECRET>"),
                "{text}"
            );
            assert_eq!(
                (s.url.as_str(), s.token.as_str(), s.retry),
                (
                    "https://svc:8090",
                    "super-secret-token",
                    ClientRetry::controller()
                )
            );
            let built = service_client(&config, Arc::new(FakeClock::new()));
            (s.insecure, s.cacert, built.err().map(|e| format!("{e:#}")))
        };
        let (insecure, cacert, err) = client(&[("CA_CERT_PATH", missing)]);
        assert_eq!((insecure, cacert), (false, Some(PathBuf::from(missing))));
        assert!(err.unwrap().contains(missing));
        let skip = ("SKIP_CERT_VERIFICATION", "true");
        assert_eq!(
            client(&[("CA_CERT_PATH", missing), skip]),
            (true, None, None)
        );
        assert_eq!(client(&[("CA_CERT_PATH", "")]), (false, None, None));
        assert_eq!(client(&[]), (false, None, None));
    }

    #[test]
    fn dry_mode_builds_the_pretend_cluster_of_the_dry_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("m0.rebooted");
        std::fs::write(&marker, "").unwrap();
        let hosts = [ClusterHost {
            hostname: "m0".into(),
            ip: "192.0.2.10".into(),
            reboot_marker_path: marker,
        }];
        let config = config(&[("DRY_ENABLE", "true")]);
        // No API server behind it: the proxy read answers at once.
        let cluster = kube_cluster(&config, Path::new("/nonexistent"), &hosts).unwrap();
        let proxy = cluster.get_proxy(PROXY_NAME).unwrap();
        assert_eq!(proxy, ProxyStatus::default());
        // The pretend MCS log names the host (its node shows up once the log was read).
        let (ns, selector) = (
            crate::openshift::MCS_NAMESPACE,
            crate::controller::tasks::nodes::MCS_SELECTOR,
        );
        let mcs = cluster.list_pods(ns, Some(selector), None).unwrap();
        assert_eq!(mcs.len(), 1);
        let log = cluster.pod_log(ns, &mcs[0].name, None).unwrap();
        assert!(log.contains("192.0.2.10:"), "{log}");
        let nodes = cluster.list_nodes(None).unwrap();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].name, "m0");
    }
}
