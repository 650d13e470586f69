//! Every class of spec error names file:line:column and says what to do.
//!
//! Each broken spec under `tests/broken/` is loaded; the test asserts the exact positions and
//! messages it must report (all of them, in one load), and snapshots the full rendering so a
//! change in wording is reviewed.

use std::path::Path;

use meshparity_specs::{load, SpecError};

/// Load a broken spec; return its rendered diagnostics (no colour) and the `file:line:col: msg`
/// headline of each.
fn errors_of(path: &str) -> (String, Vec<String>) {
    match load(Path::new(path)) {
        Ok(_) => panic!("{path} should not load"),
        Err(SpecError::Read { .. }) => panic!("{path} is missing"),
        Err(SpecError::Invalid(d)) => {
            let heads = d.iter().map(|d| format!("{}", d)).collect();
            (d.render(false), heads)
        }
    }
}

fn assert_reports(path: &str, expected: &[&str]) {
    let (rendered, heads) = errors_of(path);
    for e in expected {
        assert!(
            heads.iter().any(|h| h.starts_with(e) || h.contains(e)),
            "{path}: expected a diagnostic `{e}`, got:\n{}",
            heads.join("\n")
        );
    }
    let name = path
        .trim_start_matches("tests/broken/")
        .replace(['/', '.'], "_");
    insta::assert_snapshot!(name, rendered);
}

#[test]
fn toml_syntax() {
    assert_reports(
        "tests/broken/syntax.toml",
        &[
            "tests/broken/syntax.toml:3:10: TOML syntax: extra `=`",
            "tests/broken/syntax.toml:5:12: TOML syntax: unclosed table",
        ],
    );
}

#[test]
fn unknown_keys_with_did_you_mean() {
    assert_reports(
        "tests/broken/unknown-key.toml",
        &[
            "tests/broken/unknown-key.toml:3:1: unknown key `hiden` in `models.tiny`",
            "tests/broken/unknown-key.toml:4:1: unknown key `kv_head` in `models.tiny`",
            "tests/broken/unknown-key.toml:8:1: unknown key `schedul` in `meshes.tp2`",
        ],
    );
    let (rendered, _) = errors_of("tests/broken/unknown-key.toml");
    assert!(rendered.contains("did you mean `hidden`?"));
    assert!(rendered.contains("did you mean `kv_heads`?"));
    assert!(rendered.contains("did you mean `schedule`?"));
}

#[test]
fn wrong_types_and_values() {
    assert_reports(
        "tests/broken/wrong-type.toml",
        &[
            "tests/broken/wrong-type.toml:2:8: `run.seed` must be a non-negative integer, found a string",
            "tests/broken/wrong-type.toml:3:9: `run.steps` must be between 1",
            "tests/broken/wrong-type.toml:6:10: `models.tiny.layers` must be a non-negative integer, found a string",
            "tests/broken/wrong-type.toml:7:10: unknown family `gpt`",
            "tests/broken/wrong-type.toml:10:6: `meshes.tp2.tp` must be a non-negative integer, found a float",
            "tests/broken/wrong-type.toml:11:6: `meshes.tp2.sp` must be true or false, found a string",
        ],
    );
}

#[test]
fn unknown_names_in_matrix_and_mutations() {
    assert_reports(
        "tests/broken/unknown-name.toml",
        &[
            "tests/broken/unknown-name.toml:7:19: unknown model `small`",
            "tests/broken/unknown-name.toml:8:11: unknown mesh `dp3`",
            "tests/broken/unknown-name.toml:9:13: unknown tolerance table `strict`",
            "tests/broken/unknown-name.toml:12:11: unknown mutation `dp-skip-grad-allreduce`",
        ],
    );
    let (rendered, _) = errors_of("tests/broken/unknown-name.toml");
    assert!(rendered.contains("did you mean `dp2`?"), "{rendered}");
    assert!(
        rendered.contains("did you mean `dp-skip-grad-all-reduce`?"),
        "{rendered}"
    );
}

#[test]
fn meshes_that_do_not_divide_the_model() {
    assert_reports(
        "tests/broken/misfit.toml",
        &[
            "tests/broken/misfit.toml:15:6: mesh `tp4` does not fit model `tiny`: kv_heads (2) is not divisible by tp (4)",
            "tests/broken/misfit.toml:18:6: mesh `pp2` does not fit model `tiny`: layers (3) is not divisible by pp (2)",
            "tests/broken/misfit.toml:22:6: mesh `cp2` does not fit model `tiny`: seq_len (15) is not divisible by 2 × cp (4)",
            "tests/broken/misfit.toml:26:6: mesh `ep2` does not fit model `moe`: experts (3) is not divisible by ep (2)",
            "tests/broken/misfit.toml:29:6: mesh `dp4` does not fit model `tiny`: batch (6) is not divisible by dp·microbatches",
            "tests/broken/misfit.toml:32:6: mesh `ep2-tp2` does not fit model `moe`: expert parallelism (ep·etp = 2) with tp = 2 needs sequence parallelism",
        ],
    );
}

#[test]
fn level_the_family_does_not_support() {
    assert_reports(
        "tests/broken/unsupported-level.toml",
        &["tests/broken/unsupported-level.toml:9:22: level `routing` is not supported by family `llama`"],
    );
}

/// A command engine that does not map the files a level is judged from: refused at the level's
/// name in the matrix, one error per side (mesh runs, reference runs), instead of every job
/// failing at run time on a missing internal file.
#[test]
fn levels_an_engine_cannot_produce() {
    assert_reports(
        "tests/broken/unmapped-artifacts.toml",
        &[
            "tests/broken/unmapped-artifacts.toml:17:31: level `oracle` needs `grads` and `weights` in [engines.prog.artifacts] (its mesh runs)",
            "tests/broken/unmapped-artifacts.toml:17:41: level `roundtrip` needs `roundtrip` in [engines.prog.artifacts] (its mesh runs)",
            "tests/broken/unmapped-artifacts.toml:17:41: level `roundtrip` needs `initial` in [engines.prog.artifacts] (its reference runs)",
        ],
    );
    let (_, heads) = errors_of("tests/broken/unmapped-artifacts.toml");
    assert_eq!(heads.len(), 3, "{heads:#?}");
}

/// No follow-on errors (issue 33 item 7): names under a misspelled section are reported once,
/// as the unknown key; a refused mesh does not also make its mutations "apply to no mesh"; a
/// spec without [[matrix]] points at no matrix entry; a value the user never wrote says it is a
/// default.
#[test]
fn one_mistake_one_error() {
    let (_, heads) = errors_of("tests/broken/stray-section.toml");
    assert_eq!(
        heads,
        ["tests/broken/stray-section.toml:12:2: unknown key `mesh` in `spec`"],
        "no `unknown mesh pp2` after it"
    );
    let (rendered, heads) = errors_of("tests/broken/refused-mesh.toml");
    assert!(
        heads.iter().all(|h| h.contains("does not fit")),
        "{heads:#?}"
    );
    assert!(
        !rendered.contains("applies to no selected mesh"),
        "{rendered}"
    );
    assert!(!rendered.contains("matrix entry"), "{rendered}");
    let (rendered, heads) = errors_of("tests/broken/default-misfit.toml");
    assert_eq!(heads.len(), 1, "{heads:#?}");
    assert!(
        rendered.contains("the model default (not written; set it to change it)"),
        "{rendered}"
    );
    assert!(
        rendered.contains("add a [[matrix]] entry that leaves the pair out"),
        "{rendered}"
    );
}

#[test]
fn dtype_without_a_tolerance() {
    assert_reports(
        "tests/broken/missing-tolerance.toml",
        &["tests/broken/missing-tolerance.toml:12:13: tolerance table `strict` has no limits for level `forward` in dtype `bf16`"],
    );
}

#[test]
fn include_cycle() {
    assert_reports(
        "tests/broken/cycle/root.toml",
        &["tests/broken/cycle/b.toml:1:12: include cycle: a.toml → b.toml → a.toml"],
    );
}

#[test]
fn duplicate_names_across_includes() {
    assert_reports(
        "tests/broken/duplicate/root.toml",
        &["tests/broken/duplicate/shared.toml:1:9: mesh `dp2` is defined twice"],
    );
    let (rendered, _) = errors_of("tests/broken/duplicate/root.toml");
    assert!(
        rendered.contains("note: tests/broken/duplicate/root.toml:5:9: first defined here"),
        "{rendered}"
    );
}

#[test]
fn missing_include_points_at_the_include() {
    let files = Mem(&[(
        "root.toml",
        "include = [\"nope.toml\"]\n[models.a]\n[meshes.b]\n",
    )]);
    let err = meshparity_specs::load_with(Path::new("root.toml"), &files).unwrap_err();
    let SpecError::Invalid(d) = err else { panic!() };
    let head = d.iter().next().unwrap().to_string();
    assert!(
        head.starts_with("root.toml:1:12: cannot read included file `nope.toml`"),
        "{head}"
    );
}

#[test]
fn missing_spec_file_is_a_read_error() {
    let err = load(Path::new("tests/broken/does-not-exist.toml")).unwrap_err();
    assert!(matches!(err, SpecError::Read { .. }));
    assert!(err.to_string().contains("does-not-exist.toml"));
}

/// An in-memory file system.
struct Mem(&'static [(&'static str, &'static str)]);

impl meshparity_specs::Files for Mem {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        self.0
            .iter()
            .find(|(p, _)| Path::new(p) == path)
            .map(|(_, t)| t.to_string())
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"))
    }
}

#[test]
fn command_engine_values_a_job_could_not_use() {
    assert_reports(
        "tests/broken/engine-values.toml",
        &[
            "tests/broken/engine-values.toml:4:11: `program` is empty",
            "tests/broken/engine-values.toml:5:19: template: `{{{` is not supported",
            "tests/broken/engine-values.toml:5:36: template: `{{#` is not supported",
            "tests/broken/engine-values.toml:5:60: a NUL byte cannot be passed to a program",
            "environment variable name `A=B` holds `=`",
            "environment variable name `` is empty",
            "artifact path `../../etc/passwd` climbs out with `..`",
            "artifact path `/tmp/logits.safetensors` is absolute",
            "artifact path `../opt.safetensors` climbs out with `..`",
            "log pattern `step (?P<step>\\d+)`: has no named group `loss`",
            "mutation name `bad\\nname` holds a control character",
            "mutation name `a,b` holds `,`",
            "template: `{{ no such }}` is not a value name",
            "tests/broken/engine-values.toml:18:27: template: `{{out_dir}}` stands inside '…' quotes",
            "template: `{{seed}}` stands inside \"…\" quotes",
            "log pattern `(unclosed`",
            "tests/broken/engine-values.toml:37:9: engine `always` traces always but names no trace directory",
            "tests/broken/engine-values.toml:43:9: `engines.sometimes.trace` is `sometimes`",
            "tests/broken/engine-values.toml:48:21: `engines.floors.shrink.layers` must be between 1",
            "tests/broken/engine-values.toml:48:24: unknown key `hidden_size` in `engines.floors.shrink`",
            "tests/broken/engine-values.toml:53:10: `engines.nofloors.shrink` names no value",
        ],
    );
}

/// `artifacts.checkpoint` was renamed `initial` (the round trip's own file is
/// `checkpoint.safetensors`): the old key still works, with a warning naming the new one;
/// both at once are an error.
#[test]
fn the_old_name_of_the_initial_weights_still_reads() {
    let spec = |artifacts: &str| {
        format!(
            "[run]\nbatch = 2\n[engines.p]\nkind = \"command\"\nprogram = \"true\"\n\
             artifacts = {{ curve = \"m.jsonl\", grads = \"g.safetensors\", weights = \"w.safetensors\", {artifacts} }}\n\
             [models.m]\nengine = \"p\"\n[meshes.dp2]\ndp = 2\n[[matrix]]\nlevels = [\"oracle\"]\n"
        )
    };
    let loaded = meshparity_specs::load_text(
        Path::new("old.toml"),
        spec(r#"checkpoint = "i.safetensors""#),
        &meshparity_specs::Disk,
    )
    .unwrap();
    let def = &loaded.spec.engines["p"];
    assert_eq!(
        def.artifacts.initial.as_ref().unwrap().value,
        "i.safetensors"
    );
    let warned: Vec<String> = loaded.warnings.iter().map(|d| d.to_string()).collect();
    assert!(
        warned
            .iter()
            .any(|w| w.contains("`artifacts.checkpoint` is now `artifacts.initial`")),
        "{warned:?}"
    );
    let new = meshparity_specs::load_text(
        Path::new("new.toml"),
        spec(r#"initial = "i.safetensors""#),
        &meshparity_specs::Disk,
    )
    .unwrap();
    assert!(new.spec.engines["p"].artifacts.initial.is_some());
    assert_eq!(new.warnings.iter().count(), 0);
    let both = meshparity_specs::load_text(
        Path::new("both.toml"),
        spec(r#"checkpoint = "i.safetensors", initial = "i.safetensors""#),
        &meshparity_specs::Disk,
    );
    let Err(SpecError::Invalid(d)) = both else {
        panic!("both names at once must be an error");
    };
    assert!(d
        .iter()
        .any(|d| d.to_string().contains("both name the initial weights")));
}

/// The interleaved schedule's constraints, each at the value that breaks it: microbatches in
/// whole groups of pp (as Megatron asserts), a pipeline, two or more chunks, layers that split
/// evenly over pp·virtual_stages; `virtual_stages` without the schedule means nothing.
#[test]
fn interleaved_pipeline_constraints() {
    assert_reports(
        "tests/broken/interleaved.toml",
        &[
            "tests/broken/interleaved.toml:12:16: mesh `odd-microbatches`: the interleaved schedule runs microbatches in groups of pp = 2",
            "tests/broken/interleaved.toml:16:18: mesh `no-schedule`: `virtual_stages` needs `schedule = \"interleaved\"`",
            "tests/broken/interleaved.toml:19:12: mesh `no-pipeline`: the interleaved schedule needs pp ≥ 2",
            "tests/broken/interleaved.toml:23:18: mesh `one-chunk`: the interleaved schedule needs virtual_stages ≥ 2",
            "tests/broken/interleaved.toml:28:18: mesh `uneven` does not fit model `tiny`: layers (4) is not divisible by pp·virtual_stages (2·3 = 6)",
        ],
    );
}

/// `[run]` values a training cannot use, each at its value: clipping to a norm of 0, label
/// smoothing that leaves the label no weight.
#[test]
fn training_values_out_of_range() {
    assert_reports(
        "tests/broken/training-values.toml",
        &[
            "tests/broken/training-values.toml:3:18: `run.clip_grad_norm` is 0",
            "tests/broken/training-values.toml:4:19: `run.label_smoothing` is 1 or more",
            "tests/broken/training-values.toml:5:10: `run.z_loss` is 1 or more",
        ],
    );
}

#[test]
fn mtp_beyond_what_the_engine_builds() {
    assert_reports(
        "tests/broken/mtp.toml",
        &[
            "tests/broken/mtp.toml:3:14: model `deep`: mtp_layers = 2 — the built-in engine builds one",
            "tests/broken/mtp.toml:7:14: model `routed`: mtp_layers is built for family `llama` only",
        ],
    );
}
