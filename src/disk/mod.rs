//! Everything that touches a block device.

pub mod boot;
pub mod device;
pub mod direct;
pub mod gpt;
pub mod holders;
pub mod loopdev;
pub mod mount;
pub mod partitions;
pub mod probe;
pub mod saved;
mod sys;
mod sysfs;
mod table;
mod windows;

pub use device::{Device, DeviceBusy, DeviceKind};
