//! The streaming pipeline: source → decompress → digest → aligned buffers → device.

pub mod cancel;
pub mod digest;
pub mod format;
pub mod pipeline;
pub mod progress;
pub mod retry;
pub mod source;

pub use cancel::Cancel;
pub use pipeline::{
    reset_after_failure, stream_image, write_image, Interrupted, Staged, WriteOptions, WriteSummary,
};
