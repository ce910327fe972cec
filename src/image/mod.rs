//! The streaming pipeline: source → decompress → digest → aligned buffers → device.

pub(crate) mod cancel;
pub mod digest;
pub mod format;
pub mod osmet;
pub(crate) mod pipeline;
pub mod progress;
pub mod proxy;
pub mod retry;
pub mod signing;
pub mod source;
mod stages;
pub mod stream;
pub(crate) mod verify;
mod zeros;

pub use cancel::{Cancel, Interrupted};
pub use pipeline::{reset_after_failure, stream_image, Input, Staged, WriteOptions, WriteSummary};
pub use verify::ReadBack;
#[cfg(any(test, feature = "test-support"))]
pub use verify::ReadBackCheck;
pub use zeros::{ZeroHow, ZeroSummary};

use osmet::LiveImage;
use source::ImageLocation;

/// Where the image comes from, in the order a user would expect: a URL, a file, or (given
/// neither) the live system's own image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `--image-url` or `--image-file`.
    Given(ImageLocation),
    /// The live ISO's image, rebuilt from its osmet file and the live root's objects.
    Live(LiveImage),
    /// `--stream`: the metal image its metadata names for this architecture and the disk's
    /// sector size (resolved once the disk is open).
    Stream(stream::StreamSpec),
}
