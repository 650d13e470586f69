//! The detection-power table (`calibrate --power`): per mesh and perturbation, the smallest size
//! each level catches on every seed, pivoted so that a row reads across the levels, and one
//! headline per perturbation: the weakest mesh's figure, what the whole spec can promise.

use std::collections::BTreeMap;

use super::{short, Calibration};

/// The table as text cells: headers, rows, headlines.
pub(crate) struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub headlines: Vec<String>,
}

/// `0.5 %`, or `-` where even the largest size went uncaught on some seed.
pub fn percent(e: Option<f64>) -> String {
    e.map_or_else(|| "-".to_owned(), |e| format!("{} %", short(e * 100.0)))
}

/// [`percent`], with `≤` where the size is the smallest tried (the power may be finer).
fn bounded(e: Option<f64>, tried: &[f64]) -> String {
    let floor = tried.last().is_some_and(|t| Some(*t) == e);
    format!("{}{}", if floor { "≤ " } else { "" }, percent(e))
}

pub(crate) fn table(c: &Calibration) -> Table {
    // Levels in the order first seen, `any` first.
    let mut levels: Vec<&str> = vec!["any"];
    for p in &c.power {
        if !levels.contains(&p.level.as_str()) {
            levels.push(&p.level);
        }
    }
    type Key<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str);
    let mut rows: BTreeMap<Key<'_>, BTreeMap<&str, String>> = BTreeMap::new();
    for p in &c.power {
        let key = (
            p.config.as_str(),
            p.model.as_str(),
            p.dtype.as_str(),
            p.perturbation.as_str(),
            p.mesh.as_str(),
        );
        rows.entry(key)
            .or_default()
            .insert(&p.level, bounded(p.smallest, &p.tried));
    }
    let mut headers: Vec<String> = ["config", "model", "perturbation", "mesh"]
        .map(String::from)
        .to_vec();
    headers.extend(levels.iter().map(|l| l.to_string()));
    let cells = rows
        .iter()
        .map(|((config, model, dtype, class, mesh), by_level)| {
            let mut r = vec![
                config.to_string(),
                format!("{model}@{dtype}"),
                class.to_string(),
                mesh.to_string(),
            ];
            r.extend(
                levels
                    .iter()
                    .map(|l| by_level.get(l).cloned().unwrap_or_default()),
            );
            r
        })
        .collect();
    // The weakest mesh per (configuration, model, perturbation): the largest smallest size.
    type Weakest<'a> = (Option<f64>, &'a str, &'a [f64]);
    let mut weakest: BTreeMap<(&str, &str, &str, &str), Weakest<'_>> = BTreeMap::new();
    for p in c.power.iter().filter(|p| p.level == "any") {
        let key = (
            p.config.as_str(),
            p.model.as_str(),
            p.dtype.as_str(),
            p.perturbation.as_str(),
        );
        // Whether `a` is weaker than `b`: uncaught at every size is the weakest.
        let weaker = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (None, b) => b.is_some(),
            (Some(_), None) => false,
            (Some(x), Some(y)) => x > y,
        };
        let slot = weakest
            .entry(key)
            .or_insert((p.smallest, &p.mesh, &p.tried));
        if weaker(p.smallest, slot.0) {
            *slot = (p.smallest, &p.mesh, &p.tried);
        }
    }
    let what: BTreeMap<&str, &str> = c
        .power
        .iter()
        .map(|p| (p.perturbation.as_str(), p.what.as_str()))
        .collect();
    let headlines = weakest
        .into_iter()
        .map(
            |((config, model, dtype, class), (e, mesh, tried))| match e {
                Some(_) => format!(
                    "{config} {model}@{dtype}: detects {class} of {} on every mesh and seed ({}; \
                 weakest mesh {mesh})",
                    bounded(e, tried),
                    what[class]
                ),
                None => format!(
                    "{config} {model}@{dtype}: {class} ({}) is not caught on every seed of {mesh} \
                 even at the largest size",
                    what[class]
                ),
            },
        )
        .collect();
    Table {
        headers,
        rows: cells,
        headlines,
    }
}
