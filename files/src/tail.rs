//! The last lines of a log, read from its end.
//!
//! A job's log can be gigabytes (a program that printed without end) or one line of them; the
//! runner quotes its last lines in every error record. Reading the whole file for that cost
//! the runner 1.5 GB of memory on one 50 MB line. [`tail`] reads at most [`TAIL_WINDOW`] bytes
//! from the end and cuts each line it returns at [`TAIL_LINE`] characters.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Bytes read from the end of a log.
pub const TAIL_WINDOW: u64 = 64 * 1024;

/// Characters kept of each line returned, the rest said as ` …`.
pub const TAIL_LINE: usize = 500;

/// The last `n` non-empty lines of the file at `path` (fewer when the last [`TAIL_WINDOW`] bytes
/// hold fewer), each cut at [`TAIL_LINE`] characters. A file that cannot be read has none.
pub fn tail(path: &Path, n: usize) -> Vec<String> {
    let read = || -> std::io::Result<Vec<u8>> {
        let mut f = crate::open(path)?;
        let len = f.metadata()?.len();
        let start = len.saturating_sub(TAIL_WINDOW);
        f.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        f.take(TAIL_WINDOW).read_to_end(&mut bytes)?;
        // A window that starts mid-line: that partial line is not a line of the log.
        if start > 0 {
            let from = bytes.iter().position(|b| *b == b'\n').map_or(0, |i| i + 1);
            bytes.drain(..from);
        }
        Ok(bytes)
    };
    let bytes = read().unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| {
            let mut cut: String = l.chars().take(TAIL_LINE).collect();
            if cut.len() < l.len() {
                cut.push_str(" …");
            }
            cut
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_come_from_the_end_cut_to_size() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("stderr.log");
        let mut text = "x".repeat(10_000_000);
        text.push_str("\nsecond to last\n\n");
        text.push_str(&"y".repeat(2_000));
        std::fs::write(&log, &text).unwrap();
        let got = tail(&log, 3);
        assert_eq!(
            got.len(),
            2,
            "the 10 MB line starts before the window: {got:?}"
        );
        assert_eq!(got[0], "second to last");
        assert_eq!(got[1], format!("{} …", "y".repeat(TAIL_LINE)));
        assert!(tail(&dir.path().join("missing"), 3).is_empty());
    }
}
