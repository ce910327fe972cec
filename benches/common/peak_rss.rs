//! Peak memory of write-image runs, from the `peak memory: N MiB` line of its summary,
//! collected per case for the table closing a bench run.

use std::sync::Mutex;

static PEAKS: Mutex<Vec<(String, f64)>> = Mutex::new(Vec::new());

/// Note the peak a run's stdout reports under `case`.
pub(crate) fn record(case: &str, stdout: &str) {
    if let Some(mib) = stdout
        .lines()
        .find_map(|l| l.strip_prefix("peak memory: "))
        .and_then(|v| v.trim_end_matches(" MiB").parse::<f64>().ok())
    {
        PEAKS.lock().unwrap().push((case.to_string(), mib));
    }
}

/// The highest peak (MiB) recorded under `case`.
pub(crate) fn max(case: &str) -> Option<f64> {
    PEAKS
        .lock()
        .unwrap()
        .iter()
        .filter(|(c, _)| c == case)
        .map(|(_, m)| *m)
        .reduce(f64::max)
}
