//! Segment-wise autodiff with explicit backward collectives.
//!
//! A rank's computation between two collectives is a *segment*: its inputs become fresh autodiff
//! leaves, so each segment is its own burn graph. Collectives sit between segments and are
//! recorded with their Megatron conjugate, so the backward pass runs them explicitly (and a fault
//! can hit them) instead of leaving them implicit in one global graph, which could not represent
//! a rank that never receives a gradient. Backward walks the tape in reverse: a segment
//! backpropagates the surrogate `Σ out · grad_out` (a vector-Jacobian product), a collective
//! runs its conjugate on the gradients.

use std::collections::HashMap;

use burn::tensor::{Gradients, Tensor};

use super::collective::Comm;
pub use super::conj::Conj;
use super::conj::{backward, forward};
use super::route::{Exchange, Route};
use crate::parallel::topology::Layout;

/// A value on the tape: one tensor on one rank.
pub type Val = usize;

/// What a recomputed span is: a block of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    /// The attention block: norm, attention and its residual add (`recompute = "full"`).
    Attention(u32),
    /// The attention between the block's collectives, projections included (`recompute =
    /// "selective"`).
    CoreAttention(u32),
    /// The dense MLP block: norm, MLP and its residual add (`recompute = "full"`).
    Mlp(u32),
}

/// A span's forward run on a tape of its own: the tape, and which of its values are the span's
/// inputs and outputs.
pub struct Rerun {
    pub tape: Tape,
    pub inputs: Vec<Val>,
    pub outputs: Vec<Val>,
}

/// How backward re-runs a span from its inputs' values.
pub type Rerunner<'a> = dyn FnMut(&mut Comm, Span, Vec<Tensor<3>>) -> Rerun + 'a;

/// One rank's computation between collectives.
pub(super) struct Segment {
    rank: usize,
    inputs: Vec<(Val, Tensor<3>)>,
    output: Tensor<3>,
    out: Val,
}

pub(super) enum Node {
    /// The segments of a group's ranks, one per rank, run concurrently.
    Segments(Vec<Segment>),
    Collective {
        conj: Conj,
        site: String,
        ranks: Vec<usize>,
        groups: Layout,
        inputs: Vec<Val>,
        outputs: Vec<Val>,
    },
    /// Rows moved between ranks ([`Route`]); backward moves gradients by its transpose.
    Exchange {
        exchange: Exchange,
        back: Route,
        inputs: Vec<Val>,
        outputs: Vec<Val>,
    },
    /// A span whose activations were not kept: backward re-runs its forward from the inputs'
    /// values (`recompute.rs`).
    Recomputed {
        span: Span,
        inputs: Vec<Val>,
        outputs: Vec<Val>,
    },
}

/// The forward record of one microbatch on one pipeline stage.
#[derive(Default)]
pub struct Tape {
    values: Vec<Tensor<3>>,
    pub(super) nodes: Vec<Node>,
    /// Whether segments build graphs to backpropagate (not for a recomputed span's forward,
    /// which keeps nothing: `recompute.rs`).
    untracked: bool,
}

impl Tape {
    pub fn new() -> Self {
        Self::default()
    }

    /// A tape whose segments build no graphs: its values are all it computes.
    pub fn untracked() -> Self {
        Self {
            untracked: true,
            ..Self::default()
        }
    }

    /// The forward value (no autodiff association).
    pub fn value(&self, v: Val) -> Tensor<3> {
        self.values[v].clone()
    }

    /// A value that enters from outside (a received activation).
    pub fn input(&mut self, t: Tensor<3>) -> Val {
        self.values.push(t.inner());
        self.values.len() - 1
    }

    fn leaves(&self, inputs: &[Val]) -> Vec<(Val, Tensor<3>)> {
        inputs
            .iter()
            .map(|&v| {
                let leaf = self.values[v].clone().autodiff();
                (
                    v,
                    if self.untracked {
                        leaf
                    } else {
                        leaf.require_grad()
                    },
                )
            })
            .collect()
    }

    /// Run `f` on `rank` with `inputs` as fresh gradient leaves.
    pub fn segment(
        &mut self,
        rank: usize,
        inputs: &[Val],
        f: impl FnOnce(Vec<Tensor<3>>) -> Tensor<3>,
    ) -> Val {
        let leaves = self.leaves(inputs);
        let output = f(leaves.iter().map(|(_, l)| l.clone()).collect());
        let out = self.input(output.clone());
        self.nodes.push(Node::Segments(vec![Segment {
            rank,
            inputs: leaves,
            output,
            out,
        }]));
        out
    }

    /// One segment per rank of a group: `f(i, inputs_of_rank_i)` for the i-th rank, the ranks
    /// on their own threads as they would be on their own devices.
    pub fn per_rank(
        &mut self,
        ranks: &[usize],
        inputs: &[&[Val]],
        f: impl Fn(usize, Vec<Tensor<3>>) -> Tensor<3> + Sync,
    ) -> Vec<Val> {
        let leaves: Vec<Vec<(Val, Tensor<3>)>> = (0..ranks.len())
            .map(|i| self.leaves(&inputs.iter().map(|vals| vals[i]).collect::<Vec<_>>()))
            .collect();
        let outputs: Vec<Tensor<3>> = on_ranks(&leaves, |i, l| {
            f(i, l.iter().map(|(_, t)| t.clone()).collect())
        });
        let mut segments = Vec::with_capacity(ranks.len());
        let mut outs = Vec::with_capacity(ranks.len());
        for ((&rank, inputs), output) in ranks.iter().zip(leaves).zip(outputs) {
            let out = self.input(output.clone());
            outs.push(out);
            segments.push(Segment {
                rank,
                inputs,
                output,
                out,
            });
        }
        self.nodes.push(Node::Segments(segments));
        outs
    }

    /// A collective over the group's values, recorded with its backward conjugate. The group
    /// is a stage's TP × CP ranks ([`Layout`], from the communicator): TP collectives run on
    /// each TP group, [`Conj::Ring`] on each CP ring.
    pub fn collective(
        &mut self,
        comm: &mut Comm,
        conj: Conj,
        site: &str,
        ranks: &[usize],
        inputs: &[Val],
    ) -> Vec<Val> {
        let groups = comm.layout();
        debug_assert_eq!(groups.size(), ranks.len(), "a stage group's ranks");
        let parts: Vec<Tensor<3>> = inputs.iter().map(|&v| self.value(v)).collect();
        let (traced, both) = conj.traced();
        if traced {
            comm.trace(&format!("{site}.fwd.in"), &parts, conj.canon_in());
        }
        let outs = forward(comm, conj, site, ranks, groups, parts);
        if both {
            comm.trace(&format!("{site}.fwd.out"), &outs, conj.canon_out());
        }
        let outputs: Vec<Val> = outs.into_iter().map(|t| self.input(t)).collect();
        self.nodes.push(Node::Collective {
            conj,
            site: site.to_owned(),
            ranks: ranks.to_vec(),
            groups,
            inputs: inputs.to_vec(),
            outputs: outputs.clone(),
        });
        outputs
    }

    /// Rows moved between ranks by `exchange`; not traced (a world-size-1 run has no
    /// counterpart), the values around it are.
    pub fn exchange(&mut self, comm: &mut Comm, exchange: Exchange, inputs: &[Val]) -> Vec<Val> {
        let parts: Vec<Tensor<3>> = inputs.iter().map(|&v| self.value(v)).collect();
        exchange.log(comm, "fwd", exchange.op);
        let lens: Vec<usize> = parts.iter().map(|p| p.dims()[1] - 1).collect();
        let outputs: Vec<Val> = exchange
            .route
            .apply(&parts)
            .into_iter()
            .map(|t| self.input(t))
            .collect();
        self.nodes.push(Node::Exchange {
            back: exchange.route.transpose(&lens),
            exchange,
            inputs: inputs.to_vec(),
            outputs: outputs.clone(),
        });
        outputs
    }

    /// Backpropagate from `seeds` (gradients of output values). `params(rank, grads)` is handed
    /// every segment's gradients so the caller can take its parameters' shares. Returns the
    /// gradients of the values that entered through [`Tape::input`] (and have one).
    ///
    /// `rerun` re-runs a recomputed span's forward (the stage's layers know how); a tape without
    /// recomputed spans never calls it.
    pub fn backward(
        self,
        comm: &mut Comm,
        seeds: Vec<(Val, Tensor<3>)>,
        params: &mut dyn FnMut(usize, &Gradients),
        rerun: &mut Rerunner<'_>,
    ) -> HashMap<Val, Tensor<3>> {
        let mut grads: HashMap<Val, Tensor<3>> = HashMap::new();
        for (v, g) in seeds {
            accumulate(&mut grads, v, g.inner());
        }
        let Tape { values, nodes, .. } = self;
        for node in nodes.into_iter().rev() {
            match node {
                Node::Segments(segments) => {
                    let work: Vec<(Segment, Tensor<3>)> = segments
                        .into_iter()
                        .filter_map(|seg| grads.remove(&seg.out).map(|g| (seg, g)))
                        .collect();
                    let done = on_ranks(&work, |_, (seg, g)| {
                        let surrogate = (seg.output.clone() * g.clone().autodiff()).sum();
                        let segment_grads = surrogate.backward();
                        let inputs: Vec<(Val, Option<Tensor<3>>)> = seg
                            .inputs
                            .iter()
                            .map(|(v, leaf)| (*v, leaf.grad(&segment_grads)))
                            .collect();
                        (seg.rank, inputs, segment_grads)
                    });
                    for (rank, inputs, segment_grads) in done {
                        for (v, g) in inputs {
                            if let Some(g) = g {
                                accumulate(&mut grads, v, g);
                            }
                        }
                        params(rank, &segment_grads);
                    }
                }
                Node::Collective {
                    conj,
                    site,
                    ranks,
                    groups,
                    inputs,
                    outputs,
                } => {
                    let Some(upstream) = upstream(&mut grads, &values, &outputs) else {
                        continue;
                    };
                    // Gradients of the outputs are shaped like the outputs, and of the inputs
                    // like the inputs: the forward's canonical forms, with partial sums where
                    // each rank's downstream use was partial.
                    let (traced, both) = conj.traced();
                    if traced {
                        comm.trace(&format!("{site}.bwd.in"), &upstream, conj.canon_grad_out());
                    }
                    let down = backward(comm, conj, &site, &ranks, groups, upstream);
                    if both {
                        comm.trace(&format!("{site}.bwd.out"), &down, conj.canon_grad_in());
                    }
                    for (v, g) in inputs.into_iter().zip(down) {
                        accumulate(&mut grads, v, g);
                    }
                }
                Node::Exchange {
                    exchange,
                    back,
                    inputs,
                    outputs,
                } => {
                    let Some(upstream) = upstream(&mut grads, &values, &outputs) else {
                        continue;
                    };
                    exchange.log(comm, "bwd", exchange.back_op);
                    for (v, g) in inputs.into_iter().zip(back.apply(&upstream)) {
                        accumulate(&mut grads, v, g);
                    }
                }
                Node::Recomputed {
                    span,
                    inputs,
                    outputs,
                } => {
                    let Some(upstream) = upstream(&mut grads, &values, &outputs) else {
                        continue;
                    };
                    let at: Vec<Tensor<3>> = inputs.iter().map(|&v| values[v].clone()).collect();
                    let again = rerun(comm, span, at);
                    let seeds = again.outputs.iter().copied().zip(upstream).collect();
                    let mut inner = again.tape.backward(comm, seeds, params, rerun);
                    for (v, sub) in inputs.into_iter().zip(again.inputs) {
                        if let Some(g) = inner.remove(&sub) {
                            accumulate(&mut grads, v, g);
                        }
                    }
                }
            }
        }
        grads
    }
}

/// `f` for every item, on the thread pool (ranks run concurrently, as on their own devices).
fn on_ranks<T: Sync, R: Send>(items: &[T], f: impl Fn(usize, &T) -> R + Sync) -> Vec<R> {
    use rayon::prelude::*;
    if items.len() <= 1 {
        return items.iter().enumerate().map(|(i, t)| f(i, t)).collect();
    }
    items.par_iter().enumerate().map(|(i, t)| f(i, t)).collect()
}

/// The gradients of a node's outputs (zeros for outputs nothing downstream used), or `None`
/// when none of them has one (the node is off the backward path).
fn upstream(
    grads: &mut HashMap<Val, Tensor<3>>,
    values: &[Tensor<3>],
    outputs: &[Val],
) -> Option<Vec<Tensor<3>>> {
    if outputs.iter().all(|v| !grads.contains_key(v)) {
        return None;
    }
    Some(
        outputs
            .iter()
            .map(|v| grads.remove(v).unwrap_or_else(|| values[*v].zeros_like()))
            .collect(),
    )
}

fn accumulate(grads: &mut HashMap<Val, Tensor<3>>, v: Val, g: Tensor<3>) {
    let g = match grads.remove(&v) {
        Some(prev) => prev + g,
        None => g,
    };
    grads.insert(v, g);
}
