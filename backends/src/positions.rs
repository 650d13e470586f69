//! Where a rank's tokens sit in their rows.
//!
//! A context-parallel rank holds some positions of every row of its microbatch, in its own
//! order. Under the row layout (Megatron's BSHD split) every row gives it the same positions;
//! under TransformerEngine's THD layout each row's padded documents are cut separately, so each
//! row gives it its own. One type holds both, so the masks, RoPE, dropout's streams, the
//! router's token bookkeeping and the traces' reassembly read positions one way.

/// Per row, the absolute positions a rank holds, in its local order. Every row holds the same
/// number; `shared` when every row's are the same list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Positions {
    /// One list for every row, or one per row.
    lists: Vec<Vec<usize>>,
}

impl Positions {
    /// The same positions in every row.
    pub fn shared(positions: Vec<usize>) -> Self {
        Self {
            lists: vec![positions],
        }
    }

    /// Each row's own positions (one list when they are all the same).
    pub fn per_row(mut lists: Vec<Vec<usize>>) -> Self {
        debug_assert!(lists.windows(2).all(|w| w[0].len() == w[1].len()));
        if lists.windows(2).all(|w| w[0] == w[1]) {
            lists.truncate(1);
        }
        Self { lists }
    }

    /// Row `r`'s positions.
    pub fn row(&self, r: usize) -> &[usize] {
        if self.lists.len() == 1 {
            &self.lists[0]
        } else {
            &self.lists[r]
        }
    }

    /// One list for every row ([`Positions::row`]), or one per row: what the masks, RoPE
    /// tables and dropout blocks take.
    pub fn lists(&self) -> &[Vec<usize>] {
        &self.lists
    }

    /// The same list in every row, if it is.
    pub fn common(&self) -> Option<&[usize]> {
        (self.lists.len() == 1).then(|| self.lists[0].as_slice())
    }

    /// Positions per row.
    pub fn len(&self) -> usize {
        self.lists[0].len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The position of token `t` of a row-major [rows, len] block.
    pub fn at(&self, t: usize) -> usize {
        let n = self.len();
        self.row(t / n)[t % n]
    }

    /// Each row's entries `range` (a sequence-parallel rank's share of the local order).
    pub fn narrow(&self, range: std::ops::Range<usize>) -> Self {
        Self {
            lists: self
                .lists
                .iter()
                .map(|l| l[range.clone()].to_vec())
                .collect(),
        }
    }
}

/// Row `r`'s list of a one-or-per-row set ([`Positions::lists`]).
pub fn of_row(lists: &[Vec<usize>], r: usize) -> &[usize] {
    if lists.len() == 1 {
        &lists[0]
    } else {
        &lists[r]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_share_a_list_or_hold_their_own() {
        let same = Positions::per_row(vec![vec![0, 3], vec![0, 3]]);
        assert_eq!(same.common(), Some(&[0, 3][..]));
        let own = Positions::per_row(vec![vec![0, 3], vec![1, 2]]);
        assert_eq!(own.common(), None);
        assert_eq!((own.at(1), own.at(2), own.at(3)), (3, 1, 2));
        assert_eq!(own.narrow(1..2).lists(), &[vec![3], vec![2]]);
    }
}
