//! The process heap's live and peak bytes, where the binary's allocator counts them: a job's
//! memory figure (what a training step held at its peak) is measured, not estimated.
//!
//! [`Counting`] wraps the process's allocator and keeps two atomics up to date once
//! [`enable`]d: the bytes live now and the most live since [`reset_peak`], in allocations of
//! [`COUNTED_FROM`] bytes or more (tensors; the small ones are too many to count cheaply). Counting is off until
//! a process asks for it — the worker, which runs one job and so can attribute its heap to
//! it — so in-process sweeps (`calibrate`, tests) pay one relaxed load per allocation and report
//! no figure ([`live`] is `None`).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

static ENABLED: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// An allocator that counts what `A` hands out while counting is on.
pub struct Counting<A>(pub A);

// SAFETY: every call is forwarded to `A` unchanged; the counters only observe sizes.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { self.0.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrank(layout.size());
            grew(new_size);
        }
        p
    }
}

/// Allocations smaller than this are not counted: a training step makes millions of small ones
/// (shapes, names, graph nodes) and counting each on shared atomics cost 7–50 % of a run
/// (`backends/benches/heap.rs`); tensors, which are what a step holds, are larger.
pub const COUNTED_FROM: usize = 4096;

fn grew(n: usize) {
    if n >= COUNTED_FROM && ENABLED.load(Relaxed) {
        let live = LIVE.fetch_add(n, Relaxed) + n;
        PEAK.fetch_max(live, Relaxed);
    }
}

fn shrank(n: usize) {
    if n >= COUNTED_FROM && ENABLED.load(Relaxed) {
        // Memory allocated before counting began may be freed after: saturate at zero.
        let _ = LIVE.fetch_update(Relaxed, Relaxed, |l| Some(l.saturating_sub(n)));
    }
}

/// Start counting (the worker, before its job runs). Counts start at zero: what was allocated
/// before is not seen, and a figure is a difference of two readings.
pub fn enable() {
    ENABLED.store(true, Relaxed);
}

/// Stop counting (the overhead bench's other arm: `backends/benches/heap.rs`).
pub fn disable() {
    ENABLED.store(false, Relaxed);
}

/// Bytes live now, `None` where nothing counts.
pub fn live() -> Option<usize> {
    ENABLED.load(Relaxed).then(|| LIVE.load(Relaxed))
}

/// Restart the peak from the bytes live now.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Relaxed), Relaxed);
}

/// The most bytes live since [`reset_peak`], `None` where nothing counts.
pub fn peak() -> Option<usize> {
    ENABLED.load(Relaxed).then(|| PEAK.load(Relaxed))
}
