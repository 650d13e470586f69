//! `[[matrix]]`: which models × meshes × levels × dtypes to check.

use crate::decode::{keyword, Ctx, Table};
use crate::diagnostic::Diagnostic;
use crate::dtype::DType;
use crate::level::Level;
use crate::source::{Loc, Located};

pub const KEYS: &[&str] = &[
    "models",
    "meshes",
    "levels",
    "dtypes",
    "tolerance",
    "mutations",
    "exclude",
];
pub const EXCLUDE_KEYS: &[&str] = &["model", "mesh", "level", "dtype"];

type Names = Located<Vec<Located<String>>>;

/// One `[[matrix]]` entry. Omitted lists mean "all": all models, all meshes, every level the
/// model's family supports, the model's own dtype.
#[derive(Clone, Debug)]
pub struct MatrixEntry {
    /// 1-based position among the spec's matrix entries, for messages; 0 for the entry a spec
    /// without `[[matrix]]` gets.
    pub index: usize,
    pub models: Option<Names>,
    pub meshes: Option<Names>,
    pub levels: Option<Located<Vec<Located<Level>>>>,
    pub dtypes: Option<Located<Vec<Located<DType>>>>,
    pub tolerance: Option<Located<String>>,
    /// Whether the spec's selected mutations run on these cells.
    pub mutations: bool,
    pub exclude: Vec<Exclude>,
    pub loc: Loc,
}

/// An exclusion rule: a cell is dropped when every key the rule gives matches it.
#[derive(Clone, Debug)]
pub struct Exclude {
    pub model: Option<Located<String>>,
    pub mesh: Option<Located<String>>,
    pub level: Option<Located<Level>>,
    pub dtype: Option<Located<DType>>,
    pub loc: Loc,
}

impl Exclude {
    pub fn matches(&self, model: &str, mesh: &str, level: Option<Level>, dtype: DType) -> bool {
        self.model.as_ref().is_none_or(|m| m.value == model)
            && self.mesh.as_ref().is_none_or(|m| m.value == mesh)
            && self.level.as_ref().is_none_or(|l| Some(l.value) == level)
            && self.dtype.as_ref().is_none_or(|d| d.value == dtype)
    }

    /// An `exclude` item (at `path`); `None` (said) for one without keys.
    fn decode(
        cx: &mut Ctx<'_>,
        v: &toml::Spanned<toml::de::DeValue<'_>>,
        path: &str,
    ) -> Option<Exclude> {
        let mut e = Table::from_value(cx, v, path)?;
        let rule = Exclude {
            model: e.string(cx, "model"),
            mesh: e.string(cx, "mesh"),
            level: e.keyword::<Level>(cx, "level"),
            dtype: e.keyword::<DType>(cx, "dtype"),
            loc: e.loc.clone(),
        };
        e.finish(cx);
        if rule.model.is_none()
            && rule.mesh.is_none()
            && rule.level.is_none()
            && rule.dtype.is_none()
        {
            cx.error(
                Diagnostic::error(
                    &rule.loc,
                    "an exclude rule without keys would drop every cell",
                )
                .help("give at least one of `model`, `mesh`, `level`, `dtype`"),
            );
            return None;
        }
        Some(rule)
    }
}

impl MatrixEntry {
    /// The entry a spec without `[[matrix]]` gets: every model on every mesh at every level.
    pub fn everything(loc: Loc) -> Self {
        Self {
            index: 0,
            models: None,
            meshes: None,
            levels: None,
            dtypes: None,
            tolerance: None,
            mutations: true,
            exclude: Vec::new(),
            loc,
        }
    }

    pub fn decode(cx: &mut Ctx<'_>, index: usize, mut t: Table<'_, '_>) -> MatrixEntry {
        let models = t.strings(cx, "models");
        let meshes = t.strings(cx, "meshes");
        let levels = t.array(cx, "levels", keyword::<Level>);
        let dtypes = t.array(cx, "dtypes", keyword::<DType>);
        let tolerance = t.string(cx, "tolerance");
        let mutations = t.bool(cx, "mutations").is_none_or(|b| b.value);
        let path = format!("{}.exclude", t.path);
        let exclude = t
            .array(cx, "exclude", |cx, v| Exclude::decode(cx, v, &path))
            .map(|l| l.value)
            .unwrap_or_default();
        for (key, empty) in [
            (
                "models",
                models.as_ref().is_some_and(|l| l.value.is_empty()),
            ),
            (
                "meshes",
                meshes.as_ref().is_some_and(|l| l.value.is_empty()),
            ),
            (
                "levels",
                levels.as_ref().is_some_and(|l| l.value.is_empty()),
            ),
            (
                "dtypes",
                dtypes.as_ref().is_some_and(|l| l.value.is_empty()),
            ),
        ] {
            if empty {
                let loc = t.key_loc(cx, key).unwrap_or_else(|| t.loc.clone());
                cx.error(
                    Diagnostic::error(
                        &loc,
                        format!("`{key}` is empty, so matrix entry {index} selects nothing"),
                    )
                    .help(format!(
                        "list at least one, or leave `{key}` out to mean all"
                    )),
                );
            }
        }
        let entry = MatrixEntry {
            index,
            models,
            meshes,
            levels,
            dtypes,
            tolerance,
            mutations,
            exclude,
            loc: t.loc.clone(),
        };
        t.finish(cx);
        entry
    }
}
