//! One spec file decoded into its elements, before includes are merged.

use std::sync::Arc;

use toml::de::{DeTable, DeValue};

use crate::decode::{Ctx, Table};
use crate::diagnostic::Diagnostic;
use crate::engine::EngineDef;
use crate::matrix::MatrixEntry;
use crate::mesh::Mesh;
use crate::model::Model;
use crate::mutation::MutationSelection;
use crate::run::RunSettings;
use crate::source::{Loc, Located, SourceFile};
use crate::suggest;
use crate::tolerance::{ToleranceTable, BUILTIN, BUILTIN_GPU};
use crate::variant::Variant;

pub const KEYS: &[&str] = &[
    "include",
    "run",
    "models",
    "meshes",
    "engines",
    "variants",
    "tolerances",
    "matrix",
    "resume",
    "mutations",
    "executor",
];

/// The elements of one file, in file order.
pub struct Document {
    pub file: Arc<SourceFile>,
    pub includes: Vec<Located<String>>,
    pub run: Option<RunSettings>,
    pub models: Vec<Model>,
    pub meshes: Vec<Mesh>,
    pub engines: Vec<EngineDef>,
    pub variants: Vec<Variant>,
    pub tolerances: Vec<ToleranceTable>,
    pub matrix: Vec<MatrixEntry>,
    pub resume: Vec<crate::resume::ResumePair>,
    pub mutations: Option<MutationSelection>,
    pub executor: Option<crate::executor::ExecutorDef>,
    /// Where `[run]`, `[[matrix]]`, `[mutations]` are written, to reject them in included files.
    pub top_level_only: Vec<(&'static str, Loc)>,
    /// Names under a misspelled named-table section ([`crate::Spec::stray`]).
    pub stray: Vec<(&'static str, String)>,
}

use crate::names::check_name;
pub use crate::names::MAX_NAME;

impl Document {
    pub fn decode(cx: &mut Ctx<'_>, root: &toml::Spanned<DeTable<'_>>) -> Document {
        let file = Arc::clone(&cx.file);
        let mut t = Table::new(root.get_ref(), Loc::new(&file, 0..0), "spec");
        let mut doc = Document {
            file,
            includes: Vec::new(),
            run: None,
            models: Vec::new(),
            meshes: Vec::new(),
            engines: Vec::new(),
            variants: Vec::new(),
            tolerances: Vec::new(),
            matrix: Vec::new(),
            resume: Vec::new(),
            mutations: None,
            executor: None,
            top_level_only: Vec::new(),
            stray: stray(root.get_ref()),
        };
        if let Some(inc) = t.strings(cx, "include") {
            doc.includes = inc.value;
        }
        if let Some(v) = t.get("run") {
            doc.top_level_only.push(("[run]", cx.loc(v)));
            if let Some(rt) = Table::from_value(cx, v, "run") {
                doc.run = Some(RunSettings::decode(cx, rt));
            }
        }
        named_tables(cx, &mut t, "models", "model", |cx, name, table| {
            if let Some(m) = Model::decode(cx, name, table) {
                doc.models.push(m);
            }
        });
        named_tables(cx, &mut t, "meshes", "mesh", |cx, name, table| {
            if let Some(m) = Mesh::decode(cx, name, table) {
                doc.meshes.push(m);
            }
        });
        named_tables(cx, &mut t, "engines", "engine", |cx, name, table| {
            if let Some(e) = EngineDef::decode(cx, name, table) {
                doc.engines.push(e);
            }
        });
        named_tables(cx, &mut t, "variants", "variant", |cx, name, table| {
            if let Some(v) = Variant::decode(cx, name, table) {
                doc.variants.push(v);
            }
        });
        named_tables(
            cx,
            &mut t,
            "tolerances",
            "tolerance table",
            |cx, name, table| {
                if let Some(tt) = tolerance_table(cx, name, table) {
                    doc.tolerances.push(tt);
                }
            },
        );
        if let Some(v) = t.get("matrix") {
            doc.top_level_only.push(("[[matrix]]", cx.loc(v)));
            array_of_tables(cx, v, "matrix", "entry", |cx, i, et| {
                doc.matrix.push(MatrixEntry::decode(cx, i + 1, et));
            });
        }
        if let Some(v) = t.get("resume") {
            doc.top_level_only.push(("[[resume]]", cx.loc(v)));
            array_of_tables(cx, v, "resume", "pair", |cx, _, et| {
                doc.resume.push(crate::resume::ResumePair::decode(cx, et));
            });
        }
        if let Some(v) = t.get("executor") {
            doc.top_level_only.push(("[executor]", cx.loc(v)));
            if let Some(et) = Table::from_value(cx, v, "executor") {
                doc.executor = Some(crate::executor::ExecutorDef::decode(cx, et));
            }
        }
        if let Some(v) = t.get("mutations") {
            doc.top_level_only.push(("[mutations]", cx.loc(v)));
            if let Some(mt) = Table::from_value(cx, v, "mutations") {
                doc.mutations = Some(MutationSelection::decode(cx, mt));
            }
        }
        t.finish(cx);
        doc
    }
}

/// A `[tolerances.NAME]` table, unless it takes a built-in table's name.
fn tolerance_table(
    cx: &mut Ctx<'_>,
    name: Located<String>,
    table: Table<'_, '_>,
) -> Option<ToleranceTable> {
    if name.value == BUILTIN || name.value == BUILTIN_GPU {
        cx.error(
            Diagnostic::error(
                &name.loc,
                format!("`{}` is the name of a built-in tolerance table", name.value),
            )
            .help(format!(
                "pick another name; `extends = \"{}\"` starts from its limits",
                name.value
            )),
        );
        return None;
    }
    ToleranceTable::decode(cx, name, table)
}

/// The `[[key]]` sections in `v`, each (with its index) handed to `each`; `key` as anything but
/// an array of tables is an error saying how to write each `what`.
fn array_of_tables<'a, 'i>(
    cx: &mut Ctx<'_>,
    v: &'a toml::Spanned<DeValue<'i>>,
    key: &str,
    what: &str,
    mut each: impl FnMut(&mut Ctx<'_>, usize, Table<'a, 'i>),
) {
    let DeValue::Array(entries) = v.get_ref() else {
        cx.error(
            Diagnostic::error(&cx.loc(v), format!("`{key}` must be an array of tables"))
                .help(format!("write each {what} as a `[[{key}]]` section")),
        );
        return;
    };
    for (i, e) in entries.iter().enumerate() {
        if let Some(et) = Table::from_value(cx, e, format!("{key}[{i}]")) {
            each(cx, i, et);
        }
    }
}

/// The tables under a top-level key that is a misspelling of a named-table section, with the
/// section meant: `[mesh.pp2]` gives ("meshes", "pp2").
fn stray(root: &DeTable<'_>) -> Vec<(&'static str, String)> {
    const SECTIONS: [&str; 5] = ["models", "meshes", "engines", "variants", "tolerances"];
    let mut out = Vec::new();
    for (k, v) in root.iter() {
        let key = k.get_ref().as_ref();
        if SECTIONS.contains(&key) {
            continue;
        }
        let Some(section) = suggest::closest(key, SECTIONS) else {
            continue;
        };
        if let DeValue::Table(t) = v.get_ref() {
            out.extend(t.iter().map(|(n, _)| (section, n.get_ref().to_string())));
        }
    }
    out
}

/// Walk `[KEY.NAME]` tables, checking each name and handing the table to `each`.
fn named_tables<'a, 'i>(
    cx: &mut Ctx<'_>,
    t: &mut Table<'a, 'i>,
    key: &'static str,
    kind: &str,
    mut each: impl FnMut(&mut Ctx<'_>, Located<String>, Table<'a, 'i>),
) {
    let Some(v) = t.get(key) else { return };
    let Some(mut outer) = Table::from_value(cx, v, key) else {
        return;
    };
    for (k, inner) in outer.entries() {
        let name = Located::new(k.get_ref().to_string(), cx.loc(k));
        if !check_name(cx, kind, &name) {
            continue;
        }
        if let Some(table) = Table::from_value(cx, inner, format!("{key}.{}", name.value)) {
            each(cx, name, table);
        }
    }
}
