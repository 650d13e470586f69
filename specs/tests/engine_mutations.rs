//! `[engines.NAME.mutations]`: where a user's bug exists (`models`) and where it is injected
//! (`site`), as written and as a wrong value is reported.

use std::path::Path;

use meshparity_specs::SpecError;

/// A spec with one command engine whose mutation `bug` has `decl` (TOML inline-table keys) and
/// the models `models` (TOML tables).
fn spec(decl: &str, models: &str) -> String {
    format!(
        "[run]\nbatch = 2\n[engines.p]\nkind = \"command\"\nprogram = \"true\"\n\
         artifacts = {{ curve = \"m.jsonl\" }}\n\
         mutations = {{ bug = {{ args = [\"--bug\"], {decl} }} }}\n\
         {models}[meshes.dp2]\ndp = 2\n[[matrix]]\nlevels = [\"curve\"]\n"
    )
}

/// An engine mutation's `models` glob one typo away from a model (`qwne3*`) warns where it is
/// written, naming the model; a glob far from every model (an included engine file's bug for
/// models this spec does not have) and a glob that matches stay quiet.
#[test]
fn a_mutation_models_glob_that_misses_by_a_typo_warns() {
    let models = "[models.qwen3-moe]\nengine = \"p\"\n[models.llama]\nengine = \"p\"\n";
    let spec = |glob: &str| spec(&format!("models = [\"{glob}\"]"), models);
    let warnings = |glob: &str| -> Vec<String> {
        meshparity_specs::load_text(Path::new("m.toml"), spec(glob), &meshparity_specs::Disk)
            .unwrap()
            .warnings
            .iter()
            .map(|d| format!("{d} ({})", d.help.clone().unwrap_or_default()))
            .filter(|w| w.contains("`models` glob"))
            .collect()
    };
    let typo = warnings("qwne3*");
    assert_eq!(typo.len(), 1, "{typo:?}");
    assert!(
        typo[0].starts_with(
            "m.toml:7:51: `models` glob `qwne3*` of engines.p.mutations.bug matches no model"
        ),
        "{typo:?}"
    );
    let bare = warnings("lama");
    assert_eq!(
        bare.len(),
        1,
        "a glob without `*` one letter short of a model warns: {bare:?}"
    );
    assert!(bare[0].contains("did you mean model `llama`"), "{bare:?}");
    assert!(
        warnings("gpt*").is_empty(),
        "a glob far from every model stays quiet"
    );
    assert!(
        warnings("qwen3*").is_empty(),
        "a glob that matches stays quiet"
    );
}

/// An engine mutation's `site` is a glob or a list of them (the layout decides where some bugs
/// first show); a first divergence matching any of them is where it was injected. Anything
/// else — an empty list too — is an error at the value.
#[test]
fn a_mutation_site_is_a_glob_or_a_list_of_them() {
    let spec = |site: &str| {
        spec(
            &format!("site = {site}"),
            "[models.llama]\nengine = \"p\"\n",
        )
    };
    let load = |site: &str| {
        meshparity_specs::load_text(Path::new("m.toml"), spec(site), &meshparity_specs::Disk)
    };
    let injected = |site: &str, at: &str| {
        let loaded = load(site).unwrap();
        loaded.spec.engines["p"]
            .mutation("bug")
            .unwrap()
            .injected_at(at)
    };
    assert_eq!(injected("\"embed\"", "embed"), Some(true));
    assert_eq!(injected("\"embed\"", "layers.3.wqkv"), Some(false));
    let list = "[\"embed\", \"layers.*.wqkv\"]";
    assert_eq!(injected(list, "layers.3.wqkv"), Some(true));
    assert_eq!(injected(list, "embed"), Some(true));
    assert_eq!(injected(list, "layers.3.norm"), Some(false));
    // Refused at the value (line 7, column 48), saying what is wrong.
    for (site, says) in [
        ("3", "must be a glob or a list of globs"),
        ("[]", "is an empty list"),
    ] {
        let Err(SpecError::Invalid(d)) = load(site) else {
            panic!("`site = {site}` should not load");
        };
        let heads: Vec<String> = d.iter().map(|d| format!("{d}")).collect();
        assert!(
            heads.iter().any(|h| h.starts_with("m.toml:7:48: ")
                && h.contains(&format!("`engines.p.mutations.bug.site` {says}"))),
            "{heads:?}"
        );
    }
}
