//! The local executor: each attempt a child process group on this machine (see `child.rs`), or,
//! for a GPU job of the built-in engine, a request to a worker that serves many (`served.rs`).

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;

use super::served::Served;
use super::{Done, Executor, Launch};
use crate::exec::child;

pub struct Local {
    pub exe: PathBuf,
    pub grace: Duration,
    pub cancel: watch::Receiver<u8>,
    pub done: UnboundedSender<Done>,
    pub served: Served,
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
        let served = l.served.then(|| self.served.clone());
        tokio::spawn(async move {
            let (index, attempt) = (l.index, l.attempt);
            let finished = match served {
                Some(s) => s.run(l, cancel).await,
                None => child::run(&exe, &l.args, &l.dir, l.timeout, grace, cancel).await,
            };
            let _ = done.send(Done {
                index,
                attempt,
                finished,
            });
        });
    }
}
