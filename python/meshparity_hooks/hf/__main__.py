"""`python -m meshparity_hooks.hf [meshparity's run]`, one process per rank under torchrun.
See the package's text."""

import argparse
import faulthandler
import os
import sys


def parse(argv):
    from .bugs import BUGS

    p = argparse.ArgumentParser(prog="python -m meshparity_hooks.hf")
    for k in ["dp", "tp", "cp", "pp", "ep", "zero", "shard", "seed", "steps", "batch", "seq",
              "weights-after", "warmup-steps", "layers", "hidden", "heads", "kv-heads", "ffn",
              "vocab", "experts", "top-k"]:
        zero = k in ("zero", "shard", "weights-after", "warmup-steps")
        p.add_argument(f"--{k}", type=int, default=0 if zero else 1)
    for k in ["sp", "tie-embeddings"]:
        p.add_argument(f"--{k}", default="false", choices=["true", "false"])
    for k, d in [("lr", 1e-2), ("weight-decay", 0.0), ("clip-grad-norm", 0.0), ("min-lr", 0.0)]:
        p.add_argument(f"--{k}", type=float, default=d)
    p.add_argument("--optimizer", default="adamw")
    p.add_argument("--lr-decay", default="constant")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16", "f64"])
    p.add_argument("--grad-point", default="after_clip", choices=["before_clip", "after_clip"])
    p.add_argument("--architecture", default="llama",
                   help="a transformers model_type (llama, qwen3, qwen3_moe, ...)")
    p.add_argument("--config", default="",
                   help="the user's config.json, or a checkpoint directory holding one "
                        "(its weights, if any, are the initial weights)")
    p.add_argument("--seed-checkpoint", default="")
    p.add_argument("--trace-dir", default="")
    p.add_argument("--bug", default="none", choices=["none"] + BUGS)
    p.add_argument("--out", required=True)
    run = p.parse_args(argv)
    run.sp = run.sp == "true"
    run.tie_embeddings = run.tie_embeddings == "true"
    run.weights_after = run.weights_after or run.steps
    return run


def main():
    faulthandler.enable()
    run = parse(sys.argv[1:])
    import torch.distributed as dist

    if "WORLD_SIZE" in os.environ and not dist.is_initialized():
        dist.init_process_group("gloo")
    from . import trainer
    from .model import ConfigError

    try:
        trainer.Run(run).train()
    except ConfigError as e:
        # "error:" makes it the job's first error line, ahead of torchrun's own report.
        message = str(e).removeprefix("meshparity_hooks.hf: ")
        print(f"meshparity_hooks.hf: error: {message}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(2)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    # Out without the interpreter's finalization (a native thread still joinable at exit
    # aborted a rank after every file was written; examples/command/torch/train.py).
    os._exit(0)


if __name__ == "__main__":
    main()
