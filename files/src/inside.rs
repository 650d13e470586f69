//! Paths a file names, resolved inside the directory it speaks for.
//!
//! A checkpoint index (Hugging Face's `model.safetensors.index.json`, meshparity's sharded
//! `index.json`) names its shards, and a directory checkpoint lists them. An index naming
//! `../ref/model.safetensors` or `/abs/path`, or a shard that is a link out of the directory,
//! made `compare` read the reference's own file as the candidate's and say MATCH. One rule for
//! every such name: a relative path of plain components, none of them a link, ending at a
//! regular file inside `dir`.

use std::io::{Error, ErrorKind};
use std::path::{Component, Path, PathBuf};

/// `dir/name`, where `name` (as a file inside `dir` names it) is a relative path of plain
/// components, no component is a symbolic link, and the last is a regular file. `what` says
/// what named it, for the error ("the index", "the directory").
pub fn inside(dir: &Path, name: &str, what: &str) -> std::io::Result<PathBuf> {
    let refuse = |why: String| {
        Error::new(
            ErrorKind::InvalidInput,
            format!(
                "`{name}`, named by {what}, {why}; a file a checkpoint names must be a regular \
                 file inside its directory `{}` (name the file itself to compare it)",
                if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                }
                .display()
            ),
        )
    };
    let path = Path::new(name);
    let plain = !name.is_empty()
        && !name.contains('\0')
        && path.components().all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(refuse(
            "leaves the directory (an absolute path, `..`, or an empty name)".into(),
        ));
    }
    let mut at = dir.to_path_buf();
    let parts: Vec<Component> = path.components().collect();
    for (i, c) in parts.iter().enumerate() {
        at.push(c);
        let meta = std::fs::symlink_metadata(&at)
            .map_err(|e| Error::new(e.kind(), format!("{}: {e}", at.display())))?;
        let last = i + 1 == parts.len();
        if meta.file_type().is_symlink() {
            return Err(refuse(format!(
                "is reached through a symbolic link (`{}`)",
                at.display()
            )));
        }
        if last && !meta.is_file() {
            let kind = crate::regular::kind_name(meta.file_type());
            return Err(refuse(format!("is {kind}, not a regular file")));
        }
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_inside_and_are_regular_files() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ckpt");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a.safetensors"), "x").unwrap();
        std::fs::write(dir.join("sub/b.safetensors"), "x").unwrap();
        std::fs::write(root.path().join("ref.safetensors"), "x").unwrap();
        std::os::unix::fs::symlink(
            root.path().join("ref.safetensors"),
            dir.join("l.safetensors"),
        )
        .unwrap();
        std::os::unix::fs::symlink(root.path(), dir.join("up")).unwrap();
        assert!(inside(&dir, "a.safetensors", "t").is_ok());
        assert!(inside(&dir, "sub/b.safetensors", "t").is_ok());
        for bad in [
            "../ref.safetensors",
            "/etc/passwd",
            "./../ref.safetensors",
            "",
            "l.safetensors",
            "up/ref.safetensors",
            "sub",
        ] {
            let e = inside(&dir, bad, "the index");
            assert!(e.is_err(), "{bad:?} was accepted");
        }
        let e = inside(&dir, "l.safetensors", "the index")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("symbolic link") && e.contains("named by the index"),
            "{e}"
        );
    }
}
