//! The `meshparity compare` line every verdict carries: the command that re-derives it from
//! the two files, with exactly the limits the judge applied.

use std::path::Path;

pub use meshparity_engine::shell::quote;
use meshparity_specs::{Keyword, Limits};

/// The `meshparity compare` command that applies exactly `limits` to the two files.
pub fn compare_command(a: &Path, b: &Path, limits: &Limits, curve: bool) -> String {
    let mut cmd = format!(
        "meshparity compare {} {}",
        quote(&a.display().to_string()),
        quote(&b.display().to_string())
    );
    if limits.exact {
        cmd.push_str(" --profile exact");
        return cmd;
    }
    // Counts as integers (`allowed_failing_steps=0`), limits in scientific notation.
    let settings: Vec<String> = limits
        .metrics
        .iter()
        .map(|(k, v)| {
            if *k == "allowed_failing_steps" && v.fract() == 0.0 {
                format!("{k}={v}")
            } else {
                format!("{k}={v:e}")
            }
        })
        .collect();
    if curve {
        let mode = limits.mode.map_or("rel", |m| m.name());
        cmd.push_str(&format!(" --mode {mode}"));
    } else if let Some(l) = limits.layer_average {
        cmd.push_str(&format!(" --layer-average {l}"));
    }
    if !settings.is_empty() {
        cmd.push_str(&format!(" -t {}", settings.join(",")));
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A curve's reproduce line gives counts as integers and limits in scientific notation, so
    /// it reads as the user wrote the table.
    #[test]
    fn reproduce_lines_spell_counts_as_integers() {
        let mut limits = Limits::default();
        limits.metrics.insert("rel", 1e-9);
        limits.metrics.insert("allowed_failing_steps", 0.0);
        let cmd = compare_command(Path::new("a.jsonl"), Path::new("b.jsonl"), &limits, true);
        assert!(
            cmd.ends_with("--mode rel -t rel=1e-9,allowed_failing_steps=0"),
            "{cmd}"
        );
    }
}
