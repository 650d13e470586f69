//! How many jobs a spec plans, bounded before the plan is built.
//!
//! A spec whose matrix multiplies out to ten million jobs planned for 89 s and then aborted on
//! an allocation. The count is known from the matrix alone, so it is checked first: a plan
//! over the cap (`--max-jobs`, default [`MAX_JOBS`]) is refused with the count and what to do.

use meshparity_specs::Spec;

/// The most jobs a run (or `plan`) builds unless `--max-jobs` says otherwise.
pub const MAX_JOBS: u64 = 1_000_000;

/// An upper bound on the jobs `spec` plans: per cell its reference, its training, a job per
/// level, and a job per mutation that may apply there (the planner keeps those that do);
/// every job again per variant beyond the first.
pub fn estimate(spec: &Spec) -> u64 {
    let variants = spec.variants.len().max(1) as u64;
    let per_cell = |c: &meshparity_specs::expand::Cell<'_>| -> u64 {
        let mutations = if c.mutations {
            let engine = spec
                .engine_of(&c.model.config())
                .map_or(0, |e| e.mutations.len());
            (spec.mutations.selected.len() + engine) as u64
        } else {
            0
        };
        2 + c.levels.len() as u64 + mutations
    };
    spec.cells()
        .iter()
        .map(per_cell)
        .fold(0u64, u64::saturating_add)
        .saturating_mul(variants)
}

/// Why a plan was not built.
#[derive(Debug, thiserror::Error)]
#[error(
    "this spec plans up to {jobs} jobs, over the cap of {cap}: narrow its [[matrix]] or \
     [mutations], or raise the cap with --max-jobs"
)]
pub struct TooLarge {
    pub jobs: u64,
    pub cap: u64,
}

/// `Err` when `spec` plans more than `cap` jobs.
pub fn check(spec: &Spec, cap: u64) -> Result<(), TooLarge> {
    let jobs = estimate(spec);
    if jobs > cap {
        return Err(TooLarge { jobs, cap });
    }
    Ok(())
}
