//! Sharding plans: full checkpoint → per-rank shard files → merged back, bit-identical; and the
//! merge refuses shards whose replicas disagree or that lack what their stage owns.

use burn::tensor::{DType, Device};
use indexmap::IndexMap;
use meshparity_backends::host::{HostTensor, Param};
use meshparity_backends::llama::{specs, Params};
use meshparity_backends::sharding::{MergeError, ShardingPlan};
use meshparity_compare::{compare_checkpoints, Profile, TensorOptions, Tolerance, Verdict};
use meshparity_engine::checkpoint;
use meshparity_specs::{Family, MeshConfig, ModelConfig, Schedule};

fn model() -> ModelConfig {
    ModelConfig {
        family: Family::Llama,
        layers: 4,
        hidden: 32,
        heads: 4,
        kv_heads: 2,
        ffn: 48,
        vocab: 64,
        seq_len: 16,
        experts: None,
        top_k: None,
        routing_replay: None,
        moe: Default::default(),
        tie_embeddings: None,
        mtp_layers: None,
        engine: None,
        params: Vec::new(),
    }
}

fn mesh(dp: u32, tp: u32, pp: u32, cp: u32, sp: bool) -> MeshConfig {
    MeshConfig {
        dp,
        tp,
        pp,
        cp,
        sp,
        schedule: Schedule::OneFOneB,
        ..MeshConfig::DEFAULT
    }
}

fn full(c: &ModelConfig, dtype: DType) -> IndexMap<String, HostTensor> {
    let p = Params::init(c, 77, &Device::flex(), dtype);
    specs(c)
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                HostTensor::from_param(&p.tensors[&s.name], &s.shape),
            )
        })
        .collect()
}

#[test]
fn every_mesh_round_trips_bit_identically_through_shard_files() {
    let c = model();
    let meshes = [
        mesh(2, 1, 1, 1, false),
        mesh(1, 2, 1, 1, false),
        mesh(1, 2, 1, 1, true),
        mesh(1, 1, 2, 1, false),
        mesh(2, 2, 2, 1, false),
        mesh(1, 2, 1, 2, false),
    ];
    for dtype in [DType::F32, DType::BF16, DType::F64] {
        let full = full(&c, dtype);
        for m in &meshes {
            let dir = tempfile::tempdir().unwrap();
            let original = dir.path().join("full.safetensors");
            checkpoint::save(&original, &full).unwrap();
            let plan = ShardingPlan::llama(&c, m);
            let shards = plan.shard(&full);
            assert_eq!(shards.len(), m.world_size() as usize);
            let mut read_back = Vec::new();
            for (rank, s) in shards.iter().enumerate() {
                let path = dir.path().join(format!("rank-{rank:05}.safetensors"));
                checkpoint::save(&path, s).unwrap();
                read_back.push(checkpoint::load(&path).unwrap());
            }
            let merged = plan.merge(&read_back).unwrap();
            let merged_path = dir.path().join("merged.safetensors");
            checkpoint::save(&merged_path, &merged).unwrap();
            let opts = TensorOptions {
                tolerance: Tolerance {
                    profile: Profile::Exact,
                    ..Tolerance::default()
                },
                ..TensorOptions::default()
            };
            let r = compare_checkpoints(&original, &merged_path, &opts).unwrap();
            assert_eq!(
                r.verdict,
                Verdict::Match,
                "{m:?} {dtype:?}: {:?}",
                r.problems
            );
            assert_eq!(r.counts.tensors_compared, specs(&c).len());
            assert!(r.tensors.iter().all(|t| t.metrics.bit_exact));
        }
    }
}

#[test]
fn shards_hold_the_right_blocks_on_the_right_stages() {
    let c = model();
    let full = full(&c, DType::F32);
    let plan = ShardingPlan::llama(&c, &mesh(1, 2, 2, 1, false));
    let shards = plan.shard(&full);
    // Rank order: tp fastest, so ranks 0, 1 are stage 0 and ranks 2, 3 stage 1.
    assert!(shards[0].contains_key("embed.weight") && !shards[0].contains_key("output.weight"));
    assert!(
        shards[0].contains_key("layers.1.attn.q.weight")
            && !shards[0].contains_key("layers.2.attn.q.weight")
    );
    assert!(
        shards[3].contains_key("layers.3.mlp.down.weight") && shards[3].contains_key("norm.weight")
    );
    // Column-parallel q: rank 1 holds the second half of the columns.
    let q = &full["layers.0.attn.q.weight"];
    let q1 = &shards[1]["layers.0.attn.q.weight"];
    assert_eq!(q1.shape, vec![32, 16]);
    assert_eq!(
        q1.bytes[..16 * 4],
        q.bytes[16 * 4..32 * 4],
        "row 0, columns 16..32"
    );
    // Row-parallel o: rank 1 holds the second half of the rows.
    let o = &full["layers.0.attn.o.weight"];
    assert_eq!(
        shards[1]["layers.0.attn.o.weight"].bytes[..],
        o.bytes[o.bytes.len() / 2..]
    );
    // Vocab-parallel embedding and output; replicated norms.
    assert_eq!(shards[0]["embed.weight"].shape, vec![32, 32]);
    assert_eq!(shards[2]["output.weight"].shape, vec![32, 32]);
    assert_eq!(shards[2]["norm.weight"], full["norm.weight"]);
}

#[test]
fn merge_catches_disagreeing_replicas_and_missing_shards() {
    let c = model();
    let full = full(&c, DType::F32);
    let plan = ShardingPlan::llama(&c, &mesh(2, 2, 1, 1, false));
    let mut shards = plan.shard(&full);
    // A dp replica (rank 3 = tp1, dp1) saved a different q block than rank 1 (tp1, dp0).
    shards[3].get_mut("layers.0.attn.q.weight").unwrap().bytes[0] ^= 1;
    assert_eq!(
        plan.merge(&shards),
        Err(MergeError::ReplicaMismatch {
            name: "layers.0.attn.q.weight".into(),
            rank: 3,
            first: 1
        })
    );
    let mut shards = plan.shard(&full);
    shards[2].shift_remove("norm.weight");
    assert_eq!(
        plan.merge(&shards),
        Err(MergeError::Missing {
            rank: 2,
            name: "norm.weight".into()
        })
    );
    let shards = plan.shard(&full);
    assert!(matches!(
        plan.merge(&shards[..3]),
        Err(MergeError::RankCount { want: 4, got: 3 })
    ));
}

/// A vocabulary tp does not divide: the shards pad it with zero rows (embedding) and columns
/// (output), the merge cuts them off bit-identically, and a padding that is not zero any more
/// (it trained) is refused, whatever the dtype: −0 is still zero.
#[test]
fn a_padded_vocabulary_round_trips_and_its_padding_must_stay_zero() {
    let c = ModelConfig {
        vocab: 61,
        ..model()
    };
    for dtype in [DType::F32, DType::BF16] {
        let full = full(&c, dtype);
        let plan = ShardingPlan::llama(&c, &mesh(1, 4, 1, 1, false));
        let shards = plan.shard(&full);
        assert_eq!(shards[3]["embed.weight"].shape, vec![16, 32]);
        assert_eq!(shards[3]["output.weight"].shape, vec![32, 16]);
        assert_eq!(plan.merge(&shards).unwrap(), full);
        // The last rank's last output column is padding: a −0 there is zero, a 1 is not.
        let size = shards[3]["output.weight"].dtype.size();
        let mut signed = shards.clone();
        let out = signed[3].get_mut("output.weight").unwrap();
        let last = 16 * size - 1;
        out.bytes[last] = 0x80;
        assert_eq!(plan.merge(&signed).unwrap(), full);
        let mut trained = shards.clone();
        let out = trained[3].get_mut("output.weight").unwrap();
        out.bytes[31 * 16 * size + last] = 0x3f;
        assert_eq!(
            plan.merge(&trained),
            Err(MergeError::PaddingTrained {
                name: "output.weight".into(),
                dim: 1,
                at: 63,
                len: 61,
            })
        );
    }
}

/// A mesh that trains beside its reference (the planner does not make a dense model's
/// training wait) makes the seed checkpoint itself: its roundtrip artifact is bit-identical to
/// the one converted from the reference's file, which the roundtrip judge compares it with.
#[test]
fn a_mesh_run_without_its_reference_round_trips_the_same_seed() {
    use meshparity_backends::Backend;
    use meshparity_engine::{files, Engine, RunRequest};
    use meshparity_specs::{Level, Optimizer, Training};

    let c = model();
    let training = Training {
        seed: 5,
        steps: 1,
        oracle_steps: 1,
        batch: 4,
        optimizer: Optimizer::Adamw,
        lr: 1e-3,
        ..Training::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let engine = Backend::cpu();
    let reference = dir.path().join("reference");
    let request = |mesh, reference, out| RunRequest {
        model: &c,
        training: &training,
        dtype: meshparity_specs::DType::F32,
        mesh,
        levels: &[Level::Roundtrip],
        mutation: None,
        reference,
        out,
        trace: false,
    };
    engine
        .reference(&request(None, None, &reference))
        .expect("reference");
    let tp2 = mesh(2, 2, 1, 1, true);
    let beside = dir.path().join("beside");
    let after = dir.path().join("after");
    engine
        .run(&request(Some(&tp2), None, &beside))
        .expect("mesh run without the reference");
    engine
        .run(&request(Some(&tp2), Some(&reference), &after))
        .expect("mesh run with the reference");
    let read = |d: &std::path::Path, f: &str| std::fs::read(d.join(f)).expect(f);
    assert_eq!(
        read(&beside, files::CHECKPOINT),
        read(&after, files::CHECKPOINT)
    );
    let seed = checkpoint::load(&reference.join(files::SEED)).unwrap();
    let back = checkpoint::load(&beside.join(files::CHECKPOINT)).unwrap();
    assert_eq!(seed.len(), back.len());
    for (name, t) in &seed {
        assert_eq!(t.bytes, back[name].bytes, "{name}");
    }
}
