//! What a person watching the run sees: a live bar on a terminal, one line per finished job
//! otherwise (CI logs, pipes, `--no-progress`).

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use meshparity_reports::{JobRecord, Status};

/// How finished jobs' lines look: coloured status words (a terminal, `--color`), and whole
/// summaries for passing jobs too (`--verbose`; by default a passing line says what passed
/// and stops: the full record is in results.json and the reports).
#[derive(Clone, Copy, Debug, Default)]
pub struct LineStyle {
    pub color: bool,
    pub verbose: bool,
}

/// Longest passing summary shown without `--verbose`.
const SHORT: usize = 100;

/// What starts every line of a job's summary after its first.
pub const GUTTER: &str = "         | ";

impl LineStyle {
    /// A finished job's line; `kept`: a record a resumed run carries over, not run again (its
    /// time is the earlier run's, so none is shown).
    fn line(self, r: &JobRecord, kept: bool) -> String {
        let word = r.status.as_str().to_uppercase();
        let word = if self.color {
            let code = match r.status {
                Status::Passed | Status::Flaky => "32",
                Status::Failed | Status::Error | Status::Timeout => "31",
                Status::Skipped | Status::NotRun => "33",
            };
            format!("\x1b[{code}m{word:>8}\x1b[0m")
        } else {
            format!("{word:>8}")
        };
        let summary = if r.status.passed() && !self.verbose {
            short(&r.summary)
        } else {
            r.summary.clone()
        };
        // A summary quotes a program's output: shown, never obeyed, and never a line of its own.
        let time = if kept {
            "    kept".to_owned()
        } else {
            format!("{:>7.2}s", r.seconds)
        };
        format!(
            "{word} {time}  {}  {}",
            meshparity_files::text::one_line(&r.name),
            meshparity_files::text::continued(&summary, GUTTER)
        )
    }
}

/// A passing summary's gist: `caught by forward` (not the evidence after it), `losses match
/// (7 compared)` (not the closest gate), at most [`SHORT`] characters.
fn short(summary: &str) -> String {
    let gist = match summary.split_once(": ") {
        Some((head, _)) if head.starts_with("caught by") => head,
        _ => summary.split("; closest").next().unwrap_or(summary),
    };
    let mut out: String = gist.chars().take(SHORT).collect();
    if gist.chars().count() > SHORT {
        out.push('…');
    } else if gist.len() < summary.len() && gist.contains('(') && !gist.ends_with(')') {
        out.push(')');
    }
    out
}

pub enum Progress {
    /// A live bar; its message counts jobs that failed (a check, an error, a timeout) apart
    /// from those skipped after a failed dependency.
    Bar {
        bar: ProgressBar,
        failures: usize,
        skipped: usize,
        style: LineStyle,
    },
    Lines(LineStyle),
}

impl Progress {
    pub fn new(live: bool, total: usize, style: LineStyle) -> Self {
        if !live {
            return Progress::Lines(style);
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
            style,
        }
    }

    /// Running jobs changed.
    pub fn running(&mut self, names: &[String]) {
        if let Progress::Bar {
            bar,
            failures,
            skipped,
            ..
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
        self.done(r, false)
    }

    /// A record of the resumed run carried over.
    pub fn kept(&mut self, r: &JobRecord) {
        self.done(r, true)
    }

    fn done(&mut self, r: &JobRecord, kept: bool) {
        match self {
            Progress::Bar {
                bar,
                failures,
                skipped,
                style,
            } => {
                let line = style.line(r, kept);
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
            // Built from escaped parts, with colours of its own.
            Progress::Lines(style) => {
                crate::exec::console::stderr(format_args!("{}\n", style.line(r, kept)))
            }
        }
    }

    pub fn note(&self, msg: &str) {
        match self {
            Progress::Bar { bar, .. } => bar.println(meshparity_files::text::escaped(msg)),
            Progress::Lines(_) => crate::say!("{msg}"),
        }
    }

    pub fn finish(&self) {
        if let Progress::Bar { bar, .. } = self {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::short;

    #[test]
    fn passing_lines_keep_the_gist() {
        assert_eq!(
            short("caught by forward: logits and loss differ: `logits` relative_l2 0.3 (reproduce: …)"),
            "caught by forward"
        );
        assert_eq!(
            short("losses match (7 compared; closest: losses `loss` rel 4.5e-8 (limit ≤ 2e-3))"),
            "losses match (7 compared)"
        );
        assert_eq!(
            short("mesh artifacts written (4 steps, 5 artifacts)"),
            "mesh artifacts written (4 steps, 5 artifacts)"
        );
        assert_eq!(short(&"x".repeat(300)).chars().count(), 101);
    }
}
