//! The dry-run cluster-hosts file (`--dry-run-cluster-hosts-path`, env
//! `DRY_CLUSTER_HOSTS_PATH`): the hosts of a pretend cluster, each with the marker file its own
//! dry-run installer touches instead of rebooting. A host whose marker exists counts as
//! rebooted: its node is Ready, and it fetched its Ignition from the machine-config-server.
//!
//! ```json
//! [{"hostname": "master-1", "ip": "192.0.2.11", "rebootMarkerPath": "/tmp/m1/rebooted"}]
//! ```

use anyhow::{Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterHost {
    pub hostname: String,
    pub ip: String,
    pub reboot_marker_path: PathBuf,
}

impl ClusterHost {
    /// The host's dry-run installer has "rebooted" it.
    pub(crate) fn rebooted(&self) -> bool {
        self.reboot_marker_path.exists()
    }
}

/// Parses the file (Go: at start, and a parse error ends the installer).
pub(crate) fn load(path: &Path) -> Result<Vec<ClusterHost>> {
    let text = std::fs::read(path)
        .with_context(|| format!("reading the dry-run cluster hosts {}", path.display()))?;
    serde_json::from_slice(&text)
        .with_context(|| format!("parsing the dry-run cluster hosts {}", path.display()))
}

/// The hosts of `path` when given; none otherwise.
pub(crate) fn load_optional(path: Option<&Path>) -> Result<Vec<ClusterHost>> {
    path.map(load).transpose().map(Option::unwrap_or_default)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Go field names, reboots told from markers, errors naming the file.
    #[test]
    fn parses_the_go_field_names_and_tells_reboots_from_markers() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("m1-rebooted");
        std::fs::write(&marker, "").unwrap();
        let file = dir.path().join("hosts.json");
        let json = serde_json::json!([
            {"hostname": "master-1", "ip": "192.0.2.11", "rebootMarkerPath": marker, "extra": 1},
            {"hostname": "master-2", "ip": "192.0.2.12", "rebootMarkerPath": dir.path().join("m2")},
        ]);
        std::fs::write(&file, json.to_string()).unwrap();
        let hosts = load(&file).unwrap();
        assert_eq!(hosts.len(), 2);
        assert_eq!(hosts[0].hostname, "master-1");
        assert_eq!(hosts[0].ip, "192.0.2.11");
        assert!(hosts[0].rebooted());
        assert!(!hosts[1].rebooted());
        assert_eq!(load_optional(None).unwrap(), vec![]);
        assert_eq!(load_optional(Some(&file)).unwrap(), hosts);

        std::fs::write(&file, r#"[{"hostname": "m"}]"#).unwrap();
        let e = format!("{:#}", load(&file).unwrap_err());
        assert!(e.starts_with("parsing the dry-run cluster hosts "), "{e}");
        assert!(e.contains("hosts.json"), "{e}");
        let e = format!("{:#}", load(&dir.path().join("none.json")).unwrap_err());
        assert!(e.starts_with("reading the dry-run cluster hosts "), "{e}");
    }
}
