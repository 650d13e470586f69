//! Samples → the calibration report: headroom per (configuration, model, mesh, level), margin
//! per (configuration, model, mesh, mutation), and limits to consider per (configuration,
//! dtype, level, metric).

use std::collections::BTreeMap;

use meshparity_judge::gate::closest;
use meshparity_judge::Gate;
use meshparity_reports::calibration::{
    Calibration, Headroom, Margin, Reading, SampleError, Suggestion, CALIBRATION_FORMAT, THIN,
};

use super::sweep::Sample;
use super::{Config, Options};

fn reading(seed: u64, g: &Gate) -> Reading {
    Reading {
        seed,
        subject: if g.scope.is_empty() {
            g.subject.clone()
        } else {
            format!("{}: {}", g.scope, g.subject)
        },
        metric: g.metric.clone(),
        value: g.value,
        limit: g.limit,
        bound: g.bound.clone(),
        ratio: g.ratio,
    }
}

/// NaN ranks as the worst of all (a NaN reading fails).
fn key(r: f64) -> f64 {
    if r.is_nan() {
        f64::INFINITY
    } else {
        r
    }
}

fn inverse(r: f64) -> f64 {
    if r > 0.0 {
        1.0 / r
    } else {
        f64::INFINITY
    }
}

/// (configuration, model, dtype, mesh, level or mutation): one row of a table.
type RowKey = (usize, String, String, String, String);

#[derive(Default)]
struct Rows {
    headroom: BTreeMap<RowKey, Headroom>,
    /// Each margin row with the first catching level of every caught seed.
    margins: BTreeMap<RowKey, (Margin, Vec<String>)>,
}

pub fn summarize(
    spec: &str,
    configs: &[Config],
    opts: &Options,
    samples: &[Sample],
    seconds: f64,
) -> Calibration {
    let label = |c: usize| configs[c].label();
    let mut rows = Rows::default();
    let mut errors = Vec::new();
    // Sized perturbations (`--power`) make the power table, not margins.
    let (perturbed, samples): (Vec<&Sample>, Vec<&Sample>) = samples.iter().partition(|s| {
        s.mutation
            .as_deref()
            .is_some_and(|m| super::power::parse(m).is_some())
    });
    for s in &samples {
        match (&s.error, s.mutation.as_deref()) {
            (Some(message), _) => errors.push(SampleError {
                config: label(s.config),
                model: s.model.clone(),
                mesh: s.mesh.clone(),
                mutation: s.mutation.clone(),
                seed: s.seed,
                message: message.clone(),
            }),
            (None, None) => rows.correct(s, label(s.config)),
            (None, Some(m)) => rows.mutation(s, m, label(s.config)),
        }
    }
    let headroom: Vec<Headroom> = rows
        .headroom
        .into_values()
        .map(|mut h| {
            h.thin = h.headroom < THIN;
            h
        })
        .collect();
    let margins: Vec<Margin> = rows
        .margins
        .into_values()
        .map(|(mut m, firsts)| {
            m.first_level = most_common(&firsts);
            if m.weakest.is_none() {
                m.margin = 0.0;
            }
            m.thin = m.margin < THIN;
            m
        })
        .collect();
    Calibration {
        format_version: CALIBRATION_FORMAT,
        spec: spec.to_owned(),
        first_seed: opts.first_seed,
        seeds: opts.seeds,
        configs: configs.iter().map(Config::label).collect(),
        seconds,
        correct_runs: samples.iter().filter(|s| s.mutation.is_none()).count() as u64,
        mutation_runs: samples.iter().filter(|s| s.mutation.is_some()).count() as u64,
        suggestions: suggestions(configs, &samples),
        headroom,
        margins,
        errors,
        power: super::power::summarize(configs, &perturbed),
    }
}

impl Rows {
    /// A correct run: each level's closest gate against the worst so far.
    fn correct(&mut self, s: &Sample, config: String) {
        let dtype = s.dtype.to_string();
        for l in &s.levels {
            let k = (
                s.config,
                s.model.clone(),
                dtype.clone(),
                s.mesh.clone(),
                l.level.to_string(),
            );
            let h = self.headroom.entry(k).or_insert_with(|| Headroom {
                config: config.clone(),
                model: s.model.clone(),
                dtype: dtype.clone(),
                mesh: s.mesh.clone(),
                level: l.level.to_string(),
                runs: 0,
                failed_seeds: Vec::new(),
                worst: None,
                headroom: f64::INFINITY,
                thin: false,
            });
            h.runs += 1;
            if !l.passed {
                h.failed_seeds.push(s.seed);
            }
            if let Some(g) = closest(&l.gates) {
                if h.worst.as_ref().is_none_or(|w| key(g.ratio) > key(w.ratio)) {
                    h.worst = Some(reading(s.seed, g));
                    h.headroom = inverse(key(g.ratio));
                }
            }
        }
    }

    /// A mutation run: caught or not, and its strongest signal against the weakest so far.
    fn mutation(&mut self, s: &Sample, m: &str, config: String) {
        let dtype = s.dtype.to_string();
        let k = (
            s.config,
            s.model.clone(),
            dtype.clone(),
            s.mesh.clone(),
            m.to_owned(),
        );
        let (row, firsts) = self.margins.entry(k).or_insert_with(|| {
            let row = Margin {
                config,
                model: s.model.clone(),
                dtype,
                mesh: s.mesh.clone(),
                mutation: m.to_owned(),
                runs: 0,
                caught: 0,
                missed_seeds: Vec::new(),
                first_level: None,
                weakest: None,
                margin: f64::INFINITY,
                thin: false,
                sites: Vec::new(),
                as_injected: 0,
                mislocalized: 0,
                classes: meshparity_specs::catalog::find(m)
                    .map(|c| c.classes.iter().map(|x| (*x).to_owned()).collect())
                    .unwrap_or_default(),
            };
            (row, Vec::new())
        });
        row.runs += 1;
        if let Some(site) = &s.site {
            if !row.sites.contains(site) {
                row.sites.push(site.clone());
            }
        }
        row.as_injected += u64::from(s.as_injected == Some(true));
        row.mislocalized += u64::from(s.as_injected == Some(false));
        match (s.levels.iter().find(|l| !l.passed), s.injected) {
            (Some(l), true) => {
                row.caught += 1;
                firsts.push(l.level.to_string());
            }
            _ => row.missed_seeds.push(s.seed),
        }
        if let Some(g) = closest(s.levels.iter().flat_map(|l| &l.gates)) {
            if row
                .weakest
                .as_ref()
                .is_none_or(|w| key(g.ratio) < key(w.ratio))
            {
                row.weakest = Some(reading(s.seed, g));
                row.margin = key(g.ratio);
            }
        }
    }
}

fn most_common(xs: &[String]) -> Option<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for x in xs {
        *counts.entry(x).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(x, _)| x.to_owned())
}

/// What to compare for a metric: the value for a maximum, the shortfall from 1 for a minimum.
fn excess(g: &Gate) -> f64 {
    if g.bound == "min" {
        1.0 - g.value
    } else {
        g.value
    }
}

#[derive(Default)]
struct MetricSpan {
    bound: String,
    current: f64,
    worst_correct: f64,
    weakest_bug: Option<f64>,
}

fn suggestions(configs: &[Config], samples: &[&Sample]) -> Vec<Suggestion> {
    let mut spans: BTreeMap<(usize, String, String, String), MetricSpan> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.error.is_none()) {
        for l in &s.levels {
            let caught = s.mutation.is_some() && !l.passed;
            if s.mutation.is_some() && !caught {
                continue;
            }
            // Per metric, this run's largest excursion.
            let mut per_metric: BTreeMap<(&str, &str), (f64, &Gate)> = BTreeMap::new();
            for g in l.gates.iter().filter(|g| g.limit > 0.0 || g.bound == "min") {
                let e = excess(g);
                let slot = per_metric.entry((&g.scope, &g.metric)).or_insert((e, g));
                if key(e) > key(slot.0) {
                    *slot = (e, g);
                }
            }
            for ((scope, metric), (e, g)) in per_metric {
                let k = (
                    s.config,
                    s.dtype.to_string(),
                    format!("{} {scope}", l.level),
                    metric.to_owned(),
                );
                let span = spans.entry(k).or_insert_with(|| MetricSpan {
                    bound: g.bound.clone(),
                    current: g.limit,
                    ..MetricSpan::default()
                });
                if caught {
                    span.weakest_bug = Some(span.weakest_bug.map_or(e, |w| w.min(e)));
                } else {
                    span.worst_correct = span.worst_correct.max(e);
                }
            }
        }
    }
    spans
        .into_iter()
        .map(|((c, dtype, level, metric), span)| {
            let min = span.bound == "min";
            let current = if min {
                1.0 - span.current
            } else {
                span.current
            };
            let suggested = between(span.worst_correct, span.weakest_bug);
            let shown = |x: f64| if min { 1.0 - x } else { x };
            // Loosening with no caught bug at this metric to bound it is not suggested.
            let suggested =
                (span.weakest_bug.is_some() || suggested <= current).then_some(suggested);
            Suggestion {
                config: configs[c].label(),
                dtype,
                level,
                metric,
                bound: span.bound,
                current: span.current,
                worst_correct: shown(span.worst_correct),
                weakest_bug: span.weakest_bug.map(shown),
                suggested: suggested.map(shown),
                thin: span.worst_correct * THIN > current,
            }
        })
        .collect()
}

/// A limit between the worst correct reading and the weakest bug, on a log scale, rounded up
/// to one significant digit; 10× past the worst correct reading when no bug bounds it.
fn between(worst: f64, weakest_bug: Option<f64>) -> f64 {
    let x = match weakest_bug {
        Some(b) if worst > 0.0 && b > worst => (worst * b).sqrt(),
        _ if worst > 0.0 => worst * THIN,
        _ => return 0.0,
    };
    let p = 10f64.powf(x.log10().floor());
    (x / p).ceil() * p
}

#[cfg(test)]
mod tests {
    use super::between;

    #[test]
    fn suggested_limits_sit_between_round_off_and_bugs() {
        assert_eq!(between(1e-6, Some(1e-2)), 1e-4);
        assert_eq!(between(2e-6, None), 2e-5);
        assert_eq!(between(0.0, Some(1.0)), 0.0);
        assert!((between(3e-6, Some(2e-6)) - 3e-5).abs() < 1e-18);
    }
}
