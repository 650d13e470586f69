//! How meshparity touches files it did not write itself, and files other processes share.
//!
//! Every input (a spec, an include, a results file, a checkpoint, a curve) is user-named, so
//! it can be a FIFO, a device or a huge file. Reading one must never block forever or pull
//! gigabytes: [`read`] opens without blocking, refuses anything that is not a regular file and
//! caps the size. Files other runs may read at the same time are replaced atomically
//! ([`write_atomic`]), a run directory is held by one process at a time ([`Lock`]), and short-lived files can live
//! in memory ([`MemoryDir`]). Text read from outside is shown on a terminal through
//! [`text::escaped`], which shows control characters instead of obeying them.
//!
//! Modules:
//!
//! - `atomic` — replacing a file so that readers see the old content or the new, never a torn one;
//! - `create` — creating a file where someone else's program may have planted a link;
//! - `flush` — one flush to disk for everything a process wrote, instead of one per file;
//! - `inside` — paths a file names, resolved inside the directory it speaks for;
//! - `lock` — one process at a time in a run directory;
//! - `tail` — the last lines of a log, read from its end.

mod atomic;
mod create;
mod flush;
mod inside;
mod lock;
mod memory;
mod regular;
mod tail;
pub mod text;

pub use atomic::{temp_sibling, write_atomic, write_atomic_with, write_replace};
pub use create::{create, write};
pub use flush::flush_trees;
pub use inside::inside;
pub use lock::{Lock, LockError, LOCK_FILE};
pub use memory::{is_tmpfs_with, MemoryDir, SHM};
pub use regular::{open, open_limited, read, read_to_string, Limit};
pub use tail::{tail, TAIL_LINE, TAIL_WINDOW};
