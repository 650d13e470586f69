"""torchtitan's own Trainer, run as it runs, with meshparity's files written beside it.

`ParityTrainer` is torchtitan's `Trainer` (its model, parallelization, loss, optimizer, LR
schedule, clipping and training step untouched), with what a parity check needs added around
them:

- **world size 1's initial weights**: torchtitan initializes each rank's shards after sharding,
  so no layout starts where world size 1 does. Every rank builds the model unsharded, draws its
  weights from the run's seed as torchtitan's `init_weights` draws them, and copies its part of
  each into its shard (`distribute_tensor` to the parameter's own placements). The parameters,
  not the state dict, are copied: the state dict's hooks split a fused `wqkv` on save and merge
  it on load, and DCP's loader then mixed plain tensors and DTensors.
- **the files**: `init.safetensors` (those weights), the first step's logits over the global
  batch with its loss, the gradients at `--grad-point` (torchtitan's `clip_grad_norm_` wrapped:
  before or after it clips), the weights after `--weights-after` steps, `metrics.jsonl` (the loss
  and gradient norm torchtitan logs, every step) and each rank's replica digests. Names are the
  parameters' own, without the wrappers' `_checkpoint_wrapped_module.` / `_orig_mod.`. Under
  pipelining every file is the union of the stages' (stages.py); under context parallelism the
  logits' columns are put back in sequence order (chunks.py).
- **a `[[resume]]` pair's run** (resume.py): saved after `--save-at` steps and resumed through
  torchtitan's own checkpointer, the state merged beside each.
- **bugs to inject** (`--bug`, bugs.py), each a real mistake of a torchtitan setup.
"""

import os

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, distribute_tensor
from torchtitan.distributed import utils as dist_utils
from torchtitan.trainer import Trainer

from ..torch import Writer
from . import bugs, chunks, cpu, resume, stages
from .layout import whole
from .trace import TitanTracer

WRAPPERS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def canonical(name):
    """A parameter's name as world size 1 has it: wrappers' segments dropped."""
    for w in WRAPPERS:
        name = name.replace(w, "")
    return name


class ParityTrainer(Trainer):
    def __init__(self, config, run):
        self.run = run
        super().__init__(config)
        # After torchtitan's init: its `set_determinism` compiles FlexAttention anew.
        cpu.flex_attention_on_cpu()
        cpu.force_sum_reductions(self.model_parts)
        cpu.uneven_all_to_all_on_gloo()
        if self.parallel_dims.pp_enabled:
            cpu.contiguous_stage_outputs(self.model_parts)
        self.writer = Writer(run.out, grad_point=run.grad_point)
        self._world_size_one_init()
        # What the ranks hold, gathered: a rank that drew other weights shows here.
        self.writer.tensors("init.safetensors", self.whole_parameters())
        if run.roundtrip_from:
            self.writer.tensors("roundtrip.safetensors", self._roundtrip(run.roundtrip_from))
        self.losses = {}
        self.step_rows = []
        self.tracer = TitanTracer(self, run.trace_dir, canonical)
        self._wrap_clipping()
        self._wrap_metrics()
        self._wrap_loading()
        bugs.install(self, run.bug)

    # -- initial weights ---------------------------------------------------------------------

    def _load_parameters(self, params):
        """Each of `params` ({canonical name: whole tensor}) copied into this rank's part of the
        parameter of that name (its own placements)."""
        with torch.no_grad():
            for part in self.model_parts:
                for n, p in part.named_parameters():
                    source = params[canonical(n)].to(p.dtype)
                    if isinstance(p, DTensor):
                        # Each rank slices its own draw (no broadcast from rank 0)...
                        local = distribute_tensor(
                            source, p.device_mesh, p.placements, src_data_rank=None).to_local()
                        p.to_local().copy_(local)
                    else:
                        p.copy_(source)

    def _roundtrip(self, seed_checkpoint):
        """meshparity's roundtrip level through torchtitan's own state dict: the seed
        checkpoint loaded into the sharded parameters, the model's state dict (its hooks split a
        fused `wqkv` into `wq`/`wk`/`wv`) saved with DCP and loaded back, the parameters zeroed
        and set from what was loaded (the hooks merge it again), returned whole by parameter
        name. Training then starts from the round-tripped weights."""
        import torch.distributed.checkpoint as dcp
        from safetensors.torch import load_file

        own = [p.to_local().clone() if isinstance(p, DTensor) else p.detach().clone()
               for _, p in self.parameters()]
        self._load_parameters(load_file(seed_checkpoint))
        directory = os.path.join(self.run.out, "roundtrip-dcp")
        # The modules' own state dicts (every stage of this rank: their keys are disjoint), as
        # one checkpoint: DCP's `get_model_state_dict` resolves each key as an attribute path,
        # which a key the hooks renamed (`wq` of a fused `wqkv`) is not.
        own_keys = [list(part.state_dict()) for part in self.model_parts]
        state = {k: v for part in self.model_parts for k, v in part.state_dict().items()}
        dcp.save(state, checkpoint_id=directory)
        back = {k: torch.zeros_like(v) for k, v in state.items()}
        dcp.load(back, checkpoint_id=directory)
        with torch.no_grad():
            for part in self.model_parts:
                for p in part.parameters():
                    p.zero_()
        for part, keys in zip(self.model_parts, own_keys):
            part.load_state_dict({k: back[k] for k in keys}, strict=True)
        out = self.whole_parameters()
        # Training starts from the run's own initial weights, not the seed's: the round trip
        # checks the checkpointer, and must not mask an initialization that differs.
        with torch.no_grad():
            for (_, p), mine in zip(self.parameters(), own):
                (p.to_local() if isinstance(p, DTensor) else p).copy_(mine)
        # Only what it loaded back is compared: the DCP files are not kept (a run directory
        # keeps what its reports cite).
        if dist.is_initialized():
            dist.barrier()
        if not dist.is_initialized() or dist.get_rank() == 0:
            import shutil

            shutil.rmtree(directory, ignore_errors=True)
        return out

    def _world_size_one_init(self):
        """World size 1's initial parameters, drawn whole and loaded into this rank's shards."""
        from torchtitan.tools import utils

        with torch.device("cpu"), utils.set_default_dtype(self.params_dtype()):
            full = self.model_config.build()
        full.to_empty(device="cpu")
        torch.manual_seed(bugs.init_seed(self.run.bug, self.run.seed))
        with torch.no_grad():
            full.init_weights(buffer_device=None)
        self._load_parameters({canonical(n): p.detach() for n, p in full.named_parameters()})

    def params_dtype(self):
        return torch.bfloat16 if self.config.training.dtype == "bfloat16" else torch.float32

    def parameters(self):
        """(canonical name, parameter) of every model part, in order."""
        return [(canonical(n), p) for part in self.model_parts for n, p in part.named_parameters()]

    def whole_parameters(self, grads=False):
        out = {}
        for name, p in self.parameters():
            t = p.grad if grads else p
            if t is None:
                continue
            out[name] = whole(name, t, self.parallel_dims, batch_valued=False)
        # Under pipelining each rank holds its stages' parameters: the union is the model.
        return stages.merged(self.parallel_dims, out)

    # -- what torchtitan computes, recorded ----------------------------------------------------

    def _wrap_clipping(self):
        """torchtitan's `clip_grad_norm_` (its own call, in its train step) with the first
        step's gradients written at the grad point and each step's norm kept."""
        self.clip = dist_utils.clip_grad_norm_
        trainer = self

        def clip(parameters, max_norm, *args, **kwargs):
            parameters = list(parameters)
            first = trainer.step == 1
            trainer.tracer.gradients(trainer.parameters())
            if first and trainer.run.grad_point == "before_clip":
                trainer.writer.tensors("grads.safetensors", trainer.whole_parameters(True))
            norm = trainer.clip(parameters, max_norm, *args, **kwargs)
            trainer.tracer.value("grad_norm", norm)
            if first and trainer.run.grad_point == "after_clip":
                trainer.writer.tensors("grads.safetensors", trainer.whole_parameters(True))
            return norm

        dist_utils.clip_grad_norm_ = clip

    def _wrap_metrics(self):
        """torchtitan's own logged loss and gradient norm, written as metrics.jsonl."""
        log = self.metrics_processor.log
        trainer = self

        def record(step, global_avg_loss, global_max_loss, grad_norm, *args, **kwargs):
            # Under pipelining only the last stage computes the loss (the others log -1).
            global_avg_loss = stages.from_last(trainer, float(global_avg_loss))
            trainer.losses[step] = (float(global_avg_loss), float(grad_norm))
            trainer.writer.metric(step, loss=float(global_avg_loss), grad_norm=float(grad_norm))
            return log(step, global_avg_loss, global_max_loss, grad_norm, *args, **kwargs)

        self.metrics_processor.log = record

    def _wrap_loading(self):
        """torchtitan's own checkpoint load (the first thing its `train()` does), with the
        state as loaded written merged into `--loaded-dir` (a resumed pair's run)."""
        load = self.checkpointer.load
        trainer = self

        def loaded(*args, **kwargs):
            out = load(*args, **kwargs)
            if trainer.run.resume_from and not out:
                raise FileNotFoundError(
                    f"--resume-from {trainer.run.resume_from}: torchtitan's checkpointer found "
                    f"no checkpoint there (a `step-N` folder with DCP's .metadata)")
            if trainer.run.loaded_dir:
                resume.write_merged(trainer, trainer.run.loaded_dir)
            return out

        self.checkpointer.load = loaded

    def should_continue_training(self):
        # A saving pair's run stops once its checkpoint is saved (after step `--save-at`).
        if self.run.save_at and self.step >= self.run.save_at:
            return False
        return super().should_continue_training()

    def forward_backward_step(self, *, input_dict, labels, global_valid_tokens):
        # The rows this rank trains on this step, whole (before a context-parallel split),
        # chunk after chunk: written once the step is done.
        rows, joined = stages.rows(input_dict, labels)
        self.step_rows.append(rows["input"].detach().cpu())
        if self.step == 1 and not getattr(self, "_logits_written", False):
            self._logits_written = True
            self._write_logits(dict(rows), joined, global_valid_tokens)
        return super().forward_backward_step(
            input_dict=input_dict, labels=labels, global_valid_tokens=global_valid_tokens)

    def _write_logits(self, input_dict, labels, global_valid_tokens):
        """The first step's logits over the global batch, from a forward pass of the model as
        it trains (no gradient), under SPMD type checking on the spmd_types backend so their
        layout is known; the loss of the same batch beside them."""
        inputs, labels, extra = self.post_dataloading_process(input_dict, labels)
        self.tracer.positions = self.columns
        pipelined = self.parallel_dims.pp_enabled
        model = self.model_parts[-1]
        skip = getattr(model, "_skip_lm_head", False)
        model._skip_lm_head = False
        # On spmd_types the pass is type checked, pipelined too (torchtitan's config refuses
        # the two together for training; stages.forward hands each activation's types on).
        checking = self.config.parallelism.spmd_backend == "spmd_types"
        context = dist_utils.get_spmd_context(
            parallel_dims=self.parallel_dims, spmd_typechecking=checking)
        kept = _buffers(self.model_parts)
        try:
            with torch.no_grad(), context(), self.tracer.forward_pass():
                if pipelined:
                    logits = stages.forward(self, inputs, extra)
                else:
                    logits = model(inputs, **extra)
        finally:
            model._skip_lm_head = skip
            _restore(self.model_parts, kept)
        if pipelined:
            # Made whole by the last stage's ranks, then handed to every rank.
            if logits is not None:
                logits = self._whole_logits(logits)
            self.first_logits = stages.from_last(self, logits)
            return
        self.first_logits = self._whole_logits(logits)

    def _whole_logits(self, logits):
        """The logits made whole (collective over the ranks holding them), their sequence in
        order under context parallelism."""
        # Gathered after the type-checked region (the annotations stay on the tensor; the
        # checker would refuse meshparity's own gathers of a Varying tensor).
        if self.run.bug != "logits-shard-as-whole":
            logits = whole("logits", logits, self.parallel_dims)
        else:
            # The bug: the rank's own vocabulary shard taken for the whole tensor.
            local = logits.to_local() if isinstance(logits, DTensor) else logits
            logits = whole("logits", local.detach().clone(), self.parallel_dims, trusted=True)
        return chunks.in_order(self.parallel_dims, logits, self.columns, self.run.seq)

    def post_dataloading_process(self, input_dict, labels):
        """torchtitan's, with where each of this rank's columns sits in its sequence kept
        (`columns`: the positions as torchtitan's context-parallel split leaves them, before
        anything else reads them — a bug may alter the ones the model gets)."""
        inputs, labels, extra = super().post_dataloading_process(input_dict, labels)
        self.columns = extra.get("positions")
        return inputs, labels, extra

    def train_step(self, data_iterator):
        self.tracer.begin(self.step - 1)
        self.step_rows = []
        super().train_step(data_iterator)
        self.tracer.end()
        self.writer.inputs(self.step, torch.cat(self.step_rows))
        if self.step == 1:
            loss = torch.tensor([self.losses.get(1, (float("nan"), 0.0))[0]], dtype=torch.float64)
            self.writer.tensors("logits.safetensors", {"logits": self.first_logits, "loss": loss})
        if self.step == self.run.weights_after:
            self.writer.tensors("final.safetensors", self.whole_parameters())
        # A pair's merged states (torchtitan's own save of step `save_at` follows this step).
        if self.step == self.run.state_at:
            resume.write_merged(self, self.run.state_dir)
        if self.step == self.run.save_at:
            resume.write_merged(self, self.run.save_dir)

    def finish(self):
        """Every rank's replica digests, then the files' writer agrees that all went well."""
        self.writer.digests(_Parts(self.model_parts))


def _buffers(parts):
    """Every buffer of the model parts, copied: the logits' pass is not a training step, and a
    forward pass counts into some (a mixture of experts' tokens per expert, which its load
    balancing reads at the optimizer step)."""
    return [[b.detach().clone() for b in part.buffers()] for part in parts]


def _restore(parts, kept):
    with torch.no_grad():
        for part, copies in zip(parts, kept):
            for b, copy in zip(part.buffers(), copies):
                b.copy_(copy)


class _Parts:
    """A rank's model parts (its pipeline stages) as one module's parameters, for the digests."""

    def __init__(self, parts):
        self.parts = parts

    def named_parameters(self):
        for part in self.parts:
            yield from part.named_parameters()


class _NoWait:
    """torchtitan's `time` module for its trainer, less `sleep`: its `train()` ends with rank 0
    sleeping 2 s "for other ranks to complete" (their logging); here every rank meets at the
    writer's collectives and a barrier after, so the 2 s a run are only waited."""

    def __getattr__(self, name):
        import time

        return getattr(time, name)

    @staticmethod
    def sleep(seconds):
        pass


def train(config, run):
    import torchtitan.trainer

    torchtitan.trainer.time = _NoWait()
    trainer = ParityTrainer(config, run)
    try:
        trainer.train()
        trainer.finish()
    finally:
        trainer.close()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    os.sys.stdout.flush()
