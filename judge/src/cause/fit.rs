//! The numeric fits the hypotheses use: a tensor as f64 values, relative distances, a scale,
//! a least-squares mix of parts, blocks along a dimension, shifts and row matchings. Each fit
//! returns its residual — the relative L2 of what the hypothesis leaves unexplained — so a
//! hypothesis is judged by the same measure localization uses.

use meshparity_compare::agreement::decode;

use meshparity_engine::tensor::HostTensor;

/// A traced value as f64.
#[derive(Clone, Debug, PartialEq)]
pub struct Values {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Values {
    /// `None` for a tensor whose bytes do not decode (not a float or integer dtype).
    pub fn of(t: &HostTensor) -> Option<Values> {
        let size = t.dtype.size();
        let data = t
            .bytes
            .chunks(size)
            .map(|b| decode(t.dtype, b))
            .collect::<Option<Vec<f64>>>()?;
        Some(Values {
            shape: t.shape.clone(),
            data,
        })
    }

    pub fn norm(&self) -> f64 {
        norm(&self.data)
    }

    /// `n` equal blocks along `dim`; `None` when `dim` does not divide into them.
    pub fn blocks(&self, dim: usize, n: usize) -> Option<Vec<Values>> {
        let len = *self.shape.get(dim)?;
        if n < 2 || len % n != 0 {
            return None;
        }
        let outer: usize = self.shape[..dim].iter().product();
        let inner: usize = self.shape[dim + 1..].iter().product();
        let part = len / n;
        Some(
            (0..n)
                .map(|i| {
                    let mut data = Vec::with_capacity(self.data.len() / n);
                    for o in 0..outer {
                        let row = o * len * inner;
                        data.extend_from_slice(
                            &self.data[row + i * part * inner..row + (i + 1) * part * inner],
                        );
                    }
                    let mut shape = self.shape.clone();
                    shape[dim] = part;
                    Values { shape, data }
                })
                .collect(),
        )
    }
}

pub fn norm(x: &[f64]) -> f64 {
    x.iter().map(|v| v * v).sum::<f64>().sqrt()
}

/// Relative L2 of `c` to the reference `r` (infinite when their lengths differ; absolute when
/// the reference is zero).
pub fn rel(c: &[f64], r: &[f64]) -> f64 {
    if c.len() != r.len() {
        return f64::INFINITY;
    }
    let d = c
        .iter()
        .zip(r)
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f64>()
        .sqrt();
    let n = norm(r);
    if n > 0.0 {
        d / n
    } else {
        d
    }
}

/// Element-wise sum of equal-length values.
pub fn sum(parts: &[&[f64]]) -> Vec<f64> {
    let mut out = vec![0.0; parts.first().map_or(0, |p| p.len())];
    for p in parts {
        for (o, v) in out.iter_mut().zip(p.iter()) {
            *o += v;
        }
    }
    out
}

/// The best `k` with `c ≈ k·r`, and its residual relative to `r`.
pub fn scale(c: &[f64], r: &[f64]) -> (f64, f64) {
    let rr: f64 = r.iter().map(|v| v * v).sum();
    if rr == 0.0 || c.len() != r.len() {
        return (f64::NAN, f64::INFINITY);
    }
    let k = c.iter().zip(r).map(|(a, b)| a * b).sum::<f64>() / rr;
    let d = c
        .iter()
        .zip(r)
        .map(|(a, b)| (a - k * b) * (a - k * b))
        .sum::<f64>()
        .sqrt();
    (k, d / rr.sqrt())
}

/// The weights `k` with `c ≈ Σ kᵢ·partᵢ` (least squares), and the residual relative to `r`.
pub fn mix(c: &[f64], parts: &[&[f64]], r: &[f64]) -> Option<(Vec<f64>, f64)> {
    let n = parts.len();
    if n == 0 || parts.iter().any(|p| p.len() != c.len()) {
        return None;
    }
    // Normal equations A k = b, A = PᵀP, b = Pᵀc, solved by Gaussian elimination.
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let mut a: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            let mut row: Vec<f64> = (0..n).map(|j| dot(parts[i], parts[j])).collect();
            row.push(dot(parts[i], c));
            row
        })
        .collect();
    for col in 0..n {
        let pivot = (col..n).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[pivot][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (i, row) in a.iter_mut().enumerate() {
            if i != col {
                let f = row[col] / pivot_row[col];
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    let k: Vec<f64> = (0..n).map(|i| a[i][n] / a[i][i]).collect();
    let mut fitted = vec![0.0; c.len()];
    for (p, w) in parts.iter().zip(&k) {
        for (f, v) in fitted.iter_mut().zip(p.iter()) {
            *f += w * v;
        }
    }
    let d = norm(
        &c.iter()
            .zip(&fitted)
            .map(|(a, b)| a - b)
            .collect::<Vec<_>>(),
    );
    Some((k, d / norm(r).max(f64::MIN_POSITIVE)))
}

/// Residual of `c[i] ≈ r[i + s]` over their overlap (the flattened values), relative to the
/// reference there; infinite when the overlap is under half the values.
pub fn shifted(c: &[f64], r: &[f64], s: isize) -> f64 {
    let n = c.len().min(r.len()) as isize;
    if s.unsigned_abs() as isize * 2 > n {
        return f64::INFINITY;
    }
    let (cs, rs) = if s >= 0 {
        (&c[..(n - s) as usize], &r[s as usize..n as usize])
    } else {
        (&c[(-s) as usize..n as usize], &r[..(n + s) as usize])
    };
    rel(cs, rs)
}

/// For each row of `c` (the last dimension's runs), the row of `r` it matches within `tol`
/// (relative L2), or `None` for a zero row; empty when some non-zero row matches no row of
/// `r` (then neither a permutation nor dropped rows explain `c`). The search stops at the
/// first such row, so a value that is simply wrong costs one pass over `r`, not one per row.
pub fn match_rows(c: &[f64], r: &[f64], cols: usize, tol: f64) -> Vec<Option<usize>> {
    if cols == 0 || c.len() != r.len() || !c.len().is_multiple_of(cols) {
        return Vec::new();
    }
    let rows: Vec<&[f64]> = r.chunks(cols).collect();
    let mut out = Vec::with_capacity(rows.len());
    for (i, row) in c.chunks(cols).enumerate() {
        // Its own row first: most rows of a partly wrong value are where they belong.
        if rel(row, rows[i]) <= tol {
            out.push(Some(i));
        } else if row.iter().all(|v| *v == 0.0) {
            out.push(None);
        } else {
            match rows
                .iter()
                .position(|x| norm(x) > 0.0 && rel(row, x) <= tol)
            {
                Some(j) => out.push(Some(j)),
                None => return Vec::new(),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_recover_what_was_done() {
        let r = [1.0, -2.0, 3.0, 0.5];
        let c: Vec<f64> = r.iter().map(|v| v * 0.5).collect();
        let (k, res) = scale(&c, &r);
        assert!((k - 0.5).abs() < 1e-12 && res < 1e-12);
        let (p, q) = ([1.0, 0.0, 1.0, 0.0], [0.0, -2.0, 2.0, 0.5]);
        let c: Vec<f64> = p.iter().zip(&q).map(|(a, b)| a + 0.5 * b).collect();
        let (k, res) = mix(&c, &[&p, &q], &r).unwrap();
        assert!((k[0] - 1.0).abs() < 1e-9 && (k[1] - 0.5).abs() < 1e-9 && res < 1e-9);
        assert!(shifted(&[2.0, 3.0, 4.0, 5.0], &[1.0, 2.0, 3.0, 4.0], 1) < 1e-12);
        let m = match_rows(&[3.0, 4.0, 1.0, 2.0], &[1.0, 2.0, 3.0, 4.0], 2, 1e-9);
        assert_eq!(m, vec![Some(1), Some(0)]);
        let m = match_rows(&[0.0, 0.0, 3.0, 4.0], &[1.0, 2.0, 3.0, 4.0], 2, 1e-9);
        assert_eq!(m, vec![None, Some(1)]);
        assert!(match_rows(&[5.0, 6.0, 3.0, 4.0], &[1.0, 2.0, 3.0, 4.0], 2, 1e-9).is_empty());
        let v = Values {
            shape: vec![2, 4],
            data: (0..8).map(f64::from).collect(),
        };
        let b = v.blocks(1, 2).unwrap();
        assert_eq!(b[1].data, vec![2.0, 3.0, 6.0, 7.0]);
    }
}
