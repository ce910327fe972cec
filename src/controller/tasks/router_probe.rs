//! The SNO router probe of the final log upload (`UploadLogs`): on a single-node cluster whose
//! install failed, probe the ingress canary and the router's health endpoint every 30 s for up to
//! 70 min, and only log what they answer. Go's goroutine dies with the process; ours stops once
//! the summary upload is over.

use std::time::Duration;

use anyhow::{Context, Result};

use super::OrLog;
use crate::clock::poll;
use crate::clock::{Clock, Stop};
use crate::controller::service::ControllerService;

pub(crate) const ROUTER_PROBE_PERIOD: Duration = Duration::from_secs(30);
pub(crate) const ROUTER_PROBE_WINDOW: Duration = Duration::from_secs(70 * 60);
pub(crate) const HTTP_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP GET that returns the status and the body (TLS verification off).
pub(crate) trait HttpProbe: Send + Sync {
    fn get(&self, url: &str) -> Result<(u16, String)>;
}

/// [`HttpProbe`] over reqwest, with a 10 s timeout and no certificate check.
pub(crate) struct ReqwestProbe {
    client: reqwest::blocking::Client,
}

impl ReqwestProbe {
    pub(crate) fn new() -> Result<ReqwestProbe> {
        let client = reqwest::blocking::Client::builder()
            .tls_danger_accept_invalid_certs(true)
            .timeout(HTTP_PROBE_TIMEOUT)
            .build()
            .context("building the router probe's HTTP client")?;
        Ok(ReqwestProbe { client })
    }
}

impl HttpProbe for ReqwestProbe {
    fn get(&self, url: &str) -> Result<(u16, String)> {
        let resp = self
            .client
            .get(url)
            .send()
            .with_context(|| format!("GET {url}"))?;
        let status = resp.status().as_u16();
        let body = resp.text().with_context(|| format!("reading {url}"))?;
        Ok((status, body))
    }
}

fn log_probe(probe: &dyn HttpProbe, url: &str) {
    if let Some((status, body)) = probe.get(url).or_warn(format_args!("router probe {url}")) {
        tracing::info!("router probe {url}: {status} {body}");
    }
}

/// Rounds every `period` from now, for `window` or until `stop` fires.
pub(crate) fn run_router_probe(
    clock: &dyn Clock,
    stop: &dyn Stop,
    service: &dyn ControllerService,
    probe: &dyn HttpProbe,
    period: Duration,
    window: Duration,
) {
    // The local address of a UDP "connection" to 8.8.8.8:80, or `localhost`.
    let ip = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("8.8.8.8:80")?;
            s.local_addr()
        })
        .map_or_else(|_| "localhost".to_string(), |a| a.ip().to_string());
    let mut cluster = None;
    // Each round learns the cluster's name and domain until known (a failure skips the round),
    // then probes the canary and the router.
    let _ = poll(clock, stop, period, Some(window), || {
        if cluster.is_none() {
            let got = service.get_cluster(true);
            let Some(c) = got.or_warn("router probe: getting the cluster") else {
                return false;
            };
            cluster = Some((c.name, c.base_dns_domain));
        }
        if let Some((name, domain)) = cluster.as_ref() {
            let canary = "https://canary-openshift-ingress-canary.apps";
            log_probe(probe, &format!("{canary}.{name}.{domain}/health"));
        }
        log_probe(
            probe,
            &format!("http://{ip}/_______internal_router_healthz"),
        );
        false
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{FakeClock, NeverStop};
    use crate::controller::service::testing::MemoryService;
    use crate::controller::testing::Urls;
    use std::sync::Arc;

    #[test]
    fn rounds_learn_the_cluster_once_and_probe_both_urls() {
        let clock = FakeClock::new();
        let svc = MemoryService::new("cid", Arc::new(FakeClock::new()));
        svc.update_cluster(|c| {
            c.name = "sno".into();
            c.base_dns_domain = "example.com".into();
        });
        svc.fail("v2GetCluster", 1, 500);
        let urls = Urls::default();
        run_router_probe(
            &clock,
            &NeverStop,
            &svc,
            &urls,
            ROUTER_PROBE_PERIOD,
            Duration::from_secs(90),
        );
        // Rounds at 0 (GetCluster fails: nothing probed), 30 and 60 s.
        assert_eq!(svc.operations(), ["v2GetCluster", "v2GetCluster"]);
        let urls = urls.0.lock().unwrap().clone();
        assert_eq!(urls.len(), 4);
        assert_eq!(
            urls[0],
            "https://canary-openshift-ingress-canary.apps.sno.example.com/health"
        );
        assert!(urls[1].starts_with("http://"), "{}", urls[1]);
        assert!(urls[1].ends_with("/_______internal_router_healthz"));
    }
}
