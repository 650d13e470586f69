//! A job's memory in base (4 KiB) pages, not transparent huge pages.
//!
//! The allocator asks the kernel for huge pages on its arenas (mimalloc's `madvise`), and the
//! kernel then zeroes 2 MiB at the first touch of any byte of one, even when the job uses a
//! few KiB of it (the allocator's free lists touch every block of a fresh page). A training
//! job's memory is used once per process, so that zeroing was most of its system time: the
//! hidden-512 4-mesh run (2 cores) spent 6.5–7.7 s CPU in the kernel with huge pages and
//! 3.6–3.8 s without, its GEMMs no slower (user time the same; docs/engines.md).
//!
//! Per process and inherited by children, so the worker sets it only for jobs that compute in
//! the worker itself (the built-in engine's runs, every judge): never in the runner, nor for a
//! run that launches a user's program, whose memory is its own business.

use std::sync::Once;

/// Fault this process's memory in base pages from now on (Linux; elsewhere nothing).
pub fn base_pages_only() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        #[cfg(target_os = "linux")]
        // SAFETY: prctl(PR_SET_THP_DISABLE) sets a flag of this process; it touches no memory
        // of ours. A kernel without it returns an error, which leaves huge pages as they were.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
        }
    });
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn the_process_stops_using_huge_pages() {
        super::base_pages_only();
        // SAFETY: as above; PR_GET_THP_DISABLE reads the flag.
        let disabled = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(disabled, 1);
    }
}
