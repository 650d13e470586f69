//! A command engine's table for a repro spec: `[engines.NAME]` as its own file wrote it, made
//! to run from anywhere — the working directory absolute, and `{{spec_dir}}` /
//! `{{variant_dir}}` (the defining file's directory) spelled out, since the repro spec lives
//! in the job's directory, not beside the program. Of its bugs only the one the repro injects
//! stays: a command engine's bugs are planned on every mesh they apply to, so the table is
//! what selects it.

use meshparity_specs::EngineDef;

use super::no_repro::NoRepro;

/// `def` as TOML for a spec in another directory, with `mutation` its only bug (none for a
/// failed check); `Err` with why when its file cannot be read back (the job then has no repro).
pub fn table(def: &EngineDef, mutation: Option<&str>) -> Result<String, NoRepro> {
    let path = def.loc.path();
    let text = std::fs::read_to_string(path).map_err(|source| NoRepro::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let doc: toml::Table = text.parse().map_err(|source| NoRepro::Toml {
        path: path.to_path_buf(),
        source,
    })?;
    let name = &def.name.value;
    let mut engine = doc
        .get("engines")
        .and_then(|e| e.get(name))
        .and_then(toml::Value::as_table)
        .cloned()
        .ok_or_else(|| NoRepro::NoTable {
            path: path.to_path_buf(),
            name: name.clone(),
        })?;
    let base = def.base_dir();
    let base = std::path::absolute(&base).unwrap_or(base);
    let base = base.display().to_string();
    let cwd = match engine.get("cwd").and_then(toml::Value::as_str) {
        Some(c) if std::path::Path::new(c).is_absolute() => c.to_owned(),
        Some(c) => format!("{base}/{c}"),
        None => base.clone(),
    };
    engine.insert("cwd".into(), toml::Value::String(cwd));
    let bugs = engine
        .get_mut("mutations")
        .and_then(toml::Value::as_table_mut)
        .map(|bugs| {
            bugs.retain(|name, _| mutation == Some(name));
            bugs.is_empty()
        });
    if bugs == Some(true) {
        engine.remove("mutations");
    }
    let mut engine = toml::Value::Table(engine);
    spell_out(&mut engine, &base);
    let mut engines = toml::Table::new();
    engines.insert(name.clone(), engine);
    let mut root = toml::Table::new();
    root.insert("engines".into(), toml::Value::Table(engines));
    Ok(toml::to_string(&root)?)
}

/// Every string of `v` with the defining file's directory in place of its template names.
fn spell_out(v: &mut toml::Value, base: &str) {
    match v {
        toml::Value::String(s) => {
            *s = s
                .replace("{{spec_dir}}", base)
                .replace("{{variant_dir}}", base);
        }
        toml::Value::Array(items) => items.iter_mut().for_each(|i| spell_out(i, base)),
        toml::Value::Table(t) => t.iter_mut().for_each(|(_, i)| spell_out(i, base)),
        _ => {}
    }
}
