//! The controller's tasks (Go's `SetReadyState` to `waitForInstallation`), one file each,
//! built on the `kube` and `service` traits, the clock's waits and the shared `status`.

/// Go's general wait interval: the node-status, BMH and label rounds, CSR approval, waiting
/// for `finalizing` and the stage-report retries.
pub(crate) const GENERAL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

pub(crate) mod bmh;
pub(crate) mod completion;
pub(crate) mod csr;
pub(crate) mod dns_fix;
pub(crate) mod labels;
pub(crate) mod logs;
pub(crate) mod nodes;
pub(crate) mod olm;
pub(crate) mod operators;
pub(crate) mod ready;
pub(crate) mod reboots;
pub(crate) mod router_probe;

/// A call's value, or `None` once its error is logged as "`what`: error": a task's round logs
/// what failed and tries again at the next round.
pub(crate) trait OrLog<T> {
    fn or_warn(self, what: impl std::fmt::Display) -> Option<T>;
    fn or_error(self, what: impl std::fmt::Display) -> Option<T>;
}

impl<T, E: std::fmt::Display> OrLog<T> for Result<T, E> {
    fn or_warn(self, what: impl std::fmt::Display) -> Option<T> {
        self.map_err(|e| tracing::warn!("{what}: {e:#}")).ok()
    }

    fn or_error(self, what: impl std::fmt::Display) -> Option<T> {
        self.map_err(|e| tracing::error!("{what}: {e:#}")).ok()
    }
}
