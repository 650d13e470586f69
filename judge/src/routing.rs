//! The `routing` level: did the mesh route every token to the experts the reference routed it
//! to? Read like miles's R3 evidence: tokens × layers checked, how many chose a different
//! expert set, the mismatch fraction against its threshold (R3's default 1e-2), the mean
//! per-token set overlap, how far the router scores moved (mean_abs_pct, reported), and the
//! first mismatching tokens with both expert sets — reported even when nothing mismatched.
//!
//! Near-ties are reported, not gated: a token whose reference scores for its k-th and
//! (k+1)-th experts differ by at most [`tie_margin`] (relative) can flip on round-off alone.
//! Measured in bf16 (20 seeds × 3 meshes, 16,452 token·layers): 77 correct-run flips, every one
//! at a reference margin ≤ 4.2e-2; gating them all failed 5 of 60 correct runs at R3's 1e-2.
//!
//! **Failing-microbatch budget** (R3's, for long runs): where the candidate says which
//! microbatch each row was in, each microbatch's own mismatch fraction is held to the same
//! threshold, and at most `failing_microbatches` of them (default 0) may exceed it. A run of many
//! microbatches can then pass with one bad microbatch only when the spec allows it, and one
//! microbatch routed wholesale wrong cannot hide in a long run's average.
//!
//! The artifact's layout is the contract's (`meshparity_engine::routing`).

use std::collections::BTreeSet;
use std::path::Path;

use meshparity_compare::render::sci;
use meshparity_compare::InputError;
use meshparity_specs::{DType, Limits};
use serde::Serialize;

use crate::gate::Gate;
use crate::outcome::Comparison;
use meshparity_engine::routing::{floats, ints};
use meshparity_engine::{checkpoint, Shards};

/// R3's threshold: at most 1% of tokens routed differently.
pub const DEFAULT_MISMATCH: f64 = 1e-2;
/// Mismatching tokens listed as evidence.
const SHOWN: usize = 8;
/// Microbatches allowed over the mismatch threshold, unless the limits say otherwise.
pub const DEFAULT_FAILING_MICROBATCHES: f64 = 0.0;

/// One microbatch's share of the evidence.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MicrobatchRouting {
    pub microbatch: usize,
    pub checked: usize,
    pub mismatches: usize,
    pub mismatch: f64,
}

/// One token routed differently.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Mismatch {
    pub layer: usize,
    /// The token's sequence (batch row) and position in it.
    pub row: usize,
    pub position: usize,
    pub reference: Vec<i64>,
    pub candidate: Vec<i64>,
}

/// What the routing level found.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RoutingReport {
    pub layers: usize,
    /// Real tokens per layer.
    pub tokens: usize,
    /// Decided token·layers (reference margin over the tie margin): what `mismatch` gates.
    pub checked: usize,
    pub mismatches: usize,
    pub mismatch: f64,
    /// The relative margin under which a token is a near-tie, for this dtype.
    pub tie_margin: f64,
    /// Near-tie token·layers, and how many of them the mesh routed differently (not gated).
    pub near_ties: usize,
    pub near_tie_mismatches: usize,
    /// Mean over checked tokens of |reference set ∩ candidate set| / k.
    pub overlap: f64,
    /// Mean |Δscore| / mean |score|, in percent, over real tokens.
    pub scores_mean_abs_pct: f64,
    /// Training steps whose routing was checked.
    pub steps: usize,
    /// Per microbatch (one, when the candidate does not say): checked and mismatching
    /// token·layers.
    pub microbatches: Vec<MicrobatchRouting>,
    pub first: Vec<Mismatch>,
}

impl RoutingReport {
    /// Microbatches whose own mismatch fraction exceeds `threshold`.
    pub fn failing_microbatches(&self, threshold: f64) -> usize {
        self.microbatches
            .iter()
            .filter(|m| m.mismatch > threshold)
            .count()
    }
}

/// The relative margin (k-th minus (k+1)-th reference score, over the k-th) under which a
/// token's top-k is a near-tie in `dtype`: 8 machine epsilons (bf16 6.25e-2, f16 7.8e-3,
/// f32 9.5e-7, f64 1.8e-15).
pub fn tie_margin(dtype: DType) -> f64 {
    let eps = match dtype {
        DType::F64 => f64::EPSILON,
        DType::F32 => f64::from(f32::EPSILON),
        DType::F16 => 2f64.powi(-10),
        DType::Bf16 => 2f64.powi(-7),
    };
    8.0 * eps
}

/// The reference's relative margin between its k-th and (k+1)-th scores (∞ when k = E).
fn margin(scores: &[f64], k: usize) -> f64 {
    let mut s = scores.to_vec();
    s.sort_by(|a, b| b.total_cmp(a));
    match (s.get(k - 1), s.get(k)) {
        (Some(&kth), Some(&next)) if kth > 0.0 => (kth - next) / kth,
        (Some(_), Some(_)) => 0.0,
        _ => f64::INFINITY,
    }
}

/// Compare two routing artifacts; tokens within `tie` of a tie are reported apart.
pub fn compare(reference: &Path, candidate: &Path, tie: f64) -> Result<RoutingReport, InputError> {
    let sides = Sides {
        a: checkpoint::load(reference)?,
        b: checkpoint::load(candidate)?,
        reference,
        candidate,
    };
    let real_t = sides
        .a
        .get("real")
        .ok_or_else(|| sides.missing(true, "real"))?;
    let seq = real_t.shape.last().copied().unwrap_or(1).max(1);
    let real = ints(reference, "real", real_t)?;
    let microbatch = microbatches(&sides, real.len() / seq)?;
    let groups = microbatch.iter().max().map_or(1, |m| m + 1);
    let mut tally = Tally {
        report: RoutingReport {
            layers: 0,
            tokens: real.iter().filter(|&&r| r != 0).count(),
            checked: 0,
            mismatches: 0,
            mismatch: 0.0,
            tie_margin: tie,
            near_ties: 0,
            near_tie_mismatches: 0,
            overlap: 0.0,
            scores_mean_abs_pct: 0.0,
            steps: 1,
            microbatches: Vec::new(),
            first: Vec::new(),
        },
        micro: (0..groups)
            .map(|m| MicrobatchRouting {
                microbatch: m,
                ..MicrobatchRouting::default()
            })
            .collect(),
        overlap: 0.0,
        diff: 0.0,
        mag: 0.0,
    };
    for layer in 0.. {
        let Some(l) = sides.layer(layer, real.len())? else {
            break;
        };
        tally.layer(layer, &l, &real, (seq, &microbatch));
    }
    Ok(tally.finish())
}

/// The two routing artifacts, and where each was read from.
struct Sides<'p> {
    a: Shards,
    b: Shards,
    reference: &'p Path,
    candidate: &'p Path,
}

/// One layer's choices (`k` per token) and scores (`e` per token) on both sides.
struct Layer {
    k: usize,
    e: usize,
    ea: Vec<i64>,
    eb: Vec<i64>,
    sa: Vec<f64>,
    sb: Vec<f64>,
}

impl Sides<'_> {
    fn missing(&self, reference: bool, name: &str) -> InputError {
        let side = if reference {
            self.reference
        } else {
            self.candidate
        };
        InputError::Other {
            path: side.to_path_buf(),
            reason: format!("routing artifact without `{name}`"),
        }
    }

    /// Layer `layer` of both sides over `tokens` tokens; `None` past the reference's last.
    fn layer(&self, layer: usize, tokens: usize) -> Result<Option<Layer>, InputError> {
        let experts = format!("layers.{layer}.experts");
        let Some(ra) = self.a.get(&experts) else {
            return Ok(None);
        };
        let rb = self
            .b
            .get(&experts)
            .ok_or_else(|| self.missing(false, &experts))?;
        let k = *ra.shape.last().unwrap_or(&1);
        let (ea, eb) = (
            ints(self.reference, &experts, ra)?,
            ints(self.candidate, &experts, rb)?,
        );
        if k == 0 || ea.len() != eb.len() || eb.len() != tokens * k {
            return Err(InputError::Other {
                path: self.candidate.to_path_buf(),
                reason: format!(
                    "`{experts}` holds {} choices, the reference {} ({tokens} tokens × k = {k})",
                    eb.len(),
                    ea.len(),
                ),
            });
        }
        let scores = format!("layers.{layer}.scores");
        let got = |reference: bool| -> Result<Vec<f64>, InputError> {
            let (side, path) = if reference {
                (&self.a, self.reference)
            } else {
                (&self.b, self.candidate)
            };
            let t = side
                .get(&scores)
                .ok_or_else(|| self.missing(reference, &scores))?;
            floats(path, &scores, t)
        };
        let (sa, sb) = (got(true)?, got(false)?);
        let e = sa.len() / tokens.max(1);
        if e < k || sa.len() != tokens * e {
            return Err(InputError::Other {
                path: self.reference.to_path_buf(),
                reason: format!(
                    "`{scores}` holds {} scores: not {tokens} tokens × at least k = {k} experts",
                    sa.len(),
                ),
            });
        }
        Ok(Some(Layer {
            k,
            e,
            ea,
            eb,
            sa,
            sb,
        }))
    }
}

/// Each row's microbatch, as the candidate says (one non-negative index per row), or all 0.
fn microbatches(sides: &Sides<'_>, rows: usize) -> Result<Vec<usize>, InputError> {
    let Some(t) = sides.b.get("microbatch") else {
        return Ok(vec![0; rows]);
    };
    let m = ints(sides.candidate, "microbatch", t)?;
    if m.len() != rows || m.iter().any(|&x| x < 0) {
        return Err(InputError::Other {
            path: sides.candidate.to_path_buf(),
            reason: format!(
                "`microbatch` holds {} entries; it needs one non-negative microbatch index per \
                 row ({rows})",
                m.len()
            ),
        });
    }
    Ok(m.into_iter().map(|x| x as usize).collect())
}

/// The report as layers are counted into it, with its running sums.
struct Tally {
    report: RoutingReport,
    micro: Vec<MicrobatchRouting>,
    overlap: f64,
    diff: f64,
    mag: f64,
}

impl Tally {
    /// Count layer `layer`'s decided tokens (those of `real`, rows `seq` long, each row in its
    /// microbatch): near-ties apart, mismatches per microbatch, the first few listed.
    fn layer(
        &mut self,
        layer: usize,
        l: &Layer,
        real: &[i64],
        (seq, microbatch): (usize, &[usize]),
    ) {
        let (k, e) = (l.k, l.e);
        let report = &mut self.report;
        for (t, _) in real.iter().enumerate().filter(|(_, &r)| r != 0) {
            let x: BTreeSet<i64> = l.ea[t * k..(t + 1) * k].iter().copied().collect();
            let y: BTreeSet<i64> = l.eb[t * k..(t + 1) * k].iter().copied().collect();
            let (sx, sy) = (&l.sa[t * e..(t + 1) * e], l.sb.get(t * e..(t + 1) * e));
            for (j, a) in sx.iter().enumerate() {
                self.diff += (a - sy.map_or(f64::NAN, |y| y[j])).abs();
                self.mag += a.abs();
            }
            if margin(sx, k) <= report.tie_margin {
                report.near_ties += 1;
                report.near_tie_mismatches += usize::from(x != y);
                continue;
            }
            self.overlap += x.intersection(&y).count() as f64 / k as f64;
            report.checked += 1;
            let mb = &mut self.micro[microbatch[t / seq]];
            mb.checked += 1;
            if x != y {
                report.mismatches += 1;
                mb.mismatches += 1;
                if report.first.len() < SHOWN {
                    report.first.push(Mismatch {
                        layer,
                        row: t / seq,
                        position: t % seq,
                        reference: l.ea[t * k..(t + 1) * k].to_vec(),
                        candidate: l.eb[t * k..(t + 1) * k].to_vec(),
                    });
                }
            }
        }
        report.layers += 1;
    }

    fn finish(self) -> RoutingReport {
        let Tally {
            mut report,
            mut micro,
            overlap,
            diff,
            mag,
        } = self;
        for m in &mut micro {
            m.mismatch = m.mismatches as f64 / m.checked.max(1) as f64;
        }
        report.microbatches = micro;
        if report.checked > 0 {
            report.mismatch = report.mismatches as f64 / report.checked as f64;
            report.overlap = overlap / report.checked as f64;
            report.scores_mean_abs_pct = 100.0 * diff / mag.max(f64::MIN_POSITIVE);
        }
        report
    }
}

impl RoutingReport {
    /// The level's comparison: `mismatch` gated (and `overlap`, if the limits name it).
    pub fn comparison(&self, limits: &Limits, reference: &Path, candidate: &Path) -> Comparison {
        let threshold = limits
            .metrics
            .get("mismatch")
            .copied()
            .unwrap_or(DEFAULT_MISMATCH);
        let budget = limits
            .metrics
            .get("failing_microbatches")
            .copied()
            .unwrap_or(DEFAULT_FAILING_MICROBATCHES);
        let mut gates = vec![
            Gate::new("routed tokens".into(), "mismatch", self.mismatch, threshold),
            Gate::new(
                "routed tokens".into(),
                "failing_microbatches",
                self.failing_microbatches(threshold) as f64,
                budget,
            ),
        ];
        if let Some(&min) = limits.metrics.get("overlap") {
            gates.push(Gate::new(
                "routed tokens".into(),
                "overlap",
                self.overlap,
                min,
            ));
        }
        for g in &mut gates {
            g.scope = "routing".into();
        }
        let passed = self.checked > 0 && gates.iter().all(|g| !g.failed());
        let failure = (!passed).then(|| self.failure(&gates));
        Comparison {
            what: "routing".into(),
            reference: reference.display().to_string(),
            candidate: candidate.display().to_string(),
            passed,
            compared: self.checked as u64,
            failure,
            gates,
            reproduce: String::new(),
            report: serde_json::to_value(self).unwrap_or_default(),
            notes: Vec::new(),
            unkept: false,
        }
    }

    fn failure(&self, gates: &[Gate]) -> String {
        if self.checked == 0 {
            return "no routed token to check (the reference routed nothing)".into();
        }
        let gate = gates.iter().find(|g| g.failed()).unwrap_or(&gates[0]);
        let threshold = gates
            .iter()
            .find(|g| g.metric == "mismatch")
            .map_or(DEFAULT_MISMATCH, |g| g.limit);
        let first: Vec<String> = self
            .first
            .iter()
            .take(3)
            .map(|m| {
                format!(
                    "layer {} row {} position {}: experts {:?} vs {:?}",
                    m.layer, m.row, m.position, m.reference, m.candidate
                )
            })
            .collect();
        format!(
            "{} of {} decided token·layers routed differently ({} {} > {}; {} of {} microbatches \
             over the threshold; {} near-ties not gated); first: {}",
            self.mismatches,
            self.checked,
            gate.metric,
            sci(gate.value),
            sci(gate.limit),
            self.failing_microbatches(threshold),
            self.microbatches.len(),
            self.near_ties,
            first.join("; ")
        )
    }
}

#[cfg(test)]
mod tests;
