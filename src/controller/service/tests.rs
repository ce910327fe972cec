//! The pure parts of the service calls: the report rename, the reboots event, the operators
//! cache and the version's operator names. The client's configuration is `bootstrap`'s test;
//! every call's request on the wire (method, path, body) is `tests/service_client.rs`'s.

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
fn report_renames_ocs_to_odf_only_and_omits_empty_fields() {
    let full = OperatorMonitorReport {
        name: "console".into(),
        version: "4.18.0".into(),
        status: Some(OperatorStatus::Available),
        status_info: "All is well".into(),
    };
    assert_eq!(
        serde_json::to_value(wire_report(&full)).unwrap(),
        json!({"name": "console", "version": "4.18.0", "status": "available", "status_info": "All is well"})
    );
    for (name, sent) in [
        ("ocs", "odf"),
        ("odf", "odf"),
        ("ocs-operator", "ocs-operator"),
    ] {
        let r = OperatorMonitorReport {
            name: name.into(),
            ..OperatorMonitorReport::default()
        };
        assert_eq!(wire_report(&r).name, sent);
    }
    assert_eq!(wire_report(&OperatorMonitorReport::default()).name, "");
    let empty = serde_json::to_string(&OperatorMonitorReport::default()).unwrap();
    assert_eq!(empty, "{}");
}

#[test]
fn reboots_event_time_and_absent_ids() {
    let event = RebootsEvent {
        cluster_id: String::new(),
        host_id: "h".into(),
        infra_env_id: "ie".into(),
        node_name: "master-0".into(),
        reboots: 2,
    };
    let t = UNIX_EPOCH + Duration::from_secs(1_795_462_544);
    let body = serde_json::to_value(event.params(t)).unwrap();
    assert_eq!(body["event_time"], "2026-11-23T19:35:44Z");
    assert!(body.get("cluster_id").is_none(), "{body}");
    assert_eq!(
        (&body["host_id"], &body["infra_env_id"]),
        (&json!("h"), &json!("ie"))
    );
    let at = |s: u64| rfc3339(UNIX_EPOCH + Duration::from_secs(s));
    assert_eq!(at(0), "1970-01-01T00:00:00Z");
    assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(at(4_107_542_399), "2100-02-28T23:59:59Z");
    assert_eq!(at(4_107_542_400), "2100-03-01T00:00:00Z");
    let before = rfc3339(UNIX_EPOCH - Duration::from_secs(86_400));
    assert_eq!(before, "1969-12-31T00:00:00Z");
}

#[test]
fn cache_serves_for_20_seconds_per_cluster_without_extending() {
    let clock = FakeClock::new();
    let cache = OperatorsCache::default();
    let calls = std::cell::Cell::new(0);
    let (a, b) = (
        vec![op("console", "progressing")],
        vec![op("console", "available")],
    );
    // (advance, cluster, use_cache, what a fetch would give, what comes back, fetches so far)
    let steps = [
        // Empty cache: fetched even when asked for the cache.
        (0, CLUSTER, true, &a, &a, 1),
        // Read at 10 s and 19.999 s: served; reading does not extend the life.
        (10_000, CLUSTER, true, &b, &a, 1),
        (9_999, CLUSTER, true, &b, &a, 1),
        // At 20 s after the fetch it has expired.
        (1, CLUSTER, true, &b, &b, 2),
        // Without the cache: always fetched, and the fetch refreshes the cache.
        (15_000, CLUSTER, false, &a, &a, 3),
        (19_000, CLUSTER, true, &b, &a, 3),
        // Per cluster.
        (0, "other", true, &b, &b, 4),
    ];
    for (i, (ms, cluster, use_cache, fetched, want, fetches)) in steps.into_iter().enumerate() {
        clock.advance(Duration::from_millis(ms));
        let fetch = || {
            calls.set(calls.get() + 1);
            Ok(fetched.clone())
        };
        let got = cache
            .fetch_through(&clock, cluster, use_cache, fetch)
            .unwrap();
        assert_eq!((&got, calls.get()), (want, fetches), "step {i}");
    }
    // A failed fetch is an error and leaves the entry of the last fetch, which expires 20 s
    // after it.
    assert!(cache
        .fetch_through(&clock, CLUSTER, false, || anyhow::bail!("down"))
        .is_err());
    let cached = |clock: &FakeClock| {
        let fetch = || anyhow::bail!("not cached");
        cache.fetch_through(clock, CLUSTER, true, fetch).ok()
    };
    assert_eq!(cached(&clock), Some(a));
    clock.advance(Duration::from_secs(1));
    assert_eq!(cached(&clock), None);
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
}
