//! SIGINT and SIGTERM as a counter the scheduler and executors watch: 1 ends running jobs
//! gracefully, 2 ends them now.
//!
//! The runner counts them from its first moment ([`count_from_now`]), not only once the
//! scheduler's runtime is up: a Ctrl-C during spec loading or run-directory setup used to end
//! the process with the default action, before any report was written.

use std::sync::atomic::{AtomicU8, Ordering};

use tokio::sync::watch;

/// Signals received so far, counted by the handler [`count_from_now`] installs.
static RECEIVED: AtomicU8 = AtomicU8::new(0);

extern "C" fn count(_: libc::c_int) {
    // An atomic add is async-signal-safe.
    let _ = RECEIVED.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
        Some(c.saturating_add(1))
    });
}

/// Count SIGINT/SIGTERM from now on instead of dying of them. Tokio's handlers, registered
/// later by [`watch`], keep this one in the chain.
pub fn count_from_now() {
    // SAFETY: installing a handler that only touches an atomic.
    unsafe {
        libc::signal(libc::SIGINT, count as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, count as *const () as libc::sighandler_t);
    }
}

/// Signals counted before the scheduler was watching.
pub fn received() -> u8 {
    RECEIVED.load(Ordering::SeqCst)
}

/// Count every SIGINT/SIGTERM into `cancel`, until the task is aborted.
pub async fn watch(cancel: watch::Sender<u8>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    // What arrived before the streams existed.
    let early = received();
    if early > 0 {
        cancel.send_modify(|c| *c = (*c).max(early));
    }
    loop {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        cancel.send_modify(|c| *c = c.saturating_add(1));
    }
}
