//! Host installation stages and log-collection states, with their exact wire strings
//! (swagger `host-stage` and `logs_state`).

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
