//! OLM operators for the assisted-service invoker (`waitForOLMOperators`) and the ABI
//! invoker (`PostInstallConfigsK8sClient`): wait for the operators' CSVs, apply their post
//! manifests, wait for the CSVs to succeed, and mark the operators still pending `failed` when
//! a wait gives up.
//!
//! **Why the manifests go through `oc apply`.** They are arbitrary objects chosen by the service
//! and the controller's ServiceAccount is only granted what its own calls need
//! (`cluster/rbac.rs`); Go applies them with the admin `kubeconfig-noingress` by running `bash
//! -c "oc --kubeconfig=<K> apply -f <file>"`. This keeps the ClusterApi (and its RBAC proof)
//! free of a generic "apply anything" call.
//!
//! As in Go, a `failed` CSV is never reported by the CSV wait (see
//! [`is_available`](super::operators::is_available)): OLM operators only become `failed` through
//! [`mark_timed_out`].

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use super::OrLog;
use crate::clock::{retry_attempts, PollError};
use crate::clock::{Clock, Stop};
use crate::controller::service::{
    operators_for_version, ControllerService, CUSTOM_MANIFESTS_FILE, KUBECONFIG_NOINGRESS,
};
use crate::controller::status::ControllerStatus;
use crate::controller::tasks::completion::report_stage;
use crate::controller::tasks::operators::{check_stage_timed_out, is_available, olm_status};
use crate::host::commands::CommandRunner;
use crate::kube::ClusterApi;
use crate::service::{FinalizingStage, MonitoredOperator, OperatorMonitorReport, OperatorStatus};

/// The namespace whose failed Jobs the early-setup cleanup deletes.
pub(crate) const MARKETPLACE_NAMESPACE: &str = "openshift-marketplace";
pub(crate) const TIMED_OUT_INFO: &str = "Waiting for operator timed out";
pub(crate) const OLM_TYPE: &str = "olm";

/// `waitForOLMOperators`' OLM-list fetch poll.
const FETCH_INTERVAL: Duration = Duration::from_secs(10);
/// Its CSV waits, apply poll, stage retries and timeout-marking retries.
const WAIT_INTERVAL: Duration = Duration::from_secs(30);
/// Attempts of the timeout marking.
const MARKING_ATTEMPTS: u32 = 10;

/// The OLM early-setup cleanup of one operator: delete the failed Jobs of
/// `openshift-marketplace` (`status.failed > 0` or a True `Failed` condition) and the `Failed`
/// InstallPlans owned by its subscription. Errors are only warnings.
pub(crate) fn cleanup(cluster: &dyn ClusterApi, op: &MonitoredOperator) {
    let jobs = cluster.list_jobs(MARKETPLACE_NAMESPACE);
    for job in jobs
        .or_warn(format_args!("listing the jobs of {MARKETPLACE_NAMESPACE}"))
        .unwrap_or_default()
    {
        let failed_cond = job.conditions.iter().find(|c| c.type_ == "Failed");
        if job.failed > 0 || failed_cond.is_some_and(|c| c.status == "True") {
            let (ns, name) = (&job.namespace, &job.name);
            tracing::info!("deleting failed job {ns}/{name}");
            let deleted = cluster.delete_job(ns, name);
            deleted.or_warn(format_args!("deleting job {ns}/{name}"));
        }
    }
    let plans = cluster.list_install_plans(&op.namespace);
    for plan in plans
        .or_warn(format_args!(
            "listing the install plans of {}",
            op.namespace
        ))
        .unwrap_or_default()
    {
        if plan.phase == "Failed" && plan.owner_names.contains(&op.subscription_name) {
            let (ns, name) = (&plan.namespace, &plan.name);
            tracing::info!("deleting failed install plan {ns}/{name}");
            let deleted = cluster.delete_install_plan(ns, name);
            deleted.or_warn(format_args!("deleting install plan {ns}/{name}"));
        }
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
    let found = cluster
        .get_csv(ns, &csv)
        .or_warn(format_args!("reading CSV {ns}/{csv}"));
    if found.as_ref().is_some_and(Option::is_none) {
        tracing::info!("operator {}: CSV {ns}/{csv} not created yet", op.name);
    }
    found.flatten().is_some()
}

/// Every operator is initialized (checked in order; the first that is not ends the check).
pub(crate) fn all_initialized(cluster: &dyn ClusterApi, ops: &[MonitoredOperator]) -> bool {
    ops.iter().all(|op| is_initialized(cluster, op))
}

/// The service's OLM operators (with the 4.8 `odf`→`ocs` rename); with `pending_only`, those
/// whose record is neither `available` nor `failed`.
pub(crate) fn olm_operators(
    service: &dyn ControllerService,
    openshift_version: &str,
    use_cache: bool,
    pending_only: bool,
) -> Result<Vec<MonitoredOperator>> {
    let list = operators_for_version(service.monitored_operators(use_cache)?, openshift_version)?;
    let done = [OperatorStatus::Available, OperatorStatus::Failed].map(|s| s.to_string());
    Ok(list
        .into_iter()
        .filter(|o| o.operator_type == OLM_TYPE)
        .filter(|o| !pending_only || !done.contains(&o.status))
        .collect())
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

/// Every operator initialized (re-running the cleanup), the version parsable, then each
/// manifest of an initialized operator decoded and applied; false if any step failed (the
/// others are still tried).
pub(crate) fn apply_manifests(
    cluster: &dyn ClusterApi,
    oc: &dyn CommandRunner,
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
        let name = match name.as_str() {
            "odf" if (major, minor) == (4, 8) => "ocs",
            name => name,
        };
        if !ops.iter().any(|o| o.name == name) {
            tracing::info!("skipping the manifest of {name}: not an initialized operator");
            continue;
        }
        let applied = data_url::forgiving_base64::decode_to_vec(content.as_bytes())
            .map_err(|err| anyhow!("decoding: {err:?}"))
            .and_then(|yaml| {
                let mut file = tempfile::Builder::new()
                    .prefix("operator-manifest")
                    .tempfile()?;
                file.write_all(&yaml)?;
                file.flush()?;
                let (k, m) = (kubeconfig.display(), file.path().display());
                let line = format!("oc --kubeconfig={k} apply -f {m}");
                let out = oc.run("bash", &["-c", &line])?;
                tracing::info!("applied {m}: {out}");
                Ok(())
            });
        let what = format_args!("applying the manifest of {name}");
        ok &= applied.or_warn(what).is_some();
    }
    ok
}

/// One attempt: download `custom_manifests.json` and `kubeconfig-noingress` into a temp dir
/// and [`apply_manifests`].
pub(crate) fn apply_from_service(
    cluster: &dyn ClusterApi,
    service: &dyn ControllerService,
    oc: &dyn CommandRunner,
    openshift_version: &str,
    ops: &[MonitoredOperator],
) -> bool {
    let attempt = || -> Result<bool> {
        let dir = tempfile::Builder::new()
            .prefix("controller-custom-manifests-")
            .tempdir()?;
        let manifests_path = dir.path().join(CUSTOM_MANIFESTS_FILE);
        let kubeconfig = dir.path().join(KUBECONFIG_NOINGRESS);
        service.download_custom_manifests(&manifests_path)?;
        service.download_kubeconfig_noingress(&kubeconfig)?;
        let manifests = parse_custom_manifests(&std::fs::read(&manifests_path)?)?;
        Ok(apply_manifests(
            cluster,
            oc,
            openshift_version,
            ops,
            &manifests,
            &kubeconfig,
        ))
    };
    let applied = attempt().or_warn("applying the OLM manifests from the service");
    applied.unwrap_or(false)
}

/// The timeout marking: every OLM operator still pending (fresh list) joins the operator-error
/// set and is reported `failed` / [`TIMED_OUT_INFO`]. An error aborts the attempt.
pub(crate) fn mark_timed_out(
    service: &dyn ControllerService,
    status: &ControllerStatus,
    openshift_version: &str,
) -> Result<()> {
    for op in olm_operators(service, openshift_version, false, true)? {
        tracing::warn!("operator {} timed out; reporting it failed", op.name);
        status.operator_error(&op.name);
        service.report_operator_status(&OperatorMonitorReport {
            name: op.name,
            version: op.version,
            status: Some(OperatorStatus::Failed),
            status_info: TIMED_OUT_INFO.to_string(),
        })?;
    }
    Ok(())
}

/// `waitForOLMOperators`: reports its stages, and returns the errors joined (the caller only
/// logs them).
#[allow(clippy::too_many_arguments)]
pub(crate) fn wait_for_olm_operators(
    clock: &dyn Clock,
    stop: &dyn Stop,
    cluster: &dyn ClusterApi,
    service: &dyn ControllerService,
    oc: &dyn CommandRunner,
    status: &ControllerStatus,
    version: &str,
) -> Result<()> {
    use FinalizingStage::*;
    let interval = WAIT_INTERVAL;
    let stage = |s| report_stage(clock, stop, service, s, interval);
    // A poll whose every false round asks whether the service timed the stage out; if so, it
    // ends as cancelled.
    let poll = |interval, f: &mut dyn FnMut() -> bool, s| {
        let mut timed_out = false;
        crate::clock::poll(clock, stop, interval, None, || {
            f() || {
                timed_out = check_stage_timed_out(service, s);
                timed_out
            }
        })?;
        if timed_out {
            Err(PollError::Canceled)
        } else {
            Ok(())
        }
    };

    stage(WaitingForOlmOperatorsCsvInitialization);
    let mut operators = Vec::new();
    let fetch = &mut || {
        let list = olm_operators(service, version, true, false);
        list.or_warn("fetching the OLM operators")
            .map(|list| operators = list)
            .is_some()
    };
    if let Err(e) = poll(
        FETCH_INTERVAL,
        fetch,
        WaitingForOlmOperatorsCsvInitialization,
    ) {
        return Err(anyhow!("Failed to fetch monitored operators: {e}"));
    }
    if operators.is_empty() {
        tracing::info!("No OLM operators found.");
        return Ok(());
    }

    let mut errors: Vec<String> = Vec::new();
    let initialized = &mut || all_initialized(cluster, &operators);
    if let Err(e) = poll(
        interval,
        initialized,
        WaitingForOlmOperatorsCsvInitialization,
    ) {
        errors.push(format!(
            "Failed to wait for some of the OLM operators to be initialized: {e}"
        ));
    }

    stage(ApplyingOlmManifests);
    let apply = &mut || apply_from_service(cluster, service, oc, version, &operators);
    if let Err(e) = poll(interval, apply, ApplyingOlmManifests) {
        errors.push(format!("Stopped applying post manifests: {e}"));
    }

    // The CSV wait: the pending OLM operators (fresh list) until all are available.
    stage(WaitingForOlmOperatorsCsv);
    let waited = olm_operators(service, version, false, true).and_then(|mut pending| {
        let available = &mut || {
            pending.retain(|op| {
                let read = || olm_status(cluster, op);
                !is_available(service, version, &op.name, true, false, read)
            });
            pending.is_empty()
        };
        Ok(poll(interval, available, WaitingForOlmOperatorsCsv)?)
    });
    if let Err(e) = waited {
        errors.push(format!(
            "Stopped waiting for OLM operators be installed: {e}"
        ));
    }

    if errors.is_empty() {
        return Ok(());
    }
    let marked = retry_attempts(clock, stop, MARKING_ATTEMPTS, interval, || {
        mark_timed_out(service, status, version)
    });
    marked.or_warn("marking the timed-out OLM operators");
    Err(anyhow!(errors.join("\n")))
}

/// `PostInstallConfigsK8sClient`: the ConfigMap (in the controller's namespace) carrying the OLM
/// manifests for ABI; its `<operator>.metadata.yaml` keys describe one operator each.
pub(crate) const OLM_MANIFESTS_CONFIG_MAP: &str = "olm-operator-manifests";
/// The kubeconfig of the ABI SNO path.
pub(crate) const SNO_KUBECONFIG: &str = "/tmp/bootstrap-secrets/kubeconfig";

#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct OperatorMetadata {
    namespace: String,
    subscription_name: String,
    manifests: Vec<String>,
}

/// One round of `PostInstallConfigsK8sClient`; true ends the task (applied, a
/// Forbidden/Unauthorized read, or a malformed metadata file). `kubeconfig` gives the SNO file
/// or the reboots notifier's shared download (cached there once it succeeded).
fn abi_post_install_round(
    cluster: &dyn ClusterApi,
    oc: &dyn CommandRunner,
    namespace: &str,
    openshift_version: &str,
    kubeconfig: &dyn Fn() -> Result<PathBuf>,
) -> bool {
    let data = match cluster.get_config_map(namespace, OLM_MANIFESTS_CONFIG_MAP) {
        Ok(Some(data)) => data,
        Ok(None) => {
            tracing::info!("ConfigMap {namespace}/{OLM_MANIFESTS_CONFIG_MAP} not found yet");
            return false;
        }
        Err(err) => {
            if matches!(crate::kube::api_error_code(&err), Some(401 | 403)) {
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
        let Some(name) = key.strip_suffix(".metadata.yaml") else {
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
            let Some(content) = data.get(file) else {
                tracing::error!("{key} lists {file}, which the ConfigMap lacks");
                return false;
            };
            manifests.push((name.to_string(), content.clone()));
        }
        operators.push(MonitoredOperator {
            name: name.to_string(),
            namespace: meta.namespace,
            subscription_name: meta.subscription_name,
            operator_type: OLM_TYPE.to_string(),
            ..Default::default()
        });
    }
    let Some(path) = kubeconfig().or_warn("getting the kubeconfig") else {
        return false;
    };
    let version = openshift_version;
    let applied = apply_manifests(cluster, oc, version, &operators, &manifests, &path);
    if applied {
        tracing::info!("applied the OLM operator manifests");
    }
    applied
}

/// `PostInstallConfigsK8sClient`: [`abi_post_install_round`] every `interval` until it
/// ends the task or `stop` fires. No finalizing stages, no completion.
#[allow(clippy::too_many_arguments)]
pub(crate) fn abi_post_install(
    clock: &dyn Clock,
    stop: &dyn Stop,
    cluster: &dyn ClusterApi,
    oc: &dyn CommandRunner,
    namespace: &str,
    openshift_version: &str,
    kubeconfig: &dyn Fn() -> Result<PathBuf>,
    interval: Duration,
) -> bool {
    crate::clock::poll(clock, stop, interval, None, || {
        abi_post_install_round(cluster, oc, namespace, openshift_version, kubeconfig)
    })
    .is_ok()
}

#[cfg(test)]
mod tests;
