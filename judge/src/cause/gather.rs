//! The evidence a diagnosis reads, gathered from the two traces around the first diverging
//! entry.

use indexmap::IndexMap;

use super::{Evidence, Values};
use crate::site::Site;
use meshparity_engine::tensor::HostTensor;
use meshparity_engine::{TraceEntry, TraceIndex};

/// What the run and the reference hold around the first diverging entry `e`: every copy of
/// its value, the parts whose sum it is (traced at `{site}%`, for a collective's output at its
/// input's), and the reference's value at the other steps. `None` when a value does not decode.
pub(crate) fn gather<'a>(
    index: &TraceIndex,
    want: &IndexMap<String, HostTensor>,
    got: &IndexMap<String, HostTensor>,
    e: &TraceEntry,
    first: &'a Site,
    limit: f64,
) -> Option<Evidence<'a>> {
    let values = |t: &HostTensor| Values::of(t);
    let copies = index
        .entries
        .iter()
        .filter(|x| x.like == e.like && x.key.contains('@'))
        .filter_map(|x| got.get(&x.key).and_then(values))
        .collect();
    let summed = first
        .site
        .strip_suffix(".fwd.out")
        .map(|s| format!("{s}.fwd.in"))
        .or_else(|| {
            first
                .site
                .strip_suffix(".bwd.out")
                .map(|s| format!("{s}.bwd.in"))
        })
        .unwrap_or_else(|| first.site.clone());
    let parts_like = format!("s{}.{summed}%", first.step);
    let parts = index
        .entries
        .iter()
        .filter(|x| x.like == parts_like)
        .filter_map(|x| got.get(&x.key).and_then(values))
        .collect();
    let other_steps = (0..TRACED_STEPS_MAX)
        .filter(|&s| s != first.step)
        .filter_map(|s| Some((s, values(want.get(&format!("s{s}.{}", first.site))?)?)))
        .collect();
    Some(Evidence {
        site: &first.site,
        step: first.step,
        reference: values(want.get(&e.like)?)?,
        run: values(got.get(&e.key)?)?,
        copy: first.copy,
        copies,
        over: e.over.clone(),
        parts,
        other_steps,
        blocks: e.blocks,
        microbatches: index.microbatches,
        limit,
    })
}

/// Steps a trace's other-step values are looked for in (traces hold a few steps).
const TRACED_STEPS_MAX: usize = 16;
