//! How a command engine reads a loss curve from its program's log (`artifacts.log`): a preset
//! for the log lines of Megatron-LM, torchtitan and pithtrain, or a user regex with named
//! groups `step` and `loss`. Here, in the spec crate, so that `validate` refuses a pattern that
//! does not compile or lacks its groups at its file:line:column; the command engine applies it.

use regex::Regex;

/// `(preset, regex)`: each matches one training step's line.
pub const PRESETS: &[(&str, &str)] = &[
    // ` iteration        3/     100 | consumed samples: ... | lm loss: 1.066E+01 | ...`
    (
        "megatron",
        r"iteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|.*?lm loss:\s*(?P<loss>[-+0-9.eE]+|nan|inf)",
    ),
    // `step:  3  loss:  7.1234  memory: ...`
    (
        "torchtitan",
        r"step:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>[-+0-9.eE]+|nan|inf)",
    ),
    // `| step 3/100 | cross-entropy-loss 7.1234 | ...`
    (
        "pithtrain",
        r"\|\s*step\s+(?P<step>\d+)/\d+\s*\|\s*cross-entropy-loss\s+(?P<loss>[-+0-9.eE]+|nan|inf)",
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("log pattern `{pattern}`: {message}")]
    Pattern { pattern: String, message: String },
}

/// The regex of a preset name, or `pattern` itself as a regex.
pub fn pattern(pattern: &str) -> Result<Regex, LogError> {
    let source = PRESETS
        .iter()
        .find(|(name, _)| *name == pattern)
        .map_or(pattern, |(_, re)| re);
    let re = Regex::new(source).map_err(|e| LogError::Pattern {
        pattern: pattern.to_owned(),
        // The regex crate draws its error over several lines (the pattern, a caret, the
        // reason); its last line is the reason.
        message: e
            .to_string()
            .lines()
            .last()
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_owned(),
    })?;
    for group in ["step", "loss"] {
        if !re.capture_names().flatten().any(|n| n == group) {
            return Err(LogError::Pattern {
                pattern: pattern.to_owned(),
                message: format!(
                    "has no named group `{group}`; a preset ({}) or a regex with \
                     (?P<step>...) and (?P<loss>...)",
                    PRESETS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
                ),
            });
        }
    }
    Ok(re)
}
