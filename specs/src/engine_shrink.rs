//! `[engines.NAME.shrink]`: which of a command engine's values `run`'s shrink may lower, and
//! to what floor. The built-in engine shrinks any size down to what its shapes allow; a user's
//! program may need a minimum (a head count its attention kernel supports, a depth its
//! pipeline split needs), and only the program's author knows it, so nothing of a command
//! engine shrinks unless named here.

use crate::decode::{Ctx, Table};
use crate::diagnostic::Diagnostic;
use crate::Located;

/// The values a command engine may let shrink: the model's sizes, the run's length and batch,
/// and the mesh's degrees.
pub const SHRINKABLE: [&str; 17] = [
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn",
    "vocab",
    "seq_len",
    "experts",
    "batch",
    "steps",
    "dp",
    "tp",
    "pp",
    "cp",
    "ep",
    "etp",
    "microbatches",
];

/// The floors of the values that may shrink.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShrinkFloors {
    pub floors: Vec<(&'static str, Located<u32>)>,
}

impl ShrinkFloors {
    /// The lowest `key` may go, `None` when it may not shrink.
    pub fn floor(&self, key: &str) -> Option<u32> {
        self.floors
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.value)
    }
}

/// `[engines.NAME.shrink]` as written, `None` when absent (nothing shrinks).
pub fn decode(cx: &mut Ctx<'_>, t: &mut Table<'_, '_>, engine: &str) -> Option<ShrinkFloors> {
    let value = t.get("shrink")?;
    let mut table = Table::from_value(cx, value, format!("engines.{engine}.shrink"))?;
    let empty = table.is_empty();
    let floors: Vec<(&'static str, Located<u32>)> = SHRINKABLE
        .iter()
        .filter_map(|key| table.positive(cx, key).map(|v| (*key, v)))
        .collect();
    if empty {
        cx.error(
            Diagnostic::error(
                &table.loc,
                format!("`engines.{engine}.shrink` names no value"),
            )
            .help(format!(
                "name each value the program can run smaller and its floor, e.g. `layers = 1, \
                 hidden = 16`; these may shrink: {}",
                SHRINKABLE.join(", ")
            )),
        );
    }
    table.finish(cx);
    Some(ShrinkFloors { floors })
}
