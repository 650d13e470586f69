"""One training run of the user's transformers model on meshparity's mesh, with the files.

What runs is transformers' own: the model class for the config, its TP plan and FSDP plan
applied by `from_pretrained(distributed_config=…)`, its own causal-LM loss
(`model.loss_function`, the function its forward calls with `labels`). Around it, what a
training loop of an HF user does and what a parity check needs:

- **world size 1's scaling**: every data-parallel rank's loss is its summed token losses over
  the *global* count of counted tokens (`num_items_in_batch`, as transformers' Trainer passes
  with `average_tokens_across_devices`), and FSDP sums the ranks' gradients (divide factor 1,
  a plain SUM: gloo has no PREMUL_SUM) — so the gradients are world size 1's, not scaled by the
  number of processes and averaged back.
- **clipping** by the global norm (`meshparity_hooks.torch.clip_grads`: HF TP leaves the norms'
  weights plain tensors beside DTensors, a mix `torch.nn.utils.clip_grad_norm_` refuses);
- **the optimizer**: AdamW or SGD (the spec's), weight decay on every weight except biases and
  norms (transformers Trainer's rule), the spec's warmup and decay through transformers'
  `get_scheduler`;
- **the files**: `init.safetensors`, step 1's logits over the global batch with its loss, the
  gradients at the grad point, `final.safetensors`, `metrics.jsonl` (loss and gradient norm per
  step), `roundtrip.safetensors` (the seed checkpoint through transformers' own
  `save_pretrained(distributed_checkpoint=True)` and `from_pretrained` back), `digests.json`, and
  traces (`Tracer` with layouts from the resolved plan, layout.py). Every artifact names a
  parameter as `named_parameters()` does: a tied `lm_head.weight` is the embedding's and appears
  once, as `model.embed_tokens.weight`.
"""

import os
import shutil

import torch
import torch.distributed as dist

from ..torch import Tracer, Writer, clip_grads, grad_norm
from ..torch.norm import local_clip
from ..torch.data import IGNORE_INDEX, global_batch, rows
from . import bugs, layout, model as models

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
          "f64": torch.float64}


def _mesh(model):
    manager = getattr(model, "_mesh_manager", None)
    if manager is None:
        return None
    return manager.get_mesh(("dp_replicate", "fsdp", "tp"))


def _dp_rank(mesh):
    if mesh is None:
        return 0
    replicate, fsdp, _ = mesh.get_coordinate()
    return replicate * mesh.size(1) + fsdp


def sum_gradients(model):
    """FSDP2 sums the data-parallel ranks' gradients instead of averaging them."""
    from torch.distributed.fsdp import FSDPModule

    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)


def parameters(model):
    """(name, parameter) as world size 1 names them: FSDP2's `fully_shard` and transformers' TP
    keep the module names, so `named_parameters()` as it is (the Writer's `grads()` uses the
    same)."""
    return list(model.named_parameters())


def optimizer(run, model):
    decay, rest = [], []
    for name, p in parameters(model):
        owner = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        no_decay = name.endswith("bias") or "norm" in type(owner).__name__.lower()
        (rest if no_decay else decay).append(p)
    groups = [{"params": decay, "weight_decay": run.weight_decay},
              {"params": rest, "weight_decay": 0.0}]
    if run.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=run.lr)
    if run.optimizer != "adamw":
        raise ValueError(f"optimizer {run.optimizer}: the HF adapter runs adamw or sgd")
    return torch.optim.AdamW(groups, lr=run.lr, foreach=False)


def scheduler(run, opt):
    from transformers import get_scheduler

    names = {"constant": "constant_with_warmup", "linear": "linear",
             "cosine": "cosine_with_min_lr"}
    if run.lr_decay not in names:
        raise ValueError(f"lr_decay {run.lr_decay}: the HF adapter has {', '.join(names)}")
    extra = {"min_lr": run.min_lr} if run.lr_decay == "cosine" else None
    if run.lr_decay == "linear" and run.min_lr:
        raise ValueError("transformers' linear schedule decays to 0: min_lr must be 0")
    return get_scheduler(names[run.lr_decay], opt, num_warmup_steps=run.warmup_steps,
                         num_training_steps=run.steps, scheduler_specific_kwargs=extra)


class Run:
    """The model on this rank and everything one run writes."""

    def __init__(self, run):
        self.run = run
        self.config = models.config_of(run)
        run.tp_overrides = bugs.tp_overrides(run.bug, self.config)
        self.dtype = DTYPES[run.dtype]
        state = models.initial_state(run, self.config, bugs.init_seed(run.bug, run.seed))
        if run.tp > 1:
            run.tp_overrides = bugs.check_overrides(run.bug, run.tp_overrides, self.config,
                                                    state)
        self.model = models.load(run, self.config, state, self.dtype)
        self.model.train()
        self.mesh = _mesh(self.model)
        self.dp_rank = _dp_rank(self.mesh)
        if run.bug != "loss-per-rank-mean":
            sum_gradients(self.model)
        self.writer = Writer(run.out, grad_point=run.grad_point)
        site_layouts, self.untraced = layout.layouts(self.model, run.tp)
        # A site whose layout is unknown is left untraced rather than traced wrong.
        traced = [n for n, m in self.model.named_modules()
                  if n and not any(True for _ in m.children()) and n not in self.untraced]
        self.tracer = Tracer(self.model, run.trace_dir, mesh=self.mesh, steps=(0, 1),
                             layouts=site_layouts, tp="tp", dp=("dp_replicate", "fsdp"),
                             modules=traced if self.untraced else None)
        self.opt = optimizer(run, self.model)
        self.schedule = scheduler(run, self.opt)

    def whole(self):
        """The parameters by name (the Writer makes each whole)."""
        return dict(parameters(self.model))

    def roundtrip(self, seed_checkpoint):
        """The seed checkpoint loaded into another instance of this layout, saved with
        transformers' own `save_pretrained(distributed_checkpoint=True)` and loaded back with
        `from_pretrained(distributed_config=…)`: its parameters, whole."""
        from safetensors.torch import load_file

        seed = load_file(seed_checkpoint)
        if self.config.tie_word_embeddings and "lm_head.weight" not in seed:
            seed["lm_head.weight"] = seed["model.embed_tokens.weight"]
        other = models.load(self.run, self.config, seed, self.dtype)
        directory = os.path.join(self.run.out, "roundtrip-hf")
        models.save_distributed(other, directory)
        dist.barrier()
        back = models.model_class(self.config).from_pretrained(
            directory, distributed_config=models.distributed_config(self.run), dtype=self.dtype)
        self.writer.tensors("roundtrip.safetensors", dict(parameters(back)))
        dist.barrier()
        if dist.get_rank() == 0:
            # Only what was loaded back is compared; the checkpoint itself is not kept.
            shutil.rmtree(directory, ignore_errors=True)

    def step(self, step):
        run = self.run
        ids, labels = global_batch(run.seed, step, run.batch, run.seq, self.config.vocab_size)
        dp = run.dp
        mine = rows(run.batch, dp, self.dp_rank)
        counted = (labels != IGNORE_INDEX).sum()
        self.tracer.begin(step - 1)
        logits = self.model(input_ids=ids[mine]).logits
        per_rank_mean = run.bug == "loss-per-rank-mean"
        loss = self.model.loss_function(
            logits=logits, labels=None, vocab_size=self.config.vocab_size,
            num_items_in_batch=None if per_rank_mean else counted, shift_labels=labels[mine])
        loss.backward()
        self.tracer.grads(self.model)
        if step == 1:
            self.writer.grads(self.model, "before_clip")
        params = [p for _, p in parameters(self.model)]
        if run.clip_grad_norm > 0 and run.bug == "clip-local-norm":
            norm = local_clip(params, run.clip_grad_norm)
        elif run.clip_grad_norm > 0:
            norm = clip_grads(params, run.clip_grad_norm)
        else:
            norm = grad_norm(params)
        self.tracer.value("grad_norm", norm)
        self.tracer.end()
        if step == 1:
            self.writer.grads(self.model, "after_clip")
        self.opt.step()
        self.schedule.step()
        self.opt.zero_grad()
        # The loss world size 1 reports: the ranks' token losses summed over the global count
        # (the bug's: the mean of the ranks' means, as its trainer logs it).
        reported = loss.detach().double()
        if self.mesh is not None and dp > 1:
            dist.all_reduce(reported, group=self._dp_group())
            if per_rank_mean:
                reported = reported / dp
        self.writer.metric(step, loss=reported, grad_norm=norm)
        self.writer.inputs(step, ids[mine])
        if step == 1:
            self.writer.tensors("logits.safetensors", {
                "logits": self._rows(logits), "loss": reported.reshape(1)})

    def _dp_group(self):
        """The data-parallel ranks (replicas and FSDP shards), replica-major."""
        return self.mesh[("dp_replicate", "fsdp")]._flatten().get_group()

    def _rows(self, logits):
        """Step 1's logits over the global batch: the data-parallel ranks' rows in order."""
        logits = logits.detach().float().contiguous()
        if self.mesh is None or self.run.dp == 1:
            return logits
        group = self._dp_group()
        parts = [torch.empty_like(logits) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, logits, group=group)
        return torch.cat(parts)

    def train(self):
        run = self.run
        self.writer.tensors("init.safetensors", self.whole())
        if run.seed_checkpoint:
            self.roundtrip(run.seed_checkpoint)
        for step in range(1, run.steps + 1):
            self.step(step)
            if step == run.weights_after:
                self.writer.tensors("final.safetensors", self.whole())
        self.writer.digests(self.model)
