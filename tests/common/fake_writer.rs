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
    pub calls: Mutex<Vec<WriteCall>>,
    /// Whole writes that fail before succeeding.
    pub failures: AtomicU32,
    /// Early streams that fail.
    pub stream_failures: AtomicU32,
    /// "stream <device>", "streamed", "finish <ignition>", "write <ignition>", "abandon".
    pub events: Arc<Mutex<Vec<String>>>,
    /// When set, the Ignition the writer gets must hold exactly this.
    pub expected_ignition: Mutex<Option<String>>,
    /// Called in the middle of a stream (e.g. to check what the flow did meanwhile).
    pub during_stream: Mutex<Option<Box<dyn Fn() + Send>>>,
}

fn take_one(n: &AtomicU32) -> bool {
    n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

impl FakeWriter {
    pub(crate) fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    fn check_ignition(&self, ignition: &Path) -> Result<()> {
        if let Some(want) = self.expected_ignition.lock().unwrap().as_deref() {
            let got = std::fs::read_to_string(ignition)?;
            assert_eq!(
                got, want,
                "the writer gets the Ignition config the flow prepared"
            );
        }
        Ok(())
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
        self.events
            .lock()
            .unwrap()
            .push(format!("write {}", ignition.display()));
        if take_one(&self.failures) {
            bail!("writing /dev/vda at offset 1048576: Input/output error (os error 5)");
        }
        self.check_ignition(ignition)?;
        for p in 0..=100 {
            percent(p);
        }
        Ok(())
    }

    fn stream(
        &self,
        req: &WriteRequest,
        percent: &(dyn Fn(u8) + Send + Sync),
    ) -> Result<Box<dyn PendingDisk>> {
        self.events
            .lock()
            .unwrap()
            .push(format!("stream {}", req.device.display()));
        if take_one(&self.stream_failures) {
            bail!("the early stream failed: connection reset");
        }
        for p in 0..=50 {
            percent(p);
        }
        if let Some(f) = self.during_stream.lock().unwrap().as_ref() {
            f();
        }
        for p in 51..=99 {
            percent(p);
        }
        self.events.lock().unwrap().push("streamed".into());
        Ok(Box::new(FakePending {
            events: self.events.clone(),
            expected: self.expected_ignition.lock().unwrap().clone(),
        }))
    }
}

struct FakePending {
    events: Arc<Mutex<Vec<String>>>,
    expected: Option<String>,
}

impl PendingDisk for FakePending {
    fn finish(self: Box<Self>, ignition: &Path) -> Result<()> {
        if let Some(want) = &self.expected {
            assert_eq!(
                &std::fs::read_to_string(ignition)?,
                want,
                "finish gets the final Ignition"
            );
        }
        self.events
            .lock()
            .unwrap()
            .push(format!("finish {}", ignition.display()));
        Ok(())
    }

    fn abandon(self: Box<Self>, why: anyhow::Error) -> anyhow::Error {
        self.events.lock().unwrap().push("abandon".into());
        why
    }
}

pub(crate) fn path_of(events: &[String], prefix: &str) -> Option<PathBuf> {
    events
        .iter()
        .find_map(|e| e.strip_prefix(prefix).map(PathBuf::from))
}
