//! The rows each rank trained on against the reference's, step by step ([`meshparity_engine::inputs`]):
//! at every step the run recorded, each rank's rows must be among the rows the reference took
//! at that step, and together the ranks must take every one of them.
//!
//! A data loader whose position is not restored on resumption, a sampler that does not split
//! by rank, a shuffle seeded differently: each changes what the model sees, not how it
//! computes, and the levels that compare losses and weights see only a drift that
//! localization then blames on the first layer it traces. Here the difference is named before
//! any computation: which rank, which step, and — where the rows are the reference's at
//! another step — which step's rows it took instead. Exact: a digest matches or it does not.

use std::collections::BTreeSet;
use std::path::Path;

use meshparity_engine::inputs::{self, Inputs, InputsError};
use meshparity_specs::Level;

use crate::error::JudgeError;
use crate::gate::Gate;
use crate::locate::Localization;
use crate::outcome::{Comparison, Outcome};
use crate::site::{Site, INPUTS_PHASE};

/// The comparison's `what`.
pub const WHAT: &str = "inputs";
/// The gated metric: rows a rank took that are not its step's, plus the step's rows no rank
/// took. Its limit is 0.
pub const METRIC: &str = "rows_off";

/// The first way the run's inputs differ from the reference's.
#[derive(Clone, Debug, PartialEq)]
enum Finding {
    /// A step the reference recorded and the run, which recorded later steps, did not.
    Unrecorded { step: u64 },
    /// `rank` took `off` of its `rows` rows at `step` that the reference did not take there;
    /// `instead`: the reference's step that holds all of them, where one does.
    Foreign {
        step: u64,
        rank: u64,
        off: usize,
        rows: usize,
        instead: Option<u64>,
    },
    /// `missing` of the reference's `rows` rows at `step` no rank took.
    Uncovered {
        step: u64,
        missing: usize,
        rows: usize,
    },
}

/// The run's inputs (`run`) against the reference's — at the forward level the first step's,
/// at the others every step the run recorded; `resumed_at`: the step a resumed run's second
/// mesh loaded its state after, named in the failure.
pub fn judge(
    reference: &Path,
    run: &Path,
    resumed_at: Option<u64>,
    level: Level,
) -> Result<Comparison, JudgeError> {
    let read = |p: &Path| {
        inputs::read(p).map_err(|e| match e {
            InputsError::Io { .. } | InputsError::Malformed { .. } => JudgeError::TooLittle {
                level,
                why: e.to_string(),
            },
        })
    };
    let (want, mut got) = (read(reference)?, read(run)?);
    // The forward level is the first step's: later steps' inputs are the training's levels'.
    if level == Level::Forward {
        got.retain(|step, _| *step <= 1);
    }
    let (compared, off, first) = tally(&want, &got);
    if compared == 0 {
        return Err(JudgeError::TooLittle {
            level,
            why: format!(
                "`{}` holds no rows at a step the reference's holds: nothing to compare",
                run.display()
            ),
        });
    }
    let gate = Gate {
        scope: WHAT.to_owned(),
        ..Gate::new("every rank's rows".to_owned(), METRIC, off as f64, 0.0)
    };
    Ok(Comparison {
        what: WHAT.to_owned(),
        reference: reference.display().to_string(),
        candidate: run.display().to_string(),
        passed: first.is_none(),
        compared: compared as u64,
        failure: first.map(|f| describe(&f, resumed_at)),
        gates: vec![gate],
        reproduce: String::new(),
        report: serde_json::Value::Null,
        notes: Vec::new(),
        unkept: false,
    })
}

/// Rows checked (each rank's and, for coverage, the reference's), rows off, and the first way
/// they differ, in step order.
fn tally(want: &Inputs, got: &Inputs) -> (usize, usize, Option<Finding>) {
    let (mut compared, mut off, mut first) = (0, 0, None::<Finding>);
    let last = got.keys().next_back().copied().unwrap_or(0);
    let of = |step: u64| -> BTreeSet<&str> {
        want.get(&step)
            .into_iter()
            .flat_map(|ranks| ranks.values().flatten().map(String::as_str))
            .collect()
    };
    for step in want.keys().copied().filter(|s| *s <= last) {
        let expected = of(step);
        let Some(ranks) = got.get(&step) else {
            off += expected.len();
            first.get_or_insert(Finding::Unrecorded { step });
            continue;
        };
        let mut taken = BTreeSet::new();
        for (&rank, rows) in ranks {
            compared += rows.len();
            let foreign = rows
                .iter()
                .filter(|r| !expected.contains(r.as_str()))
                .count();
            off += foreign;
            taken.extend(rows.iter().map(String::as_str));
            if foreign > 0 && first.is_none() {
                let instead = want.keys().copied().find(|&s| {
                    let there = of(s);
                    s != step && rows.iter().all(|r| there.contains(r.as_str()))
                });
                first = Some(Finding::Foreign {
                    step,
                    rank,
                    off: foreign,
                    rows: rows.len(),
                    instead,
                });
            }
        }
        compared += expected.len();
        let missing = expected.difference(&taken).count();
        off += missing;
        if missing > 0 && first.is_none() {
            first = Some(Finding::Uncovered {
                step,
                missing,
                rows: expected.len(),
            });
        }
    }
    (compared, off, first)
}

fn describe(f: &Finding, resumed_at: Option<u64>) -> String {
    let after = |step: u64| match resumed_at {
        Some(at) if step > at => format!(" (after resuming from step {at}'s checkpoint)"),
        _ => String::new(),
    };
    match *f {
        Finding::Unrecorded { step } => format!(
            "the run recorded no inputs at step {step}, where the reference did and the run \
             trained on: a step skipped or recorded twice"
        ),
        Finding::Foreign {
            step,
            rank,
            instead: Some(other),
            ..
        } => format!(
            "rank {rank} trained at step {step}{} on the rows the reference took at step \
             {other}, not on step {step}'s: the data position {}",
            after(step),
            match resumed_at {
                Some(at) if step > at => "(the loader's or sampler's state) was not restored \
                                          from the checkpoint"
                    .to_owned(),
                _ => "is off: the loader yields another step's batch".to_owned(),
            }
        ),
        Finding::Foreign {
            step,
            rank,
            off,
            rows,
            instead: None,
        } => format!(
            "rank {rank} trained at step {step}{} on {off} of {rows} row(s) the reference \
             never took there: its data (the sampler, its shuffle seed, the files) is not the \
             reference's",
            after(step)
        ),
        Finding::Uncovered {
            step,
            missing,
            rows,
        } => format!(
            "at step {step}{} no rank trained on {missing} of the reference's {rows} row(s): \
             ranks took the same rows (a sampler that does not split the batch by rank)",
            after(step)
        ),
    }
}

/// A failed inputs comparison's localization: the data, at the first step and rank whose
/// rows are not the reference's. Nothing is traced — the difference precedes any computation.
pub fn site(o: &Outcome) -> Option<Localization> {
    let c = o.comparisons.iter().find(|c| c.what == WHAT && !c.passed)?;
    let what = c.failure.clone()?;
    let step = first_step(&what);
    let first = Site {
        step,
        replica: None,
        microbatch: None,
        phase: INPUTS_PHASE.to_owned(),
        site: INPUTS_PHASE.to_owned(),
        copy: None,
        what,
        metric: METRIC.to_owned(),
        value: c.gates.first().map_or(f64::INFINITY, |g| g.value),
        limit: 0.0,
        bound: None,
    };
    Some(Localization::placed(first, c.compared))
}

/// The step a failure names first (`… at step 3 …`), 0 if none.
fn first_step(what: &str) -> usize {
    what.split("step ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(ids: &[i64]) -> Vec<String> {
        ids.iter().map(|&i| inputs::row_digest(&[i])).collect()
    }

    /// The reference takes rows 10·s … 10·s + 3 at step s; a mesh of two ranks splits them.
    fn reference(steps: u64) -> Inputs {
        (1..=steps)
            .map(|s| {
                let base = 10 * s as i64;
                (s, [(0, rows(&[base, base + 1, base + 2, base + 3]))].into())
            })
            .collect()
    }

    fn split(steps: impl Iterator<Item = (u64, u64)>) -> Inputs {
        steps
            .map(|(s, from)| {
                let b = 10 * from as i64;
                (
                    s,
                    [(0, rows(&[b, b + 1])), (1, rows(&[b + 2, b + 3]))].into(),
                )
            })
            .collect()
    }

    /// A correct split passes with every row counted; a resumed run that restarted its data
    /// names the rank, the step and the step whose rows it took; ranks that took the same rows
    /// leave some uncovered; rows of no step are foreign; a skipped step is named.
    #[test]
    fn each_rank_takes_its_own_steps_rows_and_together_all() {
        let want = reference(4);
        let good = split((1..=4).map(|s| (s, s)));
        assert_eq!(tally(&want, &good), (32, 0, None));

        let restarted = split([(1, 1), (2, 2), (3, 1), (4, 2)].into_iter());
        let (_, off, first) = tally(&want, &restarted);
        // Steps 3 and 4: four rows each not the step's, and four of the step's untaken.
        assert_eq!(off, 16);
        let f = first.unwrap();
        assert_eq!(
            f,
            Finding::Foreign {
                step: 3,
                rank: 0,
                off: 2,
                rows: 2,
                instead: Some(1)
            }
        );
        let said = describe(&f, Some(2));
        assert!(said.contains("rank 0 trained at step 3 (after resuming from step 2's"));
        assert!(said.contains("the rows the reference took at step 1"));
        assert!(said.contains("was not restored"), "{said}");
        assert_eq!(first_step(&said), 3);

        let mut same = good.clone();
        let r0 = same[&2][&0].clone();
        same.get_mut(&2).unwrap().insert(1, r0);
        let (_, off, first) = tally(&want, &same);
        assert_eq!(off, 2);
        assert!(matches!(
            first,
            Some(Finding::Uncovered {
                step: 2,
                missing: 2,
                rows: 4
            })
        ));

        let mut foreign = good.clone();
        foreign.get_mut(&1).unwrap().insert(1, rows(&[999, 998]));
        let (_, _, first) = tally(&want, &foreign);
        let f = first.unwrap();
        assert!(matches!(
            f,
            Finding::Foreign {
                step: 1,
                rank: 1,
                off: 2,
                instead: None,
                ..
            }
        ));

        let mut skipped = good;
        skipped.remove(&2);
        let (_, _, first) = tally(&want, &skipped);
        assert_eq!(first, Some(Finding::Unrecorded { step: 2 }));
    }

    /// A run that recorded nothing the reference did compared nothing: an error, not a pass.
    #[test]
    fn nothing_compared_is_too_little() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
        inputs::write(&a, &reference(2)).unwrap();
        inputs::write(&b, &Inputs::new()).unwrap();
        let e = judge(&a, &b, None, Level::Curve).unwrap_err().to_string();
        assert!(e.contains("too little") && e.contains("no rows"), "{e}");
        inputs::write(&b, &split((1..=2).map(|s| (s, s)))).unwrap();
        let c = judge(&a, &b, None, Level::Curve).unwrap();
        assert!(c.passed && c.compared == 16 && c.gates.len() == 1, "{c:?}");
    }
}
