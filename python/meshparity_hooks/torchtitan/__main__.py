"""`python -m meshparity_hooks.torchtitan [meshparity's run] -- [the user's torchtitan args]`,
one process per rank under torchrun. See the package's text."""

import argparse
import faulthandler
import os
import sys


USAGE = ("usage: python -m meshparity_hooks.torchtitan [--tp N ...] --out DIR --module M "
         "--config C [-- torchtitan's own arguments]")


def parse(argv):
    """meshparity's options, then after `--` torchtitan's own arguments. `--module` and
    `--config` (torchtitan's) may come before `--`: a command engine's mutation appends its
    `--bug NAME` at the end of the line, which must stay meshparity's."""
    at = argv.index("--") if "--" in argv else len(argv)
    mine, titan = argv[:at], argv[at + 1:]
    from .bugs import BUGS

    p = argparse.ArgumentParser(prog="python -m meshparity_hooks.torchtitan")
    for k in ["dp", "tp", "cp", "pp", "ep", "zero", "shard", "microbatches", "virtual-stages",
              "seed", "steps", "batch", "seq", "weights-after"]:
        p.add_argument(f"--{k}", type=int, default=0 if k in ("zero", "shard") else 1)
    p.add_argument("--sp", default="false")
    p.add_argument("--schedule", default="1f1b")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16", "f64"])
    p.add_argument("--grad-point", default="after_clip", choices=["before_clip", "after_clip"])
    p.add_argument("--trace-dir", default="")
    p.add_argument("--roundtrip-from", default="")
    # A [[resume]] pair's run (resume.py): 0 and empty unless it saves or resumes.
    for k in ("save-at", "state-at"):
        p.add_argument(f"--{k}", type=int, default=0)
    for k in ("save-dir", "resume-from", "loaded-dir", "state-dir"):
        p.add_argument(f"--{k}", default="")
    p.add_argument("--bug", default="none", choices=["none"] + BUGS)
    p.add_argument("--out", required=True)
    p.add_argument("--module", default="")
    p.add_argument("--config", default="")
    run = p.parse_args(mine)
    for key in ("module", "config"):
        if getattr(run, key):
            titan = [f"--{key}", getattr(run, key)] + titan
    if not any(a.startswith("--module") for a in titan):
        raise SystemExit(USAGE)
    run.sp = run.sp == "true"
    run.weights_after = run.weights_after or run.steps
    run.dump = os.path.join(run.out, "torchtitan")
    return run, titan


def main():
    faulthandler.enable()
    run, titan = parse(sys.argv[1:])
    from . import cpu

    cpu.use_cpu()
    from . import config, trainer

    trainer.train(config.load(titan, run), run)
    sys.stdout.flush()
    sys.stderr.flush()
    # Out without the interpreter's finalization (a native thread still joinable at exit
    # aborted a rank after every file was written; examples/command/torch/train.py).
    os._exit(0)


if __name__ == "__main__":
    main()
