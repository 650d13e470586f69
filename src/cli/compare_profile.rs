//! `compare`'s default profile, `auto`: the limits a level of that dtype is judged by.
//!
//! On a correct bf16 pair the old default (element-wise allclose at the tensors' own dtype,
//! zero mismatches allowed) said `MISMATCH: 22 of 22 tensors fail`, and a curve's default was
//! f32's: allclose is the wrong statistic after optimizer steps, and a run's files are often
//! upcast (f32 master weights, f64 updates). `auto` picks the built-in table's aggregate gates
//! instead — the level from the file (meshparity's artifact names; `logits` in it: forward), the
//! dtype the run computed in (its `manifest.json`, or the `job.json` of the judge that wrote the
//! file, else the tensors' coarsest float dtype) — and says what it chose and why.

use std::path::Path;

use meshparity_compare::Checkpoint;
use meshparity_specs::{DType, Keyword, Level};

/// The profile `auto` means for these two files, and why (for the report's notes).
pub fn choose(reference: &Path, candidate: &Path, curve: bool) -> (String, String) {
    let level = level_of(reference, curve);
    let found = [reference, candidate].iter().find_map(|p| run_dtype(p));
    let (dtype, whence) = match found {
        Some((d, from)) => (Some(d), from),
        None if curve => (None, String::new()),
        None => match tensor_dtype(reference) {
            Some(d) => (Some(d), "the tensors' coarsest float dtype".to_owned()),
            None => (None, String::new()),
        },
    };
    match (level, dtype) {
        (Some(Level::Roundtrip), _) => (
            "exact".into(),
            "profile `exact` (auto): a round-trip checkpoint must be bit-identical".into(),
        ),
        (Some(level), Some(dtype)) => {
            let name = format!("{level}-{dtype}");
            (
                name.clone(),
                format!(
                    "profile `{name}` (auto): the built-in {level} limits for {dtype}, {dtype} \
                     from {whence}; --profile or -t sets others"
                ),
            )
        }
        (Some(Level::Curve), None) => (
            "curve-f32".into(),
            "profile `curve-f32` (auto): the run's dtype is unknown here (no manifest.json \
             beside the curve), so f32's limits; pass --profile curve-bf16 for a bf16 run"
                .into(),
        ),
        _ => (
            "default".into(),
            "profile `default` (auto): neither file names a level meshparity knows, so \
             element-wise allclose at each tensor's dtype; --profile forward-bf16, oracle-f32, \
             … gates as a level does"
                .into(),
        ),
    }
}

/// The level a file is an artifact of, by meshparity's names (the judge's own files too).
fn level_of(path: &Path, curve: bool) -> Option<Level> {
    if curve {
        return Some(Level::Curve);
    }
    let name = path.file_name()?.to_string_lossy();
    let by_name = match name.as_ref() {
        "forward.safetensors" => Some(Level::Forward),
        "checkpoint.safetensors" | "resume-saved.safetensors" => Some(Level::Roundtrip),
        "routing.safetensors" => Some(Level::Routing),
        n if n.ends_with("updates.safetensors")
            || n.starts_with("state-at-step")
            || ["grads.safetensors", "weights.safetensors"].contains(&n) =>
        {
            Some(Level::Oracle)
        }
        _ => None,
    };
    by_name.or_else(|| {
        let cp = Checkpoint::open(path).ok()?;
        cp.contains("logits").then_some(Level::Forward)
    })
}

/// The dtype the run behind `path` computed in: its directory's `manifest.json`, or the
/// `job.json` of the attempt that holds it (a judge's derived files, a job's evidence).
fn run_dtype(path: &Path) -> Option<(DType, String)> {
    let dir = path.parent()?;
    let read = |p: &Path| -> Option<serde_json::Value> {
        let bytes = meshparity_files::read(p, meshparity_files::Limit::JSON).ok()?;
        serde_json::from_slice(&bytes).ok()
    };
    if let Some(m) = read(&dir.join(meshparity_engine::files::MANIFEST)) {
        if let Some(d) = m["dtype"].as_str().and_then(DType::parse) {
            return Some((d, "its manifest.json".into()));
        }
    }
    for up in dir.ancestors().take(3) {
        let job = up.join(meshparity_runner::plan::job_file::JOB_FILE);
        if let Some(d) =
            read(&job).and_then(|j| j["jobs"][0]["dtype"].as_str().and_then(DType::parse))
        {
            return Some((d, format!("the job that wrote it ({})", job.display())));
        }
    }
    None
}

/// The coarsest float dtype among a checkpoint's tensors.
fn tensor_dtype(path: &Path) -> Option<DType> {
    use meshparity_compare::TensorDtype as T;
    let cp = Checkpoint::open(path).ok()?;
    let rank = |d: T| match d {
        T::BF16 => 0,
        T::F16 => 1,
        T::F32 => 2,
        _ => 3,
    };
    let coarsest = cp
        .names()
        .filter_map(|n| cp.view(n).map(|v| v.dtype))
        .filter(|d| d.is_float())
        .min_by_key(|d| rank(*d))?;
    Some(match coarsest {
        T::BF16 => DType::Bf16,
        T::F16 => DType::F16,
        T::F32 => DType::F32,
        _ => DType::F64,
    })
}
