//! `[run]`'s keys' table (specs/src/run/keys.rs) against the decoder: a job's settings written
//! back through the table read back as the same settings, every key set and none. Outside the
//! crate: the decoder reaches the whole spec loader, which the `run` module must not import.

use std::path::Path;

use meshparity_specs::run::keys::{self, Job};
use meshparity_specs::run::RunSettings;
use meshparity_specs::schedule::{LrDecay, LrSchedule};
use meshparity_specs::{DType, Dropout, Loc, Optimizer, Packing, Recompute, SourceFile, Training};

/// `[run]` from the table, around one model, mesh and level: the spec a repro writes.
fn round_trip(job: Job<'_>) -> (Training, DType) {
    let run = toml::to_string(&keys::table("repro", job)).unwrap();
    let text = format!(
        "[run]\n{run}\n[models.m]\nlayers = 1\nhidden = 16\nheads = 2\nffn = 16\nvocab = 32\n\
         seq_len = 8\n[meshes.tp2]\ntp = 2\n[[matrix]]\nlevels = [\"oracle\"]\n"
    );
    let loaded = meshparity_specs::load_text(
        Path::new("repro.toml"),
        text.clone(),
        &meshparity_specs::Disk,
    )
    .unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    let run = loaded.spec.run;
    (run.training, run.dtype.value)
}

fn plain() -> Training {
    let file = SourceFile::new("repro.toml", "");
    RunSettings::defaults(Loc::new(&file, 0..0)).training
}

#[test]
fn a_job_with_every_key_set_reads_back_as_itself() {
    let training = Training {
        seed: 77,
        steps: 6,
        oracle_steps: 3,
        batch: 4,
        optimizer: Optimizer::Sgd,
        lr: 0.02,
        clip_grad_norm: Some(0.5),
        weight_decay: Some(0.1),
        schedule: Some(LrSchedule {
            warmup_steps: 1,
            decay: LrDecay::Cosine,
            min_lr: 1e-4,
        }),
        label_smoothing: Some(0.1),
        z_loss: Some(1e-4),
        dropout: Some(Dropout {
            attention: 0.1,
            hidden: 0.2,
        }),
        recompute: Some(Recompute::Selective),
        packing: Some(Packing {
            documents: true,
            prompts: true,
            pad_to: Some(4),
        }),
        ..Training::default()
    };
    let job = Job {
        training: &training,
        dtype: DType::Bf16,
    };
    assert_eq!(round_trip(job), (training.clone(), DType::Bf16));
}

#[test]
fn a_job_with_every_default_writes_only_what_it_trains_with() {
    let training = plain();
    let job = Job {
        training: &training,
        dtype: DType::F32,
    };
    let table = keys::table("repro", job);
    let written: Vec<&str> = table.keys().map(String::as_str).collect();
    assert_eq!(
        written,
        [
            "name",
            "seed",
            "dtype",
            "steps",
            "oracle_steps",
            "batch",
            "optimizer",
            "lr"
        ]
    );
    assert_eq!(round_trip(job), (training, DType::F32));
}

/// Every key a command template sees is a `[run]` key the table lists once.
#[test]
fn template_values_are_the_keys_that_set_a_job() {
    let training = plain();
    let names: Vec<&str> = keys::template_values(Job {
        training: &training,
        dtype: DType::F32,
    })
    .map(|(k, _)| k)
    .collect();
    let all: Vec<&str> = keys::names().collect();
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), all.len(), "a key listed twice: {all:?}");
    for n in &names {
        assert!(all.contains(n), "{n}");
    }
    for n in ["name", "output", "device"] {
        assert!(!names.contains(&n), "{n}");
    }
    assert_eq!(names.len(), all.len() - 3);
}

/// `steps = 1` with `oracle_steps` left out: the default (2) is held to the run's one step —
/// a command engine's program told to record its weights after a step it never takes wrote
/// none, and the reference failed with "the program wrote no `final.safetensors`".
#[test]
fn the_default_oracle_steps_never_exceed_the_runs_steps() {
    let text = "[run]\nsteps = 1\n[models.m]\nlayers = 1\nhidden = 16\nheads = 2\nffn = 16\n\
                vocab = 32\nseq_len = 8\n[meshes.tp2]\ntp = 2\n";
    let loaded =
        meshparity_specs::load_text(Path::new("s.toml"), text.into(), &meshparity_specs::Disk)
            .unwrap_or_else(|e| panic!("{e:?}"));
    let t = loaded.spec.run.training;
    assert_eq!((t.steps, t.oracle_steps), (1, 1));
    assert!(plain().oracle_steps > 1, "the default itself is unchanged");
}
