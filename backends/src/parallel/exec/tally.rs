//! What a replica's pipeline actions have produced so far: forward outputs awaiting their
//! backward, losses and logits, routing and load, gradients accumulated per rank.

use std::collections::{BTreeMap, HashMap};

use burn::tensor::Tensor;
use indexmap::IndexMap;

use super::finalize::Lost;
use super::replica::{Done, Replica};
use super::schedule::ScheduleError;
use crate::parallel::layers::experts::RouteRecord;
use crate::parallel::layers::stage::StageOut;

/// What a replica's pipeline actions have produced so far.
pub(super) struct Tally {
    /// Gradients per global rank: one map, or one per microbatch under ZeRO (reduced per
    /// microbatch).
    acc: HashMap<usize, Vec<IndexMap<String, Tensor<2>>>>,
    per_microbatch: bool,
    /// A traced run's microbatch gradients that never reached the accumulator.
    lost: HashMap<usize, Lost>,
    /// Forward outputs awaiting their backward, by (stage, microbatch).
    pub(super) live: HashMap<(usize, usize), StageOut>,
    /// Per replica and microbatch: the loss and the logits.
    losses: Vec<Vec<f64>>,
    logits: Vec<Vec<Option<Tensor<3>>>>,
    load_balance: f64,
    routing: Vec<(usize, RouteRecord)>,
    load: BTreeMap<(usize, u32), Vec<f64>>,
}

impl Tally {
    pub(super) fn new(replicas: usize, mbs: usize, per_microbatch: bool) -> Tally {
        Tally {
            acc: HashMap::new(),
            per_microbatch,
            lost: HashMap::new(),
            live: HashMap::new(),
            losses: vec![vec![0.0; mbs]; replicas],
            logits: vec![vec![None; mbs]; replicas],
            load_balance: 0.0,
            routing: Vec::new(),
            load: BTreeMap::new(),
        }
    }

    pub(super) fn take(&mut self, done: Done) {
        match done {
            Done::Forward {
                stage,
                mb,
                mut out,
                loss,
            } => {
                self.load_balance += out.moe.load_balance;
                let routed = out.moe.routing.drain(..).map(|r| (r.first_row, r));
                self.routing.extend(routed);
                for (rank, layer, counts) in out.moe.load.drain(..) {
                    let sum = self
                        .load
                        .entry((rank, layer))
                        .or_insert(vec![0.0; counts.len()]);
                    sum.iter_mut().zip(counts).for_each(|(a, b)| *a += b);
                }
                for (k, (l, lg)) in loss.into_iter().flatten().enumerate() {
                    self.losses[k][mb] = l;
                    self.logits[k][mb] = Some(lg);
                }
                self.live.insert((stage, mb), out);
            }
            Done::Backward { mb, grads, lost } => {
                if lost {
                    for (rank, g) in grads {
                        let held = self.lost.entry(rank).or_default();
                        held.push((mb, g.into_iter().collect()));
                    }
                    return;
                }
                let slot = if self.per_microbatch { mb } else { 0 };
                for (rank, g) in grads {
                    let maps = self.acc.entry(rank).or_default();
                    if maps.len() <= slot {
                        maps.resize(slot + 1, IndexMap::new());
                    }
                    let acc = &mut maps[slot];
                    for (name, grad) in g {
                        let sum = match acc.swap_remove(&name) {
                            Some(prev) => prev + grad,
                            None => grad,
                        };
                        acc.insert(name, sum);
                    }
                }
            }
        }
    }

    pub(super) fn replica(self) -> Result<Replica, ScheduleError> {
        Ok(Replica {
            loss: self.losses,
            load_balance: self.load_balance,
            routing: self.routing,
            load: self.load,
            logits: self
                .logits
                .into_iter()
                .flatten()
                .map(|l| l.ok_or(ScheduleError::NeverReachedLastStage))
                .collect::<Result<_, _>>()?,
            acc: self.acc,
            lost: self.lost,
        })
    }
}
