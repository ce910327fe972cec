//! Percentages out of `rsync --info=progress2` output (Go `RsyncInstallerLogWriter`), for the
//! registry-data copy's `Copying registry data to disk` reports.
//!
//! rsync rewrites one status line with `\r`: `  11.5G  56%   84.95MB/s    0:01:51 (xfr#445,
//! ir-chk=1000/2131)`. Output is buffered until a chunk brings a `\r` or `\n`; the buffer is
//! then one "line" (not split at the separators, as Go does) and only its first progress entry
//! counts: a pipe can deliver many rewrites at once, and the first is the one that was due.

/// Minimum growth, in points, between two reported percentages.
const STEP: u32 = 5;

/// One progress entry: `<size> <N>% <speed>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub size: String,
    pub percent: u32,
    pub speed: String,
}

impl std::fmt::Display for Entry {
    /// `21.39G 100% 85.21MB/s`, as Go logs it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}% {}", self.size, self.percent, self.speed)
    }
}

/// The first `<size> <N>% <speed>` in `line`: three whitespace-separated words, the middle
/// one digits followed by `%` (what Go's `\s*(\S+)\s+(\d+)%\s+(\S+)` finds first); the time
/// and the `(xfr#…)` metadata after them are dropped. Percentages above 100 are not rsync's
/// and are ignored.
fn first_entry(line: &str) -> Option<Entry> {
    let words: Vec<&str> = line.split_whitespace().collect();
    words.windows(3).find_map(|w| {
        let digits = w[1].strip_suffix('%')?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let percent: u32 = digits.parse().ok().filter(|p| *p <= 100)?;
        Some(Entry {
            size: w[0].to_string(),
            percent,
            speed: w[2].to_string(),
        })
    })
}

/// Feeds rsync's output through; reports percentages as Go does.
#[derive(Debug, Default)]
pub(crate) struct RsyncProgress {
    pending: Vec<u8>,
    /// The last percentage reported (0 before the first).
    last: u32,
}

impl RsyncProgress {
    /// Takes the next chunk of output; calls `report` when a line's first entry (N%) is due:
    /// N ≥ last + 5, or N = 100 — never again once 100 was reported. Each report is logged as
    /// `rsync progress: <size> <N>% <speed>`; other lines are not logged (rsync's file list
    /// would flood the log).
    ///
    /// Go advances `last` only when its synchronous report succeeded; ours go through the
    /// reporter's queue (never blocking the copy), so `last` advances when one is queued.
    pub(crate) fn feed(&mut self, chunk: &[u8], report: &mut dyn FnMut(&Entry)) {
        self.pending.extend_from_slice(chunk);
        if !self.pending.iter().any(|b| *b == b'\r' || *b == b'\n') {
            return;
        }
        let line = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        let Some(entry) = first_entry(line.trim()) else {
            return;
        };
        if self.last == 100 {
            return;
        }
        if entry.percent >= self.last + STEP || entry.percent == 100 {
            report(&entry);
            self.last = entry.percent;
            tracing::info!("rsync progress: {entry}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entries reported for `chunks`, fed in order.
    fn entries(chunks: &[&str]) -> Vec<Entry> {
        let mut p = RsyncProgress::default();
        let mut got = Vec::new();
        for c in chunks {
            p.feed(c.as_bytes(), &mut |e| got.push(e.clone()));
        }
        got
    }

    /// The percentages reported for `chunks`, fed in order.
    fn reported(chunks: &[&str]) -> Vec<u32> {
        entries(chunks).iter().map(|e| e.percent).collect()
    }

    #[test]
    fn lines_without_progress_or_a_separator_report_nothing() {
        for chunk in [
            "some log with a new line \n",
            "   \r\n",
            "sending incremental file list\ndocker/\n",
            // Not digits before the %, or nothing around it.
            "  1G  x5%   80.00MB/s\r",
            "  1G  %   80.00MB/s\r",
            "56%\r",
            "11.5G 56%\r",
        ] {
            assert!(reported(&[chunk]).is_empty(), "{chunk:?}");
        }
        // Nothing happens before a separator arrives.
        assert!(reported(&["  11.5G  56%   84.95MB/s"]).is_empty());
        // The same line in fragments: one report when the \r comes.
        assert_eq!(
            reported(&["  11.5G", "  56", "%   84.9", "5MB/s    0:01:51  ", "\r"]),
            vec![56]
        );
    }

    #[test]
    fn a_report_every_five_points_and_at_100() {
        // The percentages reported for a full progress line at each of `percents`.
        let due = |percents: &[u32]| {
            let lines: Vec<String> = percents
                .iter()
                .map(|p| format!("  {p}G  {p}%   80.00MB/s    0:01:55  \r"))
                .collect();
            reported(&lines.iter().map(String::as_str).collect::<Vec<_>>())
        };
        assert_eq!(due(&[55, 55, 55, 60, 66]), vec![55, 60, 66]);
        // Exactly 5 more is due, less is not, more is.
        assert_eq!(due(&[5, 6, 7, 8, 9, 10, 15, 21]), vec![5, 10, 15, 21]);
        // 100 is always due once, even less than 5 points on.
        assert_eq!(due(&[90, 95, 98, 100, 100, 99]), vec![90, 95, 100]);
        // Below 5 at first: nothing yet.
        assert!(due(&[0, 4]).is_empty());
    }

    #[test]
    fn only_the_first_entry_of_a_chunk_counts() {
        let entry = "21.39G 100%   85.21MB/s    0:03:59 (xfr#1653, to-chk=0/4137)";
        let chunk = [entry; 6].join("\r         ");
        let got = entries(&[&chunk]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].to_string(), "21.39G 100% 85.21MB/s");
        // The first entry decides even when a later one would be due.
        assert_eq!(
            reported(&["  1G  3%  8MB/s  0:00:09\r  2G  50%  8MB/s  0:00:05\r"]),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn the_entry_is_size_percent_and_speed_only() {
        let e =
            first_entry("15.89G  75%   85.32MB/s    0:02:57 (xfr#445, ir-chk=1000/2131)").unwrap();
        assert_eq!(
            e,
            Entry {
                size: "15.89G".into(),
                percent: 75,
                speed: "85.32MB/s".into()
            }
        );
        assert_eq!(first_entry("  20G  100%   80.00MB/s").unwrap().percent, 100);
        assert_eq!(first_entry("  20G  101%   80.00MB/s"), None);
        assert_eq!(
            first_entry("  20G  99999999999999999999%   80.00MB/s"),
            None
        );
    }
}
