//! Activation recompute on the tape (Megatron's `--recompute-granularity`, torch's
//! `checkpoint`): a span of a stage's forward runs on a tape of its own whose graphs and values
//! are dropped as soon as its outputs are read, so the stage holds only the span's inputs and
//! outputs until backward; backward runs the span's forward again from the inputs and
//! backpropagates that. The forward's run builds no graph at all (torch's `no_grad` in
//! Megatron's `CheckpointFunction.forward`): burn frees a dropped graph only at the next
//! `backward()`, so a graph built and dropped would still be held. Dropout's masks are a function
//! of where they act, so the re-run draws the forward's masks — what restoring the random state does — unless a bug says otherwise.

use burn::tensor::Tensor;

use super::collective::Comm;
use super::tape::{Node, Tape, Val};
pub use super::tape::{Rerun, Rerunner, Span};

impl Span {
    pub fn layer(self) -> u32 {
        match self {
            Span::Attention(l) | Span::CoreAttention(l) | Span::Mlp(l) => l,
        }
    }
}

impl Rerun {
    /// Run `f` on a fresh tape whose inputs hold `values` (a graph-free one where `tracked` is
    /// false: the forward's run, which keeps nothing).
    pub fn run(
        values: Vec<Tensor<3>>,
        tracked: bool,
        f: impl FnOnce(&mut Tape, &[Val]) -> Vec<Val>,
    ) -> Self {
        let mut tape = if tracked {
            Tape::new()
        } else {
            Tape::untracked()
        };
        let inputs: Vec<Val> = values.into_iter().map(|t| tape.input(t)).collect();
        let outputs = f(&mut tape, &inputs);
        Self {
            tape,
            inputs,
            outputs,
        }
    }
}

/// The rerunner of a tape that recomputes nothing.
pub fn no_rerun(_: &mut Comm, span: Span, _: Vec<Tensor<3>>) -> Rerun {
    unreachable!("{span:?} was recorded as recomputed on a tape with no rerunner")
}

impl Tape {
    /// `span`'s forward on its own tape (`run`), of which this tape keeps only the outputs'
    /// values; backward re-runs it.
    pub fn recomputed(
        &mut self,
        span: Span,
        inputs: &[Val],
        run: impl FnOnce(Vec<Tensor<3>>) -> Rerun,
    ) -> Vec<Val> {
        let values = inputs.iter().map(|&v| self.value(v)).collect();
        let first = run(values);
        let outputs: Vec<Val> = first
            .outputs
            .iter()
            .map(|&v| self.input(first.tape.value(v)))
            .collect();
        self.nodes.push(Node::Recomputed {
            span,
            inputs: inputs.to_vec(),
            outputs: outputs.clone(),
        });
        outputs
    }
}
