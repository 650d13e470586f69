//! Identical files a run's judged jobs keep, stored once.
//!
//! The files a failed comparison cites stay ([`super::prune`]), and many are the same bytes:
//! every resumption bug of a `[[resume]]` pair cites the state its first mesh saved, which no
//! such bug changes, and every job of a model cites the same reference updates. Each kept file
//! of at least [`MIN_BYTES`] is hashed and hard-linked to one copy per content in the run's
//! `blobs/` store (beside the run's scratch files), so a path a report cites still opens the
//! same bytes and the run directory holds them once (`disk_use` counts a linked file once).
//! Files are never written again once judged (a rewrite replaces by rename), so sharing their
//! inode is safe.

use std::path::Path;

/// Smaller files are not worth a hash and a link.
pub const MIN_BYTES: u64 = 64 << 10;

/// Link every file below `out`'s subdirectories that the store already holds to its copy there,
/// and add those it does not hold. Returns the bytes no longer stored twice. Errors leave a file
/// as it was: the verdict is already computed.
pub(super) fn dedupe(out: &Path, store: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(out) else {
        return 0;
    };
    if std::fs::create_dir_all(store).is_err() {
        return 0;
    }
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|k| k.is_dir()))
        .map(|e| dedupe_dir(&e.path(), store))
        .sum()
}

/// [`dedupe`] of an engine run's own artifact directory, where it lies in the run directory
/// (a command engine's runs, never cached, keep their files there): each mesh's program writes
/// the seed checkpoint it loaded, the reference's bytes again (24.7 MB a mesh for torchtitan's
/// debug llama). Returns the bytes no longer stored twice.
pub(super) fn dedupe_run(dir: &Path, scratch: &Path, store: &Path) -> u64 {
    if !dir.starts_with(scratch) || std::fs::create_dir_all(store).is_err() {
        return 0;
    }
    dedupe_dir(dir, store)
}

/// Remove the store's copies that no file links any more (a pair's run removes what its files
/// were made from once judged): the store is how files share bytes, not a copy of its own.
pub fn drop_unlinked(store: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(store) else {
        return;
    };
    for e in entries.flatten() {
        let alone = e.metadata().is_ok_and(|m| m.is_file() && m.nlink() == 1);
        if alone {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Every file below `dir` linked into `store`; a stack, not recursion, so a program's deeply
/// nested output cannot overflow the worker's.
fn dedupe_dir(dir: &Path, store: &Path) -> u64 {
    let mut saved = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(k) if k.is_dir() => todo.push(path),
                Ok(k) if k.is_file() => saved += link(&path, store),
                _ => {}
            }
        }
    }
    saved
}

/// `path` linked to the store's copy of its bytes (or made that copy); the bytes saved.
fn link(path: &Path, store: &Path) -> u64 {
    let Ok(meta) = std::fs::metadata(path) else {
        return 0;
    };
    if meta.len() < MIN_BYTES {
        return 0;
    }
    // Hashed as it is read: a kept file may be a large model's checkpoint.
    let mut hasher = blake3::Hasher::new();
    let read = meshparity_files::open(path).and_then(|f| hasher.update_reader(f).map(|_| ()));
    if read.is_err() {
        return 0;
    }
    let blob = store.join(hasher.finalize().to_hex().as_str());
    // The first holder of these bytes gives the store its copy (a racing worker's link wins
    // and this file is linked to it below).
    if std::fs::hard_link(path, &blob).is_ok() {
        return 0;
    }
    let same = std::fs::metadata(&blob).is_ok_and(|b| b.len() == meta.len());
    if !same {
        return 0;
    }
    // Replace by rename, so the path always opens these bytes.
    let tmp = path.with_extension("dedupe-tmp");
    if std::fs::hard_link(&blob, &tmp).is_err() {
        return 0;
    }
    if std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
        return 0;
    }
    meta.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two jobs' identical files share one inode; a different file and a small one are left.
    #[test]
    fn identical_kept_files_are_stored_once() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        let store = root.path().join("blobs");
        let big = vec![7u8; MIN_BYTES as usize];
        let mut other = big.clone();
        other[0] = 8;
        let job = |name: &str, bytes: &[u8]| {
            let dir = root.path().join(name);
            std::fs::create_dir_all(dir.join("run")).unwrap();
            std::fs::write(dir.join("run/state.safetensors"), bytes).unwrap();
            std::fs::write(dir.join("run/small"), b"x").unwrap();
            dir
        };
        let (a, b, c) = (job("a", &big), job("b", &big), job("c", &other));
        assert_eq!(dedupe(&a, &store), 0);
        assert_eq!(dedupe(&b, &store), MIN_BYTES);
        assert_eq!(dedupe(&c, &store), 0);
        let ino = |d: &Path| {
            std::fs::metadata(d.join("run/state.safetensors"))
                .unwrap()
                .ino()
        };
        assert_eq!(ino(&a), ino(&b));
        assert_ne!(ino(&a), ino(&c));
        assert_eq!(std::fs::read(b.join("run/state.safetensors")).unwrap(), big);
        assert_eq!(std::fs::read_dir(&store).unwrap().count(), 2);
        // A copy no file links any more goes; one still linked stays.
        std::fs::remove_dir_all(&c).unwrap();
        drop_unlinked(&store);
        assert_eq!(std::fs::read_dir(&store).unwrap().count(), 1);
        assert_eq!(std::fs::read(a.join("run/state.safetensors")).unwrap(), big);
    }

    /// An engine run's own directory in the run's scratch shares bytes with another's; one
    /// outside it (a cache shared by runs) is left alone.
    #[test]
    fn an_engine_runs_files_share_bytes_only_inside_the_run() {
        use std::os::unix::fs::MetadataExt;
        let root = tempfile::tempdir().unwrap();
        let scratch = root.path().join("artifacts");
        let store = scratch.join("blobs");
        let big = vec![3u8; MIN_BYTES as usize];
        let run = |dir: &Path| {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("seed.safetensors"), &big).unwrap();
            dir.join("seed.safetensors")
        };
        let (reference, mesh) = (
            run(&scratch.join("reference-1")),
            run(&scratch.join("run-2")),
        );
        let cache = run(&root.path().join("cache/run-3"));
        assert_eq!(dedupe_run(reference.parent().unwrap(), &scratch, &store), 0);
        assert_eq!(
            dedupe_run(mesh.parent().unwrap(), &scratch, &store),
            MIN_BYTES
        );
        assert_eq!(dedupe_run(cache.parent().unwrap(), &scratch, &store), 0);
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        assert_eq!(ino(&reference), ino(&mesh));
        assert_ne!(ino(&reference), ino(&cache));
    }
}
