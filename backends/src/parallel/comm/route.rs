//! Rows moved between ranks: the token all-to-all of expert parallelism, and the all-gather
//! and reduce-scatter of unequal blocks within an expert-TP group (Megatron's
//! `all_to_all(ep_group, …, output_splits, input_splits)` and its ETP gather/scatter with split
//! sizes).
//!
//! A [`Route`] says, for every output, which row ranges of which inputs land where; pieces that
//! land on the same rows are added (a reduce-scatter). Its transpose moves gradients back: the
//! all-to-all's is the reverse all-to-all, the all-gather's a reduce-scatter. Values are
//! [1, rows, H] with one zero row at the end, so that no rank's tensor is empty when no rows
//! reach it.

use std::ops::Range;

use burn::tensor::Tensor;

use super::collective::Comm;

/// Rows `rows` of input `src` (a group index) land at rows `at..` of an output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub src: usize,
    pub rows: Range<usize>,
    pub at: usize,
}

/// Where every output's rows come from.
#[derive(Clone, Debug, Default)]
pub struct Route {
    /// Per output (group index): its pieces.
    pub pieces: Vec<Vec<Piece>>,
    /// Per output: its rows, not counting the zero row at the end.
    pub lens: Vec<usize>,
}

impl Route {
    /// The route of gradients: every piece sent back where it came from, onto inputs of
    /// `input_lens` rows.
    pub fn transpose(&self, input_lens: &[usize]) -> Route {
        let mut pieces = vec![Vec::new(); input_lens.len()];
        for (j, out) in self.pieces.iter().enumerate() {
            for p in out {
                pieces[p.src].push(Piece {
                    src: j,
                    rows: p.at..p.at + p.rows.len(),
                    at: p.rows.start,
                });
            }
        }
        Route {
            pieces,
            lens: input_lens.to_vec(),
        }
    }

    /// Every output from `parts` (one per group index). Pieces on the same rows must cover the
    /// same rows (as in every route built here); they are added in input order.
    pub fn apply(&self, parts: &[Tensor<3>]) -> Vec<Tensor<3>> {
        let [_, _, h] = parts[0].dims();
        let (device, dtype) = (parts[0].device(), parts[0].dtype());
        let zeros = |n: usize| Tensor::<3>::zeros([1, n, h], (&device, dtype));
        self.pieces
            .iter()
            .zip(&self.lens)
            .map(|(pieces, &len)| {
                let mut spans: Vec<(usize, usize, Tensor<3>)> = Vec::new();
                for p in pieces.iter().filter(|p| !p.rows.is_empty()) {
                    let rows = parts[p.src].clone().narrow(1, p.rows.start, p.rows.len());
                    match spans.iter_mut().find(|(at, _, _)| *at == p.at) {
                        Some((_, n, sum)) => {
                            debug_assert_eq!(*n, p.rows.len(), "overlapping pieces differ");
                            *sum = sum.clone() + rows;
                        }
                        None => spans.push((p.at, p.rows.len(), rows)),
                    }
                }
                spans.sort_by_key(|(at, _, _)| *at);
                let mut blocks = Vec::with_capacity(2 * spans.len() + 1);
                let mut next = 0;
                for (at, n, t) in spans {
                    if at > next {
                        blocks.push(zeros(at - next));
                    }
                    blocks.push(t);
                    next = at + n;
                }
                blocks.push(zeros(len + 1 - next));
                Tensor::cat(blocks, 1)
            })
            .collect()
    }
}

/// A row exchange between a stage's ranks: what moves, and how it is logged.
pub struct Exchange {
    /// Logged as `{site}.fwd.{op}` and `{site}.bwd.{back_op}` on each group.
    pub site: String,
    pub op: &'static str,
    pub back_op: &'static str,
    /// Global ranks of the stage's group indices.
    pub ranks: Vec<usize>,
    /// The groups (of group indices) the rows move within.
    pub groups: Vec<Vec<usize>>,
    pub route: Route,
}

impl Exchange {
    pub(super) fn log(&self, comm: &mut Comm, dir: &str, op: &'static str) {
        for g in &self.groups {
            let ranks: Vec<usize> = g.iter().map(|&i| self.ranks[i]).collect();
            comm.exchange(&format!("{}.{dir}.{op}", self.site), op, &ranks);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    fn rows(v: &[f64]) -> Tensor<3> {
        let n = v.len();
        Tensor::<3>::from_data(TensorData::new(v.to_vec(), [1, n, 1]), &Default::default())
    }

    fn host(t: &Tensor<3>) -> Vec<f64> {
        t.clone()
            .into_data()
            .convert::<f64>()
            .try_to_vec::<f64>()
            .unwrap()
    }

    #[test]
    fn all_to_all_and_back() {
        // Two ranks: rank 0 sends rows 0..1 to itself, 1..3 to rank 1; rank 1 sends 0..2 to
        // rank 0 and 2..3 to itself (inputs carry their zero row).
        let parts = [rows(&[1.0, 2.0, 3.0, 0.0]), rows(&[4.0, 5.0, 6.0, 0.0])];
        let piece = |src, rows, at| Piece { src, rows, at };
        let route = Route {
            pieces: vec![
                vec![piece(0, 0..1, 0), piece(1, 0..2, 1)],
                vec![piece(0, 1..3, 0), piece(1, 2..3, 2)],
            ],
            lens: vec![3, 3],
        };
        let out = route.apply(&parts);
        assert_eq!(host(&out[0]), vec![1.0, 4.0, 5.0, 0.0]);
        assert_eq!(host(&out[1]), vec![2.0, 3.0, 6.0, 0.0]);
        let back = route.transpose(&[3, 3]).apply(&out);
        assert_eq!(host(&back[0]), host(&parts[0]));
        assert_eq!(host(&back[1]), host(&parts[1]));
    }

    #[test]
    fn reduce_scatter_adds_overlapping_pieces() {
        let parts = [rows(&[1.0, 2.0, 0.0]), rows(&[10.0, 20.0, 0.0])];
        let piece = |src, rows, at| Piece { src, rows, at };
        let route = Route {
            pieces: vec![
                vec![piece(0, 0..1, 0), piece(1, 0..1, 0)],
                vec![piece(0, 1..2, 0), piece(1, 1..2, 0)],
            ],
            lens: vec![1, 1],
        };
        let out = route.apply(&parts);
        assert_eq!(host(&out[0]), vec![11.0, 0.0]);
        assert_eq!(host(&out[1]), vec![22.0, 0.0]);
    }
}
