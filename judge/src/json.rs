//! Numbers as results files hold them: serde_json writes NaN and the infinities as `null`, and
//! these read them back as what they were (a ratio past every limit, a diverged loss).

use serde::{Deserialize, Deserializer};

/// A number that JSON wrote as `null` (serde_json's NaN and infinities) reads back as +inf:
/// a ratio or value past every limit.
pub(crate) fn number_or_inf<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// Losses JSON wrote as `null` (a diverged step) read back as NaN.
pub(crate) fn numbers_or_nan<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    Ok(Vec::<Option<f64>>::deserialize(d)?
        .into_iter()
        .map(|x| x.unwrap_or(f64::NAN))
        .collect())
}
