//! The job's compute threads: as many as the CPU slots the runner gave it.
//!
//! Every job would otherwise compute on rayon's global pool (which burn's CPU kernels, gemm and
//! the comparisons use), sized to every core, so two one-slot jobs side by side ran four busy
//! threads on two cores and each GEMM's threads waited on the other job's. Sized to the job's
//! slots, the hidden-512 4-mesh run does the same work in less time (docs/engines.md).
//!
//! The job runs *inside* a pool of its size ([`ThreadPool::install`]) rather than sizing the
//! global pool, because a worker that serves many jobs (`meshparity serve`) runs jobs of
//! different slot counts one after another: each size's pool is built once and kept, so the
//! next job of that size starts on threads that already exist.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rayon::ThreadPool;

/// The variable that sizes rayon's pool; a user who set it keeps their setting.
const RAYON_NUM_THREADS: &str = "RAYON_NUM_THREADS";

/// The stack of a pool thread the job's own code runs on: the main thread's (8 MiB), which the
/// job ran on before it ran inside a pool. Address space only until touched.
const STACK_BYTES: usize = 8 << 20;

/// Run `f` on `slots` compute threads. A worker started by hand (no slots) or a
/// `RAYON_NUM_THREADS` already set computes on rayon's default pool.
pub fn within<T: Send>(slots: Option<usize>, f: impl FnOnce() -> T + Send) -> T {
    let Some(n) = threads(slots, std::env::var_os(RAYON_NUM_THREADS).is_some()) else {
        return f();
    };
    match pool(n) {
        Some(p) => p.install(f),
        // A pool that cannot be built (no threads left) computes the same on the default one.
        None => f(),
    }
}

/// This process's pool of `n` threads, built the first time a job asks for it.
fn pool(n: usize) -> Option<Arc<ThreadPool>> {
    static POOLS: Mutex<BTreeMap<usize, Arc<ThreadPool>>> = Mutex::new(BTreeMap::new());
    let mut pools = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pools.get(&n) {
        return Some(p.clone());
    }
    let p = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .stack_size(STACK_BYTES)
        .thread_name(move |i| format!("compute-{n}-{i}"))
        .build()
        .ok()?;
    Some(pools.entry(n).or_insert(Arc::new(p)).clone())
}

/// The pool size to set, if any.
fn threads(slots: Option<usize>, user_set: bool) -> Option<usize> {
    slots.filter(|n| *n > 0 && !user_set)
}

#[cfg(test)]
mod tests {
    use super::{threads, within};

    #[test]
    fn the_slots_size_the_pool_unless_the_user_did() {
        assert_eq!(threads(Some(2), false), Some(2));
        assert_eq!(threads(Some(2), true), None);
        assert_eq!(threads(None, false), None);
        assert_eq!(threads(Some(0), false), None);
    }

    #[test]
    fn jobs_of_different_sizes_compute_on_pools_of_their_sizes_kept_across_jobs() {
        if std::env::var_os(super::RAYON_NUM_THREADS).is_some() {
            return;
        }
        let one = within(Some(1), rayon::current_num_threads);
        let three = within(Some(3), rayon::current_num_threads);
        assert_eq!((one, three), (1, 3));
        // The second job of a size runs on the first one's threads.
        let name = || std::thread::current().name().map(str::to_owned);
        let (a, b) = (within(Some(1), name), within(Some(1), name));
        assert_eq!(a.as_deref(), Some("compute-1-0"));
        assert_eq!(a, b);
    }
}
