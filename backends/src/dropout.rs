//! Dropout masks as a function of where they act.
//!
//! A rank's random stream cannot be the oracle's: world size 1 draws one mask over the whole
//! activation, a mesh draws pieces of it on many ranks. So a mask element is not the next draw
//! of a generator but a hash of (seed, step, layer, site, *global* coordinates) — the
//! offset-based design of torch DTensor's `OffsetBasedRNGTracker`, where each shard reads its
//! block of one global Philox stream. A rank that asks for the right coordinates gets exactly
//! the oracle's mask; which coordinates a rank asks for is the tracker's (the parallel side's
//! `rng.rs`), and that is what the catalogued bugs break.

use crate::positions::of_row;
use burn::tensor::{DType, Device, Tensor, TensorData};
use meshparity_specs::Training;

/// Where a mask acts: its tag in the hash, so the masks of different sites are independent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// The attention probabilities, [rows, heads, queries, keys].
    Attention = 1,
    /// The attention block's output before the residual add, [rows, positions, hidden].
    AttnResidual = 2,
    /// The MLP block's output before the residual add, [rows, positions, hidden].
    MlpResidual = 3,
}

/// One step's dropout: the probabilities and what the masks are drawn from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    pub attention: f64,
    pub hidden: f64,
    seed: u64,
    step: u64,
}

/// The coordinates of one block of a mask, each axis as the global indices it covers. The
/// sequence axes may differ from row to row (a context-parallel rank's positions under the
/// per-document layout): `queries` and `keys` are one list for every row or one per row.
pub struct Block<'a> {
    pub rows: &'a [usize],
    pub heads: &'a [usize],
    pub queries: &'a [Vec<usize>],
    pub keys: &'a [Vec<usize>],
}

impl Dropout {
    /// The dropout of training step `step` of a run, `None` when the run drops nothing.
    pub fn of(t: &Training, step: usize) -> Option<Self> {
        let d = t.dropout.filter(|d| d.attention > 0.0 || d.hidden > 0.0)?;
        Some(Self {
            attention: d.attention,
            hidden: d.hidden,
            seed: t.seed,
            step: step as u64,
        })
    }

    /// The probability at `site`.
    pub fn p(&self, site: Site) -> f64 {
        match site {
            Site::Attention => self.attention,
            Site::AttnResidual | Site::MlpResidual => self.hidden,
        }
    }

    /// Whether `site` drops anything.
    pub fn acts(this: Option<&Self>, site: Site) -> bool {
        this.is_some_and(|d| d.p(site) > 0.0)
    }

    /// The multipliers (0, or 1/(1 − p) for a kept element) of layer `l`'s `site` over `block`,
    /// row-major in the axes' order: [rows, heads, queries, keys] for attention, [rows,
    /// positions (`queries`), hidden (`keys`)] for a residual branch (`heads` empty there).
    /// `salt` is 0 for every correct stream; only a catalogued bug's forked stream sets it.
    pub fn mask(&self, site: Site, l: u32, block: &Block<'_>, salt: u64) -> Vec<f64> {
        let p = self.p(site);
        let scale = 1.0 / (1.0 - p);
        let base = mix(mix(mix(mix(self.seed ^ SALT) ^ self.step) ^ site as u64) ^ u64::from(l));
        let base = if salt == 0 { base } else { mix(base ^ salt) };
        let heads: &[usize] = if block.heads.is_empty() {
            &[0]
        } else {
            block.heads
        };
        let n = block.rows.len() * heads.len() * block.queries[0].len() * block.keys[0].len();
        let mut out = Vec::with_capacity(n);
        for (j, &r) in block.rows.iter().enumerate() {
            let hr = mix(base ^ r as u64);
            let (queries, keys) = (of_row(block.queries, j), of_row(block.keys, j));
            for &h in heads {
                let hh = mix(hr ^ h as u64);
                for &q in queries {
                    let hq = mix(hh ^ q as u64);
                    out.extend(keys.iter().map(|&k| {
                        let u = (mix(hq ^ k as u64) >> 11) as f64 / (1u64 << 53) as f64;
                        if u < p {
                            0.0
                        } else {
                            scale
                        }
                    }));
                }
            }
        }
        out
    }
}

impl Block<'_> {
    /// The block's shape: [rows, heads, queries, keys], or [rows, queries, keys] without heads.
    fn dims(&self) -> Vec<usize> {
        let mut dims = vec![self.rows.len()];
        if !self.heads.is_empty() {
            dims.push(self.heads.len());
        }
        dims.extend([self.queries[0].len(), self.keys[0].len()]);
        dims
    }
}

impl Dropout {
    /// [`Dropout::mask`] as a tensor of the block's shape (`D` its axes: 4 with heads, else 3).
    pub fn keep<const D: usize>(
        &self,
        site: Site,
        l: u32,
        block: &Block<'_>,
        salt: u64,
        on: (&Device, DType),
    ) -> Tensor<D> {
        let dims: [usize; D] = block.dims().try_into().expect("the block has D axes");
        Tensor::<D>::from_data(TensorData::new(self.mask(site, l, block, salt), dims), on)
    }
}

/// Keeps dropout's hashes apart from every other use of the seed.
const SALT: u64 = 0xD809_0A7E_5EED_0001;

/// splitmix64's finalizer: a bijection of u64 that mixes every bit into every other.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dropout(p: f64) -> Dropout {
        Dropout {
            attention: p,
            hidden: p,
            seed: 7,
            step: 3,
        }
    }

    fn block<'a>(
        rows: &'a [usize],
        queries: &'a [Vec<usize>],
        keys: &'a [Vec<usize>],
    ) -> Block<'a> {
        Block {
            rows,
            heads: &[],
            queries,
            keys,
        }
    }

    #[test]
    fn a_block_is_the_whole_masks_block() {
        let d = dropout(0.3);
        let all = [(0..8).collect::<Vec<usize>>()];
        let whole = d.mask(Site::MlpResidual, 1, &block(&[0, 1], &all, &all), 0);
        let half = [all[0][4..].to_vec()];
        let part = d.mask(Site::MlpResidual, 1, &block(&[1], &half, &all), 0);
        assert_eq!(part, whole[64 + 32..].to_vec());
        // Per-row positions draw each row's own block of the same mask.
        let own = [vec![0, 1], vec![6, 7]];
        let rows = d.mask(Site::MlpResidual, 1, &block(&[0, 1], &own, &all), 0);
        assert_eq!(rows[..16], whole[..16]);
        assert_eq!(rows[16..], whole[64 + 48..]);
    }

    #[test]
    fn masks_keep_one_minus_p_and_scale_what_they_keep() {
        let d = dropout(0.25);
        let all = [(0..200).collect::<Vec<usize>>()];
        let m = d.mask(Site::Attention, 0, &block(&[0], &all, &all), 0);
        let kept = m.iter().filter(|&&v| v > 0.0).count() as f64 / m.len() as f64;
        assert!((kept - 0.75).abs() < 0.01, "{kept}");
        assert!(m
            .iter()
            .all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-15));
    }

    #[test]
    fn sites_layers_steps_and_salts_draw_apart() {
        let d = dropout(0.5);
        let all = [(0..16).collect::<Vec<usize>>()];
        let b = block(&[0], &all, &all);
        let m = d.mask(Site::AttnResidual, 0, &b, 0);
        assert_ne!(m, d.mask(Site::MlpResidual, 0, &b, 0));
        assert_ne!(m, d.mask(Site::AttnResidual, 1, &b, 0));
        assert_ne!(m, d.mask(Site::AttnResidual, 0, &b, 1));
        let later = Dropout { step: 4, ..d };
        assert_ne!(m, later.mask(Site::AttnResidual, 0, &b, 0));
    }
}
