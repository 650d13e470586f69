//! What a person watching the run sees: a live bar on a terminal, one line per finished job
//! otherwise (CI logs, pipes, `--no-progress`).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use meshparity_reports::{JobRecord, Status};

pub enum Progress {
    /// A live bar; its message counts jobs that failed (a check, an error, a timeout) apart
    /// from those skipped after a failed dependency.
    Bar {
        bar: ProgressBar,
        failures: usize,
        skipped: usize,
    },
    Lines,
}

impl Progress {
    pub fn new(live: bool, total: usize) -> Self {
        if !live {
            return Progress::Lines;
        }
        let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress::Bar {
            bar,
            failures: 0,
            skipped: 0,
        }
    }

    /// Running jobs changed.
    pub fn running(&mut self, names: &[String]) {
        if let Progress::Bar {
            bar,
            failures,
            skipped,
        } = self
        {
            let shown: Vec<&str> = names.iter().take(2).map(String::as_str).collect();
            let more = names.len().saturating_sub(shown.len());
            let more = if more > 0 {
                format!(" +{more}")
            } else {
                String::new()
            };
            let skipped = if *skipped > 0 {
                format!(", {skipped} skipped")
            } else {
                String::new()
            };
            bar.set_message(format!(
                "{failures} failed{skipped} · running {}{more}",
                shown.join(", ")
            ));
        }
    }

    pub fn finished(&mut self, r: &JobRecord) {
        let line = format!(
            "{:>8} {:>7.2}s  {}  {}",
            r.status.as_str().to_uppercase(),
            r.seconds,
            r.name,
            r.summary
        );
        match self {
            Progress::Bar {
                bar,
                failures,
                skipped,
            } => {
                match r.status {
                    Status::Failed | Status::Error | Status::Timeout => *failures += 1,
                    Status::Skipped => *skipped += 1,
                    Status::Passed | Status::Flaky | Status::NotRun => {}
                }
                if !r.status.passed() {
                    bar.println(line);
                }
                bar.inc(1);
            }
            Progress::Lines => crate::say!("{line}"),
        }
    }

    pub fn note(&self, msg: &str) {
        match self {
            Progress::Bar { bar, .. } => bar.println(msg),
            Progress::Lines => crate::say!("{msg}"),
        }
    }

    pub fn finish(&self) {
        if let Progress::Bar { bar, .. } = self {
            bar.finish_and_clear();
        }
    }
}
