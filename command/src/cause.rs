//! What a failed program's output says went wrong, for the job's error: the first error lines
//! and the Python traceback that started it, quoted whole, before the last lines.
//!
//! The last 20 lines alone hid the cause: under `torchrun` they are the launcher's
//! `ChildFailedError` banner, while the real cause (`can't open file …/train.py`, a rank's
//! traceback) is near the top of the output. torchrun's per-rank error files
//! (`error_file: PATH` in the banner, written by `@record`) are read when they exist.

use std::path::Path;

/// Lines quoted of the first error lines, of one traceback, and of the log's end.
const FIRST_ERRORS: usize = 5;
const TRACEBACK: usize = 60;
const LAST: usize = 20;
/// Characters kept of one quoted line.
const LINE: usize = 500;
/// The most read of a torchrun error file (a path the program's output names: anything).
const ERROR_FILE: meshparity_files::Limit = meshparity_files::Limit {
    bytes: 64 * 1024,
    what: "a torchrun error file",
};

/// Words that mark a line as an error report.
const ERROR_WORDS: &[&str] = &[
    "error",
    "errno",
    "exception",
    "traceback",
    "fatal",
    "panicked",
    "can't open",
    "cannot ",
    "no such file",
    "not found",
    "killed",
    "segmentation fault",
    "out of memory",
    "failed",
    "abort",
];

/// The cause of a failure as `log` (the program's bounded log) gives it: the first error line
/// (on the first line, which a job's summary shows), the last lines, the next error lines, the
/// first Python traceback that is not the launcher's and torchrun's error files (last, so the
/// tail of the job's log that a record keeps ends with them). Bounded whatever the log holds.
pub fn excerpt(log: &Path) -> String {
    let last = tail(log, LAST);
    let Ok(bytes) = meshparity_files::read(log, meshparity_files::Limit::JSON) else {
        return format!("last lines of its output:\n{last}");
    };
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let errors: Vec<&str> = lines
        .iter()
        .filter(|l| reports_error(l))
        .take(FIRST_ERRORS)
        .copied()
        .collect();
    // The first line of an error is what a job's summary shows: the first error line goes
    // there, the rest below it.
    if let Some((first, more)) = errors.split_first() {
        let cut: String = first.trim().chars().take(LINE).collect();
        out += &format!("first error line of its output: {cut}\n");
        out += &format!("last lines of its output:\n{last}\n");
        if !more.is_empty() {
            out += &format!("the next error lines:\n{}\n", quote(more));
        }
    } else {
        out += &format!("last lines of its output:\n{last}\n");
    }
    if let Some(tb) = traceback(&lines) {
        out += &format!("the Python traceback:\n{}\n", quote(&tb));
    }
    for (path, message) in error_files(&lines) {
        out += &format!("torchrun's error file {path}:\n{}\n", quote(&[&message]));
    }
    out.trim_end().to_owned()
}

/// Whether `line` reports an error: it holds one of [`ERROR_WORDS`] as a word of its own, not
/// the start of another (tyro's usage box, "than erroring out (default: False)", was quoted as
/// the cause of a bad argument).
fn reports_error(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    ERROR_WORDS.iter().any(|w| {
        l.match_indices(w)
            .any(|(at, _)| !l[at + w.len()..].starts_with("ing"))
    })
}

fn quote(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| {
            let cut: String = l.chars().take(LINE).collect();
            format!("  | {cut}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first traceback that is not torchrun's own (`ChildFailedError`), else the last one:
/// from `Traceback (most recent call last):` to the exception line that ends it.
fn traceback<'a>(lines: &[&'a str]) -> Option<Vec<&'a str>> {
    let mut found: Vec<Vec<&str>> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(at) = lines[i].find("Traceback (most recent call last):") else {
            i += 1;
            continue;
        };
        // Ranks prefix their lines (`[rank0]: `); the block is the lines with that prefix.
        let prefix = &lines[i][..at];
        let mut block = vec![lines[i]];
        i += 1;
        while i < lines.len() && block.len() < TRACEBACK {
            let Some(body) = lines[i].strip_prefix(prefix) else {
                break;
            };
            block.push(lines[i]);
            i += 1;
            // Frames and code are indented; the first line that is not ends the traceback.
            if !body.starts_with(' ') && !body.starts_with('\t') {
                // A chained exception goes on ("During handling…", "The above exception…").
                let chained = body.is_empty()
                    || body.starts_with("During handling")
                    || body.starts_with("The above exception");
                if !chained {
                    break;
                }
            }
        }
        found.push(block);
    }
    let own = |b: &Vec<&str>| {
        !b.iter()
            .any(|l| l.contains("ChildFailedError") || l.contains("torch/distributed/run.py"))
    };
    let first_own = found.iter().position(own);
    match first_own {
        Some(i) => Some(found.swap_remove(i)),
        None => found.pop(),
    }
}

/// torchrun's per-rank error files named in its banner (`error_file: PATH`), with the message
/// each holds; at most three.
fn error_files(lines: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for l in lines {
        let Some(rest) = l.split("error_file:").nth(1) else {
            continue;
        };
        let path = rest.trim();
        if path.is_empty() || path.starts_with('<') || out.iter().any(|(p, _)| p == path) {
            continue;
        }
        let Ok(text) = meshparity_files::read_to_string(Path::new(path), ERROR_FILE) else {
            continue;
        };
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["message"]["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| text.lines().next().unwrap_or("").to_owned());
        out.push((path.to_owned(), message));
        if out.len() == 3 {
            break;
        }
    }
    out
}

/// The last `n` lines of a log ([`meshparity_files::tail`]), or a note that there were none.
pub fn tail(path: &Path, n: usize) -> String {
    let lines = meshparity_files::tail(path, n);
    if lines.is_empty() {
        return "  (no output)".into();
    }
    lines
        .iter()
        .map(|l| format!("  | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("program.log");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    /// torchrun's banner ends the output; the cause is the second line and a rank's traceback.
    #[test]
    fn the_cause_comes_before_the_launchers_banner() {
        let mut text = String::from(
            "W1126 starting\n\
             /usr/bin/python3: can't open file '/x/train.py': [Errno 2] No such file or directory\n\
             [rank1]: Traceback (most recent call last):\n\
             [rank1]:   File \"/x/model.py\", line 3, in <module>\n\
             [rank1]:     import nothing\n\
             [rank1]: ModuleNotFoundError: No module named 'nothing'\n\
             [rank0]: ok\n",
        );
        for i in 0..40 {
            text += &format!("noise {i}\n");
        }
        text += "Traceback (most recent call last):\n  File \"/usr/lib/torch/distributed/run.py\", line 9\n\
                 torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n\
                 ============================================================\n";
        let (_d, path) = log(&text);
        let e = excerpt(&path);
        assert!(e.lines().next().unwrap().contains("can't open file"), "{e}");
        let tb = &e[e.find("the Python traceback:").unwrap()..];
        assert!(tb.contains("[rank1]:     import nothing"), "{e}");
        assert!(tb.contains("[rank1]: ModuleNotFoundError"), "{e}");
        assert!(
            !tb.contains("ChildFailedError") && !tb.contains("[rank0]: ok"),
            "{e}"
        );
    }

    #[test]
    fn an_error_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("error.json");
        std::fs::write(
            &file,
            r#"{"message": {"message": "RuntimeError: NCCL went away"}}"#,
        )
        .unwrap();
        let (_d, path) = log(&format!(
            "  error_file: {}\n  traceback: see\n",
            file.display()
        ));
        assert!(excerpt(&path).contains("RuntimeError: NCCL went away"));
        // A path the output names is read only when small, regular and named once.
        let big = dir.path().join("big.json");
        std::fs::write(&big, "x".repeat(100 * 1024)).unwrap();
        let (_e, path) = log(&format!(
            "error_file: {}\nerror_file: /dev/zero\n",
            big.display()
        ));
        assert!(!excerpt(&path).contains("torchrun's error file"));
    }

    #[test]
    fn a_word_that_only_starts_with_error_is_no_error() {
        let (_d, path) = log(
            "│ --debug.deterministic-warn-only  Use warn_only=True, rather │\n\
             │         than erroring out (default: False)                  │\n\
             error: Unrecognized argument: --bug\n",
        );
        let e = excerpt(&path);
        assert!(
            e.lines()
                .next()
                .unwrap()
                .ends_with("Unrecognized argument: --bug"),
            "{e}"
        );
    }

    #[test]
    fn a_quiet_failure_quotes_the_end_only() {
        let (_d, path) = log("one\ntwo\n");
        let e = excerpt(&path);
        assert!(e.starts_with("last lines of its output:"), "{e}");
    }
}
