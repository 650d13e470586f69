"""The user's torchtitan job config, as torchtitan parses it, with meshparity's layout and run.

The config is the user's: `--module M --config C` selects their registry entry and every other
torchtitan argument overrides it (torchtitan's own `ConfigManager` does both). meshparity then
sets only what a parity run fixes — the mesh, the run's length, batch, sequence and seed, the
data — and leaves the model, its parallelization plan, loss, optimizer, schedule and clipping as
the config says:

- parallelism: `tensor_parallel_degree` = tp, `enable_sequence_parallel` = sp,
  `context_parallel_degree` = cp, `pipeline_parallel_degree` = pp with the schedule
  (`1f1b` 1F1B, `gpipe` GPipe, interleaved: Interleaved1F1B, torchtitan's two stages per rank
  unless the config sets its layers per stage) and a microbatch of local batch / microbatches
  rows, `expert_parallel_degree` = ep; data parallelism: with ZeRO
  or FSDP (`zero` ≥ 1) `data_parallel_shard_degree` = the shard group and
  `data_parallel_replicate_degree` = dp / it (FSDP, or HSDP), else DDP
  (`data_parallel_replicate_degree` = dp);
- training: `steps`, `local_batch_size` = batch / dp and `global_batch_size` = batch (no
  gradient accumulation unless the config asks), `seq_len`, `debug.seed` and
  `debug.deterministic`;
- precision: in f32 `mixed_precision_param = float32` (torchtitan's default bf16 applies through
  FSDP on sharded meshes but through autocast at world size 1: other arithmetic per layout); in
  bf16 the config's own;
- what a parity run cannot use: the dataset and tokenizer (data.py's drawn tokens instead),
  compile, CUDA graphs, the validator, tensorboard and wandb, and torchtitan's periodic
  checkpoints (the round trip and a `[[resume]]` pair's run save where meshparity says:
  resume.py).
"""

from torchtitan.config import ConfigManager

from . import resume
from .data import Tokens, Untokenized

SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}


def load(titan_args, run):
    """The Trainer config for torchtitan arguments `titan_args` under meshparity run `run`."""
    config = ConfigManager().parse_args(list(titan_args))
    p = config.parallelism
    p.tensor_parallel_degree = run.tp
    p.enable_sequence_parallel = run.sp and run.tp > 1
    p.context_parallel_degree = run.cp
    p.pipeline_parallel_degree = run.pp
    if hasattr(p, "expert_parallel_degree"):
        p.expert_parallel_degree = run.ep
    if run.zero >= 1 and run.dp > 1:
        shard = run.shard or run.dp
        p.data_parallel_shard_degree = shard
        p.data_parallel_replicate_degree = run.dp // shard
    else:
        p.data_parallel_shard_degree = 1
        p.data_parallel_replicate_degree = run.dp
    local = run.batch // run.dp
    if run.pp > 1:
        schedule = SCHEDULES.get(run.schedule, run.schedule)
        if run.virtual_stages > 1 and schedule == "1F1B":
            schedule = "Interleaved1F1B"
        p.pipeline_parallel_schedule = schedule
        if (schedule.startswith("Interleaved") and run.virtual_stages not in (1, 2)
                and p.pipeline_parallel_layers_per_stage is None):
            raise ValueError(
                f"virtual_stages = {run.virtual_stages}: torchtitan places two stages per rank "
                f"for an interleaved schedule unless the config sets "
                f"`parallelism.pipeline_parallel_layers_per_stage`; set it (after `--` on the "
                f"engine's args) so the stages come to {run.virtual_stages} per rank, or use "
                f"virtual_stages = 2")
        p.pipeline_parallel_microbatch_size = max(1, local // max(1, run.microbatches))
    t = config.training
    t.steps = run.steps
    t.local_batch_size = local
    t.global_batch_size = run.batch
    t.seq_len = run.seq
    if run.dtype == "f32":
        t.mixed_precision_param = "float32"
        t.dtype = "float32"
    config.debug.seed = run.seed
    config.debug.deterministic = True
    vocab = vocabulary(config)
    config.tokenizer = Untokenized.Config(vocab=vocab)
    config.dataloader = Tokens.Config(seed=run.seed, global_batch=run.batch, vocab=vocab)
    config.compile.enable = False
    t.disable_cuda_graphs = True
    config.validator.enable = False
    config.metrics.enable_tensorboard = False
    config.metrics.enable_wandb = False
    config.metrics.log_freq = 1
    config.checkpoint.enable = False
    resume.configure(config, run)
    config.dump_folder = run.dump
    return config


def vocabulary(config):
    """The model's vocabulary size, from its registry config."""
    model = config.model_spec.model
    for key in ("vocab_size",):
        if getattr(model, key, None):
            return int(getattr(model, key))
    raise ValueError(f"cannot tell the vocabulary size of {type(model).__name__}")
