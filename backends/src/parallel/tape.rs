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

/// A value on the tape: one tensor on one rank.
pub type Val = usize;

/// Megatron's conjugate pairs: what a collective does forward and backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conj {
    /// `f`: identity forward, all-reduce of gradients backward (input of column-parallel
    /// layers computed redundantly on every TP rank).
    CopyToTp,
    /// `g`: all-reduce forward, identity backward (output of row-parallel layers, vocab-parallel
    /// embedding and cross-entropy partial sums).
    ReduceFromTp,
    /// Sequence parallelism: all-gather forward along `dim`, reduce-scatter backward.
    GatherFromSp(usize),
    /// Sequence parallelism: reduce-scatter forward along `dim`, all-gather backward.
    ScatterToSp(usize),
}

enum Node {
    Segment {
        rank: usize,
        inputs: Vec<(Val, Tensor<3>)>,
        output: Tensor<3>,
        out: Val,
    },
    Collective {
        conj: Conj,
        site: String,
        ranks: Vec<usize>,
        inputs: Vec<Val>,
        outputs: Vec<Val>,
    },
}

/// The forward record of one microbatch on one pipeline stage.
#[derive(Default)]
pub struct Tape {
    values: Vec<Tensor<3>>,
    nodes: Vec<Node>,
}

impl Tape {
    pub fn new() -> Self {
        Self::default()
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

    /// Run `f` on `rank` with `inputs` as fresh gradient leaves.
    pub fn segment(
        &mut self,
        rank: usize,
        inputs: &[Val],
        f: impl FnOnce(Vec<Tensor<3>>) -> Tensor<3>,
    ) -> Val {
        let leaves: Vec<(Val, Tensor<3>)> = inputs
            .iter()
            .map(|&v| (v, self.values[v].clone().autodiff().require_grad()))
            .collect();
        let output = f(leaves.iter().map(|(_, l)| l.clone()).collect());
        let out = self.input(output.clone());
        self.nodes.push(Node::Segment {
            rank,
            inputs: leaves,
            output,
            out,
        });
        out
    }

    /// One segment per rank of a group: `f(i, inputs_of_rank_i)` for the i-th rank.
    pub fn per_rank(
        &mut self,
        ranks: &[usize],
        inputs: &[&[Val]],
        f: impl Fn(usize, Vec<Tensor<3>>) -> Tensor<3>,
    ) -> Vec<Val> {
        ranks
            .iter()
            .enumerate()
            .map(|(i, &rank)| {
                let ins: Vec<Val> = inputs.iter().map(|vals| vals[i]).collect();
                self.segment(rank, &ins, |leaves| f(i, leaves))
            })
            .collect()
    }

    /// A collective over the group's values, recorded with its backward conjugate.
    pub fn collective(
        &mut self,
        comm: &mut Comm,
        conj: Conj,
        site: &str,
        ranks: &[usize],
        inputs: &[Val],
    ) -> Vec<Val> {
        let parts: Vec<Tensor<3>> = inputs.iter().map(|&v| self.value(v)).collect();
        let outs = match conj {
            Conj::CopyToTp => parts,
            Conj::ReduceFromTp => {
                comm.all_reduce_sum(&format!("{site}.fwd.all_reduce"), ranks, parts)
            }
            Conj::GatherFromSp(d) => {
                comm.all_gather(&format!("{site}.fwd.all_gather"), ranks, parts, d)
            }
            Conj::ScatterToSp(d) => {
                comm.reduce_scatter(&format!("{site}.fwd.reduce_scatter"), ranks, parts, d)
            }
        };
        let outputs: Vec<Val> = outs.into_iter().map(|t| self.input(t)).collect();
        self.nodes.push(Node::Collective {
            conj,
            site: site.to_owned(),
            ranks: ranks.to_vec(),
            inputs: inputs.to_vec(),
            outputs: outputs.clone(),
        });
        outputs
    }

    /// Backpropagate from `seeds` (gradients of output values). `params(rank, grads)` is handed
    /// every segment's gradients so the caller can take its parameters' shares. Returns the
    /// gradients of the values that entered through [`Tape::input`] (and have one).
    pub fn backward(
        self,
        comm: &mut Comm,
        seeds: Vec<(Val, Tensor<3>)>,
        mut params: impl FnMut(usize, &Gradients),
    ) -> HashMap<Val, Tensor<3>> {
        let mut grads: HashMap<Val, Tensor<3>> = HashMap::new();
        for (v, g) in seeds {
            accumulate(&mut grads, v, g.inner());
        }
        let Tape { values, nodes } = self;
        for node in nodes.into_iter().rev() {
            match node {
                Node::Segment {
                    rank,
                    inputs,
                    output,
                    out,
                } => {
                    let Some(g) = grads.remove(&out) else {
                        continue;
                    };
                    let surrogate = (output * g.autodiff()).sum();
                    let segment_grads = surrogate.backward();
                    for (v, leaf) in &inputs {
                        if let Some(g) = leaf.grad(&segment_grads) {
                            accumulate(&mut grads, *v, g);
                        }
                    }
                    params(rank, &segment_grads);
                }
                Node::Collective {
                    conj,
                    site,
                    ranks,
                    inputs,
                    outputs,
                } => {
                    if outputs.iter().all(|v| !grads.contains_key(v)) {
                        continue;
                    }
                    let upstream: Vec<Tensor<3>> = outputs
                        .iter()
                        .map(|v| grads.remove(v).unwrap_or_else(|| values[*v].zeros_like()))
                        .collect();
                    let down = match conj {
                        Conj::CopyToTp => {
                            comm.all_reduce_sum(&format!("{site}.bwd.all_reduce"), &ranks, upstream)
                        }
                        Conj::ReduceFromTp => upstream,
                        Conj::GatherFromSp(d) => comm.reduce_scatter(
                            &format!("{site}.bwd.reduce_scatter"),
                            &ranks,
                            upstream,
                            d,
                        ),
                        Conj::ScatterToSp(d) => {
                            comm.all_gather(&format!("{site}.bwd.all_gather"), &ranks, upstream, d)
                        }
                    };
                    for (v, g) in inputs.into_iter().zip(down) {
                        accumulate(&mut grads, v, g);
                    }
                }
            }
        }
        grads
    }
}

fn accumulate(grads: &mut HashMap<Val, Tensor<3>>, v: Val, g: Tensor<3>) {
    let g = match grads.remove(&v) {
        Some(prev) => prev + g,
        None => g,
    };
    grads.insert(v, g);
}
