//! The assisted-service side of the installer: API models and stage strings, the REST client
//! (auth, request ids, retries, downloads) and the background progress reporter.

mod calls;
pub mod client;
mod inventory;
pub(crate) mod models;
pub mod reporter;
mod retry;
pub(crate) mod stages;

pub use client::{
    ClientConfig, ClientRetry, InventoryClient, LogsType, LogsUpload, ServiceClient, ServiceError,
};
pub use models::{
    Cluster, ClusterFinalizingProgress, ClusterProgressInfo, CompletionParams, EventParams, Host,
    HostProgress, HostProgressInfo, HostStatus, LogsProgressParams, MonitoredOperator,
    OperatorMonitorReport, Platform,
};
pub use reporter::Reporter;
pub use stages::{
    check_stage, FinalizingStage, HostStage, LogsState, OperatorStatus, StageOrder, StageSkip,
    UnknownValue,
};
