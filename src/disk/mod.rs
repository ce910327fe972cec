//! Everything that touches a block device.

pub(crate) mod boot;
pub(crate) mod device;
pub(crate) mod direct;
mod dm;
pub(crate) mod firmware_disks;
pub mod gpt;
pub(crate) mod holders;
pub(crate) mod loopdev;
pub(crate) mod mount;
mod other_boot;
mod partition_maps;
pub(crate) mod partitions;
pub(crate) mod probe;
pub(crate) mod saved;
pub(crate) mod sys;
mod sysfs;
pub(crate) mod table;
mod udev;
mod windows;

pub use device::{Device, DeviceKind, ZeroMethod};
pub(crate) use firmware_disks::{firmware_disks, FirmwareDisks};
pub use holders::DeviceBusy;
pub(crate) use other_boot::other_boot_filesystems_warning;
pub(crate) use sysfs::iscsi_session_of;
