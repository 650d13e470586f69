//! The last stage's head: final norm, vocab-parallel output projection and vocab-parallel
//! cross-entropy (Megatron's: all-reduce of the max, of Σ exp and of the target logit), with
//! label smoothing's uniform share over the whole vocabulary (all-reduce of Σ z) and the z-loss
//! from the all-reduced normalizer. A vocabulary not divisible by tp is padded (Megatron's
//! `make_vocab_size_divisible_by`): the padding's logits are masked out of the softmax and the
//! smoothing share, as if the rows did not exist.

use burn::tensor::{Int, Tensor, TensorData};

use super::ctx::StageCtx;
use crate::data::IGNORE;
use crate::llama::layers::{linear, rms_norm};
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::tape::{Conj, Tape, Val};
use crate::parallel::context::Local;
use crate::parallel::topology::Layout;

/// The logits the cross-entropy reads, and where their columns sit in the vocabulary.
#[derive(Clone, Copy)]
struct Scored {
    /// Columns per rank.
    width: usize,
    /// Whether each rank holds every column: the logits gathered over TP before the loss (the
    /// catalogued bug; Megatron's GPT hands them out so with `parallel_output = False`).
    gathered: bool,
}

impl Scored {
    /// The vocabulary index of TP rank `t`'s first column: what its columns are.
    fn first_column(self, t: usize) -> usize {
        if self.gathered {
            0
        } else {
            t * self.width
        }
    }

    /// Where the cross-entropy takes TP rank `t`'s columns to start (Megatron's
    /// `vocab_start_index`, `t · width`): where they do, unless the logits were gathered.
    fn range_start(self, t: usize) -> usize {
        t * self.width
    }
}

/// One rank's loss terms, on the host.
struct RankTerms {
    sumexp: Vec<f64>,
    picked: Vec<f64>,
    shift: Vec<f64>,
    uniform: Option<Vec<f64>>,
}

impl RankTerms {
    /// Σ over counted tokens of lse − (1 − ε)·z_label − ε/V · Σ_j z_j + w·lse², in f64.
    fn loss(&self, targets: &[i64], ctx: &StageCtx<'_>, vocab: usize) -> f64 {
        let (eps, w) = (ctx.loss.label_smoothing, ctx.loss.z_loss);
        let mut total = 0.0;
        for (t, _) in targets.iter().enumerate().filter(|(_, &l)| l != IGNORE) {
            let log_sum = self.sumexp[t].ln();
            let mut ce = log_sum - self.picked[t];
            if let Some(u) = &self.uniform {
                ce += eps * self.picked[t] - u[t] * (eps / vocab as f64);
            }
            if w > 0.0 {
                ce += w * (log_sum + self.shift[t]).powi(2);
            }
            total += ce;
        }
        total
    }
}

fn host<const D: usize>(t: Tensor<D>) -> Vec<f64> {
    let data = t.into_data().convert::<f64>();
    data.try_to_vec::<f64>().expect("float data")
}

impl StageCtx<'_> {
    /// Final norm, vocab-parallel output projection and vocab-parallel cross-entropy. Returns
    /// the logits and loss per rank, and each rank's loss in f64
    /// ([`StageOut::rank_losses`](super::stage::StageOut::rank_losses)). `prefix` names the
    /// norm weight and the sites: "" for the model's head, "mtp." for the MTP layer's (its own
    /// norm, the shared output weight, its labels in `locals`).
    pub(super) fn head(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        locals: &[Local],
        x: Vec<Val>,
        normalizers: &[f64],
        prefix: &str,
    ) -> (Vec<Val>, Vec<Val>, Vec<f64>) {
        let hn = tape.per_rank(self.ranks(), &[&x], |i, v| {
            rms_norm(v[0].clone(), self.w(i, &format!("{prefix}norm.weight")))
        });
        let site = |s: &str| format!("{prefix}{s}");
        let hn = tape.collective(comm, self.enter(), &site("output.in"), self.ranks(), &hn);
        let logits = tape.per_rank(self.ranks(), &[&hn], |i, v| {
            // Tied: the rank's vocabulary block of the embedding, transposed, is its block of
            // the output head.
            let head = if self.model.tied() {
                self.w(i, "embed.weight").transpose()
            } else {
                self.w(i, "output.weight")
            };
            linear(v[0].clone(), head)
        });
        let (scored, view) = if self.policies.loss.gathers_logits_before_loss {
            let all = Conj::GatherFromTp(2);
            let gathered =
                tape.collective(comm, all, &site("output.gather"), self.ranks(), &logits);
            comm.event(
                &site("output.gather"),
                "logits gathered before the vocab-parallel loss",
            );
            let width = self.vocab_block() * self.tp();
            (
                gathered,
                Scored {
                    width,
                    gathered: true,
                },
            )
        } else {
            let width = self.vocab_block();
            (
                logits.clone(),
                Scored {
                    width,
                    gathered: false,
                },
            )
        };
        let how = (view, prefix);
        let (loss, exact) = self.cross_entropy(tape, comm, locals, &scored, how, normalizers);
        (logits, loss, exact)
    }

    /// Megatron's vocab-parallel cross-entropy over each rank's columns: all-reduce of the max,
    /// of Σ exp, of the target logit and (label smoothing) of Σ z; each rank computes the loss
    /// from the sums, so the ranks of a TP group agree to the bit.
    fn cross_entropy(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        locals: &[Local],
        scored: &[Val],
        (view, prefix): (Scored, &str),
        normalizers: &[f64],
    ) -> (Vec<Val>, Vec<f64>) {
        let g = self.groups();
        let site = |s: &str| format!("{prefix}{s}");
        let pad = self.padding_mask(view);
        let padded = self.vocab_block() * self.tp() > self.model.vocab as usize;
        if padded && self.policies.loss.leaves_vocab_padding_unmasked {
            comm.event(
                &site("loss.sumexp"),
                "vocabulary padding left in the softmax",
            );
        }
        let masked = tape.per_rank(self.ranks(), &[scored], |i, v| match &pad[i] {
            Some((bias, _)) => v[0].clone() + bias.clone(),
            None => v[0].clone(),
        });
        let maxes: Vec<Tensor<3>> = masked.iter().map(|&v| tape.value(v).max_dim(2)).collect();
        let shift = Layout::each(&g.tp_groups(), self.ranks(), maxes, |r, p| {
            comm.all_reduce_max(&site("loss.max.fwd.all_reduce_max"), r, p)
        });
        let sumexp = tape.per_rank(self.ranks(), &[&masked], |i, v| {
            (v[0].clone() - shift[i].clone()).exp().sum_dim(2)
        });
        let picked = self.target_logits(tape, locals, scored, &shift, view);
        let reduce = Conj::ReduceFromTp;
        let sumexp = tape.collective(comm, reduce, &site("loss.sumexp"), self.ranks(), &sumexp);
        let picked = tape.collective(comm, reduce, &site("loss.target"), self.ranks(), &picked);
        let uniform = self.uniform_share(tape, comm, scored, &shift, (&pad, prefix));
        let mut inputs: Vec<&[Val]> = vec![&sumexp, &picked];
        if let Some(u) = &uniform {
            inputs.push(u);
        }
        // Label smoothing's divisor: the whole vocabulary, or (the bug) the rank's own block.
        let local = self.policies.loss.smooths_over_local_vocab;
        let vocab = if local {
            view.width
        } else {
            self.model.vocab as usize
        };
        let (eps, w) = (self.loss.label_smoothing, self.loss.z_loss);
        let loss = tape.per_rank(self.ranks(), &inputs, |i, v| {
            let c = g.local_of(i);
            let mb = &locals[c].batch;
            let keep: Vec<f64> = mb
                .targets
                .iter()
                .map(|&t| f64::from(u8::from(t != IGNORE)))
                .collect();
            let keep = self.constant(keep, [mb.batch, mb.seq_len, 1]);
            let log_sum = v[0].clone().log();
            let mut ce = log_sum.clone() - v[1].clone();
            if let Some(sum) = v.get(2) {
                // lse − (1 − ε)·z_label − ε/V · Σ_j z_j, every z shifted by the same max.
                ce = ce + v[1].clone() * eps - sum.clone() * (eps / vocab as f64);
            }
            if w > 0.0 {
                // The z-loss: the unshifted normalizer log Σ exp z = log Σ exp(z − max) + max.
                ce = ce + (log_sum + shift[i].clone()).powi_scalar(2) * w;
            }
            ((ce * keep).sum() / normalizers[c]).reshape([1, 1, 1])
        });
        let exact = (0..self.ranks().len())
            .map(|i| {
                let c = g.local_of(i);
                let terms = RankTerms {
                    sumexp: host(tape.value(sumexp[i])),
                    picked: host(tape.value(picked[i])),
                    shift: host(shift[i].clone()),
                    uniform: uniform.as_ref().map(|u| host(tape.value(u[i]))),
                };
                terms.loss(&locals[c].batch.targets, self, vocab) / normalizers[c]
            })
            .collect();
        (loss, exact)
    }

    /// Each rank's target logit, shifted by the max, where the target falls in the range the
    /// rank's columns are taken for (0 elsewhere and for ignored tokens).
    fn target_logits(
        &self,
        tape: &mut Tape,
        locals: &[Local],
        scored: &[Val],
        shift: &[Tensor<3>],
        view: Scored,
    ) -> Vec<Val> {
        let g = self.groups();
        let width = view.width;
        tape.per_rank(self.ranks(), &[scored], |i, v| {
            let mb = &locals[g.local_of(i)].batch;
            let (b, s) = (mb.batch, mb.seq_len);
            let start = view.range_start(i % g.tp) as i64;
            let local: Vec<i64> = mb
                .targets
                .iter()
                .map(|&t| (t - start).clamp(0, width as i64 - 1))
                .collect();
            let keep: Vec<f64> = mb
                .targets
                .iter()
                .map(|&t| {
                    f64::from(u8::from(
                        t != IGNORE && (start..start + width as i64).contains(&t),
                    ))
                })
                .collect();
            let idx = Tensor::<2, Int>::from_data(TensorData::new(local, [b * s, 1]), self.device);
            let z = (v[0].clone() - shift[i].clone()).reshape([b * s, width]);
            (z.gather(1, idx) * self.constant(keep, [b * s, 1])).reshape([b, s, 1])
        })
    }

    /// Label smoothing's uniform share: Σ_j over the whole vocabulary of the shifted logits,
    /// each rank's block summed and all-reduced over TP (`loss.smooth`, the reduce the
    /// Megatron bug leaves out); `None` without smoothing.
    fn uniform_share(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        scored: &[Val],
        shift: &[Tensor<3>],
        (pad, prefix): (&[Option<(Tensor<3>, Tensor<3>)>], &str),
    ) -> Option<Vec<Val>> {
        if self.loss.label_smoothing <= 0.0 {
            return None;
        }
        let sums = tape.per_rank(self.ranks(), &[scored], |i, v| {
            let z = v[0].clone() - shift[i].clone();
            match &pad[i] {
                Some((_, keep)) => (z * keep.clone()).sum_dim(2),
                None => z.sum_dim(2),
            }
        });
        let site = format!("{prefix}loss.smooth");
        Some(tape.collective(comm, Conj::ReduceFromTp, &site, self.ranks(), &sums))
    }

    /// For each rank whose columns run past the vocabulary: a bias of −∞ on the padding's
    /// logits (0 elsewhere) that takes them out of the max and Σ exp, and a 0/1 keep mask that
    /// takes them out of label smoothing's Σ z. `None` for a rank without padding, and for
    /// every rank when the padding is left unmasked (the catalogued bug).
    fn padding_mask(&self, view: Scored) -> Vec<Option<(Tensor<3>, Tensor<3>)>> {
        let (g, vocab, width) = (self.groups(), self.model.vocab as usize, view.width);
        let unmasked = self.policies.loss.leaves_vocab_padding_unmasked;
        (0..self.ranks().len())
            .map(|i| {
                let valid = vocab.saturating_sub(view.first_column(i % g.tp)).min(width);
                (valid < width && !unmasked).then(|| {
                    let keep: Vec<f64> =
                        (0..width).map(|j| f64::from(u8::from(j < valid))).collect();
                    let bias = keep
                        .iter()
                        .map(|&k| if k > 0.0 { 0.0 } else { f64::NEG_INFINITY })
                        .collect();
                    (
                        self.constant(bias, [1, 1, width]),
                        self.constant(keep, [1, 1, width]),
                    )
                })
            })
            .collect()
    }
}
