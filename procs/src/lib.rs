//! Every process a job starts ends with the job, however the job ends.
//!
//! The runner starts each worker in its own process group and ends the group at a timeout. What
//! that missed, each seen with a real program: a `kill -9` of the runner killed the worker (its
//! parent-death signal) but left the user's program running under pid 1; a child the program
//! moved to its own session (`setsid`) left the group and outlived the job; a background child
//! holding the program's stdout open kept the worker reading until the timeout, so a program
//! that had exited and passed was recorded as timed out.
//!
//! So the runner is a child subreaper ([`become_subreaper`]): what a worker's processes leave
//! behind when the worker is ended at its timeout comes back to the runner, which ends it once
//! the attempt is over ([`kill_tree`], sparing its live workers). A worker ([`guard`]) is a
//! child subreaper too — descendants orphaned inside the job are
//! reparented to it instead of pid 1, and stay findable — and its parent-death signal is one a
//! thread of its own waits for, which then kills every descendant and the worker's group. When
//! the program it runs exits, the worker kills whatever the program left behind
//! ([`kill_descendants`]) before it reads the program's last output, so the job is judged when
//! the program exits.
//!
//! Modules:
//!
//! - [`stdio`] — a serving worker's standard streams: its protocol on descriptors of its own.

pub mod stdio;

use std::collections::HashMap;

/// The signal the kernel sends a worker when the runner that started it dies.
const PARENT_DIED: libc::c_int = libc::SIGUSR1;

/// Make orphaned descendants of this process its children instead of pid 1's, so they stay
/// findable ([`kill_tree`]).
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// The signals that end a job from outside: the runner's SIGTERM to a worker's group at a
/// timeout or a cancellation, Slurm's SIGTERM to every process of a job at its time limit or
/// `scancel` (SIGKILL after its KillWait), a terminal's SIGINT or SIGHUP.
const ENDING: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

/// Make this process (a worker) the keeper of every process it starts: called first thing,
/// before any other thread exists. `parent`: the runner's pid; `None` for a worker the runner
/// did not start (a Slurm batch script's, or one started by hand), which has no parent-death
/// signal.
///
/// An ending signal ([`ENDING`]) is handled by a thread of the worker, not by the default
/// action: it passes SIGTERM on to every descendant, waits up to `grace` for them to go, kills
/// what is left and then ends the worker by the signal it got. Dying at once, as the default
/// action does, took the program with it (its parent-death signal) and orphaned the program's
/// own children to pid 1, out of the job: seen on Slurm, whose process tracking by descent
/// (proctrack/linuxproc) then no longer found a child of a program that ignored SIGTERM.
pub fn guard(parent: Option<i32>, grace: std::time::Duration) {
    become_subreaper();
    let mut watched: Vec<libc::c_int> = ENDING.to_vec();
    if parent.is_some() {
        watched.push(PARENT_DIED);
    }
    let set = signal_set(&watched);
    // Blocked here, so every thread started later inherits the block and only the watcher's
    // sigwait takes them; a program started by this worker gets an empty mask back
    // ([`child_setup`]).
    // SAFETY: pthread_sigmask of this thread with a filled local set.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    std::thread::spawn(move || {
        let mut got = 0;
        // SAFETY: sigwait reads the local set and writes the signal number into a local.
        while unsafe { libc::sigwait(&set, &mut got) } != 0 {}
        if got == PARENT_DIED {
            kill_descendants();
            // SAFETY: a signal to this process's own group, which ends this process too.
            unsafe {
                libc::kill(0, libc::SIGKILL);
            }
        }
        end_descendants(grace);
        // SAFETY: the default action back, then the signal unblocked in this thread and sent
        // to this process: it ends the worker as the signal would have.
        unsafe {
            libc::signal(got, libc::SIG_DFL);
            let one = signal_set(&[got]);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
            libc::kill(libc::getpid(), got);
        }
        std::process::exit(128 + got);
    });
    let Some(parent) = parent else {
        return;
    };
    // SAFETY: prctl and getppid touch no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, PARENT_DIED);
        // The runner may have died between starting this worker and the call above.
        if libc::getppid() != parent {
            kill_descendants();
            std::process::exit(3);
        }
    }
}

fn signal_set(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: sigset operations on a zeroed local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in signals {
            libc::sigaddset(&mut set, *s);
        }
        set
    }
}

/// SIGTERM to every descendant, up to `grace` for them to go (a program's chance to end as
/// it would at a timeout), then SIGKILL to what is left.
pub fn end_descendants(grace: std::time::Duration) {
    let me = std::process::id() as i32;
    for pid in descendants(me, None) {
        // SAFETY: a signal to a process id.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
    }
    let start = std::time::Instant::now();
    // Zombies do not count (`descendants`): this waits for the living only.
    while start.elapsed() < grace {
        if descendants(me, None).is_empty() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    kill_descendants();
}

/// For a program's `pre_exec` (in the child, between fork and exec; async-signal-safe calls
/// only): an empty signal mask (the worker's block of [`PARENT_DIED`] is not the program's),
/// and death with the worker, should the worker itself be killed outright.
///
/// # Safety
/// Call only between `fork` and `exec`, as `CommandExt::pre_exec` does.
pub unsafe fn child_setup() -> std::io::Result<()> {
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    Ok(())
}

/// SIGKILL every process descended from this one (found through /proc, which a subreaper keeps
/// complete), until none is left; returns how many were signalled.
pub fn kill_descendants() -> usize {
    kill_tree(std::process::id() as i32, None)
}

/// SIGKILL every process descended from `root` except those below `spare` (and `spare`
/// itself), until none is left, reaping this process's own children among them; returns how
/// many were signalled.
pub fn kill_tree(root: i32, spare: Option<&dyn Fn(i32) -> bool>) -> usize {
    let mut killed = 0;
    // A process may fork while its siblings are killed: look again until nothing is found.
    for _ in 0..20 {
        let found = descendants(root, spare);
        if found.is_empty() {
            break;
        }
        for pid in &found {
            // SAFETY: a signal to a process id.
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        killed += found.len();
        // Reap what was this process's, so zombies do not count as found next time (by pid:
        // a waitpid(-1) would take the exit of a child someone else waits for).
        let me = std::process::id() as i32;
        for pid in &found {
            if parent_of(*pid) == Some(me) {
                // SAFETY: waitpid on a child of ours that was just killed; status into a local.
                unsafe {
                    let mut status = 0;
                    libc::waitpid(*pid, &mut status, 0);
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    killed
}

/// For a subreaper (the runner): end the processes that came back to it, every child that
/// `spare` does not keep (its live workers) with all below it. Reads this process's own child
/// lists first (`/proc/self/task/*/children`), so when every child is spared it costs a few
/// small reads, not a walk of `/proc`: the runner calls it after every attempt, and a no-op
/// job takes 2–4 ms.
pub fn end_strays(spare: &dyn Fn(i32) -> bool) -> usize {
    if let Some(children) = own_children() {
        if children.iter().all(|c| spare(*c)) {
            return 0;
        }
    }
    kill_tree(std::process::id() as i32, Some(spare))
}

/// This process's children, from the kernel's per-thread lists; `None` where the kernel does
/// not keep them.
fn own_children() -> Option<Vec<i32>> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).ok()?;
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    Some(out)
}

/// `(state, ppid)` of a process, from `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(String, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses: parse after the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.to_owned();
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn parent_of(pid: i32) -> Option<i32> {
    stat(pid).map(|(_, ppid)| ppid)
}

/// Live (not zombie) processes descended from `root`, not counting `spare` ones and theirs.
fn descendants(root: i32, spare: Option<&dyn Fn(i32) -> bool>) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        match stat(pid) {
            Some((state, ppid)) if state != "Z" => children.entry(ppid).or_default().push(pid),
            _ => {}
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
            if c != root && !spare.is_some_and(|s| s(c)) {
                out.push(c);
                stack.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_are_found_through_a_fork_and_killed() {
        // sh starts a background sleep and waits: two generations below this test process.
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 600 & wait"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let sh_pid = sh.id() as i32;
        // Only below sh: other tests of this binary may have children of their own.
        let found = descendants(sh_pid, None);
        assert_eq!(found.len(), 1, "its sleep: {found:?}");
        // Spared, sh's subtree is not touched.
        let me = std::process::id() as i32;
        let spare = |p: i32| p != sh_pid;
        assert_eq!(descendants(me, Some(&spare)), [sh_pid]);
        assert!(own_children().unwrap().contains(&sh_pid));
        assert_eq!(kill_tree(sh_pid, None), 1);
        assert!(descendants(sh_pid, None).is_empty());
        let _ = sh.kill();
        sh.wait().unwrap();
    }
}
