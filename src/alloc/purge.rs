//! mimalloc's purge delay: how long freed memory stays with the process. Its own file so that
//! tests/verdicts.rs, whose in-process sweeps use the same allocator, includes this one
//! definition (`#[path]`) instead of repeating the option's number.

use libmimalloc_sys::{mi_option_set, mi_option_t};

/// `mi_option_purge_delay` in mimalloc 3's `mi_option_e` (include/mimalloc.h): milliseconds
/// before freed memory is returned; -1 never. The Rust bindings do not name it.
pub const PURGE_DELAY: mi_option_t = 15;

/// Keep freed memory for the rest of the process.
pub fn keep_freed_memory() {
    // SAFETY: setting an option is a plain store mimalloc reads on its next purge.
    unsafe { mi_option_set(PURGE_DELAY, -1) }
}
