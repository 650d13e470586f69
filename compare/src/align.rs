//! Lining two checkpoints up before they are compared, where the user says how: candidate
//! names renamed by prefix (`--rename model.=` for a checkpoint saved with a wrapper's
//! prefix) and tensors whose dtypes differ cast to one dtype (`--cast f32` for a run saved in
//! bf16 against an f32 reference). Without these, every such tensor is a structural problem —
//! correctly, since nothing says the two are meant to match — and the report lists each.

use crate::agreement::decode;
use crate::dtype::TensorDtype;

/// `FROM=TO`: candidate names starting with FROM are compared as TO followed by the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rename {
    pub from: String,
    pub to: String,
}

impl Rename {
    pub fn parse(s: &str) -> Result<Rename, String> {
        let (from, to) = s
            .split_once('=')
            .ok_or_else(|| format!("`{s}`: a rename is FROM=TO (e.g. `model.=` drops `model.`)"))?;
        if from.is_empty() && to.is_empty() {
            return Err(format!("`{s}`: FROM and TO are both empty"));
        }
        Ok(Rename {
            from: from.to_owned(),
            to: to.to_owned(),
        })
    }

    /// `name` as the reference would call it (the first rule that applies), if one does.
    pub fn apply(rules: &[Rename], name: &str) -> Option<String> {
        rules.iter().find_map(|r| {
            name.strip_prefix(&r.from)
                .map(|rest| format!("{}{rest}", r.to))
        })
    }
}

/// The dtype a `--cast` names: a float dtype.
pub fn parse_cast(s: &str) -> Result<TensorDtype, String> {
    match TensorDtype::parse(&s.to_ascii_uppercase()) {
        Some(d) if d.is_float() => Ok(d),
        _ => Err(format!("`{s}`: cast to f64, f32, f16 or bf16")),
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
