//! Operator availability (Go's cluster-operator wait, availability check and stage timeouts).

use std::time::Duration;

use super::OrLog;
use crate::clock::PollError;
use crate::controller::service::{operators_for_version, ControllerService};
use crate::kube::{ClusterApi, Condition};
use crate::service::{FinalizingStage, MonitoredOperator, OperatorMonitorReport, OperatorStatus};

/// Console/CVO poll interval (Go's progress-update interval).
pub(crate) const CLUSTER_OPERATORS_INTERVAL: Duration = Duration::from_secs(60);
/// Cap on the console/CVO wait (Go's CVO max timeout).
pub(crate) const CVO_MAX_TIMEOUT: Duration = Duration::from_secs(10 * 60 * 60);
/// The ClusterOperator and the service record of the console.
pub(crate) const CONSOLE_NAME: &str = "console";
/// The service record of the cluster-version operator.
pub(crate) const CVO_NAME: &str = "cvo";
use crate::openshift::CLUSTER_VERSION_NAME;

/// The status from conditions: the first condition in order that is `Available=True` (`available`, its message),
/// `Progressing=True` (`progressing`) or `Degraded=True`/`Available=False` (`failed`); none →
/// `progressing` with no message.
pub(crate) fn status_from_conditions(conditions: &[Condition]) -> (OperatorStatus, String) {
    for c in conditions {
        let status = match (c.type_.as_str(), c.status.as_str()) {
            ("Available", "True") => OperatorStatus::Available,
            ("Progressing", "True") => OperatorStatus::Progressing,
            ("Degraded", "True") | ("Available", "False") => OperatorStatus::Failed,
            _ => continue,
        };
        return (status, c.message.clone());
    }
    (OperatorStatus::Progressing, String::new())
}

/// The cluster-operator wait's first check: `Console` is enabled, or not a known capability at all.
pub(crate) fn console_enabled(cv: &crate::kube::ClusterVersion) -> bool {
    cv.enabled_capabilities.iter().any(|c| c == "Console")
        || !cv.known_capabilities.iter().any(|c| c == "Console")
}

/// The stage-timeout check: the cluster (hosts excluded) says its current finalizing stage is
/// `stage` and timed out; an error is false.
pub(crate) fn check_stage_timed_out(
    service: &dyn ControllerService,
    stage: FinalizingStage,
) -> bool {
    let what = format_args!("checking whether stage {stage} timed out");
    let cluster = service.get_cluster(true).or_warn(what);
    cluster.and_then(|c| c.progress).is_some_and(|p| {
        p.finalizing_stage.as_deref() == Some(stage.to_string().as_str())
            && p.finalizing_stage_timed_out
    })
}

/// What a handler reads from the cluster (in the availability check).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    pub(crate) status: OperatorStatus,
    pub(crate) message: String,
    pub(crate) version: String,
}

/// The status of the `console` record from ClusterOperator `console` (conditions,
/// `status.versions[0].version`) or of the `cvo` record from ClusterVersion `version`
/// (conditions, `status.desired.version`).
pub(crate) fn builtin_status(cluster: &dyn ClusterApi, name: &str) -> anyhow::Result<Observed> {
    let (conditions, version) = if name == CONSOLE_NAME {
        let co = cluster.get_cluster_operator(CONSOLE_NAME)?;
        let version = co.versions.first().map(|v| v.version.clone());
        (co.conditions, version.unwrap_or_default())
    } else {
        let cv = cluster.get_cluster_version(CLUSTER_VERSION_NAME)?;
        (cv.conditions, cv.desired_version)
    };
    let (status, message) = status_from_conditions(&conditions);
    Ok(Observed {
        status,
        message,
        version,
    })
}

/// The availability check's OLM handler: a CSV phase as an operator status.
pub(crate) fn csv_status(phase: &str) -> OperatorStatus {
    match phase {
        "Succeeded" => OperatorStatus::Available,
        "Failed" => OperatorStatus::Failed,
        _ => OperatorStatus::Progressing,
    }
}

/// The status of an OLM operator: its Subscription → its `currentCSV` → the CSV's phase
/// ([`csv_status`]), message and `spec.version` (`0.0.0` when unset).
pub(crate) fn olm_status(
    cluster: &dyn ClusterApi,
    op: &MonitoredOperator,
) -> anyhow::Result<Observed> {
    let (ns, sub) = (&op.namespace, &op.subscription_name);
    let subscription = cluster
        .get_subscription(ns, sub)?
        .ok_or_else(|| anyhow::anyhow!("subscription {ns}/{sub} not found"))?;
    if subscription.current_csv.is_empty() {
        anyhow::bail!("subscription {ns}/{sub} has no current CSV yet");
    }
    let csv_name = &subscription.current_csv;
    let csv = cluster
        .get_csv(ns, csv_name)?
        .ok_or_else(|| anyhow::anyhow!("CSV {ns}/{csv_name} not found"))?;
    Ok(Observed {
        status: csv_status(&csv.phase),
        message: csv.message,
        version: if csv.version.is_empty() {
            "0.0.0".to_string()
        } else {
            csv.version
        },
    })
}

/// The availability check of the record `name`: true when the service's record says
/// `available`; otherwise `read` (the cluster's status) is called and reported when it changed
/// (the status, or the message to a non-empty one), and the answer is whether it is
/// `available`. No record (a list error, an unparsable `OPENSHIFT_VERSION` with a non-empty
/// list, or a missing name) never reports.
///
/// Without `report_failed` (OLM operators) a `failed` status is never reported, as Go behaves:
/// Go means to tolerate 10 failures first, but its counter never advances.
pub(crate) fn is_available(
    service: &dyn ControllerService,
    openshift_version: &str,
    name: &str,
    use_cache: bool,
    report_failed: bool,
    read: impl FnOnce() -> anyhow::Result<Observed>,
) -> bool {
    let record = service
        .monitored_operators(use_cache)
        .and_then(|l| operators_for_version(l, openshift_version))
        .map(|list| list.into_iter().find(|o| o.name == name))
        .unwrap_or_else(|err| {
            tracing::warn!("getting the service's record of operator {name}: {err:#}");
            None
        });
    let available = OperatorStatus::Available;
    if record
        .as_ref()
        .is_some_and(|r| r.status == available.to_string())
    {
        return true;
    }
    let what = format_args!("reading the status of operator {name}");
    let Some(observed) = read().or_warn(what) else {
        return false;
    };
    let changed = record.is_some_and(|r| {
        observed.status.to_string() != r.status
            || (observed.message != r.status_info && !observed.message.is_empty())
    });
    if !changed {
        tracing::info!("operator {name} is not available yet ({})", observed.status);
        return false;
    }
    if !report_failed && observed.status == OperatorStatus::Failed {
        return false;
    }
    let report = OperatorMonitorReport {
        name: name.to_string(),
        version: observed.version,
        status: Some(observed.status),
        status_info: observed.message,
    };
    let reported = service.report_operator_status(&report);
    let what = format_args!("reporting the status of operator {name}");
    reported.or_warn(what).is_some() && observed.status == available
}

/// One round of the cluster-operator wait.
pub(crate) fn cluster_operators_round(
    cluster: &dyn ClusterApi,
    service: &dyn ControllerService,
    openshift_version: &str,
    check_cluster_version: bool,
) -> bool {
    let what = format_args!("reading ClusterVersion {CLUSTER_VERSION_NAME}");
    let Some(cv) = cluster
        .get_cluster_version(CLUSTER_VERSION_NAME)
        .or_warn(what)
    else {
        return false;
    };
    let enabled = console_enabled(&cv);
    let available = |name| {
        let read = || builtin_status(cluster, name);
        is_available(service, openshift_version, name, true, true, read)
    };
    let ok_console = !enabled || available(CONSOLE_NAME);
    if !check_cluster_version {
        return ok_console;
    }
    // Run even when the console is not available (the Go order).
    available(CVO_NAME) && ok_console
}

/// Go's context error text for how a wait ended: the capped context's deadline or the main
/// context's cancellation.
pub(crate) fn ctx_cause(err: PollError) -> &'static str {
    match err {
        PollError::Canceled => "context canceled",
        PollError::TimedOut => "context deadline exceeded",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{poll, FakeClock, NeverStop};
    use crate::controller::service::testing::{MemoryService, ServiceCall};
    use crate::controller::testing::{available_version, boom, cond, lso_csv, LSO_NS, LSO_SUB};
    use crate::kube::testing::FakeCluster;
    use crate::kube::{ClusterOperator, ClusterVersion, OperatorVersion};
    use crate::service::{ClusterProgressInfo, MonitoredOperator};
    use std::sync::Arc;

    fn record(name: &str, status: &str, info: &str) -> MonitoredOperator {
        MonitoredOperator {
            name: name.into(),
            status: status.into(),
            status_info: info.into(),
            operator_type: "builtin".into(),
            ..MonitoredOperator::default()
        }
    }

    fn observed(status: OperatorStatus, message: &str) -> Observed {
        Observed {
            status,
            message: message.into(),
            version: String::new(),
        }
    }

    #[test]
    fn conditions_first_match_wins() {
        use OperatorStatus::*;
        // Conditions as "Type=Status:message" in order, `_` for a space in a message.
        let cases = [
            ("Available=True:up", Available, "up"),
            ("Progressing=True:p", Progressing, "p"),
            ("Degraded=True:d", Failed, "d"),
            (
                "Available=False:This_is_a_test_message",
                Failed,
                "This is a test message",
            ),
            ("Degraded=True:d Available=True:a", Failed, "d"),
            ("Degraded=False:x Available=True:a", Available, "a"),
            ("Progressing=False:x Upgradeable=True:u", Progressing, ""),
            ("", Progressing, ""),
        ];
        for (list, status, message) in cases {
            let conds: Vec<Condition> = list
                .split(' ')
                .filter(|c| !c.is_empty())
                .map(|c| {
                    let (type_, rest) = c.split_once('=').unwrap();
                    let (status, message) = rest.split_once(':').unwrap();
                    cond(type_, status, &message.replace('_', " "))
                })
                .collect();
            let want = (status, message.to_string());
            assert_eq!(status_from_conditions(&conds), want, "{list}");
        }
    }

    #[test]
    fn console_capability_rule() {
        let cv = |enabled: &[&str], known: &[&str]| ClusterVersion {
            enabled_capabilities: enabled.iter().map(|s| s.to_string()).collect(),
            known_capabilities: known.iter().map(|s| s.to_string()).collect(),
            ..ClusterVersion::default()
        };
        assert!(console_enabled(&cv(&["Console"], &["Console"])));
        assert!(console_enabled(&cv(&[], &[])), "unknown capability");
        assert!(!console_enabled(&cv(
            &["baremetal"],
            &["Console", "baremetal"]
        )));
    }

    /// The service's cluster answers whether the stage timed out; no answer is false.
    #[test]
    fn stage_timeout_needs_the_stage_the_flag_and_an_answer() {
        let svc = MemoryService::new("c", Arc::new(FakeClock::new()));
        let s = FinalizingStage::WaitingForOlmOperatorsCsv;
        assert!(!check_stage_timed_out(&svc, s), "no progress");
        let timed_out = |stage: Option<&str>, out: bool| {
            svc.update_cluster(|c| {
                c.progress = Some(ClusterProgressInfo {
                    finalizing_stage: stage.map(str::to_string),
                    finalizing_stage_timed_out: out,
                })
            });
            check_stage_timed_out(&svc, s)
        };
        let csv = Some("Waiting for olm operators csv");
        assert!(timed_out(csv, true));
        assert!(!timed_out(csv, false));
        assert!(!timed_out(Some("Applying olm manifests"), true));
        assert!(!timed_out(None, true));
        svc.fail("v2GetCluster", 1, 500);
        assert!(!timed_out(csv, true));
        let get = ServiceCall::GetCluster {
            exclude_hosts: true,
        };
        assert_eq!(svc.calls(), vec![get; 6]);
    }

    fn service(records: Vec<MonitoredOperator>) -> MemoryService {
        let svc = MemoryService::new("c", Arc::new(FakeClock::new()));
        svc.set_operators(records);
        svc
    }

    /// The check of record `lso` whose cluster status reads `read`.
    fn check(
        svc: &MemoryService,
        version: &str,
        read: anyhow::Result<Observed>,
        report_failed: bool,
    ) -> bool {
        is_available(svc, version, "lso", false, report_failed, || read)
    }

    #[test]
    fn available_record_answers_without_reading_the_cluster() {
        let svc = service(vec![record("lso", "available", "")]);
        let read = || panic!("must not be read");
        assert!(is_available(&svc, "4.12", "lso", true, true, read));
        assert_eq!(svc.operations(), ["V2ListOfClusterOperators"]);
    }

    #[test]
    fn a_change_is_reported_and_its_status_answers() {
        let svc = service(vec![record("lso", "progressing", "")]);
        let done = Observed {
            version: "4.12.0".into(),
            ..observed(OperatorStatus::Available, "done")
        };
        assert!(check(&svc, "4.12", Ok(done), true));
        assert_eq!(
            svc.operator_reports(),
            [OperatorMonitorReport {
                name: "lso".into(),
                version: "4.12.0".into(),
                status: Some(OperatorStatus::Available),
                status_info: "done".into(),
            }]
        );
        // A progressing change is reported but is not availability.
        let svc = service(vec![record("lso", "", "")]);
        let progressing = observed(OperatorStatus::Progressing, "p");
        assert!(!check(&svc, "4.12", Ok(progressing), true));
        assert_eq!(svc.operator_reports().len(), 1);
    }

    #[test]
    fn unreported_failure_or_report_error_or_read_error_is_false() {
        let svc = service(vec![record("lso", "progressing", "")]);
        let failed = || observed(OperatorStatus::Failed, "bad");
        assert!(!check(&svc, "4.12", Ok(failed()), false));
        assert!(svc.operator_reports().is_empty());
        // With report_failed the same change is reported.
        assert!(!check(&svc, "4.12", Ok(failed()), true));
        assert_eq!(svc.operator_reports().len(), 1);

        svc.fail("v2ReportMonitoredOperatorStatus", 1, 500);
        let available = observed(OperatorStatus::Available, "");
        assert!(!check(&svc, "4.12", Ok(available), true));
        assert_eq!(svc.operator_reports().len(), 2, "attempted once");

        assert!(!check(&svc, "4.12", Err(anyhow::anyhow!("boom")), true));
        assert_eq!(svc.operator_reports().len(), 2);
    }

    #[test]
    fn missing_record_or_bad_version_is_not_reported() {
        let available = || Ok(observed(OperatorStatus::Available, "m"));
        let svc = service(vec![record("other", "progressing", "")]);
        assert!(!check(&svc, "4.12", available(), true));
        let svc = service(vec![record("lso", "progressing", "")]);
        assert!(!check(&svc, "not-a-version", available(), true));
        assert!(svc.operator_reports().is_empty());
    }

    /// `use_cache` reaches the service (whose cache is tested in `controller/service`).
    #[test]
    fn the_cache_flag_is_passed_through() {
        let svc = service(vec![record("lso", "progressing", "")]);
        let read = || Ok(observed(OperatorStatus::Progressing, ""));
        is_available(&svc, "4.12", "lso", true, true, read);
        is_available(&svc, "4.12", "lso", true, true, read);
        assert_eq!(svc.operations(), ["V2ListOfClusterOperators"]);
        is_available(&svc, "4.12", "lso", false, true, read);
        assert_eq!(svc.operations().len(), 2);
    }

    fn available_console(cluster: &FakeCluster) {
        cluster.set_cluster_operator(ClusterOperator {
            name: "console".into(),
            conditions: vec![cond("Available", "True", "")],
            versions: vec![OperatorVersion {
                name: "operator".into(),
                version: "4.12.0".into(),
            }],
        });
    }

    #[test]
    fn round_reads_console_then_cvo_even_when_console_is_not_available() {
        let cluster = FakeCluster::new();
        available_version(&cluster, "done");
        cluster.fail_next("get_cluster_operator", boom());
        let svc = service(vec![
            record("console", "progressing", ""),
            record("cvo", "progressing", ""),
        ]);
        assert!(!cluster_operators_round(&cluster, &svc, "4.12", true));
        assert_eq!(
            svc.operator_reports(),
            [OperatorMonitorReport {
                name: "cvo".into(),
                version: "4.12.0".into(),
                status: Some(OperatorStatus::Available),
                status_info: "done".into(),
            }]
        );
        available_console(&cluster);
        assert!(cluster_operators_round(&cluster, &svc, "4.12", true));
        // The cached list (20 s, clock not moved) still says cvo is progressing, so the cvo
        // change is reported again, after the console's.
        let names: Vec<_> = svc
            .operator_reports()
            .into_iter()
            .map(|r| (r.name, r.version))
            .collect();
        assert_eq!(
            names,
            [("cvo", "4.12.0"), ("console", "4.12.0"), ("cvo", "4.12.0")]
                .map(|(a, b)| (a.to_string(), b.to_string()))
        );
        assert_eq!(svc.count("V2ListOfClusterOperators"), 1);
    }

    #[test]
    fn disabled_console_is_not_read_and_cluster_version_error_ends_the_round() {
        let cluster = FakeCluster::new();
        cluster.set_cluster_version(
            "version",
            ClusterVersion {
                known_capabilities: vec!["Console".into()],
                ..ClusterVersion::default()
            },
        );
        let svc = service(vec![]);
        assert!(cluster_operators_round(&cluster, &svc, "4.12", false));
        assert_eq!(cluster.count("get_cluster_operator"), 0);
        cluster.fail_next("get_cluster_version", boom());
        assert!(!cluster_operators_round(&cluster, &svc, "4.12", false));
        assert!(svc.calls().is_empty());
    }

    #[test]
    fn wait_times_out_at_the_cap_when_the_service_never_syncs() {
        let clock = FakeClock::new();
        let cluster = FakeCluster::new();
        cluster.set_cluster_version("version", ClusterVersion::default());
        available_console(&cluster);
        let svc = service(vec![record("console", "progressing", "")]);
        svc.fail("v2ReportMonitoredOperatorStatus", 1000, 500);
        let timeout = Some(Duration::from_secs(600));
        let err = poll(
            &clock,
            &NeverStop,
            CLUSTER_OPERATORS_INTERVAL,
            timeout,
            || cluster_operators_round(&cluster, &svc, "4.12", false),
        )
        .unwrap_err();
        assert_eq!(ctx_cause(err), "context deadline exceeded");
        assert_eq!(
            svc.operator_reports().len(),
            10,
            "one report a minute for 10 min"
        );
        assert_eq!(clock.elapsed(), Duration::from_secs(600));
    }

    /// The Go table through the whole wait (console available in the service, CVO on): a
    /// report only when the rule says so, and success only when the CVO became available.
    #[test]
    fn wait_table_through_the_cvo_handler() {
        let rows = [
            ("progressing", "", "Progressing", "", false),
            ("progressing", "", "Progressing", "message", true),
            ("progressing", "message", "Progressing", "message", false),
            ("progressing", "message", "Progressing", "new", true),
            ("progressing", "message", "Progressing", "", false),
            ("progressing", "", "Available", "", true),
            ("progressing", "", "Available", "message", true),
            ("available", "", "Progressing", "x", false),
        ];
        for (rs, ri, ct, cm, sent) in rows {
            let clock = FakeClock::new();
            let cluster = FakeCluster::new();
            cluster.set_cluster_version(
                "version",
                ClusterVersion {
                    conditions: vec![cond(ct, "True", cm)],
                    desired_version: "4.12.0".into(),
                    ..ClusterVersion::default()
                },
            );
            let svc = service(vec![
                record("console", "available", ""),
                record("cvo", rs, ri),
            ]);
            // One round: the deadline falls before the second tick.
            let timeout = Some(Duration::from_secs(30));
            let result = poll(
                &clock,
                &NeverStop,
                CLUSTER_OPERATORS_INTERVAL,
                timeout,
                || cluster_operators_round(&cluster, &svc, "4.12", true),
            );
            let row = format!("{rs}/{ri:?} vs {ct}/{cm:?}");
            assert_eq!(svc.operator_reports().len(), usize::from(sent), "{row}");
            let available = rs == "available" || ct == "Available";
            assert_eq!(result.is_ok(), available, "{row}");
            if !available {
                assert_eq!(result.map_err(ctx_cause), Err("context deadline exceeded"));
            }
            assert_eq!(
                cluster.count("get_cluster_operator"),
                0,
                "{row}: console not read"
            );
        }
    }

    fn olm_cluster(phase: &str, message: &str) -> FakeCluster {
        let cluster = FakeCluster::new();
        lso_csv(&cluster, phase, message);
        cluster
    }

    fn lso() -> MonitoredOperator {
        MonitoredOperator {
            name: "lso".into(),
            namespace: LSO_NS.into(),
            subscription_name: LSO_SUB.into(),
            ..MonitoredOperator::default()
        }
    }

    /// The OLM check of `lso` against `cluster`.
    fn olm_check(svc: &MemoryService, cluster: &FakeCluster) -> bool {
        is_available(svc, "4.12", "lso", false, false, || {
            olm_status(cluster, &lso())
        })
    }

    #[test]
    fn olm_failed_csv_is_never_reported_then_success_is() {
        let svc = service(vec![record("lso", "progressing", "")]);
        let cluster = olm_cluster("Failed", "broken");
        assert!(!olm_check(&svc, &cluster));
        assert!(
            svc.operator_reports().is_empty(),
            "a failed CSV is never reported"
        );
        let cluster = olm_cluster("Succeeded", "");
        assert!(olm_check(&svc, &cluster));
        assert_eq!(
            svc.operator_reports(),
            [OperatorMonitorReport {
                name: "lso".into(),
                version: "4.12.0".into(),
                status: Some(OperatorStatus::Available),
                status_info: String::new(),
            }]
        );
    }

    #[test]
    fn olm_progressing_message_rules() {
        // Empty message: no update. Same message: no update. New message: one update.
        for (record_info, message, sent) in [("", "", 0), ("m", "m", 0), ("m", "new", 1)] {
            let svc = service(vec![record("lso", "progressing", record_info)]);
            let cluster = olm_cluster("Installing", message);
            assert!(!olm_check(&svc, &cluster));
            assert_eq!(
                svc.operator_reports().len(),
                sent,
                "{record_info:?} vs {message:?}"
            );
        }
    }

    #[test]
    fn olm_status_errors() {
        use crate::kube::Subscription;
        let cluster = FakeCluster::new();
        assert!(olm_status(&cluster, &lso()).is_err(), "no subscription");
        cluster.set_subscription(Subscription {
            namespace: LSO_NS.into(),
            name: LSO_SUB.into(),
            current_csv: String::new(),
        });
        assert!(olm_status(&cluster, &lso()).is_err(), "no current CSV");
        let cluster = olm_cluster("Pending", "");
        cluster.set_csv(crate::kube::Csv {
            namespace: LSO_NS.into(),
            name: "lso.v4.12.0".into(),
            phase: "Pending".into(),
            ..Default::default()
        });
        let o = olm_status(&cluster, &lso()).unwrap();
        assert_eq!(
            (o.status, o.version.as_str()),
            (OperatorStatus::Progressing, "0.0.0")
        );
        assert_eq!(csv_status("Succeeded"), OperatorStatus::Available);
        assert_eq!(csv_status("Failed"), OperatorStatus::Failed);
    }
}
