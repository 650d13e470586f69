//! From the files a program wrote to the artifact contract: each mapped file must exist and
//! parse, and is copied to its contract name; the loss curve is re-keyed (`step_key`,
//! `loss_key`) or read from the log. Anything missing or malformed is an error naming the file,
//! the program's command and its last output, never a silently empty level.

use std::path::Path;

use meshparity_compare::curve::is_performance;
use meshparity_engine::{checkpoint, files};
use meshparity_specs::ArtifactMap;

use crate::log;
use crate::process::LOG;

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("the program wrote no `{file}` (artifacts.{key}) in {dir}; command: {argv}\n{tail}")]
    Missing {
        file: String,
        key: &'static str,
        dir: String,
        argv: String,
        tail: String,
    },
    #[error("`{path}` (artifacts.{key}) is malformed: {message}; command: {argv}")]
    Malformed {
        path: String,
        key: &'static str,
        message: String,
        argv: String,
    },
    #[error("`{path}` (artifacts.{key}) {why}; command: {argv}")]
    Escapes {
        path: String,
        key: &'static str,
        why: &'static str,
        argv: String,
    },
    #[error(transparent)]
    Log(#[from] log::LogError),
    #[error("writing {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// What [`collect`] made of the program's files.
#[derive(Debug, Default)]
pub struct Collected {
    /// Contract artifacts written, by name.
    pub written: Vec<String>,
    /// Curve metrics left out of the contract curve: neither the loss, nor gated
    /// ([`ArtifactMap::gated`]), nor a performance figure.
    pub ungated: Vec<String>,
    /// Why the program's replica digests say its replicas disagree (`artifacts.digests`).
    pub replicas_differ: Option<String>,
}

/// Which of the mapped files a run of the program is expected to have written.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// Every mapped file; the round trip's only when the run was handed `{{seed_checkpoint}}`.
    Whole { converts: bool },
    /// The part of a `[[resume]]` pair's run that saves: its curve and inputs up to the
    /// checkpoint and the first step's gradients; the weights too when they are taken before
    /// the checkpoint.
    Saving { weights: bool },
    /// The part that resumes: its curve and inputs after the checkpoint, the weights, the
    /// digests.
    Resumed { weights: bool },
}

impl Expect {
    fn wants(self, key: &str) -> bool {
        match self {
            Expect::Whole { converts } => key != "roundtrip" || converts,
            Expect::Saving { weights } => {
                key == "grads" || key == "inputs" || (weights && key == "weights")
            }
            Expect::Resumed { weights } => {
                key == "digests" || key == "inputs" || (weights && key == "weights")
            }
        }
    }
}

/// Collect the program's files in `out` into contract artifacts, those `expect` names.
pub fn collect(
    map: &ArtifactMap,
    out: &Path,
    argv: &str,
    expect: Expect,
) -> Result<Collected, CollectError> {
    let mut written = Vec::new();
    let mut moved = Vec::new();
    let tensors = [
        ("logits", &map.logits, files::FORWARD),
        ("grads", &map.grads, files::GRADS),
        ("weights", &map.weights, files::WEIGHTS),
        ("initial", &map.initial, files::SEED),
        ("roundtrip", &map.roundtrip, files::CHECKPOINT),
    ];
    for (key, file, contract) in tensors {
        let Some(file) = file else { continue };
        if !expect.wants(key) {
            continue;
        }
        let src = found(out, &file.value, key, argv)?;
        checkpoint::load(&src).map_err(|e| malformed(&src, key, argv)(e.to_string()))?;
        let dst = out.join(contract);
        if src != dst {
            place(&src, &dst, &mut moved)?;
        }
        written.push(contract.to_owned());
    }
    let (steps, ungated) = steps(map, out, argv)?;
    let replicas_differ = match &map.digests {
        Some(file) if expect.wants("digests") => {
            let path = found(out, &file.value, "digests", argv)?;
            crate::digests::disagreement(&path)
                .map_err(|e| malformed(&path, "digests", argv)(e.to_string()))?
        }
        _ => None,
    };
    if let Some(file) = map.inputs.as_ref().filter(|_| expect.wants("inputs")) {
        let path = found(out, &file.value, "inputs", argv)?;
        let inputs = meshparity_engine::inputs::read(&path)
            .map_err(|e| malformed(&path, "inputs", argv)(e.to_string()))?;
        let dst = out.join(files::INPUTS);
        meshparity_engine::inputs::write(&dst, &inputs).map_err(io(&dst))?;
        written.push(files::INPUTS.to_owned());
    }
    if let Some(steps) = steps {
        let path = out.join(files::CURVE);
        let lines: String = steps.iter().map(line).collect();
        meshparity_files::write(&path, lines.as_bytes()).map_err(io(&path))?;
        written.push(files::CURVE.to_owned());
    }
    Ok(Collected {
        written,
        ungated,
        replicas_differ,
    })
}

/// The loss curve the program logged — its metrics file, or the lines of its log the spec's
/// pattern matches — and the metrics it left out; `None` where the spec maps neither.
fn steps(
    map: &ArtifactMap,
    out: &Path,
    argv: &str,
) -> Result<(Option<Vec<Point>>, Vec<String>), CollectError> {
    match (&map.curve, &map.log) {
        (Some(file), _) => {
            let path = found(out, &file.value, "curve", argv)?;
            let (points, left_out) = curve_file(map, &path, argv)?;
            Ok((Some(points), left_out))
        }
        (None, Some(pattern)) => Ok((Some(log_points(out, &pattern.value, argv)?), Vec::new())),
        (None, None) => Ok((None, Vec::new())),
    }
}

/// The steps the log's lines matching `pattern` give: at least one, or the curve is malformed.
fn log_points(out: &Path, pattern: &str, argv: &str) -> Result<Vec<Point>, CollectError> {
    let path = out.join(LOG);
    let malformed = malformed(&path, "log", argv);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let read = log::curve(&text, &log::pattern(pattern)?).map_err(|e| malformed(e.to_string()))?;
    if read.is_empty() {
        return Err(malformed(format!(
            "no line matches the log pattern `{pattern}`"
        )));
    }
    Ok(read
        .into_iter()
        .map(|(step, loss)| Point {
            step,
            loss,
            ..Point::default()
        })
        .collect())
}

/// A malformed-file error for the program's file `path` under `key`, with `message`.
fn malformed<'a>(
    path: &'a Path,
    key: &'static str,
    argv: &'a str,
) -> impl Fn(String) -> CollectError + 'a {
    move |message| CollectError::Malformed {
        path: path.display().to_string(),
        key,
        message,
        argv: argv.to_owned(),
    }
}

/// The program's file `src` under the contract's name `dst`, in the same directory: moved, not
/// copied (a model's files are its size each, and a run keeps only what its reports cite). The
/// rename replaces whatever the program left at `dst`, a planted link included, without
/// following it. A file two keys map to is moved once and copied for the second (`moved`).
fn place(
    src: &Path,
    dst: &Path,
    moved: &mut Vec<(std::path::PathBuf, std::path::PathBuf)>,
) -> Result<(), CollectError> {
    if let Some((_, first)) = moved.iter().find(|(from, _)| from == src) {
        let first = first.clone();
        // Never through a link the program planted under the contract's name.
        let mut to = meshparity_files::create(dst).map_err(io(dst))?;
        let mut from = std::fs::File::open(&first).map_err(io(&first))?;
        std::io::copy(&mut from, &mut to).map_err(io(dst))?;
        return Ok(());
    }
    std::fs::rename(src, dst).map_err(io(dst))?;
    moved.push((src.to_owned(), dst.to_owned()));
    Ok(())
}

/// The program's file `name` (relative to its output directory), which must exist as a regular
/// file the program wrote there: not a link (the program could point it anywhere, and a job
/// would pass on a file it never wrote), and not anywhere outside `out` once resolved.
pub(crate) fn found(
    out: &Path,
    name: &str,
    key: &'static str,
    argv: &str,
) -> Result<std::path::PathBuf, CollectError> {
    let path = out.join(name);
    let linked = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
    let resolved = std::fs::canonicalize(&path).ok();
    let root = std::fs::canonicalize(out).ok();
    let inside = matches!((&resolved, &root), (Some(p), Some(r)) if p.starts_with(r));
    if (linked || !inside) && path.exists() {
        return Err(CollectError::Escapes {
            path: path.display().to_string(),
            key,
            why: if linked {
                "is a symbolic link: an artifact must be a regular file the program writes \
                 inside {{out_dir}}"
            } else {
                "resolves to a file outside {{out_dir}} (through a linked directory)"
            },
            argv: argv.to_owned(),
        });
    }
    if path.is_file() {
        return Ok(path);
    }
    Err(CollectError::Missing {
        file: name.to_owned(),
        key,
        dir: out.display().to_string(),
        argv: argv.to_owned(),
        tail: crate::cause::excerpt(&out.join(LOG)),
    })
}

/// A curve step: its number, loss, the metrics gated beside the loss, and the performance
/// figures the program reported with it (step time, tokens/s, memory: compared side by side,
/// never gated).
#[derive(Debug, Default)]
pub struct Point {
    pub step: u64,
    pub loss: f64,
    pub gated: Vec<(String, f64)>,
    pub performance: Vec<(String, f64)>,
}

/// The steps of a JSON Lines metrics file keyed as the spec says, and the metrics left out.
fn curve_file(
    map: &ArtifactMap,
    path: &Path,
    argv: &str,
) -> Result<(Vec<Point>, Vec<String>), CollectError> {
    let malformed = malformed(path, "curve", argv);
    let curve = meshparity_compare::curve::read_curve_keyed(path, &map.step_key)
        .map_err(|e| malformed(e.to_string()))?;
    if curve.steps.is_empty() {
        return Err(malformed(format!("no line has a `{}`", map.step_key)));
    }
    // A step logged twice (every rank appending its own loss: one rank's diverging value was
    // dropped for the first's), out of order, or a metric that is no number: the curve the
    // contract would hold is not the program's, so nothing is judged from it.
    if !curve.problems.is_empty() {
        let mut shown: Vec<&str> = curve
            .problems
            .iter()
            .take(5)
            .map(|p| p.message.as_str())
            .collect();
        let more = curve.problems.len().saturating_sub(shown.len());
        let more = format!("and {more} more problem(s)");
        if curve.problems.len() > 5 {
            shown.push(&more);
        }
        return Err(malformed(format!(
            "{}; a curve logs each step once, in order (write it from one rank)",
            shown.join("; ")
        )));
    }
    // Sets: a program may log 100,000 metrics a line (a list searched per metric made that
    // quadratic, as `compare` once was).
    let mut left_out: indexmap::IndexSet<&str> = indexmap::IndexSet::new();
    let mut seen: indexmap::IndexSet<&str> = indexmap::IndexSet::new();
    let mut points = Vec::with_capacity(curve.steps.len());
    for (step, metrics) in &curve.steps {
        let Some(loss) = metrics.get(&map.loss_key) else {
            return Err(malformed(format!(
                "step {step} (line {}) has no `{}`; it has: {}",
                curve.lines.get(step).copied().unwrap_or(0),
                map.loss_key,
                metrics.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        };
        let mut point = Point {
            step: *step,
            loss: *loss,
            ..Point::default()
        };
        for (k, v) in metrics.iter().filter(|(k, _)| **k != map.loss_key) {
            if map.gated(k) {
                point.gated.push((k.clone(), *v));
                seen.insert(k);
            } else if is_performance(k) {
                point.performance.push((k.clone(), *v));
            } else {
                left_out.insert(k);
            }
        }
        points.push(point);
    }
    // A metric the spec asks to gate that the program never logs would gate nothing.
    if let Some(missing) = map.gate.iter().find(|g| !seen.contains(g.value.as_str())) {
        let all: indexmap::IndexSet<&str> = curve
            .steps
            .values()
            .flat_map(|m| m.keys().map(String::as_str))
            .collect();
        return Err(malformed(format!(
            "no step has `{}`, which artifacts.gate lists; the curve's metrics: {}",
            missing.value,
            listed(&all)
        )));
    }
    // What the manifest records of the rest: the first [`UNGATED_KEPT`] names.
    let kept = left_out.iter().take(UNGATED_KEPT).map(|k| k.to_string());
    Ok((points, kept.collect()))
}

/// Names of left-out metrics a manifest keeps.
pub const UNGATED_KEPT: usize = 100;

/// At most 20 names, then how many more.
fn listed(names: &indexmap::IndexSet<&str>) -> String {
    let shown: Vec<&str> = names.iter().take(20).copied().collect();
    match names.len().saturating_sub(shown.len()) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// One line of the contract's curve: step, loss, the gated metrics, then the performance
/// figures.
fn line(p: &Point) -> String {
    let mut fields = vec![
        format!("\"step\": {}", p.step),
        format!("\"loss\": {}", json_f64(p.loss)),
    ];
    for (k, v) in p.gated.iter().chain(&p.performance) {
        let key = serde_json::to_string(k).expect("strings serialize");
        fields.push(format!("{key}: {}", json_f64(*v)));
    }
    format!("{{{}}}\n", fields.join(", "))
}

fn json_f64(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{x:?}")
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CollectError + '_ {
    move |source| CollectError::Io {
        path: path.display().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(gate: &[&str]) -> ArtifactMap {
        let file = meshparity_specs::source::SourceFile::new("spec.toml", "");
        let at = meshparity_specs::source::Loc::new(&file, 0..0);
        ArtifactMap {
            step_key: "step".into(),
            loss_key: "loss".into(),
            gate: gate
                .iter()
                .map(|g| meshparity_specs::source::Located::new(g.to_string(), at.clone()))
                .collect(),
            ..ArtifactMap::default()
        }
    }

    /// 100,000 metrics a line are sorted in linear time; the manifest keeps the first names.
    #[test]
    fn many_metrics_are_sorted_in_linear_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        let metrics: Vec<String> = (0..100_000).map(|i| format!("\"m{i}\": 1")).collect();
        let line = format!(
            "{{\"step\": 1, \"loss\": 2.0, \"grad_norm\": 3.0, \"step_time_s\": 1, {}}}\n",
            metrics.join(", ")
        );
        std::fs::write(&path, line).unwrap();
        let t = std::time::Instant::now();
        let (points, left_out) = curve_file(&map(&[]), &path, "prog").unwrap();
        assert!(t.elapsed().as_secs() < 10, "{:?}", t.elapsed());
        assert_eq!(points[0].gated, [("grad_norm".to_owned(), 3.0)]);
        assert_eq!(points[0].performance.len(), 1);
        assert_eq!(left_out.len(), UNGATED_KEPT);
        let e = curve_file(&map(&["nope"]), &path, "prog")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no step has `nope`") && e.contains("and 99983 more"),
            "{e}"
        );
    }
}
