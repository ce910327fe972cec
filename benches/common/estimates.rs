//! Criterion's saved results, for the tables the benches print at the end of a run.

use std::path::Path;

/// Median seconds of benchmark `group/id`, from criterion's `new/estimates.json`.
pub(crate) fn median_secs(group: &str, id: &str) -> Option<f64> {
    let dir = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target")
            .display()
            .to_string()
    });
    let path = Path::new(&dir)
        .join("criterion")
        .join(group)
        .join(id)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    // {"mean":{...},"median":{"confidence_interval":{...},"point_estimate":123.4,...},...}
    let median = &text[text.find("\"median\"")?..];
    let pe = &median[median.find("\"point_estimate\":")? + 17..];
    let end = pe.find([',', '}'])?;
    Some(pe[..end].trim().parse::<f64>().ok()? / 1e9)
}
