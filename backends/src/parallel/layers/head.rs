//! The last stage's head: final norm, vocab-parallel output projection and vocab-parallel
//! cross-entropy (Megatron's: all-reduce of the max, of Σ exp and of the target logit), with
//! label smoothing's uniform share over the whole vocabulary (all-reduce of Σ z).

use burn::tensor::{Int, Tensor, TensorData};

use super::ctx::StageCtx;
use crate::data::IGNORE;
use crate::llama::layers::{linear, rms_norm};
use crate::parallel::comm::collective::Comm;
use crate::parallel::comm::tape::{Conj, Tape, Val};
use crate::parallel::context::Local;
use crate::parallel::topology::Layout;

/// One rank's loss terms, on the host.
struct RankTerms {
    sumexp: Vec<f64>,
    picked: Vec<f64>,
    uniform: Option<Vec<f64>>,
}

impl RankTerms {
    /// Σ over counted tokens of lse − (1 − ε)·z_label − ε/V · Σ_j z_j, in f64.
    fn loss(&self, targets: &[i64], eps: f64, vocab: usize) -> f64 {
        let mut total = 0.0;
        for (t, _) in targets.iter().enumerate().filter(|(_, &l)| l != IGNORE) {
            let mut ce = self.sumexp[t].ln() - self.picked[t];
            if let Some(u) = &self.uniform {
                ce += eps * self.picked[t] - u[t] * (eps / vocab as f64);
            }
            total += ce;
        }
        total
    }
}

fn host(tape: &Tape, v: Val) -> Vec<f64> {
    let data = tape.value(v).into_data().convert::<f64>();
    data.try_to_vec::<f64>().expect("float data")
}

impl StageCtx<'_> {
    /// Final norm, vocab-parallel output projection and vocab-parallel cross-entropy (Megatron's:
    /// all-reduce of the max, of Σ exp and of the target logit, and with label smoothing of
    /// Σ z). Returns the logits and loss per rank, and each rank's loss in f64
    /// ([`StageOut::rank_losses`](super::stage::StageOut::rank_losses)).
    pub(super) fn head(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        locals: &[Local],
        x: Vec<Val>,
        normalizers: &[f64],
    ) -> (Vec<Val>, Vec<Val>, Vec<f64>) {
        let (g, block) = (self.groups(), self.model.vocab as usize / self.tp());
        let hn = tape.per_rank(self.ranks(), &[&x], |i, v| {
            rms_norm(v[0].clone(), self.w(i, "norm.weight"))
        });
        let hn = tape.collective(comm, self.enter(), "output.in", self.ranks(), &hn);
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
        let maxes: Vec<Tensor<3>> = logits.iter().map(|&v| tape.value(v).max_dim(2)).collect();
        let shift = Layout::each(&g.tp_groups(), self.ranks(), maxes, |r, p| {
            comm.all_reduce_max("loss.max.fwd.all_reduce_max", r, p)
        });
        let sumexp = tape.per_rank(self.ranks(), &[&logits], |i, v| {
            (v[0].clone() - shift[i].clone()).exp().sum_dim(2)
        });
        let picked = tape.per_rank(self.ranks(), &[&logits], |i, v| {
            let mb = &locals[g.local_of(i)].batch;
            let (b, s) = (mb.batch, mb.seq_len);
            let start = (i % g.tp * block) as i64;
            let local: Vec<i64> = mb
                .targets
                .iter()
                .map(|&t| (t - start).clamp(0, block as i64 - 1))
                .collect();
            let keep: Vec<f64> = mb
                .targets
                .iter()
                .map(|&t| {
                    f64::from(u8::from(
                        t != IGNORE && (start..start + block as i64).contains(&t),
                    ))
                })
                .collect();
            let idx = Tensor::<2, Int>::from_data(TensorData::new(local, [b * s, 1]), self.device);
            let z = (v[0].clone() - shift[i].clone()).reshape([b * s, block]);
            (z.gather(1, idx) * self.constant(keep, [b * s, 1])).reshape([b, s, 1])
        });
        let sumexp = tape.collective(
            comm,
            Conj::ReduceFromTp,
            "loss.sumexp",
            self.ranks(),
            &sumexp,
        );
        let picked = tape.collective(
            comm,
            Conj::ReduceFromTp,
            "loss.target",
            self.ranks(),
            &picked,
        );
        let uniform = self.uniform_share(tape, comm, &logits, &shift);
        let mut inputs: Vec<&[Val]> = vec![&sumexp, &picked];
        if let Some(u) = &uniform {
            inputs.push(u);
        }
        // Label smoothing's divisor: the whole vocabulary, or (the bug) the rank's own block.
        let local = self.fault.is_some_and(|f| f.smooths_over_local_vocab());
        let vocab = if local {
            block
        } else {
            self.model.vocab as usize
        };
        let eps = self.label_smoothing;
        let loss = tape.per_rank(self.ranks(), &inputs, |i, v| {
            let c = g.local_of(i);
            let mb = &locals[c].batch;
            let keep: Vec<f64> = mb
                .targets
                .iter()
                .map(|&t| f64::from(u8::from(t != IGNORE)))
                .collect();
            let keep = self.constant(keep, [mb.batch, mb.seq_len, 1]);
            let mut ce = v[0].clone().log() - v[1].clone();
            if let Some(sum) = v.get(2) {
                // lse − (1 − ε)·z_label − ε/V · Σ_j z_j, every z shifted by the same max.
                ce = ce + v[1].clone() * eps - sum.clone() * (eps / vocab as f64);
            }
            ((ce * keep).sum() / normalizers[c]).reshape([1, 1, 1])
        });
        let exact = (0..self.ranks().len())
            .map(|i| {
                let c = g.local_of(i);
                let terms = RankTerms {
                    sumexp: host(tape, sumexp[i]),
                    picked: host(tape, picked[i]),
                    uniform: uniform.as_ref().map(|u| host(tape, u[i])),
                };
                terms.loss(&locals[c].batch.targets, eps, vocab) / normalizers[c]
            })
            .collect();
        (logits, loss, exact)
    }

    /// Label smoothing's uniform share: Σ_j over the whole vocabulary of the shifted logits,
    /// each rank's block summed and all-reduced over TP (`loss.smooth`, the reduce the
    /// Megatron bug leaves out); `None` without smoothing.
    fn uniform_share(
        &self,
        tape: &mut Tape,
        comm: &mut Comm,
        logits: &[Val],
        shift: &[Tensor<3>],
    ) -> Option<Vec<Val>> {
        if self.label_smoothing <= 0.0 {
            return None;
        }
        let sums = tape.per_rank(self.ranks(), &[logits], |i, v| {
            (v[0].clone() - shift[i].clone()).sum_dim(2)
        });
        Some(tape.collective(comm, Conj::ReduceFromTp, "loss.smooth", self.ranks(), &sums))
    }
}
