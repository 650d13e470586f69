//! meshparity's command engine: a user's own training program (torch, JAX, Megatron, in-house)
//! run as an [`Engine`]. The program knows nothing of meshparity: it takes its layout as flags
//! rendered from `[engines.NAME]` templates, writes its own files, and this crate maps them to
//! the artifact contract, so the same levels, tolerances and mutations judge it.
//!
//! - `template.rs` — the values templates see, strict rendering, shell quoting;
//! - `process.rs` — running the program, its output teed to the log;
//! - `checkout.rs` — a variant's snapshot of one commit;
//! - `collect.rs` — the program's files → contract artifacts;
//! - `trace.rs` — the program's per-site traces → the trace artifact (localization);
//! - `run.rs` — one run of the program: invocation, traces, its files into a manifest;
//! - `resume.rs` — a `[[resume]]` pair's run: the program saves on one mesh, resumes on another;
//! - `states.rs` — the reference's state where pairs save, from its own saving run;
//! - `merged.rs` — the merged state a program writes, read back, and the file helpers both share;
//! - `log.rs` — loss curves from Megatron/torchtitan/pithtrain logs or a user regex;
//! - [`cause`] — what a failed program's output says went wrong, for the job's error;
//! - [`digests`] — replica digests: each rank's hash and norm of every parameter it holds.

pub mod cause;
pub mod checkout;
pub mod collect;
pub mod digests;
pub mod log;
mod merged;
pub mod output;
pub mod process;
mod resume;
mod run;
mod states;
pub mod template;
pub mod trace;

use std::path::{Path, PathBuf};

use meshparity_engine::{Description, Engine, EngineError, Manifest, RunRequest};
use meshparity_specs::{DType, EngineDef, Field, MeshConfig, ModelConfig, Unsupported};

use process::Invocation;
use template::{Renderer, TemplateError};

/// A `[engines.NAME]` of kind `command`, on the device the spec gives its models.
pub struct CommandEngine {
    def: EngineDef,
    device: String,
    /// The variant this engine runs, and its checkout (`None`: the working tree).
    variant: Option<(String, Option<checkout::Checkout>)>,
    /// With `trace = "always"`: the runs of this process that wrote their traces, by what they
    /// computed, so localizing one reads its trace instead of running the program again.
    traced: meshparity_engine::traced::TracedRuns,
}

impl CommandEngine {
    pub fn new(def: EngineDef, device: meshparity_specs::Device) -> Self {
        Self {
            def,
            device: device.to_string(),
            variant: None,
            traced: Default::default(),
        }
    }

    /// The same engine running variant `name`, from `checkout` (`None`: the working tree).
    pub fn variant(mut self, name: &str, checkout: Option<checkout::Checkout>) -> Self {
        self.variant = Some((name.to_owned(), checkout));
        self
    }

    fn base(&self) -> PathBuf {
        if let Some((_, Some(c))) = &self.variant {
            return c.base.clone();
        }
        let base = self.def.base_dir();
        if base.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            base
        }
    }

    /// The program, its arguments, environment and directory for `req`, writing into `out`.
    pub fn invocation(&self, req: &RunRequest<'_>, out: &Path) -> Result<Invocation, EngineError> {
        self.invocation_with(req, out, &[])
    }

    /// [`CommandEngine::invocation`], asking for per-site traces in `trace_dir` when given.
    fn invocation_tracing(
        &self,
        req: &RunRequest<'_>,
        out: &Path,
        trace_dir: Option<&Path>,
    ) -> Result<Invocation, EngineError> {
        let traces = trace_dir.map(|d| ("trace_dir", d.display().to_string()));
        self.invocation_with(req, out, traces.as_slice())
    }

    /// [`CommandEngine::invocation`] with `set` values in place of their defaults (where to
    /// trace, where to save or resume).
    fn invocation_with(
        &self,
        req: &RunRequest<'_>,
        out: &Path,
        set: &[(&str, String)],
    ) -> Result<Invocation, EngineError> {
        let base = std::path::absolute(self.base()).unwrap_or_else(|_| self.base());
        let mut values = template::values(req, out, &base);
        // The engine's defaults fill only what neither meshparity nor the model sets.
        for (k, v) in &self.def.defaults {
            values.entry(k.clone()).or_insert_with(|| v.value.clone());
        }
        for (k, v) in set {
            values.insert((*k).to_owned(), v.clone());
        }
        if let Some((name, checkout)) = &self.variant {
            values.insert("variant".into(), name.clone());
            let root = checkout.as_ref().map_or(base.clone(), |c| c.root.clone());
            values.insert("variant_dir".into(), root.display().to_string());
        }
        let r = Renderer::new(values, self.def.shell);
        let name = &self.def.name.value;
        let t = |e: TemplateError| EngineError::program(name, e);
        let mutation = match req.mutation {
            Some(m) => Some(
                self.def
                    .mutation(m)
                    .ok_or_else(|| EngineError::UnknownMutation {
                        engine: name.clone(),
                        mutation: m.to_owned(),
                        declared: self.mutations(),
                    })?,
            ),
            None => None,
        };
        let mut words = vec![r.render("program", &self.def.program.value).map_err(t)?];
        let extra = mutation.map(|m| m.args.as_slice()).unwrap_or_default();
        for (i, a) in self.def.args.iter().chain(extra).enumerate() {
            words.push(r.render(&format!("args[{i}]"), &a.value).map_err(t)?);
        }
        let argv = if self.def.shell {
            vec!["sh".to_owned(), "-c".to_owned(), words.join(" ")]
        } else {
            words
        };
        let extra_env = mutation.map(|m| m.env.as_slice()).unwrap_or_default();
        let mut env = Vec::new();
        for (k, v) in self.def.env.iter().chain(extra_env) {
            env.push((
                k.clone(),
                r.render_plain(&format!("env.{k}"), &v.value).map_err(t)?,
            ));
        }
        let cwd = match &self.def.cwd {
            Some(c) => base.join(r.render_plain("cwd", &c.value).map_err(t)?),
            None => base,
        };
        Ok(Invocation {
            argv,
            env,
            cwd,
            limit: None,
        })
    }
}

impl Engine for CommandEngine {
    fn describe(&self) -> Description {
        Description {
            engine: format!("command:{}", self.def.name.value),
            device: self.device.clone(),
        }
    }

    fn supports(
        &self,
        _model: &ModelConfig,
        _mesh: Option<&MeshConfig>,
        _dtype: DType,
    ) -> Result<(), Unsupported> {
        // The program decides what it can run; its own refusals are job errors with its log.
        Ok(())
    }

    fn cacheable(&self) -> bool {
        false
    }

    fn mutations(&self) -> Vec<String> {
        self.def
            .mutations
            .iter()
            .map(|m| m.name.value.clone())
            .collect()
    }

    fn injected_at(&self, mutation: &str, site: &str) -> Option<bool> {
        self.def.mutation(mutation)?.injected_at(site)
    }

    fn reference(&self, req: &RunRequest<'_>) -> Result<Manifest, EngineError> {
        let req = RunRequest {
            mesh: None,
            mutation: None,
            ..*req
        };
        let out = std::path::absolute(req.out).unwrap_or_else(|_| req.out.to_path_buf());
        // The state after `oracle_steps` comes from this run itself where pairs ask for it
        // (the program writes it and trains on), not from one more run of the program.
        let last = states::final_dir(self, &req, &out);
        let set: Vec<(&str, String)> = match &last {
            Some((step, dir)) => vec![
                ("state_at", step.to_string()),
                ("state_dir", dir.display().to_string()),
            ],
            None => Vec::new(),
        };
        let mut manifest = self.run_with(&req, &set)?;
        let mut kept = false;
        if let Some((step, dir)) = &last {
            let argv = self.invocation_with(&req, &out, &set)?.display();
            let to = out.join(meshparity_engine::files::state_at(*step));
            states::take(self, (dir, "state_dir"), &argv, &to)?;
            manifest
                .artifacts
                .push(meshparity_engine::files::state_at(*step));
            kept = true;
        }
        if states::keep(self, &req, &out, &mut manifest)? || kept {
            manifest.write(&out)?;
        }
        Ok(manifest)
    }

    /// Re-run the program with `{{trace_dir}}` set (when the spec names a `trace` directory)
    /// and turn what it wrote there into the trace artifact.
    fn trace(&self, req: &RunRequest<'_>) -> Result<bool, EngineError> {
        let Some(dir) = &self.def.artifacts.trace else {
            return Ok(false);
        };
        // A pair's run is two runs of the program; its trace would be neither's.
        if req.training.resume.is_some() {
            return Ok(false);
        }
        std::fs::create_dir_all(req.out).map_err(EngineError::io("creating", req.out))?;
        if let Some(from) = self.traced_run(req) {
            meshparity_engine::traced::copy_trace(&from, req.out)?;
            return Ok(true);
        }
        let out = std::path::absolute(req.out).unwrap_or_else(|_| req.out.to_path_buf());
        let traces = out.join(&dir.value);
        let inv = self.invocation_tracing(req, &out, Some(&traces))?;
        process::run(&inv, &out).map_err(EngineError::run)?;
        trace::convert(&traces, &out, run::replicas(req))
            .map_err(|e| EngineError::program(&self.def.name.value, e))?;
        Ok(true)
    }

    fn run(&self, req: &RunRequest<'_>) -> Result<Manifest, EngineError> {
        if let Some(from) = &req.training.resume {
            return resume::run(self, req, from);
        }
        self.run_with(req, &[])
    }
}

/// Render every template of `engine` for one cell, so that a template naming an unknown value
/// is a spec error before anything runs.
pub fn check_templates(def: &EngineDef, req: &RunRequest<'_>) -> Result<(), Unsupported> {
    let engine = CommandEngine::new(def.clone(), meshparity_specs::Device::Cpu);
    let mut names: Vec<Option<&str>> = vec![None];
    names.extend(def.mutations.iter().map(|m| Some(m.name.value.as_str())));
    for mutation in names {
        let req = RunRequest { mutation, ..*req };
        if let Err(e) = engine.invocation(&req, req.out) {
            return Err(Unsupported::new(Field::Engine, e.to_string()));
        }
    }
    Ok(())
}
