//! The routing artifact (`routing.safetensors`) a moe engine writes for the `routing` level:
//! per layer `layers.N.experts` ([B·S, k] i64, best first) and `layers.N.scores` ([B·S, E]
//! f64), and `real` ([B·S] i64: 1 for a token inside its sequence's length, shaped [B, S];
//! padding is routed but not checked); optionally `microbatch` (`[B]` i64: each row's
//! microbatch; without it the batch is one microbatch).
//! The helpers read and write its integer and float tensors, naming the file and tensor when
//! one has the wrong dtype.

use std::path::Path;

use indexmap::IndexMap;
use meshparity_compare::InputError;
use meshparity_compare::TensorDtype;

use crate::HostTensor;

/// The routing artifact from per-layer choices and scores; `real` row-major over `rows`
/// sequences; `microbatch`, where given, each row's microbatch.
pub fn artifact(
    layers: &[(Vec<Vec<usize>>, Vec<f64>)],
    real: &[bool],
    rows: usize,
    microbatch: Option<&[usize]>,
) -> IndexMap<String, HostTensor> {
    let mut out = IndexMap::new();
    let t = real.len();
    for (l, (choices, scores)) in layers.iter().enumerate() {
        let k = choices.first().map_or(0, Vec::len);
        let ids: Vec<i64> = choices.iter().flatten().map(|&e| e as i64).collect();
        out.insert(format!("layers.{l}.experts"), int_tensor(&ids, vec![t, k]));
        let e = scores.len() / t.max(1);
        out.insert(
            format!("layers.{l}.scores"),
            HostTensor {
                dtype: TensorDtype::F64,
                shape: vec![t, e],
                bytes: scores.iter().flat_map(|x| x.to_le_bytes()).collect(),
            },
        );
    }
    let real: Vec<i64> = real.iter().map(|&r| i64::from(r)).collect();
    out.insert(
        "real".into(),
        int_tensor(&real, vec![rows, t / rows.max(1)]),
    );
    if let Some(m) = microbatch {
        let m: Vec<i64> = m.iter().map(|&x| x as i64).collect();
        out.insert("microbatch".into(), int_tensor(&m, vec![m.len()]));
    }
    out
}

pub fn int_tensor(v: &[i64], shape: Vec<usize>) -> HostTensor {
    HostTensor {
        dtype: TensorDtype::I64,
        shape,
        bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

/// An i64 tensor's values, or an error naming the file and tensor (a program that writes i32
/// ids, say, must hear so rather than have its bytes misread).
pub fn ints(path: &Path, name: &str, t: &HostTensor) -> Result<Vec<i64>, InputError> {
    typed(path, name, t, TensorDtype::I64, "i64")?;
    Ok(t.bytes
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

/// An f64 (or f32, widened) tensor's values, or an error naming the file and tensor.
pub fn floats(path: &Path, name: &str, t: &HostTensor) -> Result<Vec<f64>, InputError> {
    if t.dtype == TensorDtype::F32 {
        return Ok(t
            .bytes
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().expect("4 bytes"))))
            .collect());
    }
    typed(path, name, t, TensorDtype::F64, "f64 or f32")?;
    Ok(t.bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

fn typed(
    path: &Path,
    name: &str,
    t: &HostTensor,
    want: TensorDtype,
    what: &str,
) -> Result<(), InputError> {
    if t.dtype == want {
        return Ok(());
    }
    Err(InputError::Other {
        path: path.to_path_buf(),
        reason: format!(
            "routing tensor `{name}` is {:?}; it must be {what}",
            t.dtype
        ),
    })
}
