//! CSR approval (Go `ApproveCsrs`): on Go's ticker, approve every CertificateSigningRequest
//! without an `Approved` condition. As in Go, Denied and Failed CSRs are approved too (only an
//! `Approved` condition, whatever its status, marks a CSR handled), and there is no requester,
//! usages or node-name check. The node-status task owns it, under a child stop token.

use std::ops::ControlFlow;
use std::time::{Duration, SystemTime};

use super::OrLog;
use crate::clock::ticker;
use crate::clock::{Clock, Stop};
use crate::kube::{ClusterApi, Condition, CsrApproval};

/// The condition type an approval appends, and the one that marks a CSR as handled.
pub(crate) const APPROVED: &str = "Approved";

/// One pass: list the CSRs and approve the pending ones. Returns how many approvals were
/// accepted (0 when the list failed).
pub(crate) fn approve_pending(cluster: &dyn ClusterApi) -> usize {
    let Some(csrs) = cluster.list_csrs().or_error("failed to list CSRs") else {
        return 0;
    };
    let mut approved = 0;
    // Pending: no condition of type `Approved`, whatever its other conditions (`Denied`,
    // `Failed`) say.
    let pending = csrs
        .iter()
        .filter(|c| !c.conditions.iter().any(|c| c.type_ == APPROVED));
    for csr in pending {
        tracing::info!("approving CSR {}", csr.name);
        let approval = CsrApproval {
            condition: Condition {
                type_: APPROVED.to_string(),
                status: "True".to_string(),
                reason: "NodeCSRApprove".to_string(),
                message: "This CSR was approved by the assisted-installer-controller".to_string(),
            },
            // Its `lastUpdateTime`.
            time: SystemTime::now(),
        };
        let done = cluster.approve_csr(csr, &approval);
        let what = format_args!("failed to approve CSR {}", csr.name);
        approved += usize::from(done.or_warn(what).is_some());
    }
    approved
}

/// [`approve_pending`] every `interval`, the first time after one interval, until `stop`
/// fires.
pub(crate) fn run(
    cluster: &dyn ClusterApi,
    clock: &dyn Clock,
    stop: &dyn Stop,
    interval: Duration,
) {
    tracing::info!("start approving CSRs");
    ticker(clock, stop, interval, || {
        approve_pending(cluster);
        ControlFlow::Continue(())
    });
    tracing::info!("stopped approving CSRs");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::controller::testing::{boom, cond};
    use crate::image::Cancel;
    use crate::kube::testing::FakeCluster;
    use crate::kube::{ApiError, Csr};

    fn csr(name: &str, conditions: Vec<Condition>) -> Csr {
        Csr {
            name: name.into(),
            conditions,
            ..Csr::default()
        }
    }

    #[test]
    fn denied_and_failed_are_approved_approved_ones_are_not() {
        let cluster = FakeCluster::new();
        cluster.set_csr(csr("pending", vec![]));
        cluster.set_csr(csr("denied", vec![cond("Denied", "True", "")]));
        cluster.set_csr(csr("failed", vec![cond("Failed", "True", "")]));
        cluster.set_csr(csr("approved", vec![cond("Approved", "True", "")]));
        // An Approved condition of any status counts as handled.
        cluster.set_csr(csr("approved-false", vec![cond("Approved", "False", "")]));
        assert_eq!(approve_pending(&cluster), 3);
        assert_eq!(
            cluster.take_calls(),
            [
                "list_csrs()",
                "approve_csr(denied, Approved)",
                "approve_csr(failed, Approved)",
                "approve_csr(pending, Approved)",
            ]
        );
        let denied = cluster.csr("denied").unwrap();
        let added = denied.conditions.last().unwrap();
        assert_eq!(
            added,
            &Condition {
                type_: "Approved".into(),
                status: "True".into(),
                reason: "NodeCSRApprove".into(),
                message: "This CSR was approved by the assisted-installer-controller".into(),
            }
        );
        // The object put back carries the Denied condition and the approval.
        let conds = denied.object["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[1]["reason"], "NodeCSRApprove");
        // A second pass has nothing left to do.
        assert_eq!(approve_pending(&cluster), 0);
        assert_eq!(cluster.take_calls(), ["list_csrs()"]);
    }

    #[test]
    fn errors_are_tolerated() {
        let cluster = FakeCluster::new();
        cluster.set_csr(csr("a", vec![]));
        cluster.set_csr(csr("b", vec![]));
        cluster.fail_next("list_csrs", boom());
        assert_eq!(approve_pending(&cluster), 0);
        cluster.fail_next("approve_csr", ApiError::new(409, "Conflict", "changed"));
        assert_eq!(approve_pending(&cluster), 1, "b is approved after a failed");
        assert_eq!(cluster.count("approve_csr"), 2);
    }

    #[test]
    fn the_ticker_acts_after_one_interval_until_stopped() {
        let clock = FakeClock::new();
        let cluster = FakeCluster::new();
        cluster.set_csr(csr("a", vec![]));
        // Stop from inside the third list.
        struct StopAfter<'a>(&'a FakeCluster, usize);
        impl Stop for StopAfter<'_> {
            fn is_stopped(&self) -> bool {
                self.0.count("list_csrs") >= self.1
            }
            fn sleep(&self, _: Duration) -> bool {
                self.is_stopped()
            }
        }
        let stop = StopAfter(&cluster, 3);
        run(&cluster, &clock, &stop, Duration::from_secs(30));
        assert_eq!(cluster.count("list_csrs"), 3);
        assert_eq!(cluster.count("approve_csr"), 1);
        assert_eq!(clock.sleeps(), vec![Duration::from_secs(30); 3]);
        // Nothing happens before the first interval.
        let cluster = FakeCluster::new();
        let stop = Cancel::new();
        stop.cancel();
        run(&cluster, &clock, &stop, Duration::from_secs(30));
        assert_eq!(cluster.count("list_csrs"), 0);
    }
}
