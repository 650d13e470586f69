//! Pipeline schedules: the order in which each pipeline rank runs forward and backward passes
//! of its microbatches, and a clocked simulation of all ranks running them concurrently.
//!
//! The order changes when activations are alive, not what is computed: every stage still
//! accumulates microbatch gradients in microbatch order, so GPipe, 1F1B and the interleaved
//! schedule must all match the oracle. The simulation checks the dependencies a real pipeline
//! enforces by blocking receives (F(s, m) after F(s-1, m); B(s, m) after B(s+1, m), or after
//! F(s, m) on the last stage) and fails instead of deadlocking.
//!
//! Under the interleaved schedule a stage is a virtual stage: pipeline rank r holds stages
//! r, r + pp, r + 2·pp, … (its model chunks) and runs one action at a time over all of them.

use meshparity_specs::Schedule;

/// One unit of pipeline work on a (virtual) stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Forward { stage: usize, mb: usize },
    Backward { stage: usize, mb: usize },
}

impl Action {
    pub fn stage(self) -> usize {
        match self {
            Action::Forward { stage, .. } | Action::Backward { stage, .. } => stage,
        }
    }

    pub fn mb(self) -> usize {
        match self {
            Action::Forward { mb, .. } | Action::Backward { mb, .. } => mb,
        }
    }
}

/// Each pipeline rank's own sequence of actions, over its `chunks` model chunks (1 unless the
/// schedule is interleaved).
pub fn stage_orders(
    schedule: Schedule,
    pp: usize,
    chunks: usize,
    microbatches: usize,
) -> Vec<Vec<Action>> {
    (0..pp)
        .map(|rank| match schedule {
            Schedule::GPipe => {
                let f = |mb| Action::Forward { stage: rank, mb };
                let b = |mb| Action::Backward { stage: rank, mb };
                (0..microbatches)
                    .map(f)
                    .chain((0..microbatches).map(b))
                    .collect()
            }
            Schedule::OneFOneB => one_f_one_b(rank, pp, 1, microbatches),
            Schedule::Interleaved => one_f_one_b(rank, pp, chunks, microbatches),
        })
        .collect()
}

/// 1F1B over `chunks` model chunks per rank, in Megatron's order
/// (`forward_backward_pipelining_with_interleaving`; with one chunk it is plain 1F1B): warm up
/// with the forwards the later stages need, then alternate one forward and one backward, then
/// drain the backwards. The k-th forward of a rank runs chunk (k div pp) mod chunks on
/// microbatch (k div (pp·chunks))·pp + k mod pp; its backwards visit the chunks in reverse.
fn one_f_one_b(rank: usize, pp: usize, chunks: usize, microbatches: usize) -> Vec<Action> {
    let total = microbatches * chunks;
    let group = pp * chunks;
    let unit = |k: usize, forward: bool| {
        let chunk = k % group / pp;
        let chunk = if forward { chunk } else { chunks - 1 - chunk };
        let mb = if chunks == 1 {
            k
        } else {
            k / group * pp + k % pp
        };
        let stage = chunk * pp + rank;
        if forward {
            Action::Forward { stage, mb }
        } else {
            Action::Backward { stage, mb }
        }
    };
    let warmup = if chunks == 1 {
        pp - rank - 1
    } else if microbatches == pp {
        total
    } else {
        (pp - rank - 1) * 2 + (chunks - 1) * pp
    }
    .min(total);
    let mut order: Vec<Action> = (0..warmup).map(|k| unit(k, true)).collect();
    for i in 0..total - warmup {
        order.push(unit(warmup + i, true));
        order.push(unit(i, false));
    }
    order.extend((total - warmup..total).map(|k| unit(k, false)));
    order
}

/// A pipeline schedule that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("pipeline schedule deadlocks after {done} of {total} actions")]
    Deadlock { done: usize, total: usize },
    /// A schedule that runs a (stage, microbatch)'s backward before its forward.
    #[error("backward before forward")]
    BackwardBeforeForward,
    #[error("a stage input got no gradient")]
    NoInputGradient,
    #[error("a microbatch never reached the last stage")]
    NeverReachedLastStage,
}

/// A clocked run of `stages` stages, each rank running `orders[rank]`: at each tick every
/// rank whose next action's inputs have arrived runs it. Returns the actions of each tick (at
/// most one per rank) and each rank's peak count of (stage, microbatch) pairs whose forward is
/// done and backward is not (the activations it holds).
pub fn simulate(
    orders: &[Vec<Action>],
    stages: usize,
) -> Result<(Vec<Vec<Action>>, Vec<usize>), ScheduleError> {
    let ranks = orders.len();
    let mut next = vec![0usize; ranks];
    let mut fwd_done = std::collections::HashSet::new();
    let mut bwd_done = std::collections::HashSet::new();
    let mut held = vec![0usize; ranks];
    let mut peak = vec![0usize; ranks];
    let mut out: Vec<Vec<Action>> = Vec::new();
    let mut done = 0;
    let total: usize = orders.iter().map(Vec::len).sum();
    while done < total {
        let mut ran = Vec::new();
        for (r, order) in orders.iter().enumerate() {
            let Some(&a) = order.get(next[r]) else {
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
                ran.push((r, a));
                next[r] += 1;
            }
        }
        if ran.is_empty() {
            return Err(ScheduleError::Deadlock { done, total });
        }
        // Completions become visible at the next tick, as messages would.
        done += ran.len();
        for &(r, a) in &ran {
            match a {
                Action::Forward { stage, mb } => {
                    fwd_done.insert((stage, mb));
                    held[r] += 1;
                    peak[r] = peak[r].max(held[r]);
                }
                Action::Backward { stage, mb } => {
                    bwd_done.insert((stage, mb));
                    held[r] -= 1;
                }
            }
        }
        out.push(ran.into_iter().map(|(_, a)| a).collect());
    }
    Ok((out, peak))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank runs each of its stages' microbatches both ways, backwards of a stage in
    /// microbatch order (gradients accumulate as at world size 1); returns the peaks.
    fn check(schedule: Schedule, pp: usize, chunks: usize, mbs: usize) -> Vec<usize> {
        let orders = stage_orders(schedule, pp, chunks, mbs);
        for (r, o) in orders.iter().enumerate() {
            assert_eq!(
                o.len(),
                2 * mbs * chunks,
                "rank {r} runs every microbatch both ways"
            );
            for c in 0..chunks {
                let stage = c * pp + r;
                let of = |fwd: bool| -> Vec<usize> {
                    o.iter()
                        .filter(|a| {
                            a.stage() == stage && matches!(a, Action::Forward { .. }) == fwd
                        })
                        .map(|a| a.mb())
                        .collect()
                };
                let all: Vec<usize> = (0..mbs).collect();
                assert_eq!(of(true), all, "stage {stage}: forwards in microbatch order");
                assert_eq!(
                    of(false),
                    all,
                    "stage {stage}: backwards in microbatch order"
                );
            }
        }
        simulate(&orders, pp * chunks).expect("no deadlock").1
    }

    #[test]
    fn gpipe_holds_every_microbatch() {
        assert_eq!(check(Schedule::GPipe, 4, 1, 8), vec![8; 4]);
    }

    #[test]
    fn one_f_one_b_bounds_activations_by_depth() {
        for (stages, mbs) in [(2, 4), (4, 8), (4, 2), (3, 7), (1, 3)] {
            let peak = check(Schedule::OneFOneB, stages, 1, mbs);
            for (s, p) in peak.iter().enumerate() {
                assert!(
                    *p <= (stages - s).min(mbs),
                    "stage {s} holds {p} ({stages}×{mbs})"
                );
            }
        }
    }

    /// Megatron's interleaved order on every shape it accepts (microbatches a multiple of pp),
    /// with the activations each rank holds bounded by its warmup plus one.
    #[test]
    fn interleaved_runs_every_chunk_without_deadlock() {
        for (pp, chunks, mbs) in [
            (2, 2, 2),
            (2, 2, 4),
            (2, 3, 6),
            (4, 2, 4),
            (4, 2, 8),
            (3, 2, 9),
        ] {
            let peak = check(Schedule::Interleaved, pp, chunks, mbs);
            for (r, p) in peak.iter().enumerate() {
                let warmup = if mbs == pp {
                    mbs * chunks
                } else {
                    ((pp - r - 1) * 2 + (chunks - 1) * pp).min(mbs * chunks)
                };
                assert!(*p <= warmup + 1, "rank {r} holds {p} ({pp}×{chunks}×{mbs})");
            }
        }
    }

    /// Rank 0 of 2 with 2 chunks and 4 microbatches, as Megatron orders it: forwards of chunk 0
    /// on microbatches 0–1, chunk 1 on 0–1, then one forward of chunk 0 and one backward of
    /// chunk 1 (the last chunk's backwards come first).
    #[test]
    fn interleaved_order_is_megatrons() {
        let o = &stage_orders(Schedule::Interleaved, 2, 2, 4)[0];
        let f = |stage, mb| Action::Forward { stage, mb };
        let b = |stage, mb| Action::Backward { stage, mb };
        assert_eq!(
            o[..8],
            [
                f(0, 0),
                f(0, 1),
                f(2, 0),
                f(2, 1),
                f(0, 2),
                b(2, 0),
                f(0, 3),
                b(2, 1)
            ]
        );
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
        assert!(matches!(
            simulate(&orders, 2),
            Err(ScheduleError::Deadlock { .. })
        ));
    }
}
