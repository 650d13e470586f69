//! SIGINT and SIGTERM as a counter the scheduler and executors watch: 1 ends running jobs
//! gracefully, 2 ends them now.

use tokio::sync::watch;

/// Count every SIGINT/SIGTERM into `cancel`, until the task is aborted.
pub async fn watch(cancel: watch::Sender<u8>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    loop {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        cancel.send_modify(|c| *c = c.saturating_add(1));
    }
}
