use std::time::UNIX_EPOCH;

use serde_json::json;

use super::*;
use crate::clock::FakeClock;
use crate::service::OperatorStatus;

const CLUSTER: &str = "3f8e9d2c-1b4a-4c5d-8e6f-7a8b9c0d1e2f";

fn op(name: &str, status: &str) -> MonitoredOperator {
    MonitoredOperator {
        name: name.into(),
        status: status.into(),
        operator_type: "builtin".into(),
        ..MonitoredOperator::default()
    }
}

#[test]
fn report_renames_ocs_to_odf_and_omits_empty_fields() {
    let report = OperatorMonitorReport {
        name: "ocs".into(),
        status: Some(OperatorStatus::Progressing),
        ..OperatorMonitorReport::default()
    };
    let body = serde_json::to_value(wire_report(&report)).unwrap();
    assert_eq!(body, json!({"name": "odf", "status": "progressing"}));
    let full = OperatorMonitorReport {
        name: "console".into(),
        version: "4.18.0".into(),
        status: Some(OperatorStatus::Available),
        status_info: "All is well".into(),
    };
    let body = serde_json::to_value(wire_report(&full)).unwrap();
    assert_eq!(
        body,
        json!({"name": "console", "version": "4.18.0", "status": "available", "status_info": "All is well"})
    );
    for name in ["odf", "ocs-operator", "OCS", "lso"] {
        let r = OperatorMonitorReport {
            name: name.into(),
            ..OperatorMonitorReport::default()
        };
        assert_eq!(wire_report(&r).name, name);
    }
    assert_eq!(
        serde_json::to_string(&OperatorMonitorReport::default()).unwrap(),
        "{}"
    );
}

#[test]
fn completion_bodies() {
    let ok = CompletionParams {
        is_success: true,
        ..CompletionParams::default()
    };
    assert_eq!(
        serde_json::to_string(&ok).unwrap(),
        r#"{"is_success":true}"#
    );
    let mut data = serde_json::Map::new();
    data.insert(
        "CLUSTER_OPERATORS_REPORT".into(),
        json!([{"name": "console", "status": "failed", "status_info": "down"}]),
    );
    let failed = CompletionParams {
        is_success: false,
        error_info: "Stopped waiting for router ca data: context canceled".into(),
        data: Some(data),
    };
    assert_eq!(
        serde_json::to_value(&failed).unwrap(),
        json!({
            "is_success": false,
            "error_info": "Stopped waiting for router ca data: context canceled",
            "data": {"CLUSTER_OPERATORS_REPORT": [{"name": "console", "status": "failed", "status_info": "down"}]}
        })
    );
    let no_data = CompletionParams {
        data: None,
        ..failed
    };
    assert!(serde_json::to_value(&no_data)
        .unwrap()
        .get("data")
        .is_none());
}

#[test]
fn finalizing_and_logs_bodies() {
    let body = ClusterFinalizingProgress {
        finalizing_stage: FinalizingStage::WaitingForOlmOperatorsCsvInitialization,
    };
    assert_eq!(
        serde_json::to_string(&body).unwrap(),
        r#"{"finalizing_stage":"Waiting for olm operators csv initialization"}"#
    );
    // The ingress CA goes as a JSON string.
    assert_eq!(
        serde_json::to_string(&"-----BEGIN CERTIFICATE-----\nMII\n").unwrap(),
        r#""-----BEGIN CERTIFICATE-----\nMII\n""#
    );
}

#[test]
fn reboots_event_body() {
    let event = RebootsEvent {
        cluster_id: CLUSTER.into(),
        host_id: "h".into(),
        infra_env_id: "ie".into(),
        node_name: "master-0".into(),
        reboots: 2,
    };
    assert_eq!(
        event.message(),
        "Node master-0 has been rebooted 2 times before completing installation"
    );
    let t = UNIX_EPOCH + Duration::from_secs(1_795_462_544);
    assert_eq!(
        serde_json::to_value(event.params(t)).unwrap(),
        json!({
            "cluster_id": CLUSTER, "host_id": "h", "infra_env_id": "ie",
            "name": "reboots_for_node", "category": "user", "severity": "info",
            "message": "Node master-0 has been rebooted 2 times before completing installation",
            "event_time": "2026-11-23T19:35:44Z"
        })
    );
    let no_ids = RebootsEvent {
        cluster_id: String::new(),
        ..event
    };
    assert!(serde_json::to_value(no_ids.params(t))
        .unwrap()
        .get("cluster_id")
        .is_none());
}

#[test]
fn rfc3339_dates() {
    let at = |s: u64| rfc3339(UNIX_EPOCH + Duration::from_secs(s));
    assert_eq!(at(0), "1970-01-01T00:00:00Z");
    assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(at(4_107_542_399), "2100-02-28T23:59:59Z");
    assert_eq!(at(4_107_542_400), "2100-03-01T00:00:00Z");
    assert_eq!(
        rfc3339(UNIX_EPOCH - Duration::from_secs(86_400)),
        "1969-12-31T00:00:00Z"
    );
}

/// A fetch that counts its calls and returns the list it is given.
fn counting(
    calls: &std::cell::Cell<u32>,
    list: Vec<MonitoredOperator>,
) -> impl FnOnce() -> Result<Vec<MonitoredOperator>> + '_ {
    move || {
        calls.set(calls.get() + 1);
        Ok(list)
    }
}

#[test]
fn cache_serves_for_20_seconds_without_extending() {
    let clock = FakeClock::new();
    let cache = OperatorsCache::default();
    let calls = std::cell::Cell::new(0);
    let a = vec![op("console", "progressing")];
    let b = vec![op("console", "available")];

    // Empty cache: fetched even when asked for the cache.
    let got = cache
        .fetch_through(&clock, CLUSTER, true, counting(&calls, a.clone()))
        .unwrap();
    assert_eq!((got, calls.get()), (a.clone(), 1));
    // Read at 10 s and 19.999 s: served; reading does not extend the life.
    clock.advance(Duration::from_secs(10));
    let got = cache
        .fetch_through(&clock, CLUSTER, true, counting(&calls, b.clone()))
        .unwrap();
    assert_eq!((got, calls.get()), (a.clone(), 1));
    clock.advance(Duration::from_millis(9_999));
    let got = cache
        .fetch_through(&clock, CLUSTER, true, counting(&calls, b.clone()))
        .unwrap();
    assert_eq!((got, calls.get()), (a.clone(), 1));
    // At 20 s after the fetch it has expired.
    clock.advance(Duration::from_millis(1));
    let got = cache
        .fetch_through(&clock, CLUSTER, true, counting(&calls, b.clone()))
        .unwrap();
    assert_eq!((got, calls.get()), (b.clone(), 2));
    // Without the cache: always fetched, and the fetch refreshes the cache.
    clock.advance(Duration::from_secs(15));
    let got = cache
        .fetch_through(&clock, CLUSTER, false, counting(&calls, a.clone()))
        .unwrap();
    assert_eq!((got, calls.get()), (a.clone(), 3));
    clock.advance(Duration::from_secs(19));
    let got = cache
        .fetch_through(&clock, CLUSTER, true, counting(&calls, b.clone()))
        .unwrap();
    assert_eq!(
        (got, calls.get()),
        (a.clone(), 3),
        "refreshed by the uncached fetch"
    );
    // Per cluster.
    let got = cache
        .fetch_through(&clock, "other", true, counting(&calls, b.clone()))
        .unwrap();
    assert_eq!((got, calls.get()), (b.clone(), 4));
}

#[test]
fn a_failed_fetch_leaves_the_cache_alone() {
    let clock = FakeClock::new();
    let cache = OperatorsCache::default();
    let a = vec![op("cvo", "available")];
    cache
        .fetch_through(&clock, CLUSTER, false, || Ok(a.clone()))
        .unwrap();
    clock.advance(Duration::from_secs(5));
    assert!(cache
        .fetch_through(&clock, CLUSTER, false, || anyhow::bail!("down"))
        .is_err());
    // Still the first fetch's entry, expiring 20 s after it.
    clock.advance(Duration::from_secs(14));
    assert_eq!(cache.get(CLUSTER, clock.now()), Some(a));
    clock.advance(Duration::from_secs(1));
    assert_eq!(cache.get(CLUSTER, clock.now()), None);
}

#[test]
fn client_config_for_the_controller() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing-ca.pem");
    let config = ControllerServiceConfig {
        inventory_url: "https://svc:8090".into(),
        token: "super-secret-token".into(),
        skip_cert_verification: false,
        ca_cert_path: Some(missing.clone()),
    };
    let text = format!("{config:?}");
    assert!(
        !text.contains("super-secret-token") && text.contains("<SECRET>"),
        "{text}"
    );
    let c = config.client_config();
    assert_eq!(c.retry, ClientRetry::controller());
    assert_eq!(c.cacert.as_deref(), Some(missing.as_path()));
    assert!(!c.insecure);
    // An unreadable CA file is a startup error when certificates are verified…
    let clock: Arc<dyn Clock> = Arc::new(FakeClock::new());
    let err = ControllerClient::new(&config, CLUSTER, clock.clone()).unwrap_err();
    assert!(format!("{err:#}").contains("missing-ca.pem"), "{err:#}");
    // …and ignored when they are not.
    let insecure = ControllerServiceConfig {
        skip_cert_verification: true,
        ..config.clone()
    };
    assert!(insecure.client_config().cacert.is_none());
    assert!(insecure.client_config().insecure);
    let client = ControllerClient::new(&insecure, CLUSTER, clock.clone()).unwrap();
    assert!(!format!("{client:?}").contains("super-secret-token"));
    // An empty CA_CERT_PATH means none.
    let empty = ControllerServiceConfig {
        ca_cert_path: Some(PathBuf::new()),
        ..config
    };
    assert!(empty.client_config().cacert.is_none());
    ControllerClient::new(&empty, CLUSTER, clock).unwrap();
}

#[test]
fn odf_is_looked_up_as_ocs_on_4_8_only() {
    let list = || {
        vec![
            MonitoredOperator {
                subscription_name: "odf-operator".into(),
                ..op("odf", "")
            },
            op("console", ""),
        ]
    };
    for v in ["4.8", "4.8.0", "v4.8.2", "4.8.9-rc.1"] {
        let got = operators_for_version(list(), v).unwrap();
        assert_eq!(
            (got[0].name.as_str(), got[0].subscription_name.as_str()),
            ("ocs", "ocs-operator"),
            "{v}"
        );
        assert_eq!(got[1].name, "console");
    }
    for v in ["4.7.9", "4.9", "4.9.0", "4.18.0-ec.2", "5.8"] {
        assert_eq!(operators_for_version(list(), v).unwrap(), list(), "{v}");
    }
    for v in ["", "four", "4.x"] {
        assert!(operators_for_version(list(), v).is_err(), "{v:?}");
        assert!(operators_for_version(vec![], v).unwrap().is_empty());
    }
    // A report of the renamed operator goes back under the service's name.
    let report = OperatorMonitorReport {
        name: operators_for_version(list(), "4.8").unwrap()[0]
            .name
            .clone(),
        ..OperatorMonitorReport::default()
    };
    assert_eq!(wire_report(&report).name, "odf");
}
