//! Exit codes, one meaning each, so CI can tell a numeric mismatch from a broken spec.

/// Every selected job passed (or, for `validate`, every spec is valid).
pub const OK: u8 = 0;
/// Some check failed (or `compare` found a mismatch).
pub const CHECK_FAILED: u8 = 1;
/// Bad usage, an invalid spec, or (for `compare`) unreadable input or nothing compared.
pub const SPEC_ERROR: u8 = 2;
/// Infrastructure errors only (crashes, timeouts, spawn failures; no check failed).
pub const INFRA_ERROR: u8 = 3;
/// Filters and partition selected no job.
pub const NOTHING_SELECTED: u8 = 4;
/// The run was interrupted (SIGINT/SIGTERM); results so far are written.
pub const INTERRUPTED: u8 = 130;

/// Text for `meshparity --help` (every command's codes) and `run --help`.
pub const HELP: &str = "\
Exit codes:
  0  success: every spec valid / every selected job passed
  1  some check failed
  2  usage or spec error
  3  infrastructure errors only
  4  nothing selected by --filter / --partition
  130 interrupted";

/// `validate --help`: it runs nothing, so only these two.
pub const HELP_VALIDATE: &str = "\
Exit codes:
  0  every spec valid
  2  usage or spec error";

/// `plan --help`.
pub const HELP_PLAN: &str = "\
Exit codes:
  0  the plan was printed
  2  usage or spec error
  4  nothing selected by --filter / --partition";

/// `report --help`.
pub const HELP_REPORT: &str = "\
Exit codes:
  0  the reports were written (with --merge: and every merged job passed)
  1  with --merge: some check failed, or jobs were skipped or not run
  2  unreadable or incompatible results files, or shards that do not merge
  3  a report could not be written (with --merge: or infrastructure errors only)
  130 with --merge: a shard's run was interrupted";

/// `schema --help` and `list --help`: they only print.
pub const HELP_PRINT: &str = "\
Exit codes:
  0  printed
  2  usage error";

/// `calibrate --help`.
pub const HELP_CALIBRATE: &str = "\
Exit codes:
  0  no false positive and every mutation caught
  1  a false positive or a missed mutation
  2  usage or spec error
  3  infrastructure errors (a job could not run)
  4  nothing selected by --filter / --partition";
