//! Hugging Face transformers as it is (examples/command/hf: transformers 5.23's own TP plans and
//! FSDP2 through `from_pretrained(distributed_config=…)`, run by `meshparity_hooks.hf` under
//! torchrun on CPU/gloo), checked at world size 1. Qwen3 — per-head q/k norms, the plan's
//! `replicated_with_grad_allreduce` — on fsdp2·tp2, every level passing, and the HF users'
//! mistakes that exist only there or that name a cause: Qwen3's q/k norms left unreduced (each
//! TP rank keeps its share) and a per-rank mean loss (each replica scaled by its own count),
//! each localized where it is injected with that cause. The Llama with tied embeddings on tp2,
//! every level passing, its tied weight named once in every artifact. The same llama in bf16 on
//! fsdp2: transformers' own save of a tied model, and the trace level on the program's traces.
//!
//! The example's other cells (qwen3-moe, every layout and bug) run the same program: their
//! verdicts are in docs/verdicts.md. Here, a cut that holds CI's budget.

mod common;

use serde_json::Value;

const CUT: &str = "(model=qwen3 and mesh=fsdp2-tp2 and (not level=mutation or \
                   mutation=qk-norm-unreduced,loss-per-rank-mean)) or \
                   (model=llama and mesh=tp2 and not level=mutation)";

/// The adapter on architectures it was not written against (tests/consumers/hf_adapter_check.py,
/// no program run): the activation between a colwise and a rowwise projection is traced as the
/// shard it is (StarCoder2's `mlp.act`), a MoE's experts' leaves untraced, bug switches that
/// change nothing on a model refused (OLMo-2's plan already gathers k/v; Phi-3 has no `k_proj`),
/// an architecture's special tokens kept inside the spec's vocabulary, heads that do not split
/// over tp refused before the first forward. Each found by running held-out architectures.
#[test]
fn the_adapter_decides_right_on_architectures_it_was_not_written_for() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::process::Command::new("python3")
        .arg(format!("{root}/tests/consumers/hf_adapter_check.py"))
        .env("PYTHONPATH", format!("{root}/python"))
        .env("OMP_NUM_THREADS", "1")
        .output()
        .unwrap();
    let log =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && log.contains("ok"), "{log}");
}

/// An HF user's whole spec (llama.toml) is at most 15 lines besides comments, names no program
/// of its own, and plans every level and bug on its layouts; the Qwen3-only bug is planned for
/// the Qwen3 models alone.
#[test]
fn an_hf_users_spec_is_fifteen_lines_and_bugs_go_to_their_models() {
    let text = std::fs::read_to_string("examples/command/hf/llama.toml").unwrap();
    let lines = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .count();
    assert!(lines <= 15, "{lines} lines");
    assert!(!text.contains("program"));
    let names = |spec: &str| -> Vec<String> {
        let out = common::cli()
            .args(["plan", spec, "--format", "json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
        plan["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let mine = names("examples/command/hf/llama.toml");
    for want in [
        "llama@f32/tp2/forward",
        "llama@f32/fsdp2-tp2/roundtrip",
        "llama@f32/fsdp2-tp2/oracle",
        "llama@f32/fsdp2-tp2/mutation[loss-per-rank-mean]",
        "llama@f32/tp2/mutation[kv-gather-output]",
    ] {
        assert!(mine.iter().any(|n| n == want), "{want} not in {mine:?}");
    }
    let all = names("examples/command/hf/models.toml");
    let qk: Vec<&String> = all
        .iter()
        .filter(|n| n.contains("mutation[qk-norm-unreduced]"))
        .collect();
    assert!(!qk.is_empty());
    assert!(
        qk.iter().all(|n| n.starts_with("qwen3")),
        "a Qwen3 bug planned for another model: {qk:?}"
    );
    assert!(mine.iter().all(|n| !n.contains("qk-norm-unreduced")));
}

#[test]
fn transformers_tp_and_fsdp_pass_and_their_bugs_are_caught_where_injected() {
    if !common::python_has(
        "torch.distributed, transformers, accelerate, safetensors",
        "torch transformers accelerate safetensors numpy",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let (code, results) =
        common::run_in_repo(&["examples/command/hf/models.toml", "-f", CUT], &run);
    let jobs = results["jobs"].as_array().unwrap();
    let failed: Vec<(&str, &str)> = jobs
        .iter()
        .filter(|j| j["status"] != "passed")
        .map(|j| {
            (
                j["name"].as_str().unwrap(),
                j["summary"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(code, Some(0));
    // Two references, two trains with their four levels, two bugs.
    assert_eq!(jobs.len(), 14);
    for j in jobs
        .iter()
        .filter(|j| j["level"].is_string() && j["kind"] != "mutation")
    {
        let compared: u64 = j["detail"]["comparisons"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["compared"].as_u64().unwrap_or(0))
            .sum();
        assert!(compared > 0, "{} compared nothing", j["name"]);
        common::judged_inputs(j);
    }
    // Caught, and where localization put the bug: (step, site, localized as injected, cause).
    let located = |job: &str| {
        let j = jobs
            .iter()
            .find(|j| j["name"].as_str().unwrap().ends_with(job))
            .unwrap_or_else(|| panic!("no job for {job}"));
        assert_eq!(j["detail"]["caught"], true, "{j}");
        common::located(jobs, job)
    };
    // Qwen3's per-head norms overridden to `replicate`: each TP rank's copy of the norm's
    // gradient is its own heads' share (the traces write each tp rank's copy).
    let (step, site, injected, cause) = located("qwen3@f32/fsdp2-tp2/mutation[qk-norm-unreduced]");
    assert_eq!(
        (step, injected, cause.as_str()),
        (0, true, "partial:tp"),
        "{site}"
    );
    assert!(site.ends_with("_norm.weight"), "{site}");
    // Each rank's mean over its own tokens: its rows of the loss's gradient scaled by its own
    // count, named as a per-rank normalization, not "summed where it should be averaged".
    let (step, site, injected, cause) = located("qwen3@f32/fsdp2-tp2/mutation[loss-per-rank-mean]");
    assert_eq!(
        (step, site.as_str(), injected, cause.as_str()),
        (0, "lm_head.bwd.in", true, "block-scaled:dp")
    );
    // Tied embeddings: the tied head is the embedding's, named once in every artifact — the
    // llama's runs (the only tied model here) hold no `lm_head.weight` in any file, gradients
    // included, and the embedding in every one.
    let mut tied = 0;
    for dir in std::fs::read_dir(run.join("artifacts")).unwrap() {
        let dir = dir.unwrap().path();
        let Some(grads) = tensor_names(&dir.join("grads.safetensors")) else {
            continue;
        };
        if grads.iter().any(|n| n == "lm_head.weight") {
            continue;
        }
        tied += 1;
        for file in ["grads", "seed", "weights"] {
            let names = tensor_names(&dir.join(format!("{file}.safetensors")))
                .unwrap_or_else(|| panic!("{}: no {file}.safetensors", dir.display()));
            assert!(
                names.iter().any(|n| n == "model.embed_tokens.weight")
                    && !names.iter().any(|n| n == "lm_head.weight"),
                "{}/{file}: {names:?}",
                dir.display()
            );
        }
    }
    assert_eq!(tied, 2, "the llama's reference and tp2 run");
}

/// A tied llama in bf16 on fsdp2, every level. Two things bf16 broke here before:
/// - transformers hands DCP's safetensors writer the tied pair as one tensor, which safetensors
///   refuses wherever a rank's shard owns its storage (bf16 on tp2 and fsdp2; f32's shards are
///   views DCP clones), so every tied run there failed in its round trip; the adapter gives DCP
///   the second name cloned (hf/model.py `save_distributed`) and the round trip matches;
/// - a per-rank mean loss moves the updates by 5–6 %, under the oracle's 12 % layer-averaged
///   bf16 gate (missed on every HF model and mesh with dp); the trace level, on the program's
///   own traces, catches it at `lm_head.bwd.in`, each replica's rows scaled by its own count.
#[test]
fn a_tied_model_in_bf16_saves_through_transformers_and_its_per_rank_loss_is_caught() {
    if !common::python_has(
        "torch.distributed, transformers, accelerate, safetensors",
        "torch transformers accelerate safetensors numpy",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("tied.toml");
    let hf = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/command/hf/hf.toml");
    let text = format!(
        "include = [{hf:?}]\n[run]\nname = \"hf-tied-bf16\"\nsteps = 2\nbatch = 4\n\
         dtype = \"bf16\"\nclip_grad_norm = 1.0\n[models.llama]\nengine = \"hf\"\n\
         architecture = \"llama\"\nlayers = 1\nhidden = 32\nheads = 4\nkv_heads = 2\n\
         ffn = 64\nvocab = 96\nseq_len = 16\ntie_embeddings = true\n\
         [meshes.fsdp2]\ndp = 2\nzero = 3\n"
    );
    std::fs::write(&spec, text).unwrap();
    let run = tmp.path().join("run");
    let filter = "not level=mutation or mutation=loss-per-rank-mean";
    let (code, results) = common::run_in_repo(&[spec.to_str().unwrap(), "-f", filter], &run);
    let jobs = results["jobs"].as_array().unwrap();
    let failed: Vec<&Value> = jobs.iter().filter(|j| j["status"] != "passed").collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(code, Some(0));
    let job = |name: &str| {
        jobs.iter()
            .find(|j| j["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {jobs:#?}"))
    };
    let trace = job("llama@bf16/fsdp2/trace");
    let compared = trace["detail"]["comparisons"][0]["compared"].as_u64();
    assert!(compared.is_some_and(|n| n > 10), "{trace:#}");
    let caught = job("llama@bf16/fsdp2/mutation[loss-per-rank-mean]");
    let by: Vec<&str> = caught["detail"]["caught_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(by.contains(&"trace"), "{caught:#}");
    let (step, site, injected, _) =
        common::located(jobs, "llama@bf16/fsdp2/mutation[loss-per-rank-mean]");
    assert_eq!((step, site.as_str(), injected), (0, "lm_head.bwd.in", true));
}

/// The tensor names in a safetensors file's header, or None when there is no such file.
fn tensor_names(path: &std::path::Path) -> Option<Vec<String>> {
    let bytes = std::fs::read(path).ok()?;
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    Some(
        header
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "__metadata__")
            .cloned()
            .collect(),
    )
}
