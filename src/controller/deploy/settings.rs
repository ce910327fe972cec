//! What the controller's manifests are built from, and the metadata they share.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

use crate::config::InstallerConfig;
use crate::openshift::{CONTROLLER_JOB, CONTROLLER_NAMESPACE};

pub(crate) const NAMESPACE: &str = CONTROLLER_NAMESPACE;
pub(crate) const NAME: &str = CONTROLLER_JOB;

/// What the manifests carry.
#[derive(Clone)]
pub(crate) struct ControllerSettings {
    pub cluster_id: String,
    pub inventory_url: String,
    pub skip_cert_verification: bool,
    pub ca_cert_path: String,
    pub check_cluster_version: bool,
    pub control_plane_count: i64,
    pub must_gather_image: String,
    pub controller_image: String,
    pub openshift_version: String,
    pub notify_num_reboots: bool,
    pub service_ips: Vec<String>,
    pub token: String,
    pub single_node: bool,
}

impl std::fmt::Debug for ControllerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerSettings")
            .field("cluster_id", &self.cluster_id)
            .field("controller_image", &self.controller_image)
            .field("single_node", &self.single_node)
            .finish_non_exhaustive()
    }
}

impl ControllerSettings {
    pub(crate) fn from_config(cfg: &InstallerConfig, token: &str, single_node: bool) -> Self {
        ControllerSettings {
            cluster_id: cfg.cluster_id.clone(),
            inventory_url: cfg.url.clone(),
            skip_cert_verification: cfg.insecure,
            ca_cert_path: cfg
                .cacert
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            check_cluster_version: cfg.check_cluster_version,
            control_plane_count: cfg.control_plane_count,
            must_gather_image: cfg.must_gather_image.clone(),
            controller_image: cfg.controller_image.clone(),
            openshift_version: cfg.openshift_version.clone(),
            notify_num_reboots: cfg.notify_num_reboots,
            service_ips: cfg
                .service_ips
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            token: token.to_string(),
            single_node,
        }
    }
}

/// A name and namespace.
pub(crate) fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        ..ObjectMeta::default()
    }
}

pub(crate) fn strings<const N: usize>(pairs: [(&str, &str); N]) -> BTreeMap<String, String> {
    pairs
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `app: assisted-installer-controller`, on the ConfigMap, the Secret and the controller's pod.
pub(crate) fn app_label() -> BTreeMap<String, String> {
    strings([("app", NAME)])
}

pub(crate) const CONFIG_MAP_NAME: &str = "assisted-installer-controller-config";
pub(crate) const SECRET_NAME: &str = "assisted-installer-controller-secret";
