//! Host installation stages and log-collection states, with their exact wire strings
//! (swagger `host-stage` and `logs_state`), and the one model of which stages the service
//! accepts from a host of each role, in which order ([`StageOrder`]).

use std::fmt;

use crate::config::Role;
use crate::wire::wire_enum;

pub use crate::wire::UnknownValue;

wire_enum! {
    /// Installation stage of a host (swagger `host-stage`). The wire strings are exact: they are
    /// what the service stores, shows in the UI and matches in triage signatures.
    pub enum HostStage: "host stage" {
        StartingInstallation = "Starting installation",
        WaitingForControlPlane = "Waiting for control plane",
        WaitingForBootkube = "Waiting for bootkube",
        WaitingForController = "Waiting for controller",
        Installing = "Installing",
        WritingImageToDisk = "Writing image to disk",
        CopyingRegistryDataToDisk = "Copying registry data to disk",
        Rebooting = "Rebooting",
        WaitingForIgnition = "Waiting for ignition",
        Configuring = "Configuring",
        Joined = "Joined",
        Done = "Done",
        Failed = "Failed",
    }
}

/// One of the stage orders the assisted-service keeps per host (its host manager's lists, by
/// the host's role and bootstrap flag, and for the bootstrap host whether the cluster has a
/// single control-plane node). A report whose stage is not in the host's order, or comes
/// before the host's current stage in it, is answered 409 ("Stages Configuring isn't available
/// for host role master bootstrap true", "Can't assign lower stage …"); `Failed` is always
/// accepted. Both programs check a report with [`StageOrder::check`] before sending it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageOrder {
    /// The bootstrap host of a cluster with several control-plane nodes.
    Bootstrap,
    /// The one host of a single-node cluster (the service marks it bootstrap): bootkube runs
    /// before the write, and there is no Configuring (nothing fetches its Ignition from a
    /// machine-config-server).
    SingleNode,
    /// `master` and `arbiter`.
    Master,
    Worker,
}

impl StageOrder {
    /// The order the service picks for a host: `bootstrap` (its flag, or the role) first, then
    /// by role. `None` for a role the service keeps no order for (`auto-assign`, one this build
    /// does not know): such a host's reports are not checked here, the service decides.
    pub fn for_host(role: Option<&Role>, bootstrap: bool, single_node: bool) -> Option<StageOrder> {
        if bootstrap || role == Some(&Role::Bootstrap) {
            return Some(if single_node {
                StageOrder::SingleNode
            } else {
                StageOrder::Bootstrap
            });
        }
        match role? {
            Role::Master | Role::Arbiter => Some(StageOrder::Master),
            Role::Worker => Some(StageOrder::Worker),
            Role::AutoAssign | Role::Bootstrap | Role::Other(_) => None,
        }
    }

    /// The order of the installer's own host, from `--role` and `--control-plane-count`. On a
    /// single-node cluster the installing host is the service's bootstrap host whatever
    /// `--role` says (the flow takes the single-node path for it too).
    pub fn for_installer(role: &Role, single_node: bool) -> Option<StageOrder> {
        StageOrder::for_host(
            Some(role),
            *role == Role::Bootstrap || single_node,
            single_node,
        )
    }

    /// The stages the service accepts from such a host, in order.
    pub fn stages(self) -> &'static [HostStage] {
        use HostStage::*;
        match self {
            StageOrder::Bootstrap => &[
                StartingInstallation,
                Installing,
                WritingImageToDisk,
                CopyingRegistryDataToDisk,
                WaitingForControlPlane,
                WaitingForBootkube,
                WaitingForController,
                Rebooting,
                Configuring,
                Joined,
                Done,
            ],
            StageOrder::SingleNode => &[
                StartingInstallation,
                Installing,
                WaitingForBootkube,
                WritingImageToDisk,
                CopyingRegistryDataToDisk,
                Rebooting,
                Joined,
                Done,
            ],
            StageOrder::Master => &[
                StartingInstallation,
                Installing,
                WritingImageToDisk,
                CopyingRegistryDataToDisk,
                Rebooting,
                Configuring,
                Joined,
                Done,
            ],
            StageOrder::Worker => &[
                StartingInstallation,
                Installing,
                WritingImageToDisk,
                WaitingForControlPlane,
                Rebooting,
                WaitingForIgnition,
                Configuring,
                Joined,
                Done,
            ],
        }
    }

    fn position(self, stage: HostStage) -> Option<usize> {
        self.stages().iter().position(|s| *s == stage)
    }

    /// Whether the service takes `next` from a host of this order whose current stage is
    /// `current` (`None`: none yet). The same stage again is accepted (a new info, a
    /// percentage); `Failed` always is.
    pub fn check(self, current: Option<HostStage>, next: HostStage) -> Result<(), StageSkip> {
        if next == HostStage::Failed {
            return Ok(());
        }
        let Some(at) = self.position(next) else {
            return Err(StageSkip::NotInOrder {
                stage: next,
                order: self,
            });
        };
        match current.and_then(|c| Some((c, self.position(c)?))) {
            Some((current, current_at)) if at < current_at => Err(StageSkip::Lower {
                stage: next,
                current,
            }),
            _ => Ok(()),
        }
    }

    /// Which of two stages is further on in this order (the one that is in it, if only one is).
    pub fn later(self, a: HostStage, b: HostStage) -> HostStage {
        match (self.position(a), self.position(b)) {
            (Some(x), Some(y)) if y > x => b,
            (None, Some(_)) => b,
            _ => a,
        }
    }
}

impl fmt::Display for StageOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StageOrder::Bootstrap => "bootstrap",
            StageOrder::SingleNode => "single-node",
            StageOrder::Master => "master",
            StageOrder::Worker => "worker",
        })
    }
}

/// Why a stage report is not sent: the service would refuse it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StageSkip {
    #[error("a {order} host has no stage \"{stage}\" at the assisted-service")]
    NotInOrder { stage: HostStage, order: StageOrder },
    #[error("stage \"{stage}\" comes before the host's current stage \"{current}\"")]
    Lower {
        stage: HostStage,
        current: HostStage,
    },
}

/// [`StageOrder::check`] for a host whose order may be unknown (then every stage is sent).
pub fn check_stage(
    order: Option<StageOrder>,
    current: Option<HostStage>,
    next: HostStage,
) -> Result<(), StageSkip> {
    order.map_or(Ok(()), |o| o.check(current, next))
}

wire_enum! {
    /// State of log collection for a host or a cluster (swagger `logs_state`, without its empty
    /// value).
    pub enum LogsState: "logs state" {
        Requested = "requested",
        Collecting = "collecting",
        Completed = "completed",
        Timeout = "timeout",
    }
}

wire_enum! {
    /// A cluster's finalizing stage (swagger `finalizing-stage`), reported by the controller
    /// with `PUT /v2/clusters/{cluster_id}/progress`.
    pub enum FinalizingStage: "finalizing stage" {
        WaitingForClusterOperators = "Waiting for cluster operators",
        AddingRouterCa = "Adding router ca",
        ApplyingOlmManifests = "Applying olm manifests",
        WaitingForOlmOperatorsCsvInitialization = "Waiting for olm operators csv initialization",
        WaitingForOlmOperatorsCsv = "Waiting for olm operators csv",
        WaitingForOlmOperatorSetupJobs = "Waiting for OLM operator setup jobs",
        Done = "Done",
    }
}

wire_enum! {
    /// A monitored operator's state (swagger `operator-status`).
    pub enum OperatorStatus: "operator status" {
        Failed = "failed",
        Progressing = "progressing",
        Available = "available",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_stage_wire_strings_match_swagger_enum_order_and_parse_exactly() {
        let wire: Vec<&str> = HostStage::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            wire,
            [
                "Starting installation",
                "Waiting for control plane",
                "Waiting for bootkube",
                "Waiting for controller",
                "Installing",
                "Writing image to disk",
                "Copying registry data to disk",
                "Rebooting",
                "Waiting for ignition",
                "Configuring",
                "Joined",
                "Done",
                "Failed",
            ]
        );
        // Display, FromStr and serde round trips are the macro's: `wire::tests`.
        for bad in ["installing", "Installing ", "", "Writing Image To Disk"] {
            let err = bad.parse::<HostStage>().unwrap_err();
            assert_eq!(err.to_string(), format!("unknown host stage {bad:?}"));
        }
    }

    fn order_names(order: StageOrder) -> Vec<&'static str> {
        order.stages().iter().map(|s| s.as_str()).collect()
    }

    /// The service's lists, as its host manager keeps them and the API reference lists them.
    #[test]
    fn each_role_has_the_services_stage_order() {
        let start = ["Starting installation", "Installing"];
        let cases: [(StageOrder, Vec<&str>); 4] = [
            (
                StageOrder::Bootstrap,
                [
                    &start[..],
                    &[
                        "Writing image to disk",
                        "Copying registry data to disk",
                        "Waiting for control plane",
                        "Waiting for bootkube",
                        "Waiting for controller",
                        "Rebooting",
                        "Configuring",
                        "Joined",
                        "Done",
                    ],
                ]
                .concat(),
            ),
            (
                StageOrder::SingleNode,
                [
                    &start[..],
                    &[
                        "Waiting for bootkube",
                        "Writing image to disk",
                        "Copying registry data to disk",
                        "Rebooting",
                        "Joined",
                        "Done",
                    ],
                ]
                .concat(),
            ),
            (
                StageOrder::Master,
                [
                    &start[..],
                    &[
                        "Writing image to disk",
                        "Copying registry data to disk",
                        "Rebooting",
                        "Configuring",
                        "Joined",
                        "Done",
                    ],
                ]
                .concat(),
            ),
            (
                StageOrder::Worker,
                [
                    &start[..],
                    &[
                        "Writing image to disk",
                        "Waiting for control plane",
                        "Rebooting",
                        "Waiting for ignition",
                        "Configuring",
                        "Joined",
                        "Done",
                    ],
                ]
                .concat(),
            ),
        ];
        for (order, want) in cases {
            assert_eq!(order_names(order), want, "{order}");
            assert!(!order.stages().contains(&HostStage::Failed), "{order}");
        }
    }

    #[test]
    fn the_order_follows_the_bootstrap_flag_then_the_role() {
        use StageOrder::*;
        let (master, worker) = (Some(&Role::Master), Some(&Role::Worker));
        let cases = [
            // (role, bootstrap flag, single node) → order
            ((master, true, true), Some(SingleNode)),
            ((master, true, false), Some(Bootstrap)),
            ((Some(&Role::Bootstrap), false, false), Some(Bootstrap)),
            ((Some(&Role::Bootstrap), false, true), Some(SingleNode)),
            ((master, false, false), Some(Master)),
            ((Some(&Role::Arbiter), false, false), Some(Master)),
            ((worker, false, false), Some(Worker)),
            // A worker of a single-node cluster is not its bootstrap.
            ((worker, false, true), Some(Worker)),
            ((Some(&Role::AutoAssign), false, false), None),
            ((Some(&Role::Other("observer".into())), false, false), None),
            ((None, false, false), None),
        ];
        for ((role, bootstrap, sno), want) in cases {
            assert_eq!(
                StageOrder::for_host(role, bootstrap, sno),
                want,
                "{role:?} {bootstrap} {sno}"
            );
        }
        // The installer: on a single-node cluster its host is the bootstrap, whatever --role.
        for role in [Role::Master, Role::Bootstrap] {
            assert_eq!(StageOrder::for_installer(&role, true), Some(SingleNode));
        }
        assert_eq!(
            StageOrder::for_installer(&Role::Bootstrap, false),
            Some(Bootstrap)
        );
        assert_eq!(
            StageOrder::for_installer(&Role::Master, false),
            Some(Master)
        );
        assert_eq!(
            StageOrder::for_installer(&Role::Worker, false),
            Some(Worker)
        );
    }

    #[test]
    fn a_stage_outside_the_order_or_before_the_current_one_is_skipped() {
        use HostStage::*;
        let sno = StageOrder::SingleNode;
        // The field failure: Configuring for a single-node host.
        let skip = sno.check(Some(Rebooting), Configuring).unwrap_err();
        assert_eq!(
            skip,
            StageSkip::NotInOrder {
                stage: Configuring,
                order: sno
            }
        );
        assert_eq!(
            skip.to_string(),
            "a single-node host has no stage \"Configuring\" at the assisted-service"
        );
        assert!(sno.check(None, Configuring).is_err());
        // Forward, the same stage again, and the first report are fine.
        sno.check(Some(Rebooting), Joined).unwrap();
        sno.check(Some(WaitingForBootkube), WritingImageToDisk)
            .unwrap();
        sno.check(Some(WritingImageToDisk), WritingImageToDisk)
            .unwrap();
        sno.check(None, StartingInstallation).unwrap();
        // Backwards: the single node writes after bootkube, a master before.
        let skip = sno
            .check(Some(WritingImageToDisk), WaitingForBootkube)
            .unwrap_err();
        assert_eq!(
            skip.to_string(),
            "stage \"Waiting for bootkube\" comes before the host's current stage \"Writing image to disk\""
        );
        assert!(StageOrder::Master.check(Some(Joined), Configuring).is_err());
        StageOrder::Worker
            .check(Some(WaitingForIgnition), Configuring)
            .unwrap();
        // Failed always goes; a current stage outside the order (a newer service's, Failed)
        // does not hold a valid one back.
        for current in [None, Some(Done), Some(Failed), Some(Configuring)] {
            sno.check(current, Failed).unwrap();
        }
        StageOrder::Master
            .check(Some(WaitingForBootkube), Rebooting)
            .unwrap();
        // No known order: the service decides.
        check_stage(None, Some(Done), StartingInstallation).unwrap();
        assert!(check_stage(Some(sno), None, Configuring).is_err());
    }

    #[test]
    fn later_picks_the_stage_further_on() {
        use HostStage::*;
        let m = StageOrder::Master;
        assert_eq!(m.later(Rebooting, Joined), Joined);
        assert_eq!(m.later(Joined, Rebooting), Joined);
        assert_eq!(m.later(WaitingForIgnition, Rebooting), Rebooting);
        assert_eq!(m.later(Rebooting, WaitingForIgnition), Rebooting);
    }

    #[test]
    fn logs_state_finalizing_stage_and_operator_status_wire_strings() {
        let wire: Vec<String> = LogsState::ALL.iter().map(|s| s.to_string()).collect();
        assert_eq!(wire, ["requested", "collecting", "completed", "timeout"]);
        let wire: Vec<&str> = FinalizingStage::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            wire,
            [
                "Waiting for cluster operators",
                "Adding router ca",
                "Applying olm manifests",
                "Waiting for olm operators csv initialization",
                "Waiting for olm operators csv",
                "Waiting for OLM operator setup jobs",
                "Done",
            ]
        );
        let wire: Vec<&str> = OperatorStatus::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(wire, ["failed", "progressing", "available"]);
        assert!("Available".parse::<OperatorStatus>().is_err());
    }
}
