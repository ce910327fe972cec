//! The assisted-installer-controller (placeholder: the real module comes with the merge).

pub mod cluster;
