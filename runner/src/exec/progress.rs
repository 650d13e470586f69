//! What a person watching the run sees: a live bar on a terminal, one line per finished job
//! otherwise (CI logs, pipes, `--no-progress`).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use meshparity_reports::{JobRecord, Status};

pub enum Progress {
    Bar { bar: ProgressBar, failures: usize },
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
        Progress::Bar { bar, failures: 0 }
    }

    /// Running jobs changed.
    pub fn running(&mut self, names: &[String]) {
        if let Progress::Bar { bar, failures } = self {
            let shown: Vec<&str> = names.iter().take(2).map(String::as_str).collect();
            let more = names.len().saturating_sub(shown.len());
            let more = if more > 0 {
                format!(" +{more}")
            } else {
                String::new()
            };
            bar.set_message(format!(
                "{failures} failed · running {}{more}",
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
            Progress::Bar { bar, failures } => {
                if !r.status.passed() && r.status != Status::NotRun {
                    *failures += 1;
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
