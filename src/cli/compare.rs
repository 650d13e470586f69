//! `meshparity compare A B`: two checkpoints or two metric curves.

use std::path::{Path, PathBuf};

use meshparity_compare::{
    render, tensors, tolerance, CurveOptions, InputError, Profile, TensorOptions, Tolerance,
    Verdict,
};
use meshparity_specs::{CurveMode, Keyword};
use tempfile::TempDir;

use crate::exit;

#[derive(clap::Args)]
pub struct Args {
    /// Reference: a .safetensors file, a sharded checkpoint's index .json, a directory, or a
    /// .jsonl metric curve.
    reference: PathBuf,
    /// Candidate, of the same kind.
    candidate: PathBuf,
    /// Limits: `auto` (the built-in table's limits for the files' level and the dtype their run
    /// computed in, said in the notes), `default` (element-wise allclose at torch defaults per
    /// tensor dtype), `exact`, or LEVEL-DTYPE from the built-in table (forward-bf16,
    /// oracle-f32, curve-f64, ...).
    #[arg(long, default_value = "auto")]
    profile: String,
    /// Limits instead of the profile's: KEY=VALUE[,KEY=VALUE]. What -t names is exactly what is
    /// gated (atol/rtol not named are 0). Checkpoints: atol, rtol, max_abs, max_rel,
    /// mean_abs_pct, relative_l2, cosine, top1, top1_decided, topk, k, overlap, mismatch,
    /// grad_norm (the `grad_norm` tensor's relative difference); curves: rel,
    /// allowed_failing_steps, investigate, fail, grad_norm (the `grad_norm` metric's per-step
    /// rel).
    #[arg(long, short = 't', value_name = "KEY=VALUE,...")]
    tolerance: Vec<String>,
    /// Per-tensor limits: GLOB:KEY=VALUE[,...]; the first matching glob applies.
    #[arg(long = "override", value_name = "GLOB:KEY=VALUE,...")]
    overrides: Vec<String>,
    /// Gate continuous metrics on per-layer averages (layer = first numeric name segment).
    #[arg(long, value_name = "BOOL")]
    layer_average: Option<bool>,
    /// Tensors compared as logits (top-1/top-k over the last dimension).
    #[arg(long, value_name = "GLOB", default_values_t = ["*logits*".to_string()])]
    logits: Vec<String>,
    /// Integer tensors compared as MoE top-k routing.
    #[arg(long, value_name = "GLOB", default_values_t = ["*routing*".to_string(), "*expert_ids*".to_string(), "*topk_ids*".to_string()])]
    routing: Vec<String>,
    /// Curves: exact, rel or noise-floor (default: the profile's, else rel).
    #[arg(long)]
    mode: Option<String>,
    /// Curves: a second baseline run, for the noise-floor mode.
    #[arg(long, value_name = "FILE")]
    baseline2: Option<PathBuf>,
    /// Curves: gate performance metrics (*time*, *mem*, rates such as tok/s) too.
    #[arg(long)]
    gate_performance: bool,
    /// Curves: the key that numbers steps (Megatron-style logs say `iteration`).
    #[arg(long, value_name = "KEY", default_value = "step")]
    step_key: String,
    /// Checkpoints: candidate names starting with FROM are matched as TO + the rest
    /// (`--rename model.=` drops a wrapper's prefix). Repeatable; the first that applies wins.
    #[arg(long, value_name = "FROM=TO")]
    rename: Vec<String>,
    /// Checkpoints: compare tensors whose float dtypes differ in this dtype (f64, f32, f16,
    /// bf16), with the limits of the coarser of the two.
    #[arg(long, value_name = "DTYPE")]
    cast: Option<String>,
    /// Rows in the table of worst tensors.
    #[arg(long, default_value_t = 10)]
    worst: usize,
    /// Print the full report as JSON instead of the table.
    #[arg(long)]
    json: bool,
}

fn is_curve(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "jsonl")
}

/// The limits asked for, and what `--profile auto` chose (a note for the report).
fn tolerance(args: &Args) -> Result<(Tolerance, Option<String>), InputError> {
    let mut settings = Vec::new();
    for t in &args.tolerance {
        settings.extend(tolerance::parse_settings(t)?);
    }
    let (profile, chose) = if args.profile == "auto" {
        let (name, why) = super::compare_profile::choose(
            &args.reference,
            &args.candidate,
            is_curve(&args.reference),
        );
        // Limits named by -t replace the profile's: nothing was chosen.
        (name, settings.is_empty().then_some(why))
    } else {
        (args.profile.clone(), None)
    };
    let tol = Tolerance {
        profile: Profile::parse(&profile)?,
        settings,
        overrides: args
            .overrides
            .iter()
            .map(|o| tolerance::parse_override(o))
            .collect::<Result<_, _>>()?,
        layer_average: args.layer_average,
        replace: true,
    };
    Ok((tol, chose))
}

/// Limit keys that mean something for curves.
const CURVE_KEYS: &[&str] = &[
    "rel",
    "allowed_failing_steps",
    "investigate",
    "fail",
    meshparity_specs::tolerance::GRAD_NORM,
];

/// Limit keys for both: the gradient norm's own limit, on the curve (every step) and beside
/// the first step's gradients.
const BOTH_KEYS: &[&str] = &[meshparity_specs::tolerance::GRAD_NORM];

/// A key, profile or flag that does not apply to this kind of input is refused, never ignored.
fn refuse_inapplicable(args: &Args, tol: &Tolerance, curve: bool) -> Result<(), InputError> {
    let kind = if curve {
        "curves (.jsonl)"
    } else {
        "checkpoints"
    };
    for (k, _) in &tol.settings {
        if CURVE_KEYS.contains(&k.as_str()) != curve && !BOTH_KEYS.contains(&k.as_str()) {
            return Err(InputError::Usage(format!(
                "-t {k}=... does not apply to {kind}; keys for {kind}: {}",
                if curve {
                    CURVE_KEYS.join(", ")
                } else {
                    "atol, rtol, max_abs, max_rel, mean_abs_pct, relative_l2, cosine, top1, top1_decided, topk, k, overlap, mismatch".into()
                }
            )));
        }
    }
    if let Profile::Builtin { level, .. } = &tol.profile {
        if (*level == meshparity_specs::Level::Curve) != curve {
            return Err(InputError::Usage(format!(
                "profile `{}` does not apply to {kind}; use {}",
                tol.profile.name(),
                if curve {
                    "curve-f32, curve-bf16, ... or exact"
                } else {
                    "default, exact, forward-DTYPE, oracle-DTYPE or routing-DTYPE"
                }
            )));
        }
    }
    if curve
        && (!args.overrides.is_empty()
            || args.layer_average.is_some()
            || !args.rename.is_empty()
            || args.cast.is_some())
    {
        return Err(InputError::Usage(
            "--override, --layer-average, --rename and --cast apply to checkpoints only; curves \
             take -t rel=..."
                .into(),
        ));
    }
    if !curve && (args.mode.is_some() || args.baseline2.is_some() || args.step_key != "step") {
        return Err(InputError::Usage(
            "--mode, --baseline2 and --step-key apply to curves (.jsonl) only".into(),
        ));
    }
    Ok(())
}

fn run_inner(args: &Args) -> Result<(String, Verdict), InputError> {
    let (tol, chose) = tolerance(args)?;
    if is_curve(&args.reference) != is_curve(&args.candidate) {
        return Err(InputError::Usage(
            "compare two curves (.jsonl) or two checkpoints, not one of each".into(),
        ));
    }
    refuse_inapplicable(args, &tol, is_curve(&args.reference))?;
    if is_curve(&args.reference) {
        let mode = match &args.mode {
            None => None,
            Some(m) => Some(CurveMode::parse(m).ok_or_else(|| {
                InputError::Usage(format!("unknown mode `{m}`; use exact, rel or noise-floor"))
            })?),
        };
        let opts = CurveOptions {
            limits: tolerance::curve_limits(&tol, mode)?,
            step_key: args.step_key.clone(),
            baseline2: args.baseline2.clone(),
            gate_performance: args.gate_performance,
        };
        let mut report =
            meshparity_compare::compare_curves(&args.reference, &args.candidate, &opts)?;
        report.notes.extend(chose);
        let text = if args.json {
            to_json(&report)
        } else {
            meshparity_files::text::escaped(&render::curves(&report)).into_owned()
        };
        return Ok((text, report.verdict));
    }
    let rename = args
        .rename
        .iter()
        .map(|r| meshparity_compare::Rename::parse(r))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| InputError::Usage(e.to_string()))?;
    let cast = args
        .cast
        .as_deref()
        .map(meshparity_compare::align::parse_cast)
        .transpose()
        .map_err(|e| InputError::Usage(e.to_string()))?;
    let opts = TensorOptions {
        tolerance: tol,
        logits: tensors::globs(&args.logits),
        routing: tensors::globs(&args.routing),
        rename,
        cast,
    };
    let (reference, _a) = whole(&args.reference)?;
    let (candidate, _b) = whole(&args.candidate)?;
    let mut report = meshparity_compare::compare_checkpoints(&reference, &candidate, &opts)?;
    report.notes.extend(chose);
    let text = if args.json {
        to_json(&report)
    } else {
        meshparity_files::text::escaped(&render::tensors(&report, args.worst)).into_owned()
    };
    Ok((text, report.verdict))
}

/// `path` as one checkpoint file: a sharded checkpoint's directory (its `index.json` naming each
/// shard's slice, [`meshparity_engine::sharded`]) is assembled whole into a file beside nothing
/// the user owns (a temporary directory, removed when the returned guard drops); anything else
/// is read as it is.
fn whole(path: &Path) -> Result<(PathBuf, Option<TempDir>), InputError> {
    use meshparity_engine::sharded;
    let index = path.join(sharded::INDEX);
    if !path.is_dir() || !index.is_file() {
        return Ok((path.to_path_buf(), None));
    }
    let tensors = sharded::read(path).map_err(|e| InputError::Index {
        path: index.clone(),
        reason: e.to_string(),
    })?;
    let tmp = TempDir::new().map_err(|e| InputError::io(path, e))?;
    let file = tmp.path().join("whole.safetensors");
    meshparity_engine::checkpoint::save(&file, &tensors).map_err(|e| InputError::io(&file, e))?;
    Ok((file, Some(tmp)))
}

fn to_json(v: &impl serde::Serialize) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("reports serialize");
    s.push('\n');
    s
}

pub fn run(args: &Args) -> u8 {
    match run_inner(args) {
        Ok((text, verdict)) => {
            print!("{text}");
            match verdict {
                Verdict::Match => exit::OK,
                Verdict::Investigate => {
                    eprintln!(
                        "INVESTIGATE is not a pass: the signal is between the investigate and \
                         fail ratios (exit 1)"
                    );
                    exit::CHECK_FAILED
                }
                Verdict::Mismatch => exit::CHECK_FAILED,
            }
        }
        Err(e) => {
            eprintln!("error: {}", meshparity_files::text::escaped(&e.to_string()));
            exit::SPEC_ERROR
        }
    }
}
