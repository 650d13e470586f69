//! The local executor: each attempt a child process group on this machine (see `child.rs`).

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;

use super::{Done, Executor, Launch};
use crate::exec::child;

pub struct Local {
    pub exe: PathBuf,
    pub grace: Duration,
    pub cancel: watch::Receiver<u8>,
    pub done: UnboundedSender<Done>,
}

impl Executor for Local {
    fn launch(&mut self, l: Launch) {
        let (exe, grace, cancel, done) = (
            self.exe.clone(),
            self.grace,
            self.cancel.clone(),
            self.done.clone(),
        );
        // Spawned on the runtime's one thread, which the workers' parent-death signal is tied to.
        tokio::spawn(async move {
            let finished = child::run(&exe, &l.args, &l.dir, l.timeout, grace, cancel).await;
            let _ = done.send(Done {
                index: l.index,
                attempt: l.attempt,
                finished,
            });
        });
    }
}
