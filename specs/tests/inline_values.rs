//! Values written inline in a spec, refused where they are written (file:line:column, what
//! to do): a model's vocabulary and device, GPU tolerance tables, moe options, the padding of
//! packed documents. The broken spec files under `tests/broken/` are errors.rs's.

use std::path::Path;

use meshparity_specs::SpecError;

#[test]
fn a_one_token_vocabulary_is_refused_where_it_is_written() {
    let text = "[models.tiny]\nvocab = 1\n\n[meshes.dp2]\ndp = 2\n";
    match meshparity_specs::load_text(
        Path::new("vocab.toml"),
        text.into(),
        &meshparity_specs::Disk,
    ) {
        Err(SpecError::Invalid(d)) => {
            let heads: Vec<String> = d.iter().map(|d| format!("{d}")).collect();
            assert!(
                heads.iter().any(
                    |h| h.starts_with("vocab.toml:2:9: model `tiny`: vocab must be at least 2")
                ),
                "{heads:?}"
            );
        }
        other => panic!(
            "a one-token vocabulary must not load: {:?}",
            other.map(|_| ())
        ),
    }
}

fn heads_of(text: &str) -> Vec<String> {
    match meshparity_specs::load_text(
        Path::new("device.toml"),
        text.into(),
        &meshparity_specs::Disk,
    ) {
        Err(SpecError::Invalid(d)) => d.iter().map(|d| format!("{d}")).collect(),
        other => panic!("{text} must not load: {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_malformed_device_is_refused_where_it_is_written() {
    let heads = heads_of("[run]\ndevice = \"cuda\"\n\n[models.m]\ndevice = \"gpu:x\"\n");
    for want in [
        "device.toml:2:10: `cuda` is not a device; expected \"cpu\", \"gpu\" or \"gpu:N\"",
        "device.toml:5:10: `gpu:x` is not a device",
    ] {
        assert!(
            heads.iter().any(|h| h.starts_with(want)),
            "{want}\n{heads:?}"
        );
    }
}

#[test]
fn builtin_gpu_is_a_reserved_table_name() {
    let heads = heads_of("[tolerances.builtin-gpu]\nforward = \"exact\"\n");
    assert!(
        heads
            .iter()
            .any(|h| h.contains("is the name of a built-in tolerance table")),
        "{heads:?}"
    );
}

#[test]
fn a_gpu_default_table_must_cover_what_the_matrix_asks() {
    // Fine on the CPU; on a GPU `default-gpu` applies and has no f32 forward limits.
    let text = "[models.m]\n[meshes.dp2]\ndp = 2\n[[matrix]]\nlevels = [\"forward\"]\n\
                [tolerances.default-gpu]\nforward.f64 = { rtol = 1e-9 }\n";
    let loaded = meshparity_specs::load_text(
        Path::new("device.toml"),
        text.into(),
        &meshparity_specs::Disk,
    )
    .expect("valid on the CPU");
    match loaded.with_device("gpu".parse().unwrap()) {
        Err(SpecError::Invalid(d)) => {
            let heads: Vec<String> = d.iter().map(|d| format!("{d}")).collect();
            assert!(
                heads.iter().any(|h| {
                    h.contains(
                    "tolerance table `default-gpu` has no limits for level `forward` in dtype `f32`"
                )
                }),
                "{heads:?}"
            );
        }
        other => panic!("must not load on a GPU: {:?}", other.map(|_| ())),
    }
}

#[test]
fn moe_options_are_refused_where_they_do_not_apply() {
    let heads = heads_of(
        "[models.dense]\nrouter = \"sigmoid\"\ncapacity_factor = 1.0\n\n\
         [models.m]\nfamily = \"moe\"\ndrop_policy = \"position\"\nrouter = \"argmax\"\n\n\
         [models.z]\nfamily = \"moe\"\ncapacity_factor = 0\n\n[meshes.dp2]\ndp = 2\n\n\
         [models.t]\naux_loss_normalization = \"token\"\n\n\
         [models.u]\nfamily = \"moe\"\naux_loss_normalization = \"microbatch\"\n",
    );
    for want in [
        "device.toml:2:10: `router` only applies to family `moe`",
        "device.toml:3:19: `capacity_factor` only applies to family `moe`",
        "device.toml:7:15: `models.m.drop_policy` without `capacity_factor`",
        "device.toml:8:10: unknown router score function `argmax`",
        "device.toml:12:19: `models.z.capacity_factor` must be greater than 0",
        "device.toml:18:26: `aux_loss_normalization` only applies to family `moe`",
        "device.toml:22:26: unknown load-balance normalization `microbatch`",
    ] {
        assert!(
            heads.iter().any(|h| h.starts_with(want)),
            "{want}\n{heads:?}"
        );
    }
}

#[test]
fn moe_options_load_into_the_model_config() {
    let text = "[models.m]\nfamily = \"moe\"\nrouter = \"sigmoid\"\nexpert_bias = true\n\
                shared_expert_ffn = 32\ncapacity_factor = 1.25\ndrop_policy = \"position\"\n\
                aux_loss_normalization = \"token\"\n\n[meshes.dp2]\ndp = 2\n";
    let loaded =
        meshparity_specs::load_text(Path::new("m.toml"), text.into(), &meshparity_specs::Disk)
            .unwrap_or_else(|e| panic!("{e:?}"));
    let moe = loaded.spec.models["m"].config().moe;
    assert_eq!(moe.router(), meshparity_specs::RouterScore::Sigmoid);
    assert!(moe.expert_bias());
    assert_eq!(moe.shared_expert_ffn, Some(32));
    assert_eq!(
        moe.capacity(),
        Some((1.25, meshparity_specs::DropPolicy::Position))
    );
    assert_eq!(
        moe.aux_normalization(),
        meshparity_specs::AuxNormalization::Token
    );
}

/// The shared expert is TP-sharded like the dense MLP: a size tp does not divide is refused at
/// the mesh, pointing at the model's key, before anything runs.
#[test]
fn a_shared_expert_tp_cannot_split_is_refused_where_it_is_written() {
    let heads =
        heads_of("[models.m]\nfamily = \"moe\"\nshared_expert_ffn = 33\n\n[meshes.tp2]\ntp = 2\n");
    assert!(
        heads
            .iter()
            .any(|h| h.contains("shared_expert_ffn (33) is not divisible by tp (2)")),
        "{heads:?}"
    );
}

/// `pad_documents_to` (the THD layout): refused without packed documents or below 2 at its
/// key, and where a mesh's 2·cp does not divide it or it does not divide a model's rows, at
/// both the mesh's and the run's (or the model's) values.
#[test]
fn document_padding_is_refused_where_it_cannot_cut_documents() {
    let heads = heads_of("[run]\npad_documents_to = 8\n\n[models.m]\n\n[meshes.cp2]\ncp = 2\n");
    assert!(
        heads.iter().any(|h| h.starts_with(
            "device.toml:2:20: `run.pad_documents_to` needs `packed_sequences = true`"
        )),
        "{heads:?}"
    );
    let heads = heads_of(
        "[run]\npacked_sequences = true\npad_documents_to = 1\n\n[models.m]\n\n[meshes.cp2]\ncp = 2\n",
    );
    assert!(
        heads
            .iter()
            .any(|h| h.starts_with("device.toml:3:20: `run.pad_documents_to` is 1")),
        "{heads:?}"
    );
    let packed = "[run]\npacked_sequences = true\n";
    for (rest, want) in [
        (
            "pad_documents_to = 4\n\n[models.m]\nseq_len = 16\n\n[meshes.cp4]\ncp = 4\n",
            "device.toml:9:6: mesh `cp4` does not fit model `m`: pad_documents_to (4) is not divisible by 2 × cp (8)",
        ),
        (
            "pad_documents_to = 8\n\n[models.m]\nseq_len = 20\n\n[meshes.cp2]\ncp = 2\n",
            "device.toml:3:20: mesh `cp2` does not fit model `m`: seq_len (20) is not divisible by pad_documents_to (8)",
        ),
    ] {
        let heads = heads_of(&format!("{packed}{rest}"));
        assert!(heads.iter().any(|h| h.starts_with(want)), "{want}\n{heads:?}");
    }
    let fine =
        "[run]\npacked_sequences = true\npad_documents_to = 8\n\n[models.m]\nseq_len = 16\n\n\
                [meshes.cp4]\ncp = 4\n";
    let loaded =
        meshparity_specs::load_text(Path::new("t.toml"), fine.into(), &meshparity_specs::Disk)
            .unwrap_or_else(|e| panic!("{e:?}"));
    let packing = loaded.spec.run.training.packing.expect("packed");
    assert_eq!(packing.pad_to, Some(8));
}
