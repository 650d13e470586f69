//! What a replica's pipeline takes, shares between its actions and yields: the step's input,
//! the context every action reads, what one action produced and what the replica returns.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

use burn::tensor::Tensor;
use indexmap::IndexMap;

use super::finalize::Lost;
use crate::data::Batch;
use crate::llama::moe::Decided;
use crate::parallel::layers::ctx::Leaves;
use crate::parallel::layers::experts::RouteRecord;
use crate::parallel::layers::stage::StageOut;

/// What one data-parallel replica (or a lockstep group of them) produced.
pub(super) struct Replica {
    /// Per replica and microbatch: the loss normalized by the step's global token count (the
    /// replica's loss is their sum).
    pub loss: Vec<Vec<f64>>,
    /// Σ over microbatches and stages of the load-balance loss (moe).
    pub load_balance: f64,
    /// Routing of its tokens (moe), with each record's first global row.
    pub routing: Vec<(usize, RouteRecord)>,
    /// With a score-correction bias: tokens each (global rank, layer) routed to each expert,
    /// summed over the microbatches.
    pub load: BTreeMap<(usize, u32), Vec<f64>>,
    /// Logits of its microbatches, replica by replica, in order.
    pub logits: Vec<Tensor<3>>,
    /// Accumulated gradients of its ranks: one map summed over the microbatches, or, on a
    /// sharded mesh (whose reduction may act per microbatch) and in a traced run, one map per
    /// microbatch.
    pub acc: HashMap<usize, Vec<IndexMap<String, Tensor<2>>>>,
    /// A traced run's gradients of the microbatches that never reached the accumulator, per
    /// rank and microbatch.
    pub lost: HashMap<usize, Lost>,
}

/// What a step computes on: the global batch and the routing to replay (moe).
#[derive(Clone, Copy)]
pub(super) struct StepInput<'a> {
    pub batch: &'a Batch,
    pub replay: Option<&'a [Decided]>,
    /// The catalogued bug's normalizer of each microbatch, for every rank (`None`: the step's).
    pub per_microbatch: Option<&'a [f64]>,
}

/// What every action of one replica shares.
pub(super) struct Act<'a> {
    /// The replicas running in lockstep.
    pub(super) ds: Range<usize>,
    /// Sequences in the global batch.
    pub(super) sequences: usize,
    /// Routing to replay (moe), per layer, over the global batch's tokens.
    pub(super) replay: Option<&'a [Decided]>,
    /// Per microbatch: each replica's first global row of it.
    pub(super) first_rows: Vec<Vec<usize>>,
    /// Each (replica, cp rank)'s loss normalizer.
    pub(super) normalizers: &'a [f64],
    pub(super) per_microbatch: Option<&'a [f64]>,
    pub(super) micro: &'a [Batch],
    pub(super) leaves: &'a [Leaves],
}

impl Act<'_> {
    /// Each (replica, cp rank)'s loss normalizer for microbatch `mb`: the step's, or the
    /// catalogued bug's own count of the microbatch.
    pub(super) fn normalizers(&self, mb: usize) -> Vec<f64> {
        match self.per_microbatch {
            Some(n) => vec![n[mb]; self.normalizers.len()],
            None => self.normalizers.to_vec(),
        }
    }
}

/// What one pipeline action produced (moved once per action: its size does not matter).
#[allow(clippy::large_enum_variant)]
pub(super) enum Done {
    Forward {
        stage: usize,
        mb: usize,
        out: StageOut,
        /// Last stage: the microbatch's loss and its gathered logits, per replica.
        loss: Option<Vec<(f64, Tensor<3>)>>,
    },
    Backward {
        mb: usize,
        /// Parameter gradients of this microbatch, per rank.
        grads: HashMap<usize, Vec<(String, Tensor<2>)>>,
        /// Whether they never reach the accumulator (a catalogued bug drops them); a traced
        /// run still hands them over, as the microbatch's share a likely cause is tested
        /// against.
        lost: bool,
    },
}
