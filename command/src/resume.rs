//! A `[[resume]]` pair's run on a command engine: the program runs twice, as a user's
//! stopped-and-resumed training does.
//!
//! 1. On the `from` mesh, with `{{save_at}}` = k and `{{save_dir}}`: it trains k steps, saves
//!    its checkpoint there in its own format, and beside it the merged state (the files
//!    `artifacts.weights` and `artifacts.optimizer` name, in world-size-1 shapes). It may stop
//!    there; meshparity reads its curve up to step k.
//! 2. On the pair's own mesh, with `{{resume_from}}` = that directory and `{{loaded_dir}}`: it
//!    loads the checkpoint, writes the merged state as loaded into `loaded_dir`, and trains on
//!    from step k + 1 to the last.
//!
//! The run's artifacts are then the uninterrupted run's — the curve joined (the first run's
//! steps up to k, the second's after), the first step's gradients from the first run, the
//! weights from whichever run held them at `weights_after` — and beside them the merged state
//! saved (`RESUME_SAVED`) and loaded (`CHECKPOINT`), which the roundtrip level holds bit-equal.

use std::path::Path;
use std::time::Instant;

use meshparity_engine::{checkpoint, files, inputs, Engine, EngineError, Manifest, RunRequest};
use meshparity_specs::ResumeFrom;

use crate::collect::{self, Collected, Expect};
use crate::merged::{create, fail, merged, put, ResumeError};
use crate::{process, states, CommandEngine};

/// Where the saving run writes its own files, under the pair's output directory.
const SAVING: &str = "saving";
/// Where the resumed run writes the merged state it loaded.
const LOADED: &str = "loaded";
/// Where the resumed run writes its merged state after `oracle_steps` (`{{state_dir}}`).
const FINAL: &str = "state-final";

/// Run `req`, a pair's, resuming from `from`: save, resume, join, write the manifest.
pub(crate) fn run(
    engine: &CommandEngine,
    req: &RunRequest<'_>,
    from: &ResumeFrom,
) -> Result<Manifest, EngineError> {
    let start = Instant::now();
    let out = std::path::absolute(req.out).unwrap_or_else(|_| req.out.to_path_buf());
    let (saving, save_dir, loaded) = (
        out.join(SAVING),
        out.join(files::RESUME_CHECKPOINT),
        out.join(LOADED),
    );
    for dir in [&saving, &save_dir, &loaded] {
        create(dir)?;
    }
    let at = from.at as u64;
    let weights_after = req.length().weights_after as u64;
    let early = weights_after > 0 && weights_after <= at;
    let map = &engine.def.artifacts;

    // 1. The `from` mesh trains to the checkpoint and saves.
    let first = RunRequest {
        mesh: Some(&from.config),
        out: &saving,
        ..*req
    };
    let set = [
        ("save_at", at.to_string()),
        ("save_dir", save_dir.display().to_string()),
    ];
    let (a, argv) = part(engine, &first, &set, Expect::Saving { weights: early })?;
    let saved = merged(map, &save_dir, "save_dir", &argv).map_err(|e| fail(engine, e))?;

    // 2. The pair's own mesh loads it and trains on; a program told where (`{{state_dir}}`)
    // also writes its merged state after `oracle_steps` there, without stopping.
    let resumed = RunRequest { out: &out, ..*req };
    let oracle = req.training.oracle_steps;
    let finals = states::asks_final(engine).then(|| out.join(FINAL));
    let mut set = vec![
        ("resume_from", save_dir.display().to_string()),
        ("loaded_dir", loaded.display().to_string()),
    ];
    if let Some(dir) = &finals {
        create(dir)?;
        set.push(("state_at", oracle.to_string()));
        set.push(("state_dir", dir.display().to_string()));
    }
    let (b, argv) = part(engine, &resumed, &set, Expect::Resumed { weights: !early })?;
    let held = merged(map, &loaded, "loaded_dir", &argv).map_err(|e| fail(engine, e))?;

    // Written where the program wrote too: never through a link it planted there.
    let mut written = vec![files::RESUME_SAVED.to_owned(), files::CHECKPOINT.to_owned()];
    if let Some(dir) = &finals {
        let to = out.join(files::state_at(oracle));
        states::take(engine, (dir, "state_dir"), &argv, &to)?;
        written.push(files::state_at(oracle));
    }
    for (name, tensors) in [(files::RESUME_SAVED, &saved), (files::CHECKPOINT, &held)] {
        let bytes = checkpoint::encode(tensors).map_err(|e| fail(engine, e))?;
        put(&out.join(name), &bytes)?;
    }
    let steps = join_parts(engine, req, (&saving, &out), at, (&a, &b), &mut written)?;
    let manifest = manifest(engine, req, &argv, (written, steps), b, start);
    manifest.write(&out)?;
    prune(&saving, &save_dir, &loaded);
    Ok(manifest)
}

/// What the pair's files were made from, removed once they are: the program's own checkpoint
/// and the merged state beside it (now `RESUME_SAVED`), the state it loaded (now `CHECKPOINT`),
/// and the saving run's files (the ones a level reads are copied beside the resumed run's);
/// the saving run's `program.log` stays. A run keeps what its reports cite: at torchtitan's
/// debug model these were 267 MB a pair: three copies of the whole training state (DCP, merged
/// as saved, merged as loaded) and the saving run's files. A failed
/// pair returns before this, its files all kept for whoever reads why. Best effort: the run's
/// verdict is computed, and what cannot be removed (a directory the program made unwritable)
/// stays rather than failing the job.
fn prune(saving: &Path, save_dir: &Path, loaded: &Path) {
    // Not followed: a link the program planted in place of a directory goes as a link.
    for dir in [save_dir, loaded] {
        let _ = std::fs::remove_dir_all(dir);
    }
    let Ok(entries) = std::fs::read_dir(saving) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name() == process::LOG {
            continue;
        }
        let path = entry.path();
        let _ = match entry.file_type() {
            Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
    }
}

/// The saving run's files beside the resumed run's in `out`: each one part's as that part wrote
/// it, the curve and the inputs joined at the checkpoint's step `at`. Returns the steps.
fn join_parts(
    engine: &CommandEngine,
    req: &RunRequest<'_>,
    (saving, out): (&Path, &Path),
    at: u64,
    (a, b): (&Collected, &Collected),
    written: &mut Vec<String>,
) -> Result<usize, EngineError> {
    let map = &engine.def.artifacts;
    // The curve and the inputs are joined at the checkpoint below; the rest is one part's.
    let joined = |n: &&String| *n != files::CURVE && *n != files::INPUTS;
    for name in a.written.iter().filter(joined) {
        let from = saving.join(name);
        let bytes = std::fs::read(&from).map_err(EngineError::io("reading", &from))?;
        put(&out.join(name), &bytes)?;
        written.push(name.clone());
    }
    written.extend(b.written.iter().filter(joined).cloned());
    if b.written.iter().any(|n| n == files::INPUTS) {
        join_inputs(saving, out, at).map_err(|e| fail(engine, e))?;
        written.push(files::INPUTS.to_owned());
    }
    Ok(if map.curve.is_some() || map.log.is_some() {
        written.push(files::CURVE.to_owned());
        join_curves(saving, out, at).map_err(|e| fail(engine, e))?
    } else {
        req.training.steps as usize
    })
}

/// The resumed pair's manifest: the files `written`, the steps, the resumed run's ungated
/// metrics and replica disagreement.
fn manifest(
    engine: &CommandEngine,
    req: &RunRequest<'_>,
    argv: &str,
    (written, steps): (Vec<String>, usize),
    b: Collected,
    start: Instant,
) -> Manifest {
    Manifest {
        engine: engine.describe().engine,
        device: engine.device.clone(),
        world_size: req.world_size(),
        dtype: Some(req.dtype),
        steps,
        artifacts: written,
        ungated: b.ungated,
        altered: req
            .mutation
            .map(|m| vec![format!("{m}: requested with `{argv}` (and its saving run)")])
            .unwrap_or_default(),
        unmerged: b
            .replicas_differ
            .map(|why| [(files::WEIGHTS.to_owned(), why)].into())
            .unwrap_or_default(),
        seconds: start.elapsed().as_secs_f64(),
        ..Manifest::default()
    }
}

/// One run of the program for `req`, in `req.out`, with `set` values; its files collected as
/// `expect` says. Returns them and the rendered command.
fn part(
    engine: &CommandEngine,
    req: &RunRequest<'_>,
    set: &[(&str, String)],
    expect: Expect,
) -> Result<(Collected, String), EngineError> {
    let inv = engine.invocation_with(req, req.out, set)?;
    process::run(&inv, req.out).map_err(EngineError::run)?;
    let argv = inv.display();
    let collected = collect::collect(&engine.def.artifacts, req.out, &argv, expect)
        .map_err(|e| fail(engine, e))?;
    Ok((collected, argv))
}

/// The contract curve of the whole run: the saving run's steps up to `at`, the resumed run's
/// after; written over the resumed run's. Each part must hold its steps, or the curve would
/// silently skip or repeat some. Returns the number of steps.
fn join_curves(saving: &Path, out: &Path, at: u64) -> Result<usize, ResumeError> {
    let steps = |dir: &Path| -> Result<Vec<(u64, String)>, ResumeError> {
        let path = dir.join(files::CURVE);
        let io = |message: String| ResumeError::Io {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| io(e.to_string()))?;
        text.lines()
            .map(|l| {
                let v: serde_json::Value =
                    serde_json::from_str(l).map_err(|e| io(e.to_string()))?;
                let step = v["step"]
                    .as_u64()
                    .ok_or_else(|| io("a curve line without its step".into()))?;
                Ok((step, format!("{l}\n")))
            })
            .collect()
    };
    let before: Vec<_> = steps(saving)?
        .into_iter()
        .filter(|(s, _)| *s <= at)
        .collect();
    let after = steps(out)?;
    let numbers: Vec<u64> = before.iter().chain(&after).map(|(s, _)| *s).collect();
    let expected: Vec<u64> = (1..=numbers.len() as u64).collect();
    if before.len() as u64 != at || numbers != expected {
        return Err(ResumeError::Steps { at, steps: numbers });
    }
    let text: String = before.into_iter().chain(after).map(|(_, l)| l).collect();
    let path = out.join(files::CURVE);
    meshparity_files::write(&path, text.as_bytes()).map_err(|e| ResumeError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    Ok(numbers.len())
}

/// The rows each rank took over the whole run: the saving run's steps up to `at` (where it
/// recorded them), the resumed run's after; written over the resumed run's. Gaps are the
/// judge's to name ([`meshparity_engine::inputs`]).
fn join_inputs(saving: &Path, out: &Path, at: u64) -> Result<(), ResumeError> {
    let read = |dir: &Path| {
        let path = dir.join(files::INPUTS);
        match path.is_file() {
            true => inputs::read(&path).map_err(|e| ResumeError::Io {
                path: path.display().to_string(),
                message: e.to_string(),
            }),
            false => Ok(inputs::Inputs::new()),
        }
    };
    let mut joined = read(saving)?;
    joined.retain(|step, _| *step <= at);
    joined.extend(read(out)?.into_iter().filter(|(step, _)| *step > at));
    let path = out.join(files::INPUTS);
    inputs::write(&path, &joined).map_err(|e| ResumeError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(dir: &Path, steps: &[u64]) {
        let text: String = steps
            .iter()
            .map(|s| format!("{{\"step\": {s}, \"loss\": 1.5}}\n"))
            .collect();
        std::fs::write(dir.join(files::CURVE), text).unwrap();
    }

    /// The saving run's steps up to the checkpoint, then the resumed run's: a saving run that
    /// trained on past it is cut there; a resumed run that started over, or skipped a step, is
    /// an error listing the steps it got.
    #[test]
    fn curves_join_at_the_checkpoint_each_step_once() {
        let dir = tempfile::tempdir().unwrap();
        let (saving, out) = (dir.path().join("s"), dir.path().join("o"));
        std::fs::create_dir_all(&saving).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        curve(&saving, &[1, 2, 3, 4]);
        curve(&out, &[3, 4, 5]);
        assert_eq!(join_curves(&saving, &out, 2).unwrap(), 5);
        let joined = std::fs::read_to_string(out.join(files::CURVE)).unwrap();
        assert_eq!(joined.lines().count(), 5);
        for (resumed, at) in [(&[1u64, 2, 3, 4, 5][..], 2), (&[4, 5], 2), (&[3, 4], 3)] {
            curve(&saving, &[1, 2]);
            curve(&out, resumed);
            let e = join_curves(&saving, &out, at).unwrap_err().to_string();
            assert!(e.contains("together they hold"), "{e}");
        }
    }
}
