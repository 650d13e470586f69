//! Lining two checkpoints up before they are compared, where the user says how: candidate
//! names renamed by prefix (`--rename model.=` for a checkpoint saved with a wrapper's
//! prefix) and tensors whose dtypes differ cast to one dtype (`--cast f32` for a run saved in
//! bf16 against an f32 reference). Without these, every such tensor is a structural problem —
//! correctly, since nothing says the two are meant to match — and the report lists each.

use std::collections::HashMap;

use crate::agreement::decode;
use crate::checkpoint::Checkpoint;
use crate::dtype::TensorDtype;
use crate::options::TensorOptions;
pub use crate::options::{OptionError, Rename};
use crate::report::{problem, Problem, ProblemKind};
use crate::safetensors::TensorView;
use crate::tolerance::TensorLimits;

/// One tensor of each side, to be compared under `limits`.
pub(crate) struct Pair<'a> {
    pub name: &'a str,
    pub a: TensorView<'a>,
    pub b: TensorView<'a>,
    pub limits: TensorLimits,
}

/// The dtype a `--cast` names: a float dtype.
pub fn parse_cast(s: &str) -> Result<TensorDtype, OptionError> {
    match TensorDtype::parse(&s.to_ascii_uppercase()) {
        Some(d) if d.is_float() => Ok(d),
        _ => Err(OptionError::Cast(s.to_owned())),
    }
}

/// How many significant bits a float dtype keeps: limits for a cast pair are those of the
/// coarser of its two dtypes, since that is the precision the values carry.
fn precision(d: TensorDtype) -> u8 {
    match d {
        TensorDtype::BF16 => 8,
        TensorDtype::F16 => 11,
        TensorDtype::F32 => 24,
        _ => 53,
    }
}

/// The coarser of two float dtypes.
pub fn coarser(a: TensorDtype, b: TensorDtype) -> TensorDtype {
    if precision(a) <= precision(b) {
        a
    } else {
        b
    }
}

/// `bytes` of dtype `from` as `to` (little-endian), or `None` for a dtype that is not a float.
pub fn cast(bytes: &[u8], from: TensorDtype, to: TensorDtype) -> Option<Vec<u8>> {
    if !from.is_float() || !to.is_float() {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / from.size() * to.size());
    for chunk in bytes.chunks_exact(from.size()) {
        let x = decode(from, chunk)?;
        match to {
            TensorDtype::F64 => out.extend(x.to_le_bytes()),
            TensorDtype::F32 => out.extend((x as f32).to_le_bytes()),
            TensorDtype::F16 => out.extend(half::f16::from_f64(x).to_le_bytes()),
            _ => out.extend(half::bf16::from_f64(x).to_le_bytes()),
        }
    }
    Some(out)
}

/// The usual cause of two shapes that differ in one dimension by a whole factor: a rank's shard
/// written as the whole tensor (the candidate's dimension a k-th of the reference's), or
/// copies concatenated (k times it). `None` for any other difference. Every tool that meets a
/// shape mismatch says this, and no value-level cause is fitted to tensors that cannot line up.
pub fn shape_hint(reference: &[usize], candidate: &[usize]) -> Option<String> {
    if reference.len() != candidate.len() {
        return None;
    }
    let differ: Vec<usize> = (0..reference.len())
        .filter(|&d| reference[d] != candidate[d])
        .collect();
    let [d] = differ[..] else {
        return None;
    };
    let (r, c) = (reference[d], candidate[d]);
    if c > 0 && r > c && r % c == 0 {
        Some(format!(
            "dimension {d} is 1/{} of the reference's: a rank's shard written as the whole \
             tensor (gather it over the {} ranks that split it before writing)",
            r / c,
            r / c
        ))
    } else if r > 0 && c > r && c % r == 0 {
        Some(format!(
            "dimension {d} is {}× the reference's: copies of the tensor concatenated (gathered \
             over ranks that hold it whole, or written once per rank)",
            c / r
        ))
    } else {
        None
    }
}

/// A tensor pair converted to the `--cast` dtype: the bytes the pair's views borrow.
pub(crate) struct Cast<'a> {
    /// Position among the reference's tensors, to keep the report in checkpoint order.
    index: usize,
    name: &'a str,
    shape: Vec<usize>,
    /// The coarser of the two original dtypes, whose limits apply.
    limits_dtype: TensorDtype,
    reference: Vec<u8>,
    candidate: Vec<u8>,
}

/// What lining the two checkpoints up found: pairs to compare (by reference position), pairs
/// converted by `--cast` (whose bytes the caller keeps), structural problems and notes.
pub(crate) struct Lined<'a> {
    pub pairs: Vec<(usize, Pair<'a>)>,
    pub casts: Vec<Cast<'a>>,
    pub problems: Vec<Problem>,
    pub notes: Vec<String>,
}

/// Match the reference's tensors to the candidate's by name (after `--rename`), checking dtype
/// and shape (converting with `--cast` where asked); every mismatch is a structural problem.
pub(crate) fn line_up<'a>(a: &'a Checkpoint, b: &'a Checkpoint, opts: &TensorOptions) -> Lined<'a> {
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let mut pairs = Vec::new();
    // The candidate's names as the reference's would be (`--rename`), to its own names.
    let candidate: HashMap<String, &str> = b
        .names()
        .map(|n| {
            (
                Rename::apply(&opts.rename, n).unwrap_or_else(|| n.to_owned()),
                n,
            )
        })
        .collect();
    let renamed = b
        .names()
        .filter(|n| Rename::apply(&opts.rename, n).is_some())
        .count();
    if renamed > 0 {
        notes.push(format!(
            "{renamed} candidate tensor name(s) renamed by --rename before matching"
        ));
    }
    // Tensors compared in the `--cast` dtype: their converted bytes, kept here for the views.
    let mut casts: Vec<Cast<'_>> = Vec::new();
    for (index, name) in a.names().enumerate() {
        let va = a.view(name).expect("listed names have views");
        let Some(vb) = candidate.get(name).and_then(|n| b.view(n)) else {
            problems.push(problem(
                ProblemKind::Missing,
                name,
                format!("`{name}` is missing from the candidate"),
            ));
            continue;
        };
        let cast_to = opts
            .cast
            .filter(|_| va.dtype != vb.dtype && va.shape == vb.shape);
        if let Some(to) = cast_to {
            if let (Some(x), Some(y)) = (cast(va.bytes, va.dtype, to), cast(vb.bytes, vb.dtype, to))
            {
                casts.push(Cast {
                    index,
                    name,
                    shape: va.shape.to_vec(),
                    limits_dtype: coarser(va.dtype, vb.dtype),
                    reference: x,
                    candidate: y,
                });
                continue;
            }
        }
        match mismatch(name, &va, &vb) {
            Some(p) => problems.push(p),
            None => {
                let limits = opts.tolerance.for_tensor(name, va.dtype);
                pairs.push((
                    index,
                    Pair {
                        name,
                        a: va,
                        b: vb,
                        limits,
                    },
                ));
            }
        }
    }
    problems.extend(extras(a, &candidate));
    Lined {
        pairs,
        casts,
        problems,
        notes,
    }
}

/// The candidate's tensors the reference lacks (by their renamed names), sorted.
fn extras(a: &Checkpoint, candidate: &HashMap<String, &str>) -> Vec<Problem> {
    let mut extra: Vec<&str> = candidate
        .iter()
        .filter(|(mapped, _)| !a.contains(mapped))
        .map(|(_, original)| *original)
        .collect();
    extra.sort();
    extra
        .into_iter()
        .map(|name| {
            problem(
                ProblemKind::Extra,
                name,
                format!("`{name}` is in the candidate but not in the reference"),
            )
        })
        .collect()
}

/// Why tensors `name` of the two sides cannot be compared element by element: a dtype or a
/// shape that differs (with a hint at how the shapes relate).
fn mismatch(name: &str, va: &TensorView<'_>, vb: &TensorView<'_>) -> Option<Problem> {
    if va.dtype != vb.dtype {
        return Some(problem(
            ProblemKind::DtypeMismatch,
            name,
            format!(
                "`{name}`: dtype {} in the reference, {} in the candidate",
                va.dtype, vb.dtype
            ),
        ));
    }
    (va.shape != vb.shape).then(|| {
        problem(
            ProblemKind::ShapeMismatch,
            name,
            format!(
                "`{name}`: shape {:?} in the reference, {:?} in the candidate{}",
                va.shape,
                vb.shape,
                shape_hint(va.shape, vb.shape)
                    .map(|h| format!(": {h}"))
                    .unwrap_or_default()
            ),
        )
    })
}

/// The pairs to compare in reference order, the `--cast` ones viewing `casts`' bytes.
pub(crate) fn with_casts<'a>(
    mut pairs: Vec<(usize, Pair<'a>)>,
    casts: &'a [Cast<'a>],
    opts: &TensorOptions,
    notes: &mut Vec<String>,
) -> Vec<Pair<'a>> {
    if let Some(to) = opts.cast.filter(|_| !casts.is_empty()) {
        notes.push(format!(
            "{} tensor(s) with different dtypes compared as {to} (--cast), with the limits of \
             the coarser dtype",
            casts.len()
        ));
    }
    for c in casts {
        let to = opts.cast.expect("casts only with --cast");
        let view = |bytes| TensorView {
            dtype: to,
            shape: c.shape.as_slice(),
            bytes,
        };
        pairs.push((
            c.index,
            Pair {
                name: c.name,
                a: view(&c.reference),
                b: view(&c.candidate),
                limits: opts.tolerance.for_tensor(c.name, c.limits_dtype),
            },
        ));
    }
    pairs.sort_by_key(|(i, _)| *i);
    pairs.into_iter().map(|(_, p)| p).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_and_casts() {
        let rules = [
            Rename::parse("model.=").unwrap(),
            Rename::parse("a=b").unwrap(),
        ];
        assert_eq!(
            Rename::apply(&rules, "model.layers.0.w").as_deref(),
            Some("layers.0.w")
        );
        assert_eq!(Rename::apply(&rules, "a.x").as_deref(), Some("b.x"));
        assert_eq!(Rename::apply(&rules, "c"), None);
        assert!(Rename::parse("nope").is_err());
        let bf16: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
            .collect();
        let f32s = cast(&bf16, TensorDtype::BF16, TensorDtype::F32).unwrap();
        assert_eq!(
            f32s,
            [1.5f32, -2.0]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<_>>()
        );
        assert_eq!(
            coarser(TensorDtype::F32, TensorDtype::BF16),
            TensorDtype::BF16
        );
        assert!(parse_cast("i32").is_err());
        assert_eq!(parse_cast("f32").unwrap(), TensorDtype::F32);
    }
}
