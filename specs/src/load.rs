//! Reading a spec and the files it includes into one [`Spec`].
//!
//! Passes, each reporting every problem it finds: parse each file (syntax errors, recovered), decode
//! it (unknown keys, wrong types), merge includes (cycles, duplicate names), then validate the
//! merged spec (see [`crate::validate`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use indexmap::IndexMap;
use toml::de::DeTable;

use crate::decode::Ctx;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::document::Document;
use crate::matrix::MatrixEntry;
use crate::mutation::MutationSelection;
use crate::run::RunSettings;
use crate::source::{Loc, Located, SourceFile};
use crate::spec::Spec;
use crate::tolerance::{ToleranceTable, BUILTIN, BUILTIN_GPU};
use crate::validate;

/// Why a spec could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read spec `{path}`: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} error(s) in spec", .0.error_count())]
    Invalid(Diagnostics),
}

/// A valid spec and the warnings found while loading it.
#[derive(Debug)]
pub struct Loaded {
    pub spec: Spec,
    pub warnings: Diagnostics,
}

impl Loaded {
    /// Every model on `device` (the command line's `--device`), checked again: a GPU selects
    /// other default tolerance tables, which must cover every level and dtype the matrix asks.
    pub fn with_device(mut self, device: crate::Device) -> Result<Loaded, SpecError> {
        self.spec.set_device(device);
        let mut diags = Diagnostics::default();
        validate::validate(&self.spec, &mut diags);
        diags.sort();
        if diags.has_errors() {
            Err(SpecError::Invalid(diags))
        } else {
            Ok(Loaded {
                spec: self.spec,
                warnings: diags,
            })
        }
    }
}

/// Where included files come from; tests use an in-memory map.
pub trait Files {
    fn read(&self, path: &Path) -> std::io::Result<String>;
}

/// The real file system.
pub struct Disk;

impl Files for Disk {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        meshparity_files::read_to_string(path, meshparity_files::Limit::SPEC)
    }
}

/// Load a spec file from disk.
pub fn load(path: &Path) -> Result<Loaded, SpecError> {
    load_with(path, &Disk)
}

/// Load a spec whose root text is given (includes still come from `files`).
pub fn load_with(path: &Path, files: &dyn Files) -> Result<Loaded, SpecError> {
    let text = files.read(path).map_err(|source| SpecError::Read {
        path: path.to_owned(),
        source,
    })?;
    load_text(path, text, files)
}

pub fn load_text(path: &Path, text: String, files: &dyn Files) -> Result<Loaded, SpecError> {
    if let Some(at) = control_char(&text) {
        // Nothing of its content is quoted: it may be anything (`/proc/self/environ`).
        let empty = SourceFile::new(path, String::new());
        let mut diags = Diagnostics::default();
        diags.push(not_a_spec(&Loc::new(&empty, 0..0), path, at));
        return Err(SpecError::Invalid(diags));
    }
    let mut loader = Loader {
        files,
        diags: Diagnostics::default(),
        docs: Vec::new(),
        stack: Vec::new(),
        seen: Vec::new(),
        syntax_errors: false,
    };
    let root = SourceFile::new(path, text);
    loader.visit(root, None);
    let Loader {
        mut diags,
        docs,
        syntax_errors,
        ..
    } = loader;
    // A file with syntax errors is not decoded: its recovered table is partial and would only
    // add confusing follow-on errors. Otherwise semantic checks run beside decoding errors, so a
    // user fixes both in one round.
    if syntax_errors {
        diags.sort();
        return Err(SpecError::Invalid(diags));
    }
    let spec = merge(docs, &mut diags);
    validate::validate(&spec, &mut diags);
    diags.sort();
    if diags.has_errors() {
        Err(SpecError::Invalid(diags))
    } else {
        Ok(Loaded {
            spec,
            warnings: diags,
        })
    }
}

struct Loader<'f> {
    files: &'f dyn Files,
    diags: Diagnostics,
    docs: Vec<Document>,
    /// Files being visited, outermost first, for cycle messages.
    stack: Vec<PathBuf>,
    /// Files already loaded (a diamond include loads a file once).
    seen: Vec<PathBuf>,
    syntax_errors: bool,
}

/// The byte offset of the first control character TOML forbids (all but tab, newline and
/// carriage return): a file that has one is not a spec, whatever else it holds.
fn control_char(text: &str) -> Option<usize> {
    text.bytes()
        .position(|b| (b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r')) || b == 0x7f)
}

/// A file that is not a spec, said without quoting any of it: an include of
/// `/proc/self/environ` printed the environment, secrets included, in its syntax errors.
fn not_a_spec(at: &Loc, path: &Path, byte: usize) -> Diagnostic {
    Diagnostic::error(
        at,
        format!(
            "`{}` is not a spec file: it holds a control character at byte {byte}, which TOML \
             does not allow (its content is not shown)",
            path.display()
        ),
    )
    .help("a spec and its includes are TOML text files")
}

fn normalize(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| {
        let mut out = PathBuf::new();
        for c in p.components() {
            match c {
                std::path::Component::CurDir => {}
                std::path::Component::ParentDir if out.file_name().is_some() => {
                    out.pop();
                }
                other => out.push(other),
            }
        }
        out
    })
}

impl Loader<'_> {
    fn visit(&mut self, file: Arc<SourceFile>, included_from: Option<&Loc>) {
        let key = normalize(&file.path);
        self.seen.push(key.clone());
        self.stack.push(key);
        let (root, errors) = DeTable::parse_recoverable(&file.text);
        for e in &errors {
            let range = e.span().unwrap_or(0..0);
            let loc = Loc::new(&file, range);
            let mut d = Diagnostic::error(&loc, format!("TOML syntax: {}", e.message().trim_end()))
                .label("here");
            if let Some(from) = included_from {
                d = d.related("included from here", from);
            }
            self.diags.push(d);
        }
        if !errors.is_empty() {
            self.syntax_errors = true;
            self.stack.pop();
            return;
        }
        let doc = {
            let mut cx = Ctx {
                file: Arc::clone(&file),
                diags: &mut self.diags,
            };
            Document::decode(&mut cx, &root)
        };
        let dir = file
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let includes = doc.includes.clone();
        if included_from.is_some() {
            for (what, loc) in &doc.top_level_only {
                self.diags.push(
                    Diagnostic::error(loc, format!("{what} is only allowed in the top-level spec"))
                        .help("included files share models, meshes and tolerance tables; move it to the spec that includes this file"),
                );
            }
        }
        self.docs.push(doc);
        for inc in includes {
            let path = dir.join(&inc.value);
            let key = normalize(&path);
            if let Some(pos) = self.stack.iter().position(|p| *p == key) {
                let chain: Vec<String> = self.stack[pos..]
                    .iter()
                    .chain(std::iter::once(&key))
                    .map(|p| {
                        p.file_name().map_or_else(
                            || p.display().to_string(),
                            |n| n.to_string_lossy().into_owned(),
                        )
                    })
                    .collect();
                self.diags.push(
                    Diagnostic::error(&inc.loc, format!("include cycle: {}", chain.join(" → ")))
                        .label("includes a file that is already being included")
                        .help("remove one of the includes; shared files should not include their includers"),
                );
                continue;
            }
            if self.seen.contains(&key) {
                continue;
            }
            match self.files.read(&path) {
                Ok(text) if control_char(&text).is_some() => {
                    self.syntax_errors = true;
                    let at = control_char(&text).unwrap_or(0);
                    self.diags.push(not_a_spec(&inc.loc, &path, at));
                }
                Ok(text) => self.visit(SourceFile::new(path, text), Some(&inc.loc)),
                Err(e) => {
                    // Like a syntax error: the spec without that file is not the spec, and
                    // checking it would only add follow-on errors.
                    self.syntax_errors = true;
                    self.diags.push(
                        Diagnostic::error(
                            &inc.loc,
                            format!("cannot read included file `{}`: {e}", path.display()),
                        )
                        .label("included here")
                        .help("include paths are relative to the file that includes them"),
                    )
                }
            }
        }
        self.stack.pop();
    }
}

/// Merge every document into one spec; a name defined twice is an error pointing at both.
fn merge(docs: Vec<Document>, diags: &mut Diagnostics) -> Spec {
    let root = Arc::clone(&docs[0].file);
    let top = Loc::new(&root, 0..0);
    let mut run = None;
    let mut models = IndexMap::new();
    let mut meshes = IndexMap::new();
    let mut engines = IndexMap::new();
    let mut variants = IndexMap::new();
    let mut tolerances = IndexMap::new();
    tolerances.insert(BUILTIN.to_owned(), ToleranceTable::builtin(top.clone()));
    tolerances.insert(
        BUILTIN_GPU.to_owned(),
        ToleranceTable::builtin_gpu(top.clone()),
    );
    let mut matrix: Vec<MatrixEntry> = Vec::new();
    let mut pairs = Vec::new();
    let mut mutations = None;
    let mut executor = None;
    let mut files = Vec::new();
    let mut stray = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        files.push(Arc::clone(&doc.file));
        stray.extend(doc.stray.iter().cloned());
        if i == 0 {
            run = doc.run;
            matrix = doc.matrix;
            pairs = doc.resume;
            mutations = doc.mutations;
            executor = doc.executor;
        }
        for m in doc.models {
            insert_unique(&mut models, m.name.clone(), m, "model", diags, |m| {
                &m.name.loc
            });
        }
        for m in doc.meshes {
            insert_unique(&mut meshes, m.name.clone(), m, "mesh", diags, |m| {
                &m.name.loc
            });
        }
        for e in doc.engines {
            insert_unique(&mut engines, e.name.clone(), e, "engine", diags, |e| {
                &e.name.loc
            });
        }
        for v in doc.variants {
            insert_unique(&mut variants, v.name.clone(), v, "variant", diags, |v| {
                &v.name.loc
            });
        }
        for t in doc.tolerances {
            insert_unique(
                &mut tolerances,
                t.name.clone(),
                t,
                "tolerance table",
                diags,
                |t| &t.name.loc,
            );
        }
    }
    if matrix.is_empty() {
        matrix.push(MatrixEntry::everything(top.clone()));
    }
    let run = run.unwrap_or_else(|| RunSettings::defaults(top.clone()));
    let resumed = crate::resume::meshes(&pairs, &meshes, &run.training, diags);
    Spec {
        path: root.path.clone(),
        files,
        run,
        models,
        meshes,
        engines,
        variants,
        tolerances,
        matrix,
        resumed,
        mutations: mutations.unwrap_or_else(MutationSelection::default),
        executor: executor.unwrap_or_default(),
        stray,
        loc: top,
    }
}

fn insert_unique<T>(
    map: &mut IndexMap<String, T>,
    name: Located<String>,
    value: T,
    kind: &str,
    diags: &mut Diagnostics,
    loc_of: impl Fn(&T) -> &Loc,
) {
    if let Some(first) = map.get(&name.value) {
        diags.push(
            Diagnostic::error(
                &name.loc,
                format!("{kind} `{}` is defined twice", name.value),
            )
            .label("second definition")
            .help("names must be unique across the spec and every file it includes; rename one")
            .related("first defined here", loc_of(first)),
        );
        return;
    }
    map.insert(name.value, value);
}
