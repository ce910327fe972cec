//! Everything that touches a block device.

pub mod device;
pub mod direct;
pub mod gpt;
pub mod holders;
mod sys;

pub use device::{Device, DeviceBusy, DeviceKind};
