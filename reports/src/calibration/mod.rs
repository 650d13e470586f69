//! What a calibration sweep measured (`meshparity calibrate`): headroom of correct runs, margin
//! of injected bugs, and limits to consider. One model, rendered as text (`text.rs`), as a
//! self-contained HTML page (`html.rs`) and as JSON (`calibration.json`, this model serialized;
//! `format_version` is bumped on incompatible changes). docs/calibrate.md documents the fields.

pub(crate) mod html;
pub mod power;
mod text;

pub use html::html;
pub use text::text;

use serde::{Serialize, Serializer};

/// Bumped on incompatible changes of `calibration.json`.
pub const CALIBRATION_FORMAT: u32 = 1;

/// Headroom or margin below this is flagged: a limit that correct runs come within 10× of will
/// cry wolf on the next seed or model size, and a bug caught by less than 10× may slip through.
pub const THIN: f64 = 10.0;

#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    pub format_version: u32,
    pub spec: String,
    /// Seeds `first_seed .. first_seed + seeds`.
    pub first_seed: u64,
    pub seeds: u64,
    /// Configurations swept (`spec`, or overrides like `bf16 sgd lr=1e-2`).
    pub configs: Vec<String>,
    pub seconds: f64,
    /// Correct-run samples judged, and mutation samples.
    pub correct_runs: u64,
    pub mutation_runs: u64,
    pub headroom: Vec<Headroom>,
    pub margins: Vec<Margin>,
    pub suggestions: Vec<Suggestion>,
    pub errors: Vec<SampleError>,
    /// Detection power (`--power`): per (configuration, model, mesh, perturbation, level), the
    /// smallest size caught on every seed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub power: Vec<Power>,
}

impl Calibration {
    /// Correct runs that failed a check (false positives).
    /// Level checks made on correct runs (each run is judged at each of its levels).
    pub fn correct_checks(&self) -> u64 {
        self.headroom.iter().map(|h| h.runs).sum()
    }

    pub fn false_positives(&self) -> usize {
        self.headroom.iter().map(|h| h.failed_seeds.len()).sum()
    }

    /// Mutation runs no check caught.
    pub fn missed(&self) -> usize {
        self.margins.iter().map(|m| m.missed_seeds.len()).sum()
    }

    /// Mutation runs localized to another site than the catalog's.
    pub fn mislocalized(&self) -> u64 {
        self.margins.iter().map(|m| m.mislocalized).sum()
    }

    /// Whether every correct run passed, every mutation was caught where it was injected and
    /// nothing errored.
    pub fn clean(&self) -> bool {
        self.false_positives() == 0
            && self.missed() == 0
            && self.mislocalized() == 0
            && self.errors.is_empty()
    }
}

/// One gate's reading on one seed.
#[derive(Clone, Debug, Serialize)]
pub struct Reading {
    pub seed: u64,
    /// Tensor, `layer N`, or curve metric.
    pub subject: String,
    pub metric: String,
    #[serde(serialize_with = "num")]
    pub value: f64,
    #[serde(serialize_with = "num")]
    pub limit: f64,
    /// `max` or `min`.
    pub bound: String,
    /// Value in units of the limit; above 1 fails.
    #[serde(serialize_with = "num")]
    pub ratio: f64,
}

/// How close correct runs of one (configuration, model, mesh, level) came to failing.
#[derive(Clone, Debug, Serialize)]
pub struct Headroom {
    pub config: String,
    pub model: String,
    pub dtype: String,
    pub mesh: String,
    pub level: String,
    pub runs: u64,
    /// Seeds on which the correct mesh failed this level.
    pub failed_seeds: Vec<u64>,
    /// The reading closest to its limit over every seed.
    pub worst: Option<Reading>,
    /// 1 / worst ratio: how many times over the worst run could grow before failing.
    #[serde(serialize_with = "num")]
    pub headroom: f64,
    /// Headroom under [`THIN`].
    pub thin: bool,
}

/// How clearly one mutation on one mesh was caught.
#[derive(Clone, Debug, Serialize)]
pub struct Margin {
    pub config: String,
    pub model: String,
    pub dtype: String,
    pub mesh: String,
    pub mutation: String,
    pub runs: u64,
    pub caught: u64,
    /// Seeds on which no level failed (or the fault altered nothing).
    pub missed_seeds: Vec<u64>,
    /// The level that failed first in level order, the most common one over seeds.
    pub first_level: Option<String>,
    /// The seed whose strongest signal was weakest, with that signal.
    pub weakest: Option<Reading>,
    /// The weakest seed's strongest gate ratio: how far past its limit the bug went at least.
    #[serde(serialize_with = "num")]
    pub margin: f64,
    /// Margin under [`THIN`].
    pub thin: bool,
    /// Where the runs were localized first (distinct sites, in the order first seen).
    pub sites: Vec<String>,
    /// Runs localized where the catalog says the bug is injected, and elsewhere (a
    /// localization that points elsewhere is a failure of the tool, like a missed bug).
    pub as_injected: u64,
    pub mislocalized: u64,
    /// The VERDICT / ART classes this mutation reproduces.
    pub classes: Vec<String>,
}

/// The smallest perturbation of one kind that one level (or `any` level) catches on every
/// seed, on one mesh: what the spec can see, measured.
#[derive(Clone, Debug, Serialize)]
pub struct Power {
    pub config: String,
    pub model: String,
    pub dtype: String,
    pub mesh: String,
    /// The perturbation class (`rank-grad-scale`, …) and what it does at size ε.
    pub perturbation: String,
    pub what: String,
    /// A level, or `any` (the job's verdict: the first level that fails).
    pub level: String,
    /// The smallest ε of the ladder such that it and every larger ε were caught on every
    /// seed; `None` when even the largest was not.
    #[serde(serialize_with = "opt_num")]
    pub smallest: Option<f64>,
    /// The ladder's sizes tried, largest first, and the seeds each ran on.
    pub tried: Vec<f64>,
    pub seeds: u64,
}

/// A limit to consider for one (configuration, level, metric).
#[derive(Clone, Debug, Serialize)]
pub struct Suggestion {
    pub config: String,
    pub dtype: String,
    pub level: String,
    pub metric: String,
    /// `max` or `min`.
    pub bound: String,
    #[serde(serialize_with = "num")]
    pub current: f64,
    /// The worst value any correct run reached.
    #[serde(serialize_with = "num")]
    pub worst_correct: f64,
    /// The weakest value of this metric among mutation runs this level caught (if any).
    #[serde(serialize_with = "opt_num")]
    pub weakest_bug: Option<f64>,
    /// Between the two on a log scale where they are apart, else 10× past the worst correct;
    /// `None` where that would loosen the limit with no caught bug measured at this metric (a
    /// looser limit nothing shows to be safe is not suggested).
    #[serde(serialize_with = "opt_num")]
    pub suggested: Option<f64>,
    /// The current limit leaves correct runs under 10× headroom.
    pub thin: bool,
}

/// A sample that could not be judged.
#[derive(Clone, Debug, Serialize)]
pub struct SampleError {
    pub config: String,
    pub model: String,
    pub mesh: String,
    pub mutation: Option<String>,
    pub seed: u64,
    pub message: String,
}

/// JSON has no inf/nan: write them as strings instead of losing them.
fn num<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    if x.is_finite() {
        s.serialize_f64(*x)
    } else {
        s.collect_str(x)
    }
}

fn opt_num<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match x {
        Some(x) => num(x, s),
        None => s.serialize_none(),
    }
}

/// A number for tables: `3.1e-6`, `0.5`, `inf`.
/// A ratio against a limit (headroom, margin): `∞` where the limit is exact, whole numbers from
/// 10 to 10,000, two significant digits below 10, powers of ten above (`1.3e4`), so one column
/// reads in one format.
pub fn times(x: f64) -> String {
    if x.is_infinite() && x > 0.0 {
        "∞".into()
    } else if x >= 1e4 {
        format!("{x:.1e}")
    } else if x >= 10.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// `1234–1240`, or the one seed.
pub fn seed_range(first: u64, count: u64) -> String {
    let last = first + count.saturating_sub(1);
    if last == first {
        format!("seed {first}")
    } else {
        format!("seeds {first}–{last}")
    }
}

pub fn short(x: f64) -> String {
    if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else if x == 0.0 {
        "0".into()
    } else if (1e-2..1e4).contains(&x.abs()) {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        format!("{x:.1e}")
    }
}
