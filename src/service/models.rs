//! The parts of the assisted-service API models the installer reads or sends. Field names match
//! `swagger.yaml` exactly. Responses are parsed leniently: every field has a default, `null`
//! reads as the default, and unknown fields are ignored, so a newer service does not break us.

use serde::{Deserialize, Deserializer, Serialize};

use super::stages::{FinalizingStage, HostStage, LogsState, OperatorStatus};
use crate::config::Role;
use crate::wire::wire_enum;

/// A model of a response: `null` or a missing field gives the field's default (the Go service
/// may send `null` for an empty list or omit empty strings).
macro_rules! lenient {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident: $t:ty,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct $name {
            $($(#[$fm])* #[serde(deserialize_with = "null_as_default")] pub $f: $t,)*
        }
    };
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

lenient! {
    /// Swagger `cluster` (subset).
    pub struct Cluster {
        pub id: String,
        /// `Cluster`, `AddHostsCluster` (day 2) or `DisconnectedCluster`.
        pub kind: String,
        pub name: String,
        pub status: String,
        pub status_info: String,
        pub openshift_version: String,
        pub base_dns_domain: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub control_plane_count: Option<i64>,
        /// Deprecated by the service in favour of `control_plane_count`; `Full` or `None`.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub high_availability_mode: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub platform: Option<Platform>,
        /// A JSON document (as a string) of install-config overrides, e.g. vSphere credentials.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub install_config_overrides: Option<String>,
        /// Empty when fetched with `exclude-hosts=true`.
        pub hosts: Vec<Host>,
        /// The finalizing stage and whether the service timed it out (the controller's OLM waits).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub progress: Option<ClusterProgressInfo>,
    }
}

lenient! {
    /// Swagger `cluster-progress-info` (subset).
    pub struct ClusterProgressInfo {
        /// Kept as the wire string, as [`HostProgressInfo::current_stage`] is.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub finalizing_stage: Option<String>,
        pub finalizing_stage_timed_out: bool,
    }
}

impl Cluster {
    /// Day-2 cluster (hosts added to an existing OpenShift cluster).
    pub fn is_day2(&self) -> bool {
        self.kind == "AddHostsCluster"
    }

    /// One control-plane node: `control_plane_count` 1, or from a service that does not send
    /// it, `high_availability_mode` `None`. The service then gives its bootstrap host the
    /// single-node stage order.
    pub fn is_single_node(&self) -> bool {
        match self.control_plane_count {
            Some(n) => n == 1,
            None => self.high_availability_mode.as_deref() == Some("None"),
        }
    }

    /// `platform.type`, or "" when the service sent no platform.
    pub fn platform_type(&self) -> &str {
        self.platform.as_ref().map_or("", |p| p.type_.as_str())
    }
}

lenient! {
    /// Swagger `platform` (subset).
    pub struct Platform {
        /// `baremetal`, `nutanix`, `vsphere`, `none` or `external`.
        #[serde(rename = "type")]
        pub type_: String,
    }
}

lenient! {
    /// Swagger `host` (subset).
    pub struct Host {
        pub id: String,
        pub infra_env_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub cluster_id: Option<String>,
        /// `Host` or `AddToExistingClusterHost`.
        pub kind: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub status: Option<HostStatus>,
        pub status_info: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub role: Option<Role>,
        pub bootstrap: bool,
        pub requested_hostname: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub progress: Option<HostProgressInfo>,
        /// The agent's inventory, a JSON document as a string.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub inventory: Option<String>,
        /// Labels for the host's Node, a JSON object as a string ("" when none).
        pub node_labels: String,
        /// The MachineConfigPool the host joins ("" for the role's default).
        pub machine_config_pool_name: String,
    }
}

wire_enum! {
    /// A host's status (swagger `host.status`): the ones the installer and the controller act
    /// on. Open: any other status is kept as text.
    pub enum HostStatus: open {
        InstallingInProgress = "installing-in-progress",
        Installed = "installed",
        Error = "error",
        Disabled = "disabled",
    }
}

impl Host {
    /// Disabled hosts take no part in the installation: the Go installer skips them.
    pub fn is_disabled(&self) -> bool {
        self.status == Some(HostStatus::Disabled)
    }

    /// `progress.current_stage` as sent by the service ("" when absent).
    pub fn current_stage(&self) -> &str {
        self.progress
            .as_ref()
            .and_then(|p| p.current_stage.as_deref())
            .unwrap_or("")
    }

    /// `progress.current_stage` parsed; `None` when absent or not a stage this build knows.
    pub fn stage(&self) -> Option<HostStage> {
        self.current_stage().parse().ok()
    }
}

lenient! {
    /// Swagger `host-progress-info` (`host.progress` in responses; subset).
    pub struct HostProgressInfo {
        /// Kept as the wire string so that a stage added by a newer service does not fail the
        /// parse; read it typed through [`Host::stage`].
        #[serde(skip_serializing_if = "Option::is_none")]
        pub current_stage: Option<String>,
        pub progress_info: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub installation_percentage: Option<i64>,
    }
}

lenient! {
    /// Swagger `host-progress`: the body of `PUT …/hosts/{host_id}/progress`. Like the Go model
    /// (`omitempty` on both fields), an absent stage or an empty info is left out of the JSON.
    pub struct HostProgress {
        #[serde(skip_serializing_if = "Option::is_none")]
        pub current_stage: Option<HostStage>,
        #[serde(skip_serializing_if = "String::is_empty")]
        pub progress_info: String,
    }
}

/// Swagger `logs-progress-params`: the body of both logs-progress updates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LogsProgressParams {
    pub logs_state: LogsState,
}

lenient! {
    /// Swagger `monitored-operator` (subset): an element of `GET …/monitored-operators`.
    pub struct MonitoredOperator {
        pub name: String,
        pub version: String,
        pub namespace: String,
        pub subscription_name: String,
        /// `builtin` or `olm`.
        pub operator_type: String,
        /// `failed`, `progressing`, `available`, or "" before the first report.
        pub status: String,
        pub status_info: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub timeout_seconds: Option<i64>,
    }
}

/// Swagger `operator-monitor-report`: the body of `PUT …/monitored-operators`. Like the Go
/// model (`omitempty` everywhere), empty fields are left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OperatorMonitorReport {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<OperatorStatus>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status_info: String,
}

/// Swagger `cluster-finalizing-progress`: the body of `PUT /v2/clusters/{id}/progress`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClusterFinalizingProgress {
    pub finalizing_stage: FinalizingStage,
}

/// Swagger `completion-params`: the body of `complete-installation`. `error_info` and `data`
/// are left out when empty, as the Go model's `omitempty` does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionParams {
    pub is_success: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error_info: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Swagger `event` (the fields a client sets): the body of `POST /v2/events`. Absent ids are
/// left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EventParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infra_env_id: Option<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `user` or `metrics`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub category: String,
    /// `info`, `warning`, `error` or `critical`.
    pub severity: String,
    pub message: String,
    /// RFC 3339.
    pub event_time: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The bodies of real calls: `every_call_sends_its_request_with_the_token_and_its_own_request_id`
    /// in tests/service_client.rs.
    #[test]
    fn an_empty_progress_body_is_an_empty_object() {
        assert_eq!(
            serde_json::to_string(&HostProgress::default()).unwrap(),
            "{}"
        );
    }

    #[test]
    fn cluster_parses_leniently() {
        let v = json!({
            "kind": "AddHostsCluster",
            "id": "8d5b5f4e-0000-4000-8000-000000000001",
            "href": "/api/assisted-install/v2/clusters/x",
            "image_info": {},
            "status": "installing",
            "status_info": "Installation in progress",
            "platform": {"type": "vsphere", "external": null},
            "install_config_overrides": "{\"platform\":{}}",
            "control_plane_count": 3,
            "hosts": null,
            "name": null,
            "some_future_field": [1, 2, 3]
        });
        let c: Cluster = serde_json::from_value(v).unwrap();
        assert!(c.is_day2());
        assert_eq!(c.platform_type(), "vsphere");
        assert_eq!(
            c.install_config_overrides.as_deref(),
            Some("{\"platform\":{}}")
        );
        assert_eq!(c.control_plane_count, Some(3));
        assert!(c.hosts.is_empty());
        assert_eq!(c.name, "");

        assert!(!c.is_single_node());
        let c: Cluster = serde_json::from_str("{}").unwrap();
        assert_eq!(c.platform_type(), "");
        assert!(!c.is_day2());
        assert!(!c.is_single_node());
        for v in [
            json!({"control_plane_count": 1, "high_availability_mode": "Full"}),
            json!({"high_availability_mode": "None"}),
        ] {
            let c: Cluster = serde_json::from_value(v).unwrap();
            assert!(c.is_single_node());
        }
    }

    #[test]
    fn host_parses_progress_and_inventory() {
        let v = json!({
            "kind": "Host",
            "id": "11111111-1111-4111-8111-111111111111",
            "infra_env_id": "22222222-2222-4222-8222-222222222222",
            "href": "",
            "status": "installing-in-progress",
            "status_info": "",
            "role": "master",
            "requested_hostname": "Master-0",
            "inventory": "{\"interfaces\":[]}",
            "progress": {
                "current_stage": "Done",
                "progress_info": "",
                "installation_percentage": 100,
                "stage_started_at": "2024-01-01T00:00:00Z"
            }
        });
        let h: Host = serde_json::from_value(v).unwrap();
        assert_eq!(h.current_stage(), "Done");
        assert_eq!(h.stage(), Some(HostStage::Done));
        assert_eq!(h.inventory.as_deref(), Some("{\"interfaces\":[]}"));
        assert_eq!(h.requested_hostname, "Master-0");
        assert_eq!(h.role, Some(Role::Master));
        assert_eq!(h.status, Some(HostStatus::InstallingInProgress));
        assert!(!h.is_disabled());

        let h: Host =
            serde_json::from_value(json!({"progress": {"current_stage": "Brand new"}})).unwrap();
        assert_eq!(h.current_stage(), "Brand new");
        assert_eq!(h.stage(), None);
        let h: Host = serde_json::from_value(json!({"id": "x"})).unwrap();
        assert_eq!(h.current_stage(), "");
        assert_eq!((h.role, h.status), (None, None));
        let h: Host = serde_json::from_value(
            json!({"role": "observer", "status": "brand-new", "bootstrap": null}),
        )
        .unwrap();
        assert_eq!(h.role, Some(Role::Other("observer".into())));
        assert_eq!(h.status, Some(HostStatus::Other("brand-new".into())));
        let h: Host = serde_json::from_value(json!({"status": "disabled", "role": null})).unwrap();
        assert!(h.is_disabled());
        assert_eq!(h.role, None);
    }
}
