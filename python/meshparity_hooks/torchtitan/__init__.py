"""torchtitan checked as it runs: the user's own config, model, parallelization, loss,
optimizer, schedule and clipping, on any layout meshparity asks for, written out as meshparity's
artifacts.

    torchrun --nproc-per-node N -m meshparity_hooks.torchtitan --tp 2 --dp 2 --zero 3 \\
        --seed 7 --steps 4 --batch 8 --seq 32 --out OUT --module llama3 \\
        --config llama3_debugmodel [-- more of torchtitan's own arguments]

`--module`/`--config` and everything after `--` are the user's torchtitan command line, parsed
by torchtitan's own `ConfigManager`. The rest is meshparity's run (its command engine's template
values): the mesh, the run's length, batch, sequence, seed and dtype, where the gradients are
taken, the seed checkpoint to round-trip, a bug to inject. The files (`OUT/`):
`init.safetensors`, `logits.safetensors`, `grads.safetensors`, `final.safetensors`,
`roundtrip.safetensors`, `metrics.jsonl`, `digests.json`. The engine that runs it:
examples/command/torchtitan/torchtitan.toml.

- `config.py` — the user's config with meshparity's layout and run (what is set, and why);
- `data.py` — the tokens every layout trains on, drawn from (seed, step);
- `cpu.py` — the CPU adaptations, each with why;
- `layout.py` — any torchtitan tensor (DTensor, SPMD-typed local, plain) made whole, or refused;
- `stages.py` — pipeline stages: what each rank holds merged, the logits' pass stage by stage;
- `chunks.py` — context parallelism: a sequence's chunks gathered and put back in order;
- `trainer.py` — torchtitan's Trainer with world size 1's initial weights and the files;
- `bugs.py` — the bug switches, each citing the report it replays.

Import nothing of this package before `cpu.use_cpu()` has run on a machine without a GPU:
torchtitan reads its device when first imported (`__main__` orders it).
"""
