//! Host installation stages and log-collection states, with their exact wire strings
//! (swagger `host-stage` and `logs_state`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A string that is not one of the values the API defines for this enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownValue {
    /// What was being parsed ("host stage", "logs state").
    pub kind: &'static str,
    /// The rejected input.
    pub value: String,
}

/// Installation stage of a host (swagger `host-stage`). The wire strings are exact: they are
/// what the service stores, shows in the UI and matches in triage signatures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostStage {
    StartingInstallation,
    WaitingForControlPlane,
    WaitingForBootkube,
    WaitingForController,
    Installing,
    WritingImageToDisk,
    CopyingRegistryDataToDisk,
    Rebooting,
    WaitingForIgnition,
    Configuring,
    Joined,
    Done,
    Failed,
}

impl HostStage {
    /// Every stage, in swagger enum order.
    pub const ALL: [HostStage; 13] = [
        HostStage::StartingInstallation,
        HostStage::WaitingForControlPlane,
        HostStage::WaitingForBootkube,
        HostStage::WaitingForController,
        HostStage::Installing,
        HostStage::WritingImageToDisk,
        HostStage::CopyingRegistryDataToDisk,
        HostStage::Rebooting,
        HostStage::WaitingForIgnition,
        HostStage::Configuring,
        HostStage::Joined,
        HostStage::Done,
        HostStage::Failed,
    ];

    /// The exact wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            HostStage::StartingInstallation => "Starting installation",
            HostStage::WaitingForControlPlane => "Waiting for control plane",
            HostStage::WaitingForBootkube => "Waiting for bootkube",
            HostStage::WaitingForController => "Waiting for controller",
            HostStage::Installing => "Installing",
            HostStage::WritingImageToDisk => "Writing image to disk",
            HostStage::CopyingRegistryDataToDisk => "Copying registry data to disk",
            HostStage::Rebooting => "Rebooting",
            HostStage::WaitingForIgnition => "Waiting for ignition",
            HostStage::Configuring => "Configuring",
            HostStage::Joined => "Joined",
            HostStage::Done => "Done",
            HostStage::Failed => "Failed",
        }
    }
}

impl fmt::Display for HostStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HostStage {
    type Err = UnknownValue;

    /// Exact, case-sensitive match on the wire string.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HostStage::ALL
            .into_iter()
            .find(|stage| stage.as_str() == s)
            .ok_or_else(|| UnknownValue {
                kind: "host stage",
                value: s.to_string(),
            })
    }
}

impl Serialize for HostStage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for HostStage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// State of log collection for a host or a cluster (swagger `logs_state`, without its empty value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogsState {
    Requested,
    Collecting,
    Completed,
    Timeout,
}

impl LogsState {
    /// Every state, in swagger enum order.
    pub const ALL: [LogsState; 4] = [
        LogsState::Requested,
        LogsState::Collecting,
        LogsState::Completed,
        LogsState::Timeout,
    ];

    /// The exact wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            LogsState::Requested => "requested",
            LogsState::Collecting => "collecting",
            LogsState::Completed => "completed",
            LogsState::Timeout => "timeout",
        }
    }
}

impl fmt::Display for LogsState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LogsState {
    type Err = UnknownValue;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LogsState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownValue {
                kind: "logs state",
                value: s.to_string(),
            })
    }
}

impl Serialize for LogsState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for LogsState {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_stage_wire_strings_match_swagger_enum_order() {
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
    }

    #[test]
    fn host_stage_round_trips_through_display_fromstr_and_serde() {
        for stage in HostStage::ALL {
            assert_eq!(stage.to_string(), stage.as_str());
            assert_eq!(stage.as_str().parse::<HostStage>().unwrap(), stage);
            let json = serde_json::to_string(&stage).unwrap();
            assert_eq!(json, format!("\"{}\"", stage.as_str()));
            assert_eq!(serde_json::from_str::<HostStage>(&json).unwrap(), stage);
        }
    }

    #[test]
    fn host_stage_parsing_is_exact() {
        for bad in [
            "installing",
            "Installing ",
            "",
            "Not a stage",
            "Writing Image To Disk",
        ] {
            let err = bad.parse::<HostStage>().unwrap_err();
            assert_eq!(err.value, bad);
            assert!(err.to_string().contains("unknown host stage"));
        }
        assert!(serde_json::from_str::<HostStage>("\"done\"").is_err());
    }

    #[test]
    fn logs_state_wire_strings() {
        let wire: Vec<String> = LogsState::ALL.iter().map(|s| s.to_string()).collect();
        assert_eq!(wire, ["requested", "collecting", "completed", "timeout"]);
        for state in LogsState::ALL {
            assert_eq!(state.as_str().parse::<LogsState>().unwrap(), state);
            let json = serde_json::to_string(&state).unwrap();
            assert_eq!(serde_json::from_str::<LogsState>(&json).unwrap(), state);
        }
        assert!("Requested".parse::<LogsState>().is_err());
        assert!("".parse::<LogsState>().is_err());
    }
}
