//! The job's compute threads: as many as the CPU slots the runner gave it.
//!
//! Every job process would otherwise size its thread pool (rayon's, which burn's CPU kernels and
//! the comparisons use) to every core, so two one-slot jobs side by side ran four busy threads
//! on two cores and each GEMM's threads waited on the other job's. Sized to the job's slots,
//! the hidden-512 4-mesh run does the same work in less time (docs/engines.md).

/// The variable that sizes rayon's pool; a user who set it keeps their setting.
const RAYON_NUM_THREADS: &str = "RAYON_NUM_THREADS";

/// Size this process's pool to `slots` threads, before anything has used it. A worker started
/// by hand (no slots) or a `RAYON_NUM_THREADS` already set keeps rayon's default.
pub fn size_pool(slots: Option<usize>) {
    let Some(n) = threads(slots, std::env::var_os(RAYON_NUM_THREADS).is_some()) else {
        return;
    };
    // Fails only if the pool already exists (nothing in a worker has used it yet); the default
    // pool then stays, which computes the same results.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global();
}

/// The pool size to set, if any.
fn threads(slots: Option<usize>, user_set: bool) -> Option<usize> {
    slots.filter(|n| *n > 0 && !user_set)
}

#[cfg(test)]
mod tests {
    use super::threads;

    #[test]
    fn the_slots_size_the_pool_unless_the_user_did() {
        assert_eq!(threads(Some(2), false), Some(2));
        assert_eq!(threads(Some(2), true), None);
        assert_eq!(threads(None, false), None);
        assert_eq!(threads(Some(0), false), None);
    }
}
