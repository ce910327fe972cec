//! The one reset of a disk after a failure past the stream (the stream resets its own, in
//! `image`): to an empty partition table, keeping saved partitions, unless the caller chose
//! to preserve the disk as it is.

use std::path::Path;

use crate::disk::Device;
use crate::image::{reset_after_failure, WriteOptions};

use super::post_install::show_partitions;

/// The one reset after a streamed write failed or was given up (and after a failed `embed`):
/// the disk, reopened when the failure came while it was not held.
pub(super) fn reset(
    held: Option<Device>,
    path: &Path,
    sector_size: u64,
    opts: &WriteOptions,
    e: anyhow::Error,
) -> anyhow::Error {
    let dev = match held {
        Some(dev) => dev,
        None => match Device::open_for_write(path) {
            Ok(dev) => dev,
            Err(reopen) => {
                return reopen.context(format!(
                    "{e:#}; and reopening {} to reset it failed",
                    path.display()
                ))
            }
        },
    };
    let e = reset_after_failure(&dev, sector_size, opts, e);
    show_partitions(dev);
    e
}
