//! `meshparity compare A B`: two checkpoints or two metric curves.

use std::path::{Path, PathBuf};

use meshparity_compare::{
    render, tensors, tolerance, CurveOptions, InputError, Profile, TensorOptions, Tolerance,
    Verdict,
};
use meshparity_specs::{CurveMode, Keyword};

use crate::exit;

#[derive(clap::Args)]
pub struct Args {
    /// Reference: a .safetensors file, a sharded checkpoint's index .json, a directory, or a
    /// .jsonl metric curve.
    reference: PathBuf,
    /// Candidate, of the same kind.
    candidate: PathBuf,
    /// Limits: `default` (allclose at torch defaults per dtype), `exact`, or LEVEL-DTYPE from the
    /// built-in table (forward-bf16, oracle-f32, curve-f64, ...).
    #[arg(long, default_value = "default")]
    profile: String,
    /// Limits on top of the profile: KEY=VALUE[,KEY=VALUE] (atol, rtol, max_abs, max_rel,
    /// mean_abs_pct, relative_l2, cosine, top1, topk, k, overlap, mismatch; for curves rel,
    /// allowed_failing_steps, investigate, fail).
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
    /// Curves: gate performance metrics (*time*, *tok*, *mem*) too.
    #[arg(long)]
    gate_performance: bool,
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

fn tolerance(args: &Args) -> Result<Tolerance, InputError> {
    let mut settings = Vec::new();
    for t in &args.tolerance {
        settings.extend(tolerance::parse_settings(t)?);
    }
    Ok(Tolerance {
        profile: Profile::parse(&args.profile)?,
        settings,
        overrides: args
            .overrides
            .iter()
            .map(|o| tolerance::parse_override(o))
            .collect::<Result<_, _>>()?,
        layer_average: args.layer_average,
    })
}

fn run_inner(args: &Args) -> Result<(String, Verdict), InputError> {
    let tol = tolerance(args)?;
    if is_curve(&args.reference) != is_curve(&args.candidate) {
        return Err(InputError::Usage(
            "compare two curves (.jsonl) or two checkpoints, not one of each".into(),
        ));
    }
    if is_curve(&args.reference) {
        let mode = match &args.mode {
            None => None,
            Some(m) => Some(CurveMode::parse(m).ok_or_else(|| {
                InputError::Usage(format!("unknown mode `{m}`; use exact, rel or noise-floor"))
            })?),
        };
        let opts = CurveOptions {
            limits: tolerance::curve_limits(&tol, mode)?,
            baseline2: args.baseline2.clone(),
            gate_performance: args.gate_performance,
        };
        let report = meshparity_compare::compare_curves(&args.reference, &args.candidate, &opts)?;
        let text = if args.json {
            to_json(&report)
        } else {
            render::curves(&report)
        };
        return Ok((text, report.verdict));
    }
    if args.mode.is_some() || args.baseline2.is_some() {
        return Err(InputError::Usage(
            "--mode and --baseline2 apply to curves (.jsonl) only".into(),
        ));
    }
    let opts = TensorOptions {
        tolerance: tol,
        logits: tensors::globs(&args.logits),
        routing: tensors::globs(&args.routing),
    };
    let report = meshparity_compare::compare_checkpoints(&args.reference, &args.candidate, &opts)?;
    let text = if args.json {
        to_json(&report)
    } else {
        render::tensors(&report, args.worst)
    };
    Ok((text, report.verdict))
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
                Verdict::Match | Verdict::Investigate => exit::OK,
                Verdict::Mismatch => exit::CHECK_FAILED,
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::SPEC_ERROR
        }
    }
}
