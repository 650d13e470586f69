//! What each rank trained on, step by step: one digest per row (a sequence of the batch) it
//! took, so that a run's inputs can be held to the reference's without keeping the data.
//!
//! NeMo Automodel's checkpoint-robustness check compares each rank's batches after a
//! resumption with the uninterrupted run's; a data loader whose position or sampler state is
//! not restored otherwise shows only as a curve that drifts, and a localization that blames
//! the first layer it traces. The digests are layout-free: a row is the same row on any mesh,
//! so the rows a rank took at step `s` must be among the rows the world-size-1 reference took
//! at step `s`, and together the ranks must take them all.
//!
//! The file is JSON Lines, one line per (step, rank): `{"step": 3, "rank": 0, "rows":
//! ["9f0c…", …]}`, steps numbered as the curve's (from 1). A row's digest is FNV-1a (64 bits)
//! of its input token ids as little-endian i64, in 16 lower-case hex digits ([`row_digest`];
//! `meshparity_hooks.inputs.row_digest` computes the same in Python).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Rows each rank took, per step: `step → rank → row digests`.
pub type Inputs = BTreeMap<u64, BTreeMap<u64, Vec<String>>>;

/// One line of the file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Line {
    step: u64,
    rank: u64,
    rows: Vec<String>,
}

/// Why an inputs file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputsError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path}:{line}: {message} (each line is {{\"step\": N, \"rank\": R, \"rows\": [\"<16 hex \
         digits>\", …]}})"
    )]
    Malformed {
        path: String,
        line: usize,
        message: String,
    },
}

/// FNV-1a's 64-bit offset basis and prime.
const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// The digest of one row: FNV-1a (64 bits) of its token ids as little-endian i64.
pub fn row_digest(tokens: &[i64]) -> String {
    let mut h = OFFSET;
    for byte in tokens.iter().flat_map(|t| t.to_le_bytes()) {
        h = (h ^ u64::from(byte)).wrapping_mul(PRIME);
    }
    format!("{h:016x}")
}

/// Write `inputs` to `path`, a line per (step, rank).
pub fn write(path: &Path, inputs: &Inputs) -> std::io::Result<()> {
    let mut text = String::new();
    for (&step, ranks) in inputs {
        for (&rank, rows) in ranks {
            let line = Line {
                step,
                rank,
                rows: rows.clone(),
            };
            text.push_str(&serde_json::to_string(&line).map_err(std::io::Error::other)?);
            text.push('\n');
        }
    }
    meshparity_files::write(path, text.as_bytes())
}

/// The inputs in `path`: every line well-formed, each digest 16 hex digits, no (step, rank)
/// twice (a rank writing a step twice would let one record hide the other).
pub fn read(path: &Path) -> Result<Inputs, InputsError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| InputsError::Io {
        path: shown.clone(),
        source,
    })?;
    let mut inputs = Inputs::new();
    for (i, l) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let bad = |message: String| InputsError::Malformed {
            path: shown.clone(),
            line: i + 1,
            message,
        };
        let line: Line = serde_json::from_str(l).map_err(|e| bad(e.to_string()))?;
        if let Some(d) = line.rows.iter().find(|d| !is_digest(d)) {
            return Err(bad(format!("`{}` is not a row digest", d.escape_debug())));
        }
        let ranks = inputs.entry(line.step).or_default();
        if ranks.insert(line.rank, line.rows).is_some() {
            let (s, r) = (line.step, line.rank);
            return Err(bad(format!("step {s}, rank {r} is recorded twice")));
        }
    }
    Ok(inputs)
}

fn is_digest(d: &str) -> bool {
    d.len() == 16
        && d.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digest is FNV-1a's: the empty row is the offset basis, and one token's bytes give
    /// the value the Python hooks compute (python/meshparity_hooks/inputs.py's test vector).
    #[test]
    fn rows_digest_as_fnv1a_of_little_endian_ids() {
        assert_eq!(row_digest(&[]), "cbf29ce484222325");
        assert_eq!(row_digest(&[1, 2, 3]), row_digest(&[1, 2, 3]));
        assert_ne!(row_digest(&[1, 2, 3]), row_digest(&[3, 2, 1]));
        // FNV-1a of `7i64.to_le_bytes() ++ (-1i64).to_le_bytes()`, as Python's `struct`
        // packs them (the hooks' test holds the same vector).
        assert_eq!(row_digest(&[7, -1]), "c59e4efbc0fc0c1a");
    }

    #[test]
    fn written_inputs_read_back_and_bad_lines_name_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inputs.jsonl");
        let mut inputs = Inputs::new();
        inputs
            .entry(1)
            .or_default()
            .insert(0, vec![row_digest(&[1])]);
        inputs
            .entry(1)
            .or_default()
            .insert(1, vec![row_digest(&[2])]);
        write(&path, &inputs).unwrap();
        assert_eq!(read(&path).unwrap(), inputs);
        let line = r#"{"step": 1, "rank": 0, "rows": ["cbf29ce484222325"]}"#;
        for (text, says) in [
            (
                format!("{line}\n{line}\n"),
                ":2: step 1, rank 0 is recorded twice",
            ),
            (
                r#"{"step": 1, "rank": 0, "rows": ["XYZ"]}"#.into(),
                ":1: `XYZ` is not",
            ),
            ("{\"step\": 1}".into(), ":1: missing field"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = read(&path).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }
}
