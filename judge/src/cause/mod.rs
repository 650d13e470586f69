//! Likely cause: at the first site where a run leaves its reference, test what the difference
//! is against hypotheses about how parallel code goes wrong, and name the one that fits with
//! its evidence — or say that none does.
//!
//! Localization says *where*; this says *what*. Everything before the first diverging site
//! agreed, so a hypothesis that is right explains the value there to within localization's
//! own limit: the copies sum to the reference (a missing all-reduce: the value is Partial
//! where Replicate belongs), the value is the reference scaled by a degree of the mesh, one
//! replica's share is scaled, one rank's copy or shard differs, the value is another step's,
//! the blocks hold the sum of the blocks (an all-reduce where an all-gather belongs), the rows
//! are permuted or shifted, or nothing but the computation before it explains it. The bugs
//! fuzzing Megatron-LM found (NVIDIA/Megatron-LM#7452) were reported this way: which axis's
//! reduction is missing or duplicated.

pub(crate) mod fit;
mod gather;
mod hypotheses;
mod naming;
mod placement;
mod shares;

use meshparity_specs::MeshConfig;
use serde::{Deserialize, Serialize};

pub use fit::Values;
pub(crate) use gather::gather;

/// The mesh's degrees, named: what a fitted factor or a group of copies is matched against.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Axes {
    /// `(axis, degree)` for every axis with a degree above 1, in the mesh's order.
    pub degrees: Vec<(&'static str, usize)>,
    pub microbatches: usize,
}

impl Axes {
    pub fn of(m: &MeshConfig) -> Axes {
        Axes {
            degrees: m
                .degrees()
                .into_iter()
                .filter(|&(_, n)| n > 1)
                .map(|(a, n)| (a, n as usize))
                .collect(),
            microbatches: m.microbatches.max(1) as usize,
        }
    }

    pub fn degree(&self, axis: &str) -> usize {
        self.degrees
            .iter()
            .find(|(a, _)| *a == axis)
            .map_or(1, |&(_, n)| n)
    }
}

/// What kind of wrong a value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Each copy holds a share whose sum (or mean) is the reference: a reduction is missing.
    Partial,
    /// Each copy is the norm of its own shards: the sum of squares is not reduced.
    PartialNorm,
    /// The reference times a factor.
    Scaled,
    /// One replica's or rank's share of a sum, scaled (or missing).
    PartScaled,
    /// One rank's copy differs while the others match.
    OneCopy,
    /// One row block (a replica's microbatch) differs while the others match.
    OneBlock,
    /// Each row block (a replica's microbatch) is the reference's times its own factor: a
    /// normalizer counted per replica (a per-rank mean) where the global one belongs.
    BlockScaled,
    /// One shard (a block along a dimension) differs while the others match.
    OneShard,
    /// The reference's value at another step.
    OtherStep,
    /// Every block holds the sum of the blocks: an all-reduce where an all-gather belongs.
    Reduced,
    /// Rows in another order, or another block's rows.
    Permuted,
    /// The values shifted along their flattened order.
    Shifted,
    /// Zero.
    Zero,
    /// None of the above, at the output of a computation whose inputs agreed.
    Computation,
    /// The training agrees with the reference; only a reported metric differs
    /// ([`crate::metric_only`]).
    MetricOnly,
    /// Nothing fits.
    Unexplained,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Partial => "partial",
            Kind::PartialNorm => "partial-norm",
            Kind::Scaled => "scaled",
            Kind::PartScaled => "part-scaled",
            Kind::OneCopy => "one-copy",
            Kind::OneBlock => "one-block",
            Kind::BlockScaled => "block-scaled",
            Kind::OneShard => "one-shard",
            Kind::OtherStep => "other-step",
            Kind::Reduced => "reduced",
            Kind::Permuted => "permuted",
            Kind::Shifted => "shifted",
            Kind::Zero => "zero",
            Kind::Computation => "computation",
            Kind::MetricOnly => "metric-only",
            Kind::Unexplained => "unexplained",
        }
    }
}

/// The likely cause of a first divergence.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Cause {
    pub kind: Kind,
    /// The mesh axis it implicates (`tp`, `dp`, `1/tp` for a factor, …), when one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axis: Option<String>,
    /// In words, with the placement it implies.
    pub text: String,
    /// Relative L2 of what the hypothesis leaves unexplained (the fit's evidence).
    // JSON writes inf as null; it reads back as inf.
    #[serde(deserialize_with = "crate::json::number_or_inf")]
    pub residual: f64,
}

impl Cause {
    /// `kind` or `kind:axis`, what tests and tables compare.
    pub fn label(&self) -> String {
        match &self.axis {
            Some(a) => format!("{}:{a}", self.kind.as_str()),
            None => self.kind.as_str().to_owned(),
        }
    }

    /// One line for reports.
    pub fn summary(&self) -> String {
        if matches!(self.kind, Kind::Unexplained | Kind::MetricOnly) {
            return format!("likely cause: {}", self.text);
        }
        format!(
            "likely cause: {} (what it leaves unexplained: relative L2 {:.1e})",
            self.text, self.residual
        )
    }
}

/// What the run and the reference hold around the first diverging value.
pub struct Evidence<'a> {
    /// The site path (`layers.0.mlp.down.fwd.out`), without step or copy.
    pub site: &'a str,
    pub step: usize,
    pub reference: Values,
    pub run: Values,
    /// Which copy `run` is, and every copy of the value in the run, in copy order.
    pub copy: Option<usize>,
    pub copies: Vec<Values>,
    /// The mesh axes the copies run over, major first, where the trace names them.
    pub over: Vec<String>,
    /// The per-rank (or per-replica) parts whose sum the reference is, where traced.
    pub parts: Vec<Values>,
    /// The reference's value at the same site at other steps.
    pub other_steps: Vec<(usize, Values)>,
    /// Row blocks (DP replica × microbatch) stacked along the first dimension; 0 if none.
    pub blocks: usize,
    pub microbatches: usize,
    /// Localization's limit at this site: the round-off of a correct run.
    pub limit: f64,
}

impl Evidence<'_> {
    /// Whether the copies differ among themselves beyond round-off (`exact`: at all, as the
    /// copies of one all-reduced value must not).
    fn copies_disagree(&self, exact: bool) -> bool {
        let tol = if exact { 0.0 } else { self.limit };
        self.copies
            .iter()
            .skip(1)
            .any(|c| fit::rel(&c.data, &self.copies[0].data) > tol)
    }

    /// Relative L2 of the run's value to the reference's.
    fn delta(&self) -> f64 {
        fit::rel(&self.run.data, &self.reference.data)
    }

    /// Whether a hypothesis leaving `residual` unexplained fits: within a correct run's
    /// round-off (or a tenth of the difference, for values far off), and well below the
    /// difference itself.
    ///
    /// A value of a few numbers (a norm, a learning rate, a count) fits any scale and many a
    /// coincidence, so there a hypothesis must hold to 1e-6.
    fn fits(&self, residual: f64) -> bool {
        let delta = self.delta();
        if self.run.data.len() < 4 {
            return residual <= 1e-6 && residual <= 0.5 * delta;
        }
        residual <= (0.1 * delta).max(self.limit) && residual <= 0.5 * delta
    }
}

/// A hypothesis's finding.
fn cause(kind: Kind, axis: Option<String>, text: String, residual: f64) -> Option<Cause> {
    Some(Cause {
        kind,
        axis,
        text,
        residual,
    })
}

/// The hypothesis that fits the first diverging value, most specific first.
pub fn diagnose(e: &Evidence<'_>, axes: &Axes) -> Cause {
    hypotheses::ALL
        .iter()
        .find_map(|h| h(e, axes))
        .unwrap_or_else(|| Cause {
            kind: Kind::Unexplained,
            axis: None,
            text: "no hypothesis fits (not a missing or doubled reduction, a scaling by a \
                   degree, one rank's share, another step's value, or moved rows)"
                .to_owned(),
            residual: f64::INFINITY,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(data: &[f64]) -> Values {
        Values {
            shape: vec![2, data.len() / 2],
            data: data.to_vec(),
        }
    }

    fn evidence(reference: Values, run: Values, copies: Vec<Values>) -> Evidence<'static> {
        Evidence {
            site: "layers.0.mlp.down.fwd.out",
            step: 0,
            reference,
            run,
            copy: Some(0),
            copies,
            over: Vec::new(),
            parts: Vec::new(),
            other_steps: Vec::new(),
            blocks: 0,
            microbatches: 1,
            limit: 1e-4,
        }
    }

    /// A dp2·tp2 mesh, a reference and two copies that sum to it.
    fn dp2_tp2_partial() -> (Axes, Values, Values, Values) {
        let axes = Axes::of(&MeshConfig {
            tp: 2,
            dp: 2,
            ..MeshConfig::DEFAULT
        });
        let r = v(&[1.0, -2.0, 3.0, 0.5, 2.0, 1.5]);
        let a = v(&[0.4, -1.5, 1.0, 0.1, 2.5, 0.5]);
        let b = v(&[0.6, -0.5, 2.0, 0.4, -0.5, 1.0]);
        (axes, r, a, b)
    }

    /// Each hypothesis names what was done to the value, and unrelated values get no cause.
    #[test]
    fn hypotheses_name_what_was_done() {
        let (axes, r, a, b) = dp2_tp2_partial();
        let partial = diagnose(&evidence(r.clone(), a.clone(), vec![a, b]), &axes);
        assert_eq!(partial.label(), "partial:tp", "{}", partial.text);
        let half = v(&r.data.iter().map(|x| x / 2.0).collect::<Vec<_>>());
        let scaled = diagnose(
            &evidence(r.clone(), half.clone(), vec![half.clone(), half]),
            &axes,
        );
        assert_eq!(scaled.label(), "scaled:1/tp", "{}", scaled.text);
        let other = v(&[0.3, 0.9, -1.1, 2.2, -0.7, 0.05]);
        let none = diagnose(&evidence(r, other, Vec::new()), &axes);
        assert_eq!(none.kind, Kind::Unexplained, "{}", none.text);
    }

    /// An expert's gradient twice the reference's on a mesh where dp and ep are both 2 is
    /// named for ep first (the experts' reduction), a dense gradient for dp.
    #[test]
    fn an_experts_factor_is_named_for_ep_first() {
        let axes = Axes::of(&MeshConfig {
            dp: 2,
            ep: 2,
            zero: 3,
            ..MeshConfig::DEFAULT
        });
        let r = v(&[1.0, -2.0, 3.0, 0.5, 2.0, 1.5]);
        let twice = v(&r.data.iter().map(|x| x * 2.0).collect::<Vec<_>>());
        let mut e = evidence(r, twice, Vec::new());
        e.copy = None;
        e.site = "grad.layers.0.moe.routed_experts.inner_experts.w1_EFD";
        let expert = diagnose(&e, &axes);
        assert_eq!(expert.label(), "scaled:ep", "{}", expert.text);
        assert!(expert.text.contains("or ×dp = 2"), "{}", expert.text);
        e.site = "grad.tok_embeddings.weight";
        assert_eq!(diagnose(&e, &axes).label(), "scaled:dp");
    }

    /// Copies the trace says run over tp are diagnosed over tp, even where dp has the same
    /// degree and a gradient's copies would by default be the replicas' (the axis HF's and
    /// torchtitan's programs got named wrong: dp first).
    #[test]
    fn copies_over_named_axes() {
        let (axes, r, a, b) = dp2_tp2_partial();
        let mut e = evidence(r, a.clone(), vec![a, b]);
        e.site = "grad.layers.0.attention_norm.weight";
        assert_eq!(diagnose(&e, &axes).label(), "partial:dp");
        e.over = vec!["tp".to_owned()];
        let c = diagnose(&e, &axes);
        assert_eq!(c.label(), "partial:tp", "{}", c.text);
    }

    /// A pp2·tp2 mesh with 4 microbatches, whose gradient has no replicas: its traced parts
    /// are the microbatches' shares.
    fn accumulated(lost: &[usize], scale: f64) -> (Evidence<'static>, Axes) {
        let axes = Axes::of(&MeshConfig {
            tp: 2,
            pp: 2,
            microbatches: 4,
            ..MeshConfig::DEFAULT
        });
        let parts = vec![
            v(&[0.4, -1.5, 1.0, 0.1, 2.5, 0.5]),
            v(&[0.6, -0.5, 2.0, 0.4, -0.5, 1.0]),
            v(&[-0.2, 0.7, 0.3, -1.1, 0.9, 0.2]),
            v(&[1.3, 0.1, -0.6, 0.8, 0.4, -0.9]),
        ];
        let sum = |keep: &dyn Fn(usize) -> bool| {
            let mut out = [0.0; 6];
            for (_, p) in parts.iter().enumerate().filter(|&(i, _)| keep(i)) {
                for (o, x) in out.iter_mut().zip(&p.data) {
                    *o += x;
                }
            }
            v(&out.iter().map(|x| x * scale).collect::<Vec<_>>())
        };
        let reference = sum(&|_| true);
        let run = sum(&|i| !lost.contains(&i));
        let mut e = evidence(reference, run, Vec::new());
        e.site = "grad.layers.0.mlp.down.weight.accumulated";
        e.copy = None;
        e.parts = parts;
        e.microbatches = 4;
        (e, axes)
    }

    /// A run of microbatches missing from the accumulated sum is named, the first or the
    /// last, one or several; a sum of every share scaled is not a lost microbatch, and with
    /// replicas (dp2) the parts are not the microbatches'.
    #[test]
    fn lost_microbatches_are_named() {
        for (lost, words) in [
            (&[0][..], "microbatch 0 never"),
            (&[3][..], "microbatch 3 never"),
            (&[0, 1][..], "microbatch 0, 1 never"),
        ] {
            let (e, axes) = accumulated(lost, 1.0);
            let c = diagnose(&e, &axes);
            assert_eq!(c.kind, Kind::PartScaled, "{lost:?}: {}", c.text);
            assert!(c.text.contains(words), "{lost:?}: {}", c.text);
        }
        let (e, axes) = accumulated(&[], 0.5);
        let c = diagnose(&e, &axes);
        assert!(!c.text.contains("never reached"), "{}", c.text);
        let (e, _) = accumulated(&[0], 1.0);
        let replicas = Axes::of(&MeshConfig {
            dp: 2,
            tp: 2,
            microbatches: 4,
            ..MeshConfig::DEFAULT
        });
        let c = diagnose(&e, &replicas);
        assert!(!c.text.contains("never reached"), "{}", c.text);
    }
}
