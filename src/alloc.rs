//! The process's allocator: mimalloc, told never to hand freed memory back to the kernel.
//!
//! A training job allocates and frees its tensors, hundreds of MB, every step. With glibc's
//! malloc each large allocation was a fresh mapping that the kernel faulted in and zeroed
//! again (a hidden-512 llama's dp2 job: 512,000 page faults, 4.35 s); with mimalloc as it
//! comes, freed memory is still returned after a second and faulted back in (3.8 s); kept, the job
//! takes 3.3 s with 2,300 faults, and the 4-mesh run of that model 24.0 s → 21.2 s (2 cores).
//! A job is one process that ends when its run does, so memory kept is never memory lost; a
//! long in-process sweep (`calibrate`) keeps its peak and reuses it.

mod purge;

pub use purge::keep_freed_memory;

/// mimalloc, its live bytes counted where a worker asks (`meshparity_engine::heap`: a job's
/// memory figure).
#[global_allocator]
static GLOBAL: meshparity_engine::heap::Counting<mimalloc::MiMalloc> =
    meshparity_engine::heap::Counting(mimalloc::MiMalloc);

/// The purge delay in force (for the test that `PURGE_DELAY` names that option).
#[cfg(test)]
fn purge_delay() -> std::ffi::c_long {
    // SAFETY: reading an option has no precondition.
    unsafe { libmimalloc_sys::mi_option_get(purge::PURGE_DELAY) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_option_set_is_the_purge_delay() {
        // mimalloc 3's default purge delay is 1000 ms (src/options.c; unless the environment
        // overrides it); no neighbouring option defaults to 1000.
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(super::purge_delay(), 1000);
        }
        super::keep_freed_memory();
        assert_eq!(super::purge_delay(), -1);
    }
}
