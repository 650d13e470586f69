//! Tensors a judge derives from the artifacts (weight updates, a resumed state's judged view),
//! compared in memory and written into the judge's directory only when they differ, so that a
//! failing comparison's `meshparity compare` line has files to read and a passing one costs no
//! disk (a hidden-512 llama's pair of updates is 235 MB of f64, written for every oracle judge
//! before).

use std::path::{Path, PathBuf};

use meshparity_compare::safetensors::SafetensorsFile;
use meshparity_compare::tensors::compare;
use meshparity_compare::{Checkpoint, TensorOptions, Tolerance};
use meshparity_specs::Limits;

use crate::compare_line::compare_command;
use crate::judge::JudgeError;
use crate::outcome::Comparison;
use meshparity_engine::checkpoint;
use meshparity_engine::tensor::Shards;

/// One side of a derived comparison: the tensors, and the file they are written to if it fails.
pub struct Side {
    pub tensors: Shards,
    pub path: PathBuf,
}

/// `reference` against `run` under `tolerance`, as `what`; on failure both are written and the
/// comparison names the command that re-derives it under `limits`.
pub fn compare_derived(
    what: &str,
    [reference, run]: [Side; 2],
    tolerance: Tolerance,
    limits: &Limits,
) -> Result<Comparison, JudgeError> {
    let encoded = |side: &Side| -> Result<Checkpoint, JudgeError> {
        let bytes = checkpoint::encode(&side.tensors).map_err(|source| io(&side.path, source))?;
        Ok(Checkpoint::of_file(SafetensorsFile::from_bytes(
            &side.path, bytes,
        )?))
    };
    let (a, b) = (encoded(&reference)?, encoded(&run)?);
    let opts = TensorOptions {
        tolerance,
        ..TensorOptions::default()
    };
    let mut c = Comparison::tensors(what, &compare(&a, &b, &opts)?);
    if c.passed {
        return Ok(c);
    }
    for file in [&a, &b].into_iter().flat_map(|cp| cp.files()) {
        std::fs::write(&file.path, file.bytes()).map_err(|source| io(&file.path, source))?;
    }
    c.reproduce = compare_command(&reference.path, &run.path, limits, false);
    Ok(c)
}

fn io(path: &Path, source: std::io::Error) -> JudgeError {
    JudgeError::Io {
        path: path.display().to_string(),
        source,
    }
}
