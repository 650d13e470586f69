//! A job's localization as the HTML report shows it ([`meshparity_judge::locate`]).

use serde::Serialize;

use crate::chars::clean;

/// A localization as the HTML shows it: the site path highlighted, and the last values
/// compared up to it (all are in results.json).
#[derive(Serialize)]
pub struct DivergenceView {
    pub at: String,
    pub site: String,
    pub what: String,
    pub reading: String,
    /// The likely cause, with its evidence; empty when none was tested.
    pub cause: String,
    /// (traced value, relative L2, error-analysis bound) of the last values compared.
    pub before: Vec<(String, String, String)>,
}

/// Values of the per-site table shown before the divergence.
const SITES_SHOWN: usize = 8;

pub(crate) fn divergence(l: &meshparity_judge::Localization) -> DivergenceView {
    let before = l.sites[l.sites.len().saturating_sub(SITES_SHOWN)..]
        .iter()
        .map(|s| {
            (
                clean(&s.key),
                format!("{:.2e}", s.relative_l2),
                s.bound.map_or_else(String::new, |b| format!("{b:.1e}")),
            )
        })
        .collect();
    let Some(f) = &l.first else {
        return DivergenceView {
            at: String::new(),
            site: String::new(),
            what: clean(&l.summary()),
            reading: String::new(),
            cause: String::new(),
            before,
        };
    };
    let mut at = format!("step {}", f.step);
    if let (Some(r), Some(m)) = (f.replica, f.microbatch) {
        at += &format!(", microbatch {m} (replica {r})");
    }
    at += &format!(", {}", f.phase);
    let copy = f.copy.map(|c| format!(", copy {c}")).unwrap_or_default();
    DivergenceView {
        at: clean(&at),
        site: clean(&f.site),
        what: clean(&format!("{}{copy}", f.what)),
        reading: format!(
            "{} {:.2e} > {:.0e}",
            f.metric.replace('_', " "),
            f.value,
            f.limit
        ),
        cause: l
            .cause
            .as_ref()
            .map(|c| clean(&c.summary()))
            .unwrap_or_default(),
        before,
    }
}
