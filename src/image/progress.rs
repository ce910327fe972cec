//! Progress of a write: an indicatif bar on a terminal, plain rate-limited log lines otherwise,
//! or a callback the install flows turn into percentage reports. Never fatal, never blocking:
//! the pipeline's coordinator calls `update` between its polls.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// Uncompressed bytes on the disk (or held back for the end: the first MiB).
    pub written: u64,
    /// Size of the image from its partition table, once the first MiB is decoded.
    pub image_size: Option<u64>,
    /// Compressed bytes downloaded or read.
    pub downloaded: u64,
    pub download_size: Option<u64>,
    /// Since the write began; during the read-back, since the read-back began.
    pub elapsed: Duration,
    /// `--verify`: a read-back follows the write, and counts as much as it in [`Self::percent`].
    pub verify: bool,
    /// Bytes of the image checked by the read-back so far (the first MiB, held in memory,
    /// counts from its start); `None` until it starts.
    pub read_back: Option<u64>,
}

impl Progress {
    /// Whole percent done, from the written bytes when the image size is known, else from the
    /// download.
    /// With `--verify`, the write is the first half and the read-back the second, so the
    /// percentage the service sees keeps rising and reaches 100 once, at the very end.
    pub fn percent(&self) -> Option<u8> {
        let (done, total) = match (self.image_size, self.download_size) {
            (Some(t), _) if t > 0 => (self.written, t),
            (_, Some(t)) if t > 0 => (self.downloaded, t),
            _ => return None,
        };
        let written = done.min(total) * 100 / total;
        if !self.verify {
            return Some(written as u8);
        }
        let checked = self.read_back.map_or(0, |r| r.min(total) * 100 / total);
        Some(((written + checked) / 2) as u8)
    }

    /// Bytes done by the current pass: the write, or the read-back once it started.
    fn pass_bytes(&self) -> u64 {
        self.read_back.unwrap_or(self.written)
    }
}

pub trait ProgressSink: Send + Sync {
    fn update(&self, p: &Progress);
    /// The write ended (successfully or not): clear any terminal state.
    fn finish(&self) {}
}

/// Discards progress.
pub struct NoProgress;

impl ProgressSink for NoProgress {
    fn update(&self, _: &Progress) {}
}

/// A bar on stderr: bytes, rate, ETA.
struct TerminalBar {
    bar: ProgressBar,
}

impl ProgressSink for TerminalBar {
    fn update(&self, p: &Progress) {
        if let Some(t) = p.image_size {
            self.bar.set_length(t);
        }
        if p.read_back.is_some() && self.bar.message().is_empty() {
            self.bar.set_message("read back");
        }
        self.bar.set_position(p.pass_bytes());
    }
    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// One log line at most every `interval`, plus one at every 10% step; for journals and CI logs.
pub struct LogLines {
    interval: Duration,
    last: Mutex<(Option<Instant>, Option<u8>)>,
}

impl LogLines {
    pub fn new(interval: Duration) -> LogLines {
        LogLines {
            interval,
            last: Mutex::new((None, None)),
        }
    }

    /// Whether a line is due for `p` at `now` (pure enough to test).
    fn due(&self, p: &Progress, now: Instant) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let tenth = p.percent().map(|x| x / 10);
        let time_due = last
            .0
            .is_none_or(|t| now.duration_since(t) >= self.interval);
        let step_due = tenth.is_some() && tenth != last.1;
        if time_due || step_due {
            *last = (Some(now), tenth);
            true
        } else {
            false
        }
    }
}

impl ProgressSink for LogLines {
    fn update(&self, p: &Progress) {
        if !self.due(p, Instant::now()) {
            return;
        }
        let pct = p.percent().map(|x| format!("{x}% ")).unwrap_or_default();
        let secs = p.elapsed.as_secs_f64();
        let rate = if secs > 0.0 {
            p.pass_bytes() as f64 / secs / 1e6
        } else {
            0.0
        };
        let pass = match p.read_back {
            Some(_) => "read back",
            None => "written",
        };
        tracing::info!(
            "{pass} {pct}({} MiB of {}), {:.0} MB/s",
            p.pass_bytes() >> 20,
            p.image_size
                .map(|t| format!("{} MiB", t >> 20))
                .unwrap_or_else(|| "?".into()),
            rate
        );
    }
}

/// Calls `f` with each new whole percentage (monotonic, no repeats).
pub struct PercentCallback<F: Fn(u8) + Send + Sync> {
    f: F,
    last: Mutex<Option<u8>>,
}

impl<F: Fn(u8) + Send + Sync> PercentCallback<F> {
    pub fn new(f: F) -> Self {
        PercentCallback {
            f,
            last: Mutex::new(None),
        }
    }
}

impl<F: Fn(u8) + Send + Sync> ProgressSink for PercentCallback<F> {
    fn update(&self, p: &Progress) {
        let Some(pct) = p.percent() else { return };
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_none_or(|l| pct > l) {
            *last = Some(pct);
            drop(last);
            (self.f)(pct);
        }
    }
}

/// A bar when stderr is a terminal, log lines every 10 s otherwise.
pub fn for_stderr() -> Box<dyn ProgressSink> {
    if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} {msg} [{elapsed_precise}] [{wide_bar}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        Box::new(TerminalBar { bar })
    } else {
        Box::new(LogLines::new(Duration::from_secs(10)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn at(written: u64) -> Progress {
        Progress {
            written,
            image_size: Some(1000),
            ..Default::default()
        }
    }

    /// From the image size, else the download; with `--verify` the write is the first half
    /// and the read-back the second.
    #[test]
    fn percent_of_the_image_then_the_download_and_the_read_back() {
        let download = Progress {
            downloaded: 25,
            download_size: Some(100),
            ..Default::default()
        };
        let verify = |written, read_back| Progress {
            verify: true,
            read_back,
            ..at(written)
        };
        let cases = [
            (at(500), Some(50)),
            (at(2000), Some(100)), // clamped
            (download, Some(25)),
            (Progress::default(), None),
            (verify(500, None), Some(25)),
            (verify(1000, None), Some(50)), // written, not yet checked
            (verify(1000, Some(500)), Some(75)),
            (verify(1000, Some(1000)), Some(100)),
        ];
        for (p, want) in cases {
            assert_eq!(p.percent(), want, "{p:?}");
        }
        let rate = verify(1000, Some(500)).pass_bytes();
        assert_eq!(rate, 500, "the rate is the read-back's");
    }

    #[test]
    fn log_lines_are_rate_limited_but_mark_every_tenth() {
        let l = LogLines::new(Duration::from_secs(3600));
        let t = Instant::now();
        assert!(l.due(&at(10), t), "first update logs");
        assert!(!l.due(&at(50), t), "same tenth, too soon");
        assert!(l.due(&at(120), t), "new tenth");
        assert!(!l.due(&at(150), t));
        assert!(
            l.due(&at(150), t + Duration::from_secs(3601)),
            "interval passed"
        );
    }

    #[test]
    fn callback_sees_each_percent_once_and_in_order() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let cb = PercentCallback::new(move |p| s2.lock().unwrap().push(p));
        for w in [0, 5, 5, 9, 120, 110, 1000, 1000] {
            cb.update(&at(w));
        }
        assert_eq!(*seen.lock().unwrap(), vec![0, 12, 100]);
    }
}
