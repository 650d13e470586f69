//! One run of the program: its invocation for a request, traced where a level may need the
//! trace, and its files collected into the run's manifest.

use std::path::{Path, PathBuf};
use std::time::Instant;

use meshparity_engine::{Engine, EngineError, Manifest, RunRequest};
use meshparity_specs::Level;

use crate::process::{self, Invocation};
use crate::{collect, merged, trace, CommandEngine};

impl CommandEngine {
    /// One run of the program for `req`, with the template values `set` besides its own.
    pub(crate) fn run_with(
        &self,
        req: &RunRequest<'_>,
        set: &[(&str, String)],
    ) -> Result<Manifest, EngineError> {
        let start = Instant::now();
        std::fs::create_dir_all(req.out).map_err(EngineError::io("creating", req.out))?;
        let out = std::path::absolute(req.out).unwrap_or_else(|_| req.out.to_path_buf());
        let mut traces = match &self.def.artifacts.trace {
            Some(dir) if self.traces(req) => Some(out.join(&dir.value)),
            _ => None,
        };
        let inv = match self.run_program(req, &out, traces.as_deref(), set) {
            // The reference traces for whoever may need it; where its traced run fails, it
            // runs again untraced, from an empty directory (no file of the failed run is
            // judged), so every level that does not read a trace is judged as before (the
            // trace level then says the reference has none; localization reruns the trace and
            // says why it failed).
            Err(_) if traces.is_some() && self.traces_if_it_can(req) => {
                traces = None;
                std::fs::remove_dir_all(&out).map_err(EngineError::io("clearing", &out))?;
                std::fs::create_dir_all(&out).map_err(EngineError::io("creating", &out))?;
                self.run_program(req, &out, None, set)?
            }
            result => result?,
        };
        let argv = inv.display();
        let expect = collect::Expect::Whole {
            converts: converts(req),
        };
        let mut collected =
            collect::collect(&self.def.artifacts, &out, &argv, expect).map_err(EngineError::run)?;
        if traces.is_some() {
            // The trace level's file, judged like any other artifact of the run.
            let trace = [
                meshparity_engine::files::TRACE,
                meshparity_engine::files::TRACE_INDEX,
            ];
            collected.written.extend(trace.map(str::to_owned));
        }
        let steps = std::fs::read_to_string(out.join(meshparity_engine::files::CURVE))
            .map_or(req.training.steps as usize, |c| c.lines().count());
        let manifest = Manifest {
            engine: self.describe().engine,
            device: self.device.clone(),
            world_size: req.world_size(),
            dtype: Some(req.dtype),
            steps,
            artifacts: collected.written,
            ungated: collected.ungated,
            // What the program was asked to inject: a command engine cannot see inside it.
            altered: req
                .mutation
                .map(|m| vec![format!("{m}: requested with `{argv}`")])
                .unwrap_or_default(),
            // Replicas that disagree stand for no one model: the oracle level fails, saying so.
            unmerged: collected
                .replicas_differ
                .map(|why| [(meshparity_engine::files::WEIGHTS.to_owned(), why)].into())
                .unwrap_or_default(),
            seconds: start.elapsed().as_secs_f64(),
            ..Manifest::default()
        };
        manifest.write(&out)?;
        Ok(manifest)
    }

    /// Run the program for `req` into `out` with the template values `set`, tracing into
    /// `traces` when given and converting what it wrote there.
    fn run_program(
        &self,
        req: &RunRequest<'_>,
        out: &Path,
        traces: Option<&Path>,
        set: &[(&str, String)],
    ) -> Result<Invocation, EngineError> {
        let mut set = set.to_vec();
        set.extend(traces.map(|d| ("trace_dir", d.display().to_string())));
        // The directory a merged state is asked into exists, as a saving run's does.
        if let Some((_, dir)) = set.iter().find(|(k, _)| *k == "state_dir") {
            merged::create(Path::new(dir))?;
        }
        let inv = self.invocation_with(req, out, &set)?;
        process::run(&inv, out).map_err(EngineError::run)?;
        if let Some(traces) = traces {
            trace::convert(traces, out, replicas(req))
                .map_err(|e| EngineError::program(&self.def.name.value, e))?;
            self.traced
                .record(&RunRequest { out, ..*req }, TRACED_STEPS, true);
        }
        Ok(inv)
    }

    /// Whether `req` traces only in case a later job needs it: the reference, unless the
    /// engine traces always (there a failed trace is the run's failure, as it always was).
    fn traces_if_it_can(&self, req: &RunRequest<'_>) -> bool {
        req.levels.is_empty() && req.mesh.is_none() && !self.def.trace_always
    }

    /// Whether `req`'s run writes its traces, kept beside its artifacts: every run with
    /// `trace = "always"`; a run the trace level judges; the reference (asked for no level in
    /// particular, it records everything a level may judge: the trace level's other side, and
    /// what every mutation of the run is localized against); and a mutation run whatever the
    /// mode — it runs to be caught, and a caught run is localized from its trace: tracing it
    /// afterwards ran the user's program a second time (torchtitan's debug model: ~20 s of a
    /// 55 s mutation job, most of it imports).
    fn traces(&self, req: &RunRequest<'_>) -> bool {
        self.def.trace_always
            || req.mutation.is_some()
            || req.levels.is_empty()
            || req.levels.contains(&Level::Trace)
    }

    /// A run that already wrote `req`'s trace: for the reference its artifact directory, or
    /// one of this process's runs computing the same thing.
    pub(crate) fn traced_run(&self, req: &RunRequest<'_>) -> Option<PathBuf> {
        // The reference traces as it runs: its trace is the one asked of it, whatever the mode.
        let has = |dir: &Path| dir.join(meshparity_engine::files::TRACE).is_file();
        if let Some(dir) = req.reference.filter(|dir| req.mesh.is_none() && has(dir)) {
            return Some(dir.to_path_buf());
        }
        if !self.traces(req) {
            return None;
        }
        self.traced.find(req, TRACED_STEPS, true)
    }
}

/// The data-parallel replicas whose rows a batch-valued trace holds, in rank order.
pub(crate) fn replicas(req: &RunRequest<'_>) -> usize {
    req.mesh.map_or(1, |m| m.dp as usize)
}

/// A program traces the steps it runs, whatever the request's length: one count for all.
const TRACED_STEPS: usize = 0;

/// Whether this run converts the reference's seed checkpoint (the roundtrip level of a mesh).
fn converts(req: &RunRequest<'_>) -> bool {
    req.mesh.is_some()
        && req.reference.is_some()
        && req.levels.contains(&meshparity_specs::Level::Roundtrip)
}
