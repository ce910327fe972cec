//! A scripted disk writer for the flow scenarios: reports 0..=100%, fails the first N calls on
//! request, checks it gets the expected Ignition, and records the order of what happened.
#![allow(dead_code)]

use anyhow::{bail, Result};
use assisted_installer::flow::writer::{DiskWriter, PendingDisk, WriteRequest};
use assisted_installer::write::WriterArgs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// One whole write the flow asked for.
#[derive(Clone, Debug)]
pub(crate) struct WriteCall {
    pub device: PathBuf,
    pub ignition: PathBuf,
    pub args: WriterArgs,
}

#[derive(Default)]
pub(crate) struct FakeWriter {
    calls: Mutex<Vec<WriteCall>>,
    /// Whole writes that fail before succeeding.
    pub failures: AtomicU32,
    /// Early streams that fail.
    pub stream_failures: AtomicU32,
    /// "stream <device>", "streamed", "finish <ignition>", "write <ignition>", "abandon".
    events: Arc<Mutex<Vec<String>>>,
    /// When set, the Ignition the writer gets must hold exactly this.
    pub expected_ignition: Mutex<Option<String>>,
}

fn take_one(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

fn check_ignition(want: Option<&str>, ignition: &Path) -> Result<()> {
    if let Some(want) = want {
        let got = std::fs::read_to_string(ignition)?;
        assert_eq!(
            got, want,
            "the writer gets the Ignition config the flow prepared"
        );
    }
    Ok(())
}

fn record(events: &Mutex<Vec<String>>, event: String) {
    events.lock().unwrap().push(event);
}

impl FakeWriter {
    pub(crate) fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    pub(crate) fn calls(&self) -> Vec<WriteCall> {
        self.calls.lock().unwrap().clone()
    }

    fn expected(&self) -> Option<String> {
        self.expected_ignition.lock().unwrap().clone()
    }
}

impl DiskWriter for FakeWriter {
    fn write(
        &self,
        req: &WriteRequest,
        ignition: &Path,
        percent: &(dyn Fn(u8) + Send + Sync),
    ) -> Result<()> {
        self.calls.lock().unwrap().push(WriteCall {
            device: req.device.clone(),
            ignition: ignition.to_path_buf(),
            args: req.args.clone(),
        });
        record(&self.events, format!("write {}", ignition.display()));
        if take_one(&self.failures) {
            bail!("writing /dev/vda at offset 1048576: Input/output error (os error 5)");
        }
        check_ignition(self.expected().as_deref(), ignition)?;
        (0..=100).for_each(percent);
        Ok(())
    }

    fn stream(
        &self,
        req: &WriteRequest,
        percent: &(dyn Fn(u8) + Send + Sync),
    ) -> Result<Box<dyn PendingDisk>> {
        record(&self.events, format!("stream {}", req.device.display()));
        if take_one(&self.stream_failures) {
            bail!("the early stream failed: connection reset");
        }
        (0..=99).for_each(percent);
        record(&self.events, "streamed".into());
        Ok(Box::new(FakePending {
            events: self.events.clone(),
            expected: self.expected(),
        }))
    }
}

struct FakePending {
    events: Arc<Mutex<Vec<String>>>,
    expected: Option<String>,
}

impl PendingDisk for FakePending {
    fn finish(self: Box<Self>, ignition: &Path) -> Result<()> {
        check_ignition(self.expected.as_deref(), ignition)?;
        record(&self.events, format!("finish {}", ignition.display()));
        Ok(())
    }

    fn abandon(self: Box<Self>, why: anyhow::Error) -> anyhow::Error {
        record(&self.events, "abandon".into());
        why
    }
}
