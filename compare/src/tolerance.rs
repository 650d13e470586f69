//! Which limits hold for a tensor: a profile (or per-dtype defaults), per-tensor overrides by
//! glob, and command-line `key=value` settings.
//!
//! Limits are `meshparity_specs::Limits`, the same type spec files use, so `meshparity compare
//! --profile forward-bf16` and a spec's `[tolerances]` mean the same numbers.

use globset::{Glob, GlobMatcher};
use meshparity_specs::{tolerance, CurveMode, DType, Keyword, Level, Limits};

use crate::dtype::TensorDtype;
use crate::error::InputError;

/// Where limits come from, before per-tensor overrides.
#[derive(Clone, Debug)]
pub enum Profile {
    /// Allclose at torch.testing defaults for each tensor's own dtype; integers exact.
    DtypeDefaults,
    /// Bit-exact for every tensor.
    Exact,
    /// A level of the built-in table (`forward-bf16`, `oracle-f32`, `curve-f32`...).
    Builtin {
        level: Level,
        dtype: DType,
        limits: Limits,
    },
}

impl Profile {
    pub fn parse(name: &str) -> Result<Self, InputError> {
        if name == "exact" {
            return Ok(Profile::Exact);
        }
        if name == "default" {
            return Ok(Profile::DtypeDefaults);
        }
        let builtin = tolerance::ToleranceTable::builtin(dummy_loc());
        let parsed = name
            .rsplit_once('-')
            .and_then(|(l, d)| Some((Level::parse(l)?, DType::parse(d)?)));
        let Some((level, dtype)) = parsed else {
            return Err(InputError::Usage(format!(
                "unknown profile `{name}`; use `default`, `exact` or LEVEL-DTYPE such as `forward-bf16`, `oracle-f32`, `curve-f64`"
            )));
        };
        let limits = builtin
            .get(level, dtype)
            .map(|l| l.value.clone())
            .ok_or_else(|| InputError::Usage(format!("the built-in table has no `{name}`")))?;
        Ok(Profile::Builtin {
            level,
            dtype,
            limits,
        })
    }

    pub fn name(&self) -> String {
        match self {
            Profile::DtypeDefaults => "default".into(),
            Profile::Exact => "exact".into(),
            Profile::Builtin { level, dtype, .. } => format!("{level}-{dtype}"),
        }
    }
}

fn dummy_loc() -> meshparity_specs::Loc {
    let f = meshparity_specs::SourceFile::new("<builtin>", "");
    meshparity_specs::Loc::new(&f, 0..0)
}

/// Limits for every tensor of a comparison.
#[derive(Clone, Debug)]
pub struct Tolerance {
    pub profile: Profile,
    /// `key=value` settings applied on top of the profile for every tensor.
    pub settings: Vec<(String, f64)>,
    /// Per-tensor overrides: the first glob that matches a tensor name applies its settings.
    pub overrides: Vec<Override>,
    /// Gate continuous metrics on per-layer averages (`None`: as the profile says).
    pub layer_average: Option<bool>,
    /// `settings` replace the profile's gates instead of adding to them (the command line's
    /// `-t`: what the user names is exactly what is gated; atol/rtol not named are 0).
    pub replace: bool,
}

impl Default for Tolerance {
    fn default() -> Self {
        Self {
            profile: Profile::DtypeDefaults,
            settings: Vec::new(),
            overrides: Vec::new(),
            layer_average: None,
            replace: false,
        }
    }
}

/// `GLOB:KEY=VALUE,...`: settings for the tensors a glob matches.
#[derive(Clone, Debug)]
pub struct Override {
    pub glob: String,
    matcher: GlobMatcher,
    pub settings: Vec<(String, f64)>,
}

/// Whether `key` names a limit of some level, as spec tolerance tables do (one list, in the
/// spec crate). `mode` and `layer_average` are not numbers: they have their own flags.
fn is_limit_key(key: &str) -> bool {
    !matches!(key, "mode" | "layer_average")
        && Level::ALL
            .iter()
            .any(|(_, l)| tolerance::limit_keys(*l).contains(&key))
}

/// Parse `key=value[,key=value]`.
pub fn parse_settings(s: &str) -> Result<Vec<(String, f64)>, InputError> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| InputError::Usage(format!("`{p}` is not KEY=VALUE")))?;
            let k = k.trim();
            if !is_limit_key(k) {
                return Err(InputError::Usage(format!("unknown tolerance key `{k}`")));
            }
            let v: f64 = v
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    InputError::Usage(format!("`{p}`: the value must be a finite number ≥ 0"))
                })?;
            Ok((k.to_owned(), v))
        })
        .collect()
}

/// Parse `GLOB:key=value[,...]`.
pub fn parse_override(s: &str) -> Result<Override, InputError> {
    let (glob, settings) = s.rsplit_once(':').ok_or_else(|| {
        InputError::Usage(format!("override `{s}` must be GLOB:KEY=VALUE[,KEY=VALUE]"))
    })?;
    let matcher = Glob::new(glob)
        .map_err(|e| InputError::Usage(format!("override `{s}`: bad glob: {e}")))?
        .compile_matcher();
    Ok(Override {
        glob: glob.to_owned(),
        matcher,
        settings: parse_settings(settings)?,
    })
}

/// The limits in force for one tensor.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TensorLimits {
    pub exact: bool,
    pub atol: f64,
    pub rtol: f64,
    /// Gated metrics other than allclose, by name.
    pub gates: Vec<(String, f64)>,
    pub layer_average: bool,
    /// The override glob that applied, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub override_glob: Option<String>,
}

impl Tolerance {
    pub fn for_tensor(&self, name: &str, dtype: TensorDtype) -> TensorLimits {
        let (rtol_d, atol_d) = dtype.spec_dtype().map_or((0.0, 0.0), tolerance::allclose);
        let mut out = TensorLimits {
            exact: !dtype.is_float(),
            atol: atol_d,
            rtol: rtol_d,
            gates: Vec::new(),
            layer_average: false,
            override_glob: None,
        };
        // Allclose is always computed (and reported); it gates only when the limits name it.
        let mut allclose_gated = false;
        let replaced = self.replace && !self.settings.is_empty();
        if replaced {
            let named = |k: &str| self.settings.iter().any(|(s, _)| s == k);
            if named("atol") || named("rtol") {
                out.atol = 0.0;
                out.rtol = 0.0;
            }
            out.exact = !dtype.is_float();
        }
        match &self.profile {
            _ if replaced => {}
            Profile::DtypeDefaults => allclose_gated = dtype.is_float(),
            Profile::Exact => out.exact = true,
            Profile::Builtin { limits, .. } => {
                out.exact |= limits.exact;
                out.layer_average = limits.layer_average.unwrap_or(false);
                apply(
                    (&mut out, name),
                    &mut allclose_gated,
                    limits.metrics.iter().map(|(k, v)| (*k, *v)),
                );
            }
        }
        apply(
            (&mut out, name),
            &mut allclose_gated,
            self.settings.iter().map(|(k, v)| (k.as_str(), *v)),
        );
        if let Some(o) = self.overrides.iter().find(|o| o.matcher.is_match(name)) {
            apply(
                (&mut out, name),
                &mut allclose_gated,
                o.settings.iter().map(|(k, v)| (k.as_str(), *v)),
            );
            out.override_glob = Some(o.glob.clone());
        }
        if !allclose_gated {
            out.gates.retain(|(k, _)| k != "allclose");
        } else if !out.gates.iter().any(|(k, _)| k == "allclose") {
            out.gates.insert(0, ("allclose".into(), 0.0));
        }
        if let Some(l) = self.layer_average {
            out.layer_average = l;
        }
        out
    }
}

fn apply<'a>(
    (out, name): (&mut TensorLimits, &str),
    allclose: &mut bool,
    settings: impl Iterator<Item = (&'a str, f64)>,
) {
    for (k, v) in settings {
        match k {
            // The global gradient norm's own gate: its relative difference, on that one
            // scalar (a norm summed over the wrong ranks is off by far less than the
            // per-tensor gradient gates allow, and far more than round-off).
            tolerance::GRAD_NORM if name == tolerance::GRAD_NORM => {
                out.gates.retain(|(g, _)| g != "max_rel");
                out.gates.push(("max_rel".to_owned(), v));
            }
            tolerance::GRAD_NORM => {}
            "atol" => {
                out.atol = v;
                *allclose = true;
            }
            "rtol" => {
                out.rtol = v;
                *allclose = true;
            }
            "k" | "rel" | "allowed_failing_steps" | "investigate" | "fail" => {}
            _ => {
                out.gates.retain(|(g, _)| g != k);
                out.gates.push((k.to_owned(), v));
            }
        }
    }
}

/// Whether a metric is a lower bound (cosine, agreement) rather than an upper one.
pub fn is_minimum(metric: &str) -> bool {
    matches!(
        metric,
        "cosine" | "top1" | "top1_decided" | "topk" | "overlap"
    )
}

/// `k` for top-k agreement from the profile or settings (default 5).
pub fn top_k(tol: &Tolerance) -> usize {
    let from_settings = tol.settings.iter().find(|(k, _)| k == "k").map(|(_, v)| *v);
    let from_profile = match &tol.profile {
        Profile::Builtin { limits, .. } => limits.metrics.get("k").copied(),
        _ => None,
    };
    from_settings
        .or(from_profile)
        .map_or(5, |k| k.max(1.0) as usize)
}

/// Curve limits: the profile's (a `curve-*` profile) with settings on top.
pub fn curve_limits(tol: &Tolerance, mode: Option<CurveMode>) -> Result<Limits, InputError> {
    let mut limits = match &tol.profile {
        Profile::Builtin {
            level: Level::Curve,
            limits,
            ..
        } => limits.clone(),
        Profile::Exact => Limits {
            mode: Some(CurveMode::Exact),
            ..Limits::default()
        },
        Profile::DtypeDefaults => tolerance::ToleranceTable::builtin(dummy_loc())
            .get(Level::Curve, DType::F32)
            .map(|l| l.value.clone())
            .expect("the built-in table has curve limits"),
        Profile::Builtin { .. } => {
            return Err(InputError::Usage(format!(
                "profile `{}` is not a curve profile; use curve-f32, curve-bf16, ... or exact",
                tol.profile.name()
            )))
        }
    };
    for (k, v) in &tol.settings {
        // Every key the command line accepts for curves (src/cli/compare.rs), the gradient
        // norm's own included: a key accepted and then dropped would be a silent gate.
        let key = [
            "rel",
            "allowed_failing_steps",
            "investigate",
            "fail",
            tolerance::GRAD_NORM,
        ]
        .into_iter()
        .find(|x| x == k);
        if let Some(key) = key {
            limits.metrics.insert(key, *v);
        }
    }
    if let Some(m) = mode {
        limits.mode = Some(m);
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_overrides_and_settings_compose() {
        let tol = Tolerance::default();
        let l = tol.for_tensor("w", TensorDtype::BF16);
        assert_eq!((l.rtol, l.atol), (1.6e-2, 1e-5));
        assert_eq!(l.gates, vec![("allclose".to_string(), 0.0)]);
        assert!(
            tol.for_tensor("ids", TensorDtype::I64).exact,
            "integers are exact"
        );

        let fwd = Tolerance {
            profile: Profile::parse("forward-bf16").unwrap(),
            overrides: vec![parse_override("*.norm.*:cosine=0.99").unwrap()],
            ..Tolerance::default()
        };
        let l = fwd.for_tensor("logits", TensorDtype::BF16);
        assert_eq!(
            l.gates,
            vec![("relative_l2".into(), 0.07)],
            "bf16 forward gates relative L2, not allclose or top-1"
        );
        let l = fwd.for_tensor("layers.0.norm.weight", TensorDtype::BF16);
        assert!(l.gates.contains(&("cosine".into(), 0.99)));
        assert_eq!(l.override_glob.as_deref(), Some("*.norm.*"));

        let strict = Tolerance {
            settings: parse_settings("rtol=0,atol=0,max_abs=1e-9").unwrap(),
            ..Tolerance::default()
        };
        let l = strict.for_tensor("w", TensorDtype::F32);
        assert_eq!((l.rtol, l.atol), (0.0, 0.0));
        assert_eq!(
            l.gates,
            vec![("allclose".into(), 0.0), ("max_abs".into(), 1e-9)]
        );
        assert!(Profile::parse("sideways-f32").is_err());
        assert!(parse_settings("cosine=abc").is_err());
        assert!(parse_settings("colour=1").is_err());
    }
}
