"""Hugging Face transformers checked as it is: the user's architecture (a config of theirs, a
checkpoint directory, or the spec's shape in a named `model_type`), distributed by transformers'
own TP plan and FSDP plan through `DistributedConfig`, trained with the model's own loss at
world size 1's scaling, written out as meshparity's artifacts.

    torchrun --nproc-per-node 4 -m meshparity_hooks.hf --tp 2 --dp 2 --zero 3 \\
        --architecture qwen3 --layers 2 --hidden 32 --heads 4 --kv-heads 2 --ffn 64 \\
        --vocab 96 --seed 7 --steps 3 --batch 4 --seq 16 --out OUT

The engine that runs it: examples/command/hf/hf.toml (a user's spec includes it and names an
architecture or a config). The files (`OUT/`): `init.safetensors`, `logits.safetensors`,
`grads.safetensors`, `final.safetensors`, `roundtrip.safetensors`, `metrics.jsonl`,
`digests.json`, and traces under `--trace-dir`.

- `model.py` — the config, world size 1's initial weights, transformers' distributed loading;
- `layout.py` — tracer layouts from the resolved TP plan, unnamed sites included;
- `trainer.py` — the training loop (loss scaling, clipping, optimizer, schedule) and the files;
- `bugs.py` — HF users' mistakes as bug switches, each saying what it replays.

What it shares with the torchtitan adapter: the torch hooks (Writer, Tracer, norms) and the
drawn tokens (`meshparity_hooks.torch.data`).
"""
