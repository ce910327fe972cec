//! The scenarios' side of the one test-`Flow` builder (the crate's `flow::testing`): a host's
//! harness, running its flow, and the reports the fake service must have seen.

use assisted_installer::clock::FakeClock;
use assisted_installer::flow::testing::{FakeWriter, FlowBuilder, HOST, INFRA};
use assisted_installer::host::commands::RecordingRunner;
use std::sync::Arc;

use super::fake_service::{host_json, FakeService};

/// Host [`HOST`] against the fake service, with recorded host commands on a BIOS machine (not
/// PowerVM: no boot entry to create), a fake clock, a scripted writer and a directory.
pub(crate) struct Harness {
    pub(crate) svc: FakeService,
    pub(crate) runner: Arc<RecordingRunner>,
    pub(crate) clock: Arc<FakeClock>,
    pub(crate) writer: Arc<FakeWriter>,
    pub(crate) dir: tempfile::TempDir,
    installer_args: &'static [&'static str],
}

impl Harness {
    /// The host has `role` at the service; its flows get `installer_args`.
    pub(crate) fn new(role: &str, installer_args: &'static [&'static str]) -> Harness {
        let svc = FakeService::new();
        svc.set_host_role(HOST, role);
        let runner = Arc::new(RecordingRunner::new());
        runner.fail("test -f /usr/sbin/bootlist", 1, "");
        runner.fail("test -d /sys/firmware/efi", 1, "");
        let (clock, writer) = (Arc::default(), Arc::default());
        let dir = tempfile::tempdir().unwrap();
        Harness {
            svc,
            runner,
            clock,
            writer,
            dir,
            installer_args,
        }
    }

    /// The flow of `role`, talking to the fake service through `svc.client()`.
    pub(crate) fn flow(&self, role: &str) -> FlowBuilder {
        let (dir, writer) = (self.dir.path(), self.writer.clone());
        FlowBuilder::new(role, dir, self.svc.client(), writer)
            .commands(self.runner.clone())
            .clock(self.clock.clone())
            .installer_args(self.installer_args)
    }

    pub(crate) fn reports(&self) -> Vec<Report> {
        self.svc.progress_reports(HOST)
    }

    /// A path under the directory.
    pub(crate) fn path(&self, relative: &str) -> std::path::PathBuf {
        self.dir.path().join(relative)
    }
}

/// Builds the flow and runs the installer's flow for its role.
pub(crate) fn run(flow: FlowBuilder) -> anyhow::Result<()> {
    assisted_installer::flow::node::run_installer(&flow.build())
}

/// A progress report: (stage, info).
pub(crate) type Report = (String, String);

pub(crate) fn s(stage: &str, info: &str) -> Report {
    (stage.to_string(), info.to_string())
}

/// The reports of a stage that runs to completion: "" then 5%, 10%, … 100%.
pub(crate) fn with_percents(stage: &str) -> Vec<Report> {
    let percents = (5..=100).step_by(5).map(|p| format!("{p}%"));
    let infos = std::iter::once(String::new()).chain(percents);
    infos.map(|info| s(stage, &info)).collect()
}

/// The reports of a host that installs as `role` like a master: started, written, rebooting.
pub(crate) fn installed_as(role: &str) -> Vec<Report> {
    installed_with(role, vec![])
}

/// The reports of a host installing as `role`, with `then` between the write and the reboot.
pub(crate) fn installed_with(role: &str, then: Vec<Report>) -> Vec<Report> {
    let mut v = vec![s("Starting installation", role), s("Installing", role)];
    v.extend(with_percents("Writing image to disk"));
    v.extend(then);
    v.push(s("Rebooting", ""));
    v
}

/// Two masters of the cluster, at `stage`, as the service lists them.
pub(crate) fn two_masters(stage: &str) -> Vec<serde_json::Value> {
    let masters = [
        "8c4d5e6f-7081-4b92-8d1e-2f3a4b5c6d7e",
        "9d5e6f70-8192-4ca3-9e2f-3a4b5c6d7e8f",
    ];
    masters
        .map(|id| host_json(id, INFRA, "master", Some(stage)))
        .to_vec()
}

/// The info of the last report, which must be `Failed`.
pub(crate) fn failed_info(reports: &[Report]) -> String {
    let (stage, info) = reports.last().expect("a report");
    assert_eq!(stage, "Failed", "{reports:#?}");
    info.clone()
}

/// `lsblk --bytes --json /dev/vda` on Go's fixture: a 100 GB disk with the CoreOS partitions as
/// written (1 MiB, 127 MiB, 384 MiB, 3.05 GiB).
pub(crate) const LSBLK_VDA: &str = r#"{"blockdevices":[{"name":"vda","size":100000000000,"type":"disk","children":[
    {"name":"vda1","size":1048576,"type":"part"},{"name":"vda2","size":133169152,"type":"part"},
    {"name":"vda3","size":402653184,"type":"part"},{"name":"vda4","size":3272588800,"type":"part"}]}]}"#;
