//! What keeps the experts' loads in bounds, decided on the host from routing: the capacity
//! factor's drops (per sequence, so every layout drops the same slots) and the score-correction
//! bias's update (from the load over the whole global batch). See `moe.rs` for the model.

use crate::positions::Positions;
pub use meshparity_specs::moe::BIAS_UPDATE_RATE;
use meshparity_specs::DropPolicy;

use super::moe::{counts, Choice};

/// One routed (token, slot) pair competing for its expert's capacity.
#[derive(Clone, Copy, Debug)]
pub struct Pair {
    /// The pair's sequence (row of the batch) and the token's position in it.
    pub row: usize,
    pub position: usize,
    pub slot: usize,
    pub expert: usize,
    /// Its (renormalized) routing weight, what the `probs` policy ranks by.
    pub weight: f64,
}

/// Which pairs their experts keep: per sequence s with T_s real tokens among `pairs` (a
/// position below the row's length in `lengths`), each expert keeps at most ⌈factor·k·T_s/E⌉
/// of the pairs routed to it — the highest weights (`probs`; ties to the earlier position, then
/// slot) or the earliest positions (`position`). Pairs of padding tokens are kept and do not
/// count. Given a whole sequence's pairs T_s is its length; given a rank's share (the
/// catalogued per-rank bug), the share's real tokens.
pub fn capacity(
    pairs: &[Pair],
    lengths: &[usize],
    (experts, k): (usize, usize),
    (factor, policy): (f64, DropPolicy),
) -> Vec<bool> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut kept = vec![true; pairs.len()];
    let mut groups: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
    let mut real: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for (i, p) in pairs.iter().enumerate() {
        if p.position < lengths[p.row] {
            groups.entry((p.row, p.expert)).or_default().push(i);
            real.entry(p.row).or_default().insert(p.position);
        }
    }
    for ((row, _), mut members) in groups {
        let tokens = real.get(&row).map_or(0, BTreeSet::len);
        let cap = (factor * (k * tokens) as f64 / experts as f64).ceil() as usize;
        let order = |&a: &usize, &b: &usize| {
            let (x, y) = (&pairs[a], &pairs[b]);
            let by_place = x.position.cmp(&y.position).then(x.slot.cmp(&y.slot));
            match policy {
                DropPolicy::Probs => y.weight.total_cmp(&x.weight).then(by_place),
                DropPolicy::Position => by_place,
            }
        };
        members.sort_by(order);
        for &i in members.iter().skip(cap) {
            kept[i] = false;
        }
    }
    kept
}

/// The slots kept, per token, of `choices` over `rows` rows of positions `positions` with
/// their slot `weights` ([T·k] token-major), under `cap`.
pub fn kept_slots(
    choices: &[Choice],
    weights: &[f64],
    (rows, positions): (usize, &Positions),
    lengths: &[usize],
    experts: usize,
    cap: (f64, DropPolicy),
) -> Vec<Vec<bool>> {
    let k = choices.first().map_or(0, Vec::len);
    let per_row = choices.len() / rows.max(1);
    let pairs: Vec<Pair> = choices
        .iter()
        .enumerate()
        .flat_map(|(t, c)| {
            c.iter().enumerate().map(move |(j, &e)| Pair {
                row: t / per_row,
                position: positions.at(t),
                slot: j,
                expert: e,
                weight: weights[t * k + j],
            })
        })
        .collect();
    let kept = capacity(&pairs, lengths, (experts, k), cap);
    kept.chunks(k.max(1)).map(<[bool]>::to_vec).collect()
}

/// A layer's score-correction bias after one step with these per-expert loads (tokens routed to
/// each expert over the global batch): b_e += rate·sign(mean − load_e), sign(0) = 0.
pub fn update_bias(bias: &[f64], load: &[f64]) -> Vec<f64> {
    let mean = load.iter().sum::<f64>() / load.len().max(1) as f64;
    bias.iter()
        .zip(load)
        .map(|(b, l)| {
            let d = mean - l;
            let sign = if d > 0.0 {
                1.0
            } else if d < 0.0 {
                -1.0
            } else {
                0.0
            };
            b + BIAS_UPDATE_RATE * sign
        })
        .collect()
}

/// Tokens routed to each expert over the real tokens of `rows` rows (the score-correction
/// bias's load): [`counts`] summed over the rows.
pub fn load(
    choices: &[Choice],
    rows: usize,
    positions: &Positions,
    lengths: &[usize],
    experts: usize,
) -> Vec<f64> {
    let per_row = counts(choices, rows, positions, lengths, experts);
    (0..experts)
        .map(|x| per_row.iter().skip(x).step_by(experts).sum())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(row: usize, position: usize, slot: usize, expert: usize, weight: f64) -> Pair {
        Pair {
            row,
            position,
            slot,
            expert,
            weight,
        }
    }

    #[test]
    fn capacity_keeps_the_best_or_the_earliest_per_sequence_and_expert() {
        // One sequence of 4 real tokens, k = 1, 2 experts, factor 0.5: ⌈0.5·4/2⌉ = 1 per expert.
        let pairs = [
            pair(0, 0, 0, 0, 0.6),
            pair(0, 1, 0, 0, 0.9),
            pair(0, 2, 0, 1, 0.7),
            pair(0, 3, 0, 0, 0.9),
        ];
        let probs = capacity(&pairs, &[4], (2, 1), (0.5, DropPolicy::Probs));
        // Expert 0: 0.9 at position 1 wins the tie with position 3.
        assert_eq!(probs, vec![false, true, true, false]);
        let position = capacity(&pairs, &[4], (2, 1), (0.5, DropPolicy::Position));
        assert_eq!(position, vec![true, false, true, false]);
        // A second sequence has its own capacity; padding (position ≥ length) is kept.
        let more = [
            pair(1, 0, 0, 0, 0.1),
            pair(1, 1, 0, 0, 0.2),
            pair(1, 3, 0, 0, 0.9),
        ];
        let kept = capacity(&more, &[4, 2], (2, 1), (0.5, DropPolicy::Probs));
        assert_eq!(kept, vec![false, true, true]);
    }

    #[test]
    fn the_bias_moves_each_expert_towards_the_mean_load() {
        let b = update_bias(&[0.0, 0.5, -0.5], &[3.0, 1.0, 2.0]);
        assert_eq!(b, vec![-BIAS_UPDATE_RATE, 0.5 + BIAS_UPDATE_RATE, -0.5]);
    }
}
