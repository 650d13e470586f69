//! A user's per-site traces → the trace artifact that localization reads
//! (`meshparity_judge::locate`).
//!
//! Asked to trace (`{{trace_dir}}` set), the program writes into that directory:
//! - `sites.txt`: the names of the values it traced (`embed.out`, `layers.3.mlp.out`,
//!   `grad.layers.3.w1`...), one per line, in the order it computed them;
//! - `step{S}.safetensors` for S = 0, 1, ...: each site's value at that step, whole-batch and
//!   unsharded (what a world-size-1 run holds: gathered over TP, concatenated over DP), the way
//!   ART's forward trace capture writes per-module outputs.
//!
//! A site the program leaves out on purpose is a line `!NAME: why` (torchtitan's adapter leaves
//! out the experts' dispatched rows, which have no world-size-1 order): kept in the index, so a
//! localization that finds nothing says what it could not look at.
//!
//! Once converted, the files read (`sites.txt`, the step files) are removed: the artifact holds
//! every value, and a kept run would otherwise hold each twice.
//!
//! Localization then walks the sites step by step in that order and names the first whose
//! relative L2 to the reference's exceeds the dtype's limit. Names starting with `grad.` are
//! gradients, names with `.bwd.` backward values, the rest forward values.
//!
//! A value replicated over some mesh axes may be written as every rank's copy instead of one:
//! the site list names it with those axes, major first (`grad.norm.weight@tp`,
//! `grad_norm@dp,tp`), and the step files hold `grad.norm.weight@0`, `grad.norm.weight@1`, … in
//! the ranks' order. Each copy is compared with the reference's one value, and a first
//! divergence is diagnosed against its copies along the axes named: one rank's share kept where
//! the sum belongs (a missing all-reduce) is then said as such, on the right axis.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use meshparity_engine::trace::{write_trace, TraceEntry};
use meshparity_engine::{HostTensor, LeftOut, TraceIndex};

/// Why a program's traces could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceFilesError {
    #[error("{path}: the program wrote no site list; write the traced value names there, one per line, in the order they were computed")]
    NoSites { path: PathBuf },
    #[error(
        "{path}: the program wrote no traces (expected step0.safetensors, step1.safetensors, ...)"
    )]
    NoSteps { path: PathBuf },
    #[error("{path}: tensor `{name}` is not in sites.txt; list it there (in computation order) or do not write it")]
    Unlisted { path: PathBuf, name: String },
    #[error("{path}: copies of `{name}` over {axes} are listed; write one tensor per rank numbered from 0 with no gap (`{name}@0`, `{name}@1`, …), or list the site without `@`")]
    NoCopies {
        path: PathBuf,
        name: String,
        axes: String,
    },
    #[error("{path}: line {line}: `{text}`: copies are named over mesh axes ({known}), major first and comma-separated, as in `grad.norm.weight@dp,tp`")]
    BadAxes {
        path: PathBuf,
        line: usize,
        text: String,
        known: String,
    },
    #[error("{path}: line {line}: `{text}`: a site left out is written `!NAME: why` (its name, a colon, the reason)")]
    BadLeftOut {
        path: PathBuf,
        line: usize,
        text: String,
    },
    #[error("{path}: {message}")]
    Read { path: PathBuf, message: String },
}

/// One line of the site list: a value's name, and the axes its copies run over (empty: one
/// value, not copies).
struct Listed {
    name: String,
    over: Vec<String>,
}

/// The site list's lines, each checked.
fn listed(path: &Path, text: &str) -> Result<Vec<Listed>, TraceFilesError> {
    let axes: Vec<&str> = meshparity_specs::MeshConfig::DEFAULT
        .degrees()
        .iter()
        .map(|(a, _)| *a)
        .collect();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('!') {
            continue;
        }
        let Some((name, over)) = line.rsplit_once('@') else {
            out.push(Listed {
                name: line.to_owned(),
                over: Vec::new(),
            });
            continue;
        };
        let over: Vec<String> = over.split(',').map(|a| a.trim().to_owned()).collect();
        let known = over.iter().all(|a| axes.contains(&a.as_str()));
        let unique = over.iter().enumerate().all(|(j, a)| !over[..j].contains(a));
        if name.is_empty() || !known || !unique {
            return Err(TraceFilesError::BadAxes {
                path: path.to_path_buf(),
                line: i + 1,
                text: line.to_owned(),
                known: axes.join(", "),
            });
        }
        out.push(Listed {
            name: name.to_owned(),
            over,
        });
    }
    Ok(out)
}

/// The site list's `!NAME: why` lines: sites left out, each with its reason.
fn left_out(path: &Path, text: &str) -> Result<Vec<LeftOut>, TraceFilesError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some(rest) = line.trim().strip_prefix('!') else {
            continue;
        };
        let Some((site, why)) = rest
            .split_once(':')
            .filter(|(s, w)| !s.trim().is_empty() && !w.trim().is_empty())
        else {
            return Err(TraceFilesError::BadLeftOut {
                path: path.to_path_buf(),
                line: i + 1,
                text: line.trim().to_owned(),
            });
        };
        out.push(LeftOut {
            site: site.trim().to_owned(),
            why: why.trim().to_owned(),
        });
    }
    Ok(out)
}

/// Whether a step file's tensor `n` is one `sites` lists: the site itself, or a copy
/// (`NAME@K`) of one listed with its axes.
fn is_listed(sites: &[Listed], n: &str) -> bool {
    sites.iter().any(|s| {
        if s.over.is_empty() {
            return s.name == n;
        }
        n.strip_prefix(s.name.as_str())
            .and_then(|rest| rest.strip_prefix('@'))
            .is_some_and(|k| k.parse::<usize>().is_ok())
    })
}

/// Read the program's traces in `from` and write the trace artifact into `to`. `replicas`: the
/// mesh's data-parallel degree — a batch-valued site (anything but a gradient or a value listed
/// with its copies) holds the replicas' rows in rank order, the hooks' contract, so its rows are
/// that many blocks (a cause can then name one replica's rows, or each replica's own scale).
pub fn convert(from: &Path, to: &Path, replicas: usize) -> Result<usize, TraceFilesError> {
    let list = from.join("sites.txt");
    let read = |path: &Path, message: String| TraceFilesError::Read {
        path: path.to_path_buf(),
        message,
    };
    let limit = meshparity_files::Limit {
        bytes: 16 << 20,
        what: "a site list",
    };
    // A regular file, bounded: a FIFO or a runaway writer is an error, never a hang.
    let (sites, skipped) = match meshparity_files::read_to_string(&list, limit) {
        Ok(text) => (listed(&list, &text)?, left_out(&list, &text)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(TraceFilesError::NoSites { path: list })
        }
        Err(e) => return Err(read(&list, e.to_string())),
    };
    if sites.is_empty() {
        return Err(TraceFilesError::NoSites { path: list });
    }
    let mut index = TraceIndex {
        microbatches: 1,
        entries: Vec::new(),
        program: true,
        left_out: skipped,
    };
    let mut tensors: IndexMap<String, HostTensor> = IndexMap::new();
    let mut read_files = vec![list.clone()];
    for step in 0.. {
        let path = from.join(format!("step{step}.safetensors"));
        if !path.exists() {
            if step == 0 {
                return Err(TraceFilesError::NoSteps {
                    path: from.to_path_buf(),
                });
            }
            break;
        }
        let mut values =
            meshparity_engine::checkpoint::load(&path).map_err(|e| read(&path, e.to_string()))?;
        read_files.push(path.clone());
        if let Some(name) = values.keys().find(|n| !is_listed(&sites, n)) {
            return Err(TraceFilesError::Unlisted {
                path,
                name: name.clone(),
            });
        }
        for site in &sites {
            let like = format!("s{step}.{}", site.name);
            let batch_valued = site.over.is_empty() && !site.name.starts_with("grad.");
            let blocks = if batch_valued { replicas.max(1) } else { 1 };
            let mut add = |key: String, t: HostTensor| {
                index.entries.push(TraceEntry {
                    key: key.clone(),
                    like: like.clone(),
                    blocks,
                    over: site.over.clone(),
                });
                tensors.insert(key, t);
            };
            if site.over.is_empty() {
                if let Some(t) = values.swap_remove(&site.name) {
                    add(like.clone(), t);
                }
                continue;
            }
            let copies: Vec<HostTensor> = (0..)
                .map_while(|k| values.swap_remove(&format!("{}@{k}", site.name)))
                .collect();
            let stray = values
                .keys()
                .any(|n| is_listed(std::slice::from_ref(site), n));
            if stray {
                return Err(TraceFilesError::NoCopies {
                    path,
                    name: site.name.clone(),
                    axes: site.over.join(","),
                });
            }
            for (k, t) in copies.into_iter().enumerate() {
                add(format!("{like}@{k}"), t);
            }
        }
    }
    write_trace(to, &index, &tensors).map_err(|e| read(to, e.to_string()))?;
    // The artifact holds every value the program wrote (in f64); its own files would double
    // the trace's bytes in every run that keeps it (a cached reference's). Only the files read
    // go, and the directory if that empties it; a failed conversion leaves them to be read. A
    // directory the program linked to elsewhere is left alone: nothing outside the run's
    // directory is deleted.
    let canonical = |p: &Path| std::fs::canonicalize(p).ok();
    let inside = canonical(from)
        .zip(canonical(to))
        .is_some_and(|(f, t)| f.starts_with(t));
    if inside {
        for f in &read_files {
            let _ = std::fs::remove_file(f);
        }
        let _ = std::fs::remove_dir(from);
    }
    Ok(index.entries.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshparity_compare::TensorDtype;

    fn tensor(v: f32) -> HostTensor {
        HostTensor {
            dtype: TensorDtype::F32,
            shape: vec![1],
            bytes: v.to_le_bytes().to_vec(),
        }
    }

    fn step(dir: &Path, s: usize, names: &[&str]) {
        let t: IndexMap<String, HostTensor> =
            names.iter().map(|n| (n.to_string(), tensor(1.0))).collect();
        meshparity_engine::checkpoint::save(&dir.join(format!("step{s}.safetensors")), &t).unwrap();
    }

    #[test]
    fn sites_keep_the_programs_order() {
        let out = tempfile::tempdir().unwrap();
        let (from, to) = (out.path().join("traces"), out.path());
        let write = |from: &Path| {
            std::fs::create_dir_all(from).unwrap();
            std::fs::write(from.join("sites.txt"), "b.out\na.out\ngrad.w\n").unwrap();
            step(from, 0, &["a.out", "b.out", "grad.w"]);
            step(from, 1, &["a.out", "b.out"]);
            std::fs::write(from.join("notes.txt"), "the program's own").unwrap();
        };
        let left = |from: &Path| {
            let mut names: Vec<_> = std::fs::read_dir(from)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        };
        // Linked to a directory outside the run's: converted, and nothing there deleted.
        let elsewhere = tempfile::tempdir().unwrap();
        write(elsewhere.path());
        std::os::unix::fs::symlink(elsewhere.path(), &from).unwrap();
        assert_eq!(convert(&from, to, 1).unwrap(), 5);
        assert_eq!(left(elsewhere.path()).len(), 4);
        std::fs::remove_file(&from).unwrap();
        write(&from);
        assert_eq!(convert(&from, to, 1).unwrap(), 5);
        // The files read are in the artifact now; anything else the program left stays.
        assert_eq!(left(&from), ["notes.txt"]);
        let index: TraceIndex = serde_json::from_slice(
            &std::fs::read(to.join(meshparity_engine::files::TRACE_INDEX)).unwrap(),
        )
        .unwrap();
        let keys: Vec<&str> = index.entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            ["s0.b.out", "s0.a.out", "s0.grad.w", "s1.b.out", "s1.a.out"]
        );
    }

    /// `!NAME: why` lines are sites left out, kept with their reasons in the index; one
    /// without a reason is an error at its line.
    #[test]
    fn sites_left_out_keep_their_reasons() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        let list = "a.out\n!moe.experts: rows sorted by expert\ngrad.w\n";
        std::fs::write(from.path().join("sites.txt"), list).unwrap();
        step(from.path(), 0, &["a.out", "grad.w"]);
        assert_eq!(convert(from.path(), to.path(), 1).unwrap(), 2);
        let index: TraceIndex = serde_json::from_slice(
            &std::fs::read(to.path().join(meshparity_engine::files::TRACE_INDEX)).unwrap(),
        )
        .unwrap();
        assert_eq!(
            index.left_out,
            [LeftOut {
                site: "moe.experts".into(),
                why: "rows sorted by expert".into()
            }]
        );
        std::fs::write(from.path().join("sites.txt"), "a.out\n!moe.experts\n").unwrap();
        step(from.path(), 0, &["a.out"]);
        let e = convert(from.path(), to.path(), 1).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("`!NAME: why`"), "{e}");
    }

    #[test]
    fn unlisted_and_missing_files_are_errors_that_say_what_to_do() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        let e = convert(from.path(), to.path(), 1).unwrap_err().to_string();
        assert!(e.contains("sites.txt") && e.contains("one per line"), "{e}");
        std::fs::write(from.path().join("sites.txt"), "a.out\n").unwrap();
        let e = convert(from.path(), to.path(), 1).unwrap_err().to_string();
        assert!(e.contains("step0.safetensors"), "{e}");
        step(from.path(), 0, &["a.out", "c.out"]);
        let e = convert(from.path(), to.path(), 1).unwrap_err().to_string();
        assert!(e.contains("`c.out` is not in sites.txt"), "{e}");
        // A FIFO in place of the site list is refused at once, not waited on.
        let fifo = tempfile::tempdir().unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(fifo.path().join("sites.txt"))
            .status()
            .is_ok_and(|s| s.success());
        if made {
            let e = convert(fifo.path(), to.path(), 1).unwrap_err().to_string();
            assert!(e.contains("sites.txt"), "{e}");
        }
    }

    /// Copies listed with their axes become one entry per copy, each compared with the
    /// reference's one value and carrying the axes; gaps, unknown axes and unlisted copies are
    /// errors that say what to write.
    #[test]
    fn copies_carry_their_axes() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        std::fs::write(from.path().join("sites.txt"), "a.out\ngrad.n@dp,tp\n").unwrap();
        step(
            from.path(),
            0,
            &["a.out", "grad.n@0", "grad.n@1", "grad.n@2", "grad.n@3"],
        );
        assert_eq!(convert(from.path(), to.path(), 1).unwrap(), 5);
        let index: TraceIndex = serde_json::from_slice(
            &std::fs::read(to.path().join(meshparity_engine::files::TRACE_INDEX)).unwrap(),
        )
        .unwrap();
        let e = &index.entries[4];
        assert_eq!(
            (e.key.as_str(), e.like.as_str()),
            ("s0.grad.n@3", "s0.grad.n")
        );
        assert_eq!(e.over, ["dp", "tp"]);
        assert!(index.entries[0].over.is_empty());

        step(from.path(), 0, &["a.out", "grad.n@0", "grad.n@2"]);
        let e = convert(from.path(), to.path(), 1).unwrap_err().to_string();
        assert!(e.contains("numbered from 0 with no gap"), "{e}");
        std::fs::write(from.path().join("sites.txt"), "a.out\ngrad.n@tensor\n").unwrap();
        let e = convert(from.path(), to.path(), 1).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("dp, tp"), "{e}");
        std::fs::write(from.path().join("sites.txt"), "a.out\ngrad.n\n").unwrap();
        let e = convert(from.path(), to.path(), 1).unwrap_err().to_string();
        assert!(e.contains("`grad.n@0` is not in sites.txt"), "{e}");
    }
}
