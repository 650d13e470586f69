//! How each kind of mesh axis is decoded (the `kind` column of `mesh_axes!`).

use crate::decode::{Ctx, Keyword, Table};
use crate::source::Located;

/// A degree or count: a positive integer.
pub fn degree(t: &mut Table<'_, '_>, cx: &mut Ctx<'_>, key: &'static str) -> Option<Located<u32>> {
    t.positive(cx, key)
}

/// A ZeRO stage: an integer from 0 to 3.
pub fn zero_stage(
    t: &mut Table<'_, '_>,
    cx: &mut Ctx<'_>,
    key: &'static str,
) -> Option<Located<u32>> {
    let n = t.u64(cx, key)?;
    if n.value > 3 {
        cx.error(
            crate::diagnostic::Diagnostic::error(
                &n.loc,
                format!("`{}.{key}` must be 0, 1, 2 or 3, found {}", t.path, n.value),
            )
            .label("not a ZeRO stage")
            .help("0: replicated; 1: optimizer state sharded; 2: gradients too; 3: parameters too (FSDP)"),
        );
        return None;
    }
    Some(Located::new(n.value as u32, n.loc))
}

pub fn flag(t: &mut Table<'_, '_>, cx: &mut Ctx<'_>, key: &'static str) -> Option<Located<bool>> {
    t.bool(cx, key)
}

pub fn keyword<K: Keyword>(
    t: &mut Table<'_, '_>,
    cx: &mut Ctx<'_>,
    key: &'static str,
) -> Option<Located<K>> {
    t.keyword::<K>(cx, key)
}
