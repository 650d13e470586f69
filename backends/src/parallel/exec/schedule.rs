//! Pipeline schedules: the order in which each stage runs forward and backward passes of its
//! microbatches, and a clocked simulation of all stages running them concurrently.
//!
//! The order changes when activations are alive, not what is computed: every stage still
//! accumulates microbatch gradients in microbatch order, so GPipe and 1F1B must both match the
//! oracle. The simulation checks the dependencies a real pipeline enforces by blocking
//! receives (F(s, m) after F(s-1, m); B(s, m) after B(s+1, m), or after F(s, m) on the last
//! stage) and fails instead of deadlocking.

use meshparity_specs::Schedule;

/// One unit of pipeline work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Forward { stage: usize, mb: usize },
    Backward { stage: usize, mb: usize },
}

/// Each stage's own sequence of actions.
pub fn stage_orders(schedule: Schedule, stages: usize, microbatches: usize) -> Vec<Vec<Action>> {
    (0..stages)
        .map(|stage| {
            let f = |mb| Action::Forward { stage, mb };
            let b = |mb| Action::Backward { stage, mb };
            match schedule {
                Schedule::GPipe => (0..microbatches)
                    .map(f)
                    .chain((0..microbatches).map(b))
                    .collect(),
                Schedule::OneFOneB => {
                    // Megatron: warm up with the forwards the later stages need, then alternate
                    // one forward and one backward, then drain the backwards.
                    let warmup = (stages - stage - 1).min(microbatches);
                    let mut order: Vec<Action> = (0..warmup).map(f).collect();
                    for i in 0..microbatches - warmup {
                        order.push(f(warmup + i));
                        order.push(b(i));
                    }
                    order.extend((microbatches - warmup..microbatches).map(b));
                    order
                }
            }
        })
        .collect()
}

/// A clocked run: at each tick every stage whose next action's inputs have arrived runs it.
/// Returns the actions of each tick (at most one per stage) and each stage's peak count of
/// microbatches whose forward is done and backward is not (the activations it holds).
pub fn simulate(orders: &[Vec<Action>]) -> Result<(Vec<Vec<Action>>, Vec<usize>), String> {
    let stages = orders.len();
    let mut next = vec![0usize; stages];
    let mut fwd_done = std::collections::HashSet::new();
    let mut bwd_done = std::collections::HashSet::new();
    let mut held = vec![0usize; stages];
    let mut peak = vec![0usize; stages];
    let mut out: Vec<Vec<Action>> = Vec::new();
    let mut done = 0;
    let total: usize = orders.iter().map(Vec::len).sum();
    while done < total {
        let mut ran = Vec::new();
        for s in 0..stages {
            let Some(&a) = orders[s].get(next[s]) else {
                continue;
            };
            let ready = match a {
                Action::Forward { stage, mb } => stage == 0 || fwd_done.contains(&(stage - 1, mb)),
                Action::Backward { stage, mb } => {
                    fwd_done.contains(&(stage, mb))
                        && (stage + 1 == stages || bwd_done.contains(&(stage + 1, mb)))
                }
            };
            if ready {
                ran.push(a);
                next[s] += 1;
            }
        }
        if ran.is_empty() {
            return Err(format!(
                "pipeline schedule deadlocks after {done} of {total} actions"
            ));
        }
        // Completions become visible at the next tick, as messages would.
        done += ran.len();
        for &a in &ran {
            match a {
                Action::Forward { stage, mb } => {
                    fwd_done.insert((stage, mb));
                    held[stage] += 1;
                    peak[stage] = peak[stage].max(held[stage]);
                }
                Action::Backward { stage, mb } => {
                    bwd_done.insert((stage, mb));
                    held[stage] -= 1;
                }
            }
        }
        out.push(ran);
    }
    Ok((out, peak))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(schedule: Schedule, stages: usize, mbs: usize) -> Vec<usize> {
        let orders = stage_orders(schedule, stages, mbs);
        for (s, o) in orders.iter().enumerate() {
            assert_eq!(
                o.len(),
                2 * mbs,
                "stage {s} runs every microbatch both ways"
            );
            let backs: Vec<usize> = o
                .iter()
                .filter_map(|a| match a {
                    Action::Backward { mb, .. } => Some(*mb),
                    _ => None,
                })
                .collect();
            assert_eq!(
                backs,
                (0..mbs).collect::<Vec<_>>(),
                "backwards in microbatch order"
            );
        }
        simulate(&orders).expect("no deadlock").1
    }

    #[test]
    fn gpipe_holds_every_microbatch() {
        assert_eq!(check(Schedule::GPipe, 4, 8), vec![8; 4]);
    }

    #[test]
    fn one_f_one_b_bounds_activations_by_depth() {
        for (stages, mbs) in [(2, 4), (4, 8), (4, 2), (3, 7), (1, 3)] {
            let peak = check(Schedule::OneFOneB, stages, mbs);
            for (s, p) in peak.iter().enumerate() {
                assert!(
                    *p <= (stages - s).min(mbs),
                    "stage {s} holds {p} ({stages}×{mbs})"
                );
            }
        }
    }

    #[test]
    fn a_bad_order_is_reported_not_hung() {
        let orders = vec![
            vec![
                Action::Backward { stage: 0, mb: 0 },
                Action::Forward { stage: 0, mb: 0 },
            ],
            vec![
                Action::Forward { stage: 1, mb: 0 },
                Action::Backward { stage: 1, mb: 0 },
            ],
        ];
        assert!(simulate(&orders).unwrap_err().contains("deadlocks"));
    }
}
