//! udev, where it runs: it makes the /dev links of new block devices (and, on a multipath host,
//! may make partition maps itself). We never need it, but when it runs we wait for it rather
//! than race it.

use std::path::Path;
use std::time::Duration;

use crate::clock::{Failure, NeverStop, Schedule, SYSTEM_CLOCK};

/// Whether udev runs on this system (its control socket is there): then it makes the /dev
/// links, and we wait for it instead of making them.
pub(crate) fn udev_running() -> bool {
    Path::new("/run/udev/control").exists()
}

/// Let udev catch up when it runs (it may be renaming or probing the new nodes); without
/// /run/udev there is no udev and nothing to wait for.
pub(crate) fn settle_udev() {
    if !udev_running() {
        return;
    }
    let status = std::process::Command::new("udevadm")
        .args(["settle", "--timeout=30"])
        .status();
    if let Err(e) = status {
        tracing::debug!("udevadm settle: {e}");
    }
}

/// Whether `done` holds within `limit`, asked every `every`.
pub(crate) fn wait_until(limit: Duration, every: Duration, mut done: impl FnMut() -> bool) -> bool {
    let schedule = Schedule::within(limit, every);
    let ask = |_| done().then_some(()).ok_or(Failure::Retry(()));
    SYSTEM_CLOCK
        .retry(&NeverStop, &schedule, ask, |_, _| {})
        .is_ok()
}
