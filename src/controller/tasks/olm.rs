//! OLM operators for the assisted-service invoker (`waitForOLMOperators`): wait for the operators' CSVs to exist,
//! apply the operators' post manifests, wait for the CSVs to succeed, and mark the operators
//! still pending as `failed` when a wait gives up. [`wait_for_olm_operators`] is shaped to be
//! the OLM closure of [`post_install_configs`](super::completion::post_install_configs); its
//! error is only logged there.
//!
//! **Why the manifests go through `oc apply`.** The manifests are arbitrary objects chosen by the
//! service (operator CRs of any kind). The controller's ServiceAccount is granted only the
//! narrow set of verbs and resources its own calls need (`cluster/rbac.rs`), so it cannot create
//! them; Go applies them with the admin `kubeconfig-noingress` downloaded from the service, by
//! running `oc apply`. We keep that behind the narrow [`ManifestApplier`] trait so that the
//! ClusterApi (and its RBAC proof) never grows a generic "apply anything" call, and the tests
//! can record applies without a binary. [`OcApplier`] runs `bash -c "oc --kubeconfig=<K>
//! apply -f <file>"` through the crate's [`CommandRunner`].
//!
//! As in Go, a `failed` CSV is never reported by the CSV wait (see
//! [`OlmHandler`](super::operators::OlmHandler)); OLM operators only become `failed` through
//! the timeout marking ([`mark_timed_out`]).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use crate::clock::{poll_with_cancel, retry_attempts};
use crate::clock::{Clock, Stop};
use crate::controller::service::{operators_for_version, ControllerService};
use crate::controller::status::ControllerStatus;
use crate::controller::tasks::completion::report_stage;
use crate::controller::tasks::operators::{check_stage_timed_out, is_available, OlmHandler};
use crate::host::commands::CommandRunner;
use crate::kube::{ClusterApi, Job};
use crate::service::{FinalizingStage, MonitoredOperator, OperatorMonitorReport, OperatorStatus};

/// The namespace whose failed Jobs the early-setup cleanup deletes.
pub(crate) const MARKETPLACE_NAMESPACE: &str = "openshift-marketplace";
/// The `status_info` of the timeout marking.
pub(crate) const TIMED_OUT_INFO: &str = "Waiting for operator timed out";
/// The `operator_type` of an OLM operator.
pub(crate) const OLM_TYPE: &str = "olm";
/// The custom-manifests file of the service.
pub(crate) const CUSTOM_MANIFESTS_FILE: &str = "custom_manifests.json";
/// The kubeconfig the manifests are applied with.
pub(crate) const KUBECONFIG_NOINGRESS_FILE: &str = "kubeconfig-noingress";

/// Applies one manifest file with an admin kubeconfig (see the module doc for why this is not a
/// ClusterApi call).
pub trait ManifestApplier: Send + Sync {
    fn apply(&self, kubeconfig: &Path, manifest: &Path) -> Result<()>;
}

/// `bash -c "oc --kubeconfig=<K> apply -f <file>"`, as Go runs it.
pub(crate) struct OcApplier {
    pub(crate) runner: Arc<dyn CommandRunner>,
}

impl ManifestApplier for OcApplier {
    fn apply(&self, kubeconfig: &Path, manifest: &Path) -> Result<()> {
        let line = format!(
            "oc --kubeconfig={} apply -f {}",
            kubeconfig.display(),
            manifest.display()
        );
        let out = self
            .runner
            .run("bash", &["-c", &line])
            .map_err(|e| anyhow!("{e}"))?;
        tracing::info!("applied {}: {out}", manifest.display());
        Ok(())
    }
}

/// The settings of `waitForOLMOperators`; [`OlmSettings::new`] has Go's intervals.
#[derive(Debug, Clone)]
pub(crate) struct OlmSettings {
    pub(crate) openshift_version: String,
    /// The OLM-list fetch poll (10 s).
    pub(crate) fetch_interval: Duration,
    /// The CSV waits, the apply poll, stage retries and the marking retries (30 s).
    pub(crate) wait_interval: Duration,
    /// Attempts of the timeout marking (10).
    pub(crate) marking_attempts: u32,
}

impl OlmSettings {
    pub(crate) fn new(openshift_version: &str) -> OlmSettings {
        OlmSettings {
            openshift_version: openshift_version.to_string(),
            fetch_interval: Duration::from_secs(10),
            wait_interval: Duration::from_secs(30),
            marking_attempts: 10,
        }
    }
}

/// A Job has failed: `status.failed > 0`, or its first `Failed` condition is True.
pub(crate) fn job_failed(job: &Job) -> bool {
    job.failed > 0
        || job
            .conditions
            .iter()
            .find(|c| c.type_ == "Failed")
            .is_some_and(|c| c.status == "True")
}

/// The OLM early-setup cleanup of one operator: delete the failed Jobs of
/// `openshift-marketplace` and the `Failed` InstallPlans owned by its subscription. Errors are
/// only warnings.
pub(crate) fn cleanup(cluster: &dyn ClusterApi, op: &MonitoredOperator) {
    match cluster.list_jobs(MARKETPLACE_NAMESPACE) {
        Ok(jobs) => {
            for job in jobs.iter().filter(|j| job_failed(j)) {
                tracing::info!("deleting failed job {}/{}", job.namespace, job.name);
                if let Err(err) = cluster.delete_job(&job.namespace, &job.name) {
                    tracing::warn!("deleting job {}/{}: {err:#}", job.namespace, job.name);
                }
            }
        }
        Err(err) => tracing::warn!("listing the jobs of {MARKETPLACE_NAMESPACE}: {err:#}"),
    }
    match cluster.list_install_plans(&op.namespace) {
        Ok(plans) => {
            let owned = plans
                .iter()
                .filter(|p| p.owner_names.contains(&op.subscription_name));
            for plan in owned.filter(|p| p.phase == "Failed") {
                tracing::info!(
                    "deleting failed install plan {}/{}",
                    plan.namespace,
                    plan.name
                );
                if let Err(err) = cluster.delete_install_plan(&plan.namespace, &plan.name) {
                    tracing::warn!(
                        "deleting install plan {}/{}: {err:#}",
                        plan.namespace,
                        plan.name
                    );
                }
            }
        }
        Err(err) => tracing::warn!("listing the install plans of {}: {err:#}", op.namespace),
    }
}

/// Initialized: after the cleanup, the Subscription names a current CSV and that CSV exists
/// (its phase does not matter).
pub(crate) fn is_initialized(cluster: &dyn ClusterApi, op: &MonitoredOperator) -> bool {
    cleanup(cluster, op);
    let (ns, sub) = (&op.namespace, &op.subscription_name);
    let csv = match cluster.get_subscription(ns, sub) {
        Ok(Some(s)) if !s.current_csv.is_empty() => s.current_csv,
        Ok(_) => {
            tracing::info!(
                "operator {}: subscription {ns}/{sub} has no CSV yet",
                op.name
            );
            return false;
        }
        Err(err) => {
            tracing::warn!("reading subscription {ns}/{sub}: {err:#}");
            return false;
        }
    };
    match cluster.get_csv(ns, &csv) {
        Ok(Some(_)) => true,
        Ok(None) => {
            tracing::info!("operator {}: CSV {ns}/{csv} not created yet", op.name);
            false
        }
        Err(err) => {
            tracing::warn!("reading CSV {ns}/{csv}: {err:#}");
            false
        }
    }
}

/// Every operator is initialized (checked in order; the first that is not ends the check).
pub(crate) fn all_initialized(cluster: &dyn ClusterApi, ops: &[MonitoredOperator]) -> bool {
    ops.iter().all(|op| is_initialized(cluster, op))
}

/// The service's OLM operators (`operator_type == "olm"`, with the 4.8 `odf`→`ocs` rename).
pub(crate) fn olm_operators(
    service: &dyn ControllerService,
    openshift_version: &str,
    use_cache: bool,
) -> Result<Vec<MonitoredOperator>> {
    let list = operators_for_version(service.monitored_operators(use_cache)?, openshift_version)?;
    Ok(list
        .into_iter()
        .filter(|o| o.operator_type == OLM_TYPE)
        .collect())
}

/// The operators whose record is neither `available` nor `failed`.
fn pending(ops: Vec<MonitoredOperator>) -> Vec<MonitoredOperator> {
    let done = [
        OperatorStatus::Available.to_string(),
        OperatorStatus::Failed.to_string(),
    ];
    ops.into_iter()
        .filter(|o| !done.contains(&o.status))
        .collect()
}

/// `custom_manifests.json`: a JSON array of `{Name, Content}` (keys matched case-insensitively,
/// as Go's decoder does), content base64 YAML. Returns `(name, content)` in order.
pub(crate) fn parse_custom_manifests(bytes: &[u8]) -> Result<Vec<(String, String)>> {
    let items: Vec<serde_json::Map<String, Value>> =
        serde_json::from_slice(bytes).context("parsing the custom manifests")?;
    let field = |item: &serde_json::Map<String, Value>, key: &str| -> Result<String> {
        match item.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)) {
            None | Some((_, Value::Null)) => Ok(String::new()),
            Some((_, Value::String(s))) => Ok(s.clone()),
            Some((k, v)) => Err(anyhow!("custom manifest field {k} is not a string: {v}")),
        }
    };
    items
        .iter()
        .map(|item| Ok((field(item, "name")?, field(item, "content")?)))
        .collect()
}

/// *Apply manifests* (`waitForOLMOperators`): every operator initialized (re-running the cleanup), the version
/// parsable, then each manifest of an initialized operator decoded and applied; false if any
/// step failed (the others are still tried).
pub(crate) fn apply_manifests(
    cluster: &dyn ClusterApi,
    applier: &dyn ManifestApplier,
    openshift_version: &str,
    ops: &[MonitoredOperator],
    manifests: &[(String, String)],
    kubeconfig: &Path,
) -> bool {
    if !all_initialized(cluster, ops) {
        tracing::info!("not every OLM operator is initialized yet");
        return false;
    }
    let Some((major, minor, _)) = crate::kube::install_config::parse_version(openshift_version)
    else {
        tracing::warn!("invalid OPENSHIFT_VERSION {openshift_version:?}");
        return false;
    };
    let mut ok = true;
    for (name, content) in manifests {
        let name = if (major, minor) == (4, 8) && name == "odf" {
            "ocs"
        } else {
            name.as_str()
        };
        if !ops.iter().any(|o| o.name == name) {
            tracing::info!("skipping the manifest of {name}: not an initialized operator");
            continue;
        }
        let yaml = match data_url::forgiving_base64::decode_to_vec(content.as_bytes()) {
            Ok(y) => y,
            Err(err) => {
                tracing::warn!("decoding the manifest of {name}: {err:?}");
                ok = false;
                continue;
            }
        };
        if let Err(err) = write_and_apply(applier, kubeconfig, &yaml) {
            tracing::warn!("applying the manifest of {name}: {err:#}");
            ok = false;
        }
    }
    ok
}

fn write_and_apply(applier: &dyn ManifestApplier, kubeconfig: &Path, yaml: &[u8]) -> Result<()> {
    let mut file = tempfile::Builder::new()
        .prefix("operator-manifest")
        .tempfile()
        .context("creating the manifest file")?;
    file.write_all(yaml).context("writing the manifest file")?;
    file.flush()?;
    applier.apply(kubeconfig, file.path())
}

/// *Apply-from-service* (one attempt): download `custom_manifests.json` and
/// `kubeconfig-noingress` into a temp dir and [`apply_manifests`].
pub(crate) fn apply_from_service(
    cluster: &dyn ClusterApi,
    service: &dyn ControllerService,
    applier: &dyn ManifestApplier,
    openshift_version: &str,
    ops: &[MonitoredOperator],
) -> bool {
    let attempt = || -> Result<bool> {
        let dir = tempfile::Builder::new()
            .prefix("controller-custom-manifests-")
            .tempdir()
            .context("creating the manifests dir")?;
        let manifests_path = dir.path().join(CUSTOM_MANIFESTS_FILE);
        let kubeconfig = dir.path().join(KUBECONFIG_NOINGRESS_FILE);
        service.download_custom_manifests(&manifests_path)?;
        service.download_kubeconfig_noingress(&kubeconfig)?;
        let bytes = std::fs::read(&manifests_path).context("reading the custom manifests")?;
        let manifests = parse_custom_manifests(&bytes)?;
        Ok(apply_manifests(
            cluster,
            applier,
            openshift_version,
            ops,
            &manifests,
            &kubeconfig,
        ))
    };
    attempt().unwrap_or_else(|err| {
        tracing::warn!("applying the OLM manifests from the service: {err:#}");
        false
    })
}

/// The timeout marking of `waitForOLMOperators`: for every OLM operator still neither `available` nor `failed` (fresh list), add
/// it to the operator-error set and report it `failed` / [`TIMED_OUT_INFO`]. An error aborts
/// the attempt.
pub(crate) fn mark_timed_out(
    service: &dyn ControllerService,
    status: &ControllerStatus,
    openshift_version: &str,
) -> Result<()> {
    for op in pending(olm_operators(service, openshift_version, false)?) {
        tracing::warn!("operator {} timed out; reporting it failed", op.name);
        status.operator_error(&op.name);
        service.report_operator_status(&OperatorMonitorReport {
            name: op.name.clone(),
            version: op.version.clone(),
            status: Some(OperatorStatus::Failed),
            status_info: TIMED_OUT_INFO.to_string(),
        })?;
    }
    Ok(())
}

/// `waitForOLMOperators`: the OLM step of post-install. Reports its stages, and returns the remembered errors
/// joined (the caller only logs them).
#[allow(clippy::too_many_arguments)]
pub(crate) fn wait_for_olm_operators(
    clock: &dyn Clock,
    stop: &dyn Stop,
    cluster: &dyn ClusterApi,
    service: &dyn ControllerService,
    applier: &dyn ManifestApplier,
    status: &ControllerStatus,
    settings: &OlmSettings,
) -> Result<()> {
    let version = settings.openshift_version.as_str();
    let interval = settings.wait_interval;
    let stage = |s| report_stage(clock, stop, service, s, interval);
    let timed_out = |s| move || check_stage_timed_out(service, s);

    stage(FinalizingStage::WaitingForOlmOperatorsCsvInitialization);
    let mut operators = None;
    let fetched = poll_with_cancel(
        clock,
        stop,
        settings.fetch_interval,
        None,
        || match olm_operators(service, version, true) {
            Ok(list) => {
                operators = Some(list);
                true
            }
            Err(err) => {
                tracing::warn!("fetching the OLM operators: {err:#}");
                false
            }
        },
        timed_out(FinalizingStage::WaitingForOlmOperatorsCsvInitialization),
    );
    let operators = match (fetched, operators) {
        (Ok(()), Some(list)) => list,
        (Err(e), _) => return Err(anyhow!("Failed to fetch monitored operators: {e}")),
        (Ok(()), None) => unreachable!("poll succeeded without a list"),
    };
    if operators.is_empty() {
        tracing::info!("No OLM operators found.");
        return Ok(());
    }

    let mut errors: Vec<String> = Vec::new();
    if let Err(e) = poll_with_cancel(
        clock,
        stop,
        interval,
        None,
        || all_initialized(cluster, &operators),
        timed_out(FinalizingStage::WaitingForOlmOperatorsCsvInitialization),
    ) {
        errors.push(format!(
            "Failed to wait for some of the OLM operators to be initialized: {e}"
        ));
    }

    stage(FinalizingStage::ApplyingOlmManifests);
    if let Err(e) = poll_with_cancel(
        clock,
        stop,
        interval,
        None,
        || apply_from_service(cluster, service, applier, version, &operators),
        timed_out(FinalizingStage::ApplyingOlmManifests),
    ) {
        errors.push(format!("Stopped applying post manifests: {e}"));
    }

    stage(FinalizingStage::WaitingForOlmOperatorsCsv);
    if let Err(e) = wait_for_csvs(clock, stop, cluster, service, version, interval) {
        errors.push(format!(
            "Stopped waiting for OLM operators be installed: {e}"
        ));
    }

    if errors.is_empty() {
        return Ok(());
    }
    if let Err(err) = retry_attempts(clock, stop, settings.marking_attempts, interval, || {
        mark_timed_out(service, status, version)
    }) {
        tracing::warn!("marking the timed-out OLM operators: {err:#}");
    }
    Err(anyhow!(errors.join("\n")))
}

/// The CSV wait of `waitForOLMOperators`: the pending OLM operators (fresh list) checked every `interval` until all are
/// available, the stage times out or `stop` fires.
fn wait_for_csvs(
    clock: &dyn Clock,
    stop: &dyn Stop,
    cluster: &dyn ClusterApi,
    service: &dyn ControllerService,
    version: &str,
    interval: Duration,
) -> Result<()> {
    let remaining = pending(olm_operators(service, version, false)?);
    let mut handlers: Vec<OlmHandler> = remaining
        .into_iter()
        .map(|op| OlmHandler {
            cluster,
            name: op.name,
            namespace: op.namespace,
            subscription: op.subscription_name,
        })
        .collect();
    poll_with_cancel(
        clock,
        stop,
        interval,
        None,
        || {
            handlers.retain_mut(|h| !is_available(service, version, h, true));
            handlers.is_empty()
        },
        || check_stage_timed_out(service, FinalizingStage::WaitingForOlmOperatorsCsv),
    )?;
    Ok(())
}

/// `PostInstallConfigsK8sClient`: the ConfigMap (in the controller's namespace) carrying the OLM manifests for ABI.
pub(crate) const OLM_MANIFESTS_CONFIG_MAP: &str = "olm-operator-manifests";
/// The data keys describing one operator end with this.
pub(crate) const METADATA_SUFFIX: &str = ".metadata.yaml";
/// The kubeconfig of the ABI SNO path.
pub(crate) const SNO_KUBECONFIG: &str = "/tmp/bootstrap-secrets/kubeconfig";

/// One `<operator>.metadata.yaml` of [`OLM_MANIFESTS_CONFIG_MAP`].
#[derive(Debug, Default, serde::Deserialize)]
struct OperatorMetadata {
    #[serde(default)]
    namespace: String,
    #[serde(default, rename = "subscriptionName")]
    subscription_name: String,
    #[serde(default)]
    manifests: Vec<String>,
}

/// Where the ABI post-install gets its kubeconfig: the SNO file, or the notifier's shared
/// download (the reboots notifier), asked until it succeeds and then reused.
pub(crate) enum AbiKubeconfig<'a> {
    Fixed(std::path::PathBuf),
    Download(&'a mut dyn FnMut() -> Result<std::path::PathBuf>),
}

/// One round of `PostInstallConfigsK8sClient`; true ends the task (applied, or a Forbidden/Unauthorized read, or a
/// malformed metadata file).
pub(crate) fn abi_post_install_round(
    cluster: &dyn ClusterApi,
    applier: &dyn ManifestApplier,
    namespace: &str,
    openshift_version: &str,
    kubeconfig: &mut AbiKubeconfig<'_>,
) -> bool {
    let data = match cluster.get_config_map(namespace, OLM_MANIFESTS_CONFIG_MAP) {
        Ok(Some(data)) => data,
        Ok(None) => {
            tracing::info!("ConfigMap {namespace}/{OLM_MANIFESTS_CONFIG_MAP} not found yet");
            return false;
        }
        Err(err) => {
            let code = crate::kube::api_error_code(&err);
            if matches!(code, Some(401) | Some(403)) {
                tracing::error!("reading the OLM manifests ConfigMap: {err:#}; giving up");
                return true;
            }
            tracing::warn!("reading the OLM manifests ConfigMap: {err:#}");
            return false;
        }
    };
    let mut operators = Vec::new();
    let mut manifests = Vec::new();
    for (key, value) in &data {
        let Some(name) = key.strip_suffix(METADATA_SUFFIX) else {
            continue;
        };
        let meta: OperatorMetadata = match serde_saphyr::from_str(value) {
            Ok(m) => m,
            Err(err) => {
                tracing::warn!("parsing {key}: {err}; stopping");
                return true;
            }
        };
        for file in &meta.manifests {
            match data.get(file) {
                Some(content) => manifests.push((name.to_string(), content.clone())),
                None => {
                    tracing::error!("{key} lists {file}, which the ConfigMap lacks");
                    return false;
                }
            }
        }
        operators.push(MonitoredOperator {
            name: name.to_string(),
            namespace: meta.namespace,
            subscription_name: meta.subscription_name,
            operator_type: OLM_TYPE.to_string(),
            ..Default::default()
        });
    }
    let path = match kubeconfig {
        AbiKubeconfig::Fixed(path) => path.clone(),
        AbiKubeconfig::Download(get) => match get() {
            Ok(path) => {
                *kubeconfig = AbiKubeconfig::Fixed(path.clone());
                path
            }
            Err(err) => {
                tracing::warn!("getting the kubeconfig: {err:#}");
                return false;
            }
        },
    };
    if apply_manifests(
        cluster,
        applier,
        openshift_version,
        &operators,
        &manifests,
        &path,
    ) {
        tracing::info!("applied the OLM operator manifests");
        true
    } else {
        false
    }
}

/// `PostInstallConfigsK8sClient`: [`abi_post_install_round`] every `interval` until it
/// ends the task or `stop` fires. No finalizing stages, no completion.
#[allow(clippy::too_many_arguments)]
pub(crate) fn abi_post_install(
    clock: &dyn Clock,
    stop: &dyn Stop,
    cluster: &dyn ClusterApi,
    applier: &dyn ManifestApplier,
    namespace: &str,
    openshift_version: &str,
    mut kubeconfig: AbiKubeconfig<'_>,
    interval: Duration,
) -> bool {
    poll_with_cancel(
        clock,
        stop,
        interval,
        None,
        || {
            abi_post_install_round(
                cluster,
                applier,
                namespace,
                openshift_version,
                &mut kubeconfig,
            )
        },
        || false,
    )
    .is_ok()
}

#[cfg(test)]
mod tests;
