//! The values a command engine's templates see, and rendering them
//! ([`meshparity_specs::template`]: `{{name}}` and nothing else). Strict: a template naming a
//! value that does not exist is an error that lists the ones that do, never an empty string
//! passed to the program.

use std::collections::BTreeMap;
use std::path::Path;

use meshparity_engine::RunRequest;
use meshparity_specs::template::{parse, Piece};
use meshparity_specs::Keyword;

/// Why a template did not render.
#[derive(Debug, thiserror::Error)]
#[error("{what} `{template}`: {message}")]
pub struct TemplateError {
    pub what: String,
    pub template: String,
    pub message: String,
}

/// Every value a template may name, as text.
/// A job's template values, by name.
type Values = BTreeMap<String, String>;

pub fn values(req: &RunRequest<'_>, out: &Path, base: &Path) -> BTreeMap<String, String> {
    let mut v = Values::new();
    mesh_values(&mut v, req);
    training_values(&mut v, req);
    run_values(&mut v, req, out, base);
    later_values(&mut v, base);
    model_values(&mut v, req.model);
    v
}

/// The mesh's degrees and schedule.
fn mesh_values(v: &mut Values, req: &RunRequest<'_>) {
    let mut put = |k: &str, x: String| {
        v.insert(k.to_owned(), x);
    };
    let m = req
        .mesh
        .copied()
        .unwrap_or(meshparity_specs::MeshConfig::SINGLE);
    for (k, x) in m.degrees().into_iter().chain([
        ("microbatches", m.microbatches),
        ("zero", m.zero),
        // The data-parallel ranks per shard group: dp unless the mesh shards hybrid.
        ("shard", m.shard_dp()),
    ]) {
        put(k, x.to_string());
    }
    put("sp", m.sp.to_string());
    put("schedule", m.schedule.name().to_owned());
    // Model chunks per pipeline rank: 1 unless the schedule is interleaved.
    put("virtual_stages", m.chunks().to_string());
    put("world_size", m.world_size().to_string());
}

/// Every `[run]` key a job trains with, from the keys' one table (`run::keys`), and where the
/// `weights` artifact is taken.
fn training_values(v: &mut Values, req: &RunRequest<'_>) {
    let job = meshparity_specs::run::keys::Job {
        training: req.training,
        dtype: req.dtype,
    };
    for (k, x) in meshparity_specs::run::keys::template_values(job) {
        v.insert(k.to_owned(), x);
    }
    // Where the `weights` artifact is taken: after `oracle_steps` where the oracle level is
    // judged (the reference always), otherwise after the last step.
    let length = req.length();
    let weights_after = if length.weights_after > 0 {
        length.weights_after
    } else {
        req.training.steps as usize
    };
    v.insert("weights_after".to_owned(), weights_after.to_string());
}

/// The job's directories, mutation and the checkpoint it converts.
fn run_values(v: &mut Values, req: &RunRequest<'_>, out: &Path, base: &Path) {
    let mut put = |k: &str, x: String| {
        v.insert(k.to_owned(), x);
    };
    put("out_dir", out.display().to_string());
    put("spec_dir", base.display().to_string());
    put("mutation", req.mutation.unwrap_or("none").to_owned());
    // The checkpoint a mesh run converts for the roundtrip level; empty when it converts none
    // (the reference, a variant's run, a cell without the roundtrip level).
    // A `[[resume]]` pair's round trip is its own checkpoint's, not the seed's.
    let converts = req.mesh.is_some()
        && req.training.resume.is_none()
        && req.levels.contains(&meshparity_specs::Level::Roundtrip);
    put(
        "seed_checkpoint",
        req.reference
            .filter(|_| converts)
            .map(|r| r.join(meshparity_engine::files::SEED).display().to_string())
            .unwrap_or_default(),
    );
}

/// Values only some runs fill (traces, `[[resume]]` pairs, variants): empty here.
fn later_values(v: &mut Values, base: &Path) {
    let mut put = |k: &str, x: String| {
        v.insert(k.to_owned(), x);
    };
    // Where to write per-site traces: empty unless meshparity asks for them (localization).
    put("trace_dir", String::new());
    // A `[[resume]]` pair's run (docs/engines.md): after step `save_at`, save the checkpoint
    // and the merged state into `save_dir`; load `resume_from` and write the merged state as
    // loaded into `loaded_dir`. 0 and empty when the run neither saves nor resumes.
    put("save_at", "0".to_owned());
    put("save_dir", String::new());
    put("resume_from", String::new());
    put("loaded_dir", String::new());
    // After step `state_at`, write the merged state into `state_dir` and train on: a pair's
    // resumed run's (and its reference's) state after `oracle_steps`. 0 and empty otherwise.
    put("state_at", "0".to_owned());
    put("state_dir", String::new());
    // Outside `[variants]`: no variant, and the program's own directory.
    put("variant", "none".to_owned());
    put("variant_dir", base.display().to_string());
}

/// The model's shapes, and its engine's own parameters.
fn model_values(v: &mut Values, model: &meshparity_specs::ModelConfig) {
    let mut put = |k: &str, x: String| {
        v.insert(k.to_owned(), x);
    };
    for (k, x) in [
        ("layers", model.layers),
        ("hidden", model.hidden),
        ("heads", model.heads),
        ("kv_heads", model.kv_heads),
        ("ffn", model.ffn),
        ("vocab", model.vocab),
        ("seq_len", model.seq_len),
    ] {
        put(k, x.to_string());
    }
    put("tie_embeddings", model.tied().to_string());
    // A moe's experts and top-k, where the model sets them (an engine's `defaults` may fill them
    // for the others).
    for (k, x) in [("experts", model.experts), ("top_k", model.top_k)] {
        if let Some(x) = x {
            put(k, x.to_string());
        }
    }
    for (k, x) in &model.params {
        put(k, x.clone());
    }
}

/// Renders templates over one job's values.
pub struct Renderer {
    values: BTreeMap<String, String>,
    /// Values are shell-quoted as they are inserted (the rendered text goes to `sh -c`).
    shell: bool,
}

impl Renderer {
    /// `shell`: values are shell-quoted as they are inserted (the rendered text goes to `sh -c`).
    pub fn new(values: BTreeMap<String, String>, shell: bool) -> Self {
        Self { values, shell }
    }

    /// A word of the command: under `shell = true`, values shell-quoted.
    pub fn render(&self, what: &str, template: &str) -> Result<String, TemplateError> {
        self.render_as(what, template, self.shell)
    }

    /// A value no shell reads (an environment variable, the working directory): values as
    /// they are, whatever `shell` says (quoted, a directory name would have its quotes in it).
    pub fn render_plain(&self, what: &str, template: &str) -> Result<String, TemplateError> {
        self.render_as(what, template, false)
    }

    fn render_as(&self, what: &str, template: &str, shell: bool) -> Result<String, TemplateError> {
        let fail = |message: String| TemplateError {
            what: what.to_owned(),
            template: template.to_owned(),
            message,
        };
        let mut out = String::with_capacity(template.len());
        for piece in parse(template).map_err(|e| fail(e.message))? {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Value(name) => {
                    let Some(v) = self.values.get(name) else {
                        return Err(fail(format!(
                            "unknown value `{name}` (known: {})",
                            self.values.keys().cloned().collect::<Vec<_>>().join(", ")
                        )));
                    };
                    if shell {
                        out.push_str(&shell_quote(v));
                    } else {
                        out.push_str(v);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// A shell word: as is when it is plain, else single-quoted — the one quoting every reproduce
/// line and batch script uses (a copy of it lived here).
pub use meshparity_engine::shell::quote as shell_quote;

#[cfg(test)]
mod tests {
    use super::*;
    use meshparity_specs::{DType, Level, MeshConfig, Optimizer, Training};

    /// `{{weights_after}}`: the oracle's step where the oracle is judged (always for the
    /// reference), the last step otherwise — the contract of the `weights` artifact.
    #[test]
    fn weights_are_taken_where_the_oracle_compares_them() {
        let model: meshparity_specs::ModelConfig = serde_json::from_value(serde_json::json!({
            "family": "llama", "layers": 1, "hidden": 8, "heads": 2, "kv_heads": 2,
            "ffn": 8, "vocab": 8, "seq_len": 4
        }))
        .unwrap();
        let training = Training {
            seed: 1,
            steps: 6,
            oracle_steps: 2,
            batch: 2,
            optimizer: Optimizer::Sgd,
            lr: 1e-2,
            ..Training::default()
        };
        let mesh = MeshConfig {
            tp: 2,
            ..MeshConfig::DEFAULT
        };
        let out = Path::new("/tmp/out");
        let at = |mesh: Option<&MeshConfig>, levels: &[Level]| {
            let req = RunRequest {
                model: &model,
                training: &training,
                dtype: DType::F32,
                mesh,
                levels,
                mutation: None,
                reference: None,
                out,
                trace: false,
            };
            values(&req, out, out)["weights_after"].clone()
        };
        assert_eq!(at(None, &[]), "2");
        assert_eq!(at(Some(&mesh), &[Level::Curve, Level::Oracle]), "2");
        assert_eq!(at(Some(&mesh), &[Level::Curve]), "6");
    }
}

#[cfg(test)]
mod documented {
    use super::*;
    use meshparity_specs::{DType, Training};

    /// The values a template may name but the model's, as `values` builds them.
    fn job_values() -> Vec<String> {
        let model: meshparity_specs::ModelConfig = serde_json::from_value(serde_json::json!({
            "family": "llama", "layers": 1, "hidden": 8, "heads": 2, "kv_heads": 2,
            "ffn": 8, "vocab": 8, "seq_len": 4
        }))
        .unwrap();
        let training: Training = serde_json::from_value(serde_json::json!({
            "seed": 1, "steps": 2, "oracle_steps": 1, "batch": 2, "optimizer": "sgd", "lr": 0.1
        }))
        .unwrap();
        let out = Path::new("/tmp/out");
        let req = RunRequest {
            model: &model,
            training: &training,
            dtype: DType::F32,
            mesh: None,
            levels: &[],
            mutation: None,
            reference: None,
            out,
            trace: false,
        };
        let mut own = Values::new();
        model_values(&mut own, &model);
        let mut names: Vec<String> = values(&req, out, out)
            .into_keys()
            .filter(|k| !own.contains_key(k))
            .collect();
        names.sort();
        names
    }

    /// The words of the list after `start` up to `end` in `text`.
    fn listed(text: &str, start: &str, end: &str) -> Vec<String> {
        let from = text.find(start).expect(start) + start.len();
        let to = from + text[from..].find(end).expect(end);
        let mut words: Vec<String> = text[from..to]
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        words.sort();
        words
    }

    /// docs/spec-format.md and the schema's description of a command engine list exactly the
    /// values a template may name: one list, held to the code (two copies had drifted apart
    /// from it, missing the packing keys and the run directories).
    #[test]
    fn the_documented_values_are_the_values() {
        let want = job_values();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let docs = std::fs::read_to_string(root.join("docs/spec-format.md")).unwrap();
        assert_eq!(
            listed(&docs, "backslash) over `", "`, the model's"),
            want,
            "docs/spec-format.md"
        );
        let schema = std::fs::read_to_string(root.join("specs/src/schema/engine.rs")).unwrap();
        let doc: String = schema
            .lines()
            .filter_map(|l| l.trim().strip_prefix("///"))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(
            listed(&doc, "templates over the job's values (", ", the model's"),
            want,
            "specs/src/schema/engine.rs"
        );
    }
}
