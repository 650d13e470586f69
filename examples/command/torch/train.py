#!/usr/bin/env python3
"""A small PyTorch trainer as torchtitan builds one: DTensor tensor parallelism with sequence
parallelism (`parallelize_module` with Colwise/Rowwise/SequenceParallel), FSDP2 (`fully_shard`)
over the data-parallel ranks, AdamW, gradient clipping, prompt-masked labels — launched by
`torchrun --nproc-per-node N` on CPU/gloo. It knows nothing of meshparity beyond writing its
files with `meshparity_hooks.torch` (which gathers DTensors and FSDP shards on every rank and
writes on rank 0):

    metrics.jsonl         {"step", "loss", "grad_norm"} per step
    logits.safetensors    first-step logits [batch, seq, vocab] and loss
    grads.safetensors     first-step gradients, at --grad-point (before or after clipping)
    init.safetensors      the initial weights; final.safetensors after --weights-after steps
    roundtrip.safetensors with --roundtrip-from CKPT: the checkpoint through DCP and back
    digests.json          each rank's hash and norm of every parameter it holds, by replica group
    TRACE/                with --trace-dir: every module's output, the gradient arriving at it
                          and the finalized gradients of the first two steps
                          (meshparity_hooks.torch.Tracer)

Bug switches (`--bug NAME`), each a way such stacks have gone wrong:
    clip-local-norm        each rank clips by the norm of its own shards (SpecForge PR#663)
    local-loss-normalization  each data-parallel rank divides its loss by its own count of
                           labels that count (prompts masked: the counts differ)
    init-per-rank-seed     each rank seeds its initialization with seed + rank, and FSDP shards
                           each rank's own draw (torchtitan PR#1363, detr#544)
    norm-drift-one-tp-rank the second TP rank's layer norms move by 1e-2 after each update (a
                           replicated parameter drifting, BLOOM-176B's desync found by TrainCheck)
    dropout-local-shape    the residual dropout is torch's own over each rank's local tensor
                           (nn.Dropout as written for one device), not world size 1's mask at the
                           rank's positions
    sampler-rank-unwired   every data-parallel rank takes the first rank's rows: the sampler
                           built without the rank (VisCy PR#408: FlexibleBatchSampler defaulted to
                           (1, 0), every rank yielded identical batches; speculators PR#427: the
                           node-local rank passed, nodes trained on the same shards)

With --dropout P each block's residual branch is dropped with probability P by a mask drawn
over the whole global batch from (seed, step, layer) alone (meshparity_hooks.torch.dropout_mask)
and cut to the rank's rows and, under SP, its sequence chunk: a rank drops what world size 1
drops there.
"""

import argparse
import faulthandler
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

from meshparity_hooks.torch import Tracer, Writer, clip_grads, dropout_mask, grad_norm, roundtrip

BUGS = ["clip-local-norm", "local-loss-normalization", "init-per-rank-seed",
        "norm-drift-one-tp-rank", "dropout-local-shape", "sampler-rank-unwired"]

# This step's dropout: (seed, step, p, the rank's rows, its sequence positions, the bug's flag);
# set by the training loop, read by the blocks.
DROPOUT = {}


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for k in ["tp", "dp", "seed", "steps", "batch", "layers", "hidden", "ffn", "vocab", "seq"]:
        p.add_argument(f"--{k}", type=int, default=1)
    p.add_argument("--sp", default="false")
    p.add_argument("--weights-after", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--clip-grad-norm", type=float, default=0.0)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--grad-point", default="after_clip", choices=["before_clip", "after_clip"])
    p.add_argument("--out", required=True)
    p.add_argument("--roundtrip-from", default="")
    p.add_argument("--trace-dir", default="")
    p.add_argument("--bug", default="none", choices=["none"] + BUGS)
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, a, index):
        super().__init__()
        self.index = index
        self.norm = nn.LayerNorm(a.hidden)
        self.w1 = nn.Linear(a.hidden, a.ffn, bias=False)
        self.w2 = nn.Linear(a.ffn, a.hidden, bias=False)
        self.drop = Dropout(index)

    def forward(self, x):
        return x + self.drop(self.w2(torch.nn.functional.gelu(self.w1(self.norm(x)))))


class Dropout(nn.Module):
    """The residual branch's dropout at world size 1's positions (see the module's text); a
    module, so the tracer sees what it drops."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, y):
        d = DROPOUT
        if not d or d["p"] == 0.0:
            return y
        if d["bug"]:
            return nn.functional.dropout(y, d["p"], training=True)
        shape = (d["batch"], d["seq"], y.shape[-1])
        keep = dropout_mask(d["seed"], d["step"], f"layers.{self.layer}.hidden", shape, d["p"],
                            (d["rows"], d["positions"]))
        return y * keep.to(y.dtype)


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.hidden)
        self.layers = nn.ModuleList(Block(a, i) for i in range(a.layers))
        self.norm = nn.LayerNorm(a.hidden)
        self.head = nn.Linear(a.hidden, a.vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def data(a, step):
    """The global batch of `step`, the same at every world size: tokens, and labels with each
    row's first (row mod 3) + 1 positions masked (-100) as prompts, so counts differ by row."""
    g = torch.Generator().manual_seed(a.seed * 1000 + step)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
    labels = ids[:, 1:].clone()
    for r in range(a.batch):
        labels[r, : r % 3 + 1] = -100
    return ids[:, :-1], labels


def parallelize(model, mesh, a):
    """torchtitan's plan: vocabulary-parallel embedding, Colwise w1, Rowwise w2, the norms
    sequence-parallel with --sp; then FSDP2 over dp."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    sp = a.sp == "true"
    if a.tp > 1:
        seq = Shard(1) if sp else Replicate()
        plan = {
            "embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
            "norm": SequenceParallel() if sp else None,
            "head": ColwiseParallel(input_layouts=seq, output_layouts=Replicate()),
        }
        for i in range(a.layers):
            plan[f"layers.{i}.norm"] = SequenceParallel() if sp else None
            plan[f"layers.{i}.w1"] = ColwiseParallel(input_layouts=seq)
            plan[f"layers.{i}.w2"] = RowwiseParallel(output_layouts=seq)
        parallelize_module(model, mesh["tp"], {k: v for k, v in plan.items() if v is not None})
    if a.dp > 1:
        for layer in model.layers:
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    return model


def layouts(a):
    """How each traced module's plain local output is laid out over tp (for the Tracer)."""
    if a.tp == 1:
        return {}
    out = {"layers.*.w1*": "shard:-1"}
    if a.sp == "true":
        out.update({"embed*": "shard:1", "layers.*.w2*": "shard:1", "layers.*.drop*": "shard:1"})
    return out


def local_norm(params):
    sq = sum((p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad).float().pow(2).sum()
             for p in params if p.grad is not None)
    return sq.sqrt()


def main():
    # A rank that dies in native code (SIGABRT, SIGSEGV) prints its Python stack first.
    faulthandler.enable()
    a = parse()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == a.dp * a.tp, f"world size {world} is not dp {a.dp} x tp {a.tp}"
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (a.dp, a.tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(a.seed + (rank if a.bug == "init-per-rank-seed" else 0))
    model = parallelize(Model(a), mesh, a)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0, foreach=False)
    w = Writer(a.out, grad_point=a.grad_point)
    tracer = Tracer(model, a.trace_dir, mesh=mesh, steps=(0, 1), layouts=layouts(a))
    if a.roundtrip_from:
        # Another instance of the same layout: the checkpoint must not become the weights
        # this run trains.
        w.tensors("roundtrip.safetensors",
                  roundtrip(parallelize(Model(a), mesh, a), a.roundtrip_from,
                            os.path.join(a.out, "dcp")))
    w.tensors("init.safetensors", model.state_dict())
    d = mesh.get_coordinate()[0]
    if a.bug == "sampler-rank-unwired":
        d = 0  # the sampler was never told this rank's place
    rows = slice(d * a.batch // a.dp, (d + 1) * a.batch // a.dp)
    weights_after = a.weights_after or a.steps
    for step in range(1, a.steps + 1):
        ids, labels = data(a, step)
        counted = (labels != -100).sum()
        mine = (labels[rows] != -100).sum()
        normalizer = mine if a.bug == "local-loss-normalization" else counted
        tp_rank = mesh.get_coordinate()[1]
        chunk = a.seq // a.tp
        DROPOUT.update(
            seed=a.seed, step=step, p=a.dropout, batch=a.batch, seq=a.seq, rows=rows,
            positions=slice(tp_rank * chunk, (tp_rank + 1) * chunk) if a.sp == "true"
            else slice(None),
            bug=a.bug == "dropout-local-shape")
        tracer.begin(step - 1)
        logits = model(ids[rows])
        total = nn.functional.cross_entropy(
            logits.reshape(-1, a.vocab).float(), labels[rows].reshape(-1),
            ignore_index=-100, reduction="sum")
        (total / normalizer).backward()
        # The loss is normalized by the global count, so the ranks' gradients must be summed;
        # FSDP2 averages them (its divide factor 1 needs PREMUL_SUM, which gloo lacks), so
        # undo that here rather than scale the loss, which would scale every backward value.
        if a.dp > 1:
            for p in model.parameters():
                p.grad.mul_(a.dp)
        tracer.grads(model)
        if step == 1:
            w.grads(model, "before_clip")
        if a.clip_grad_norm > 0 and a.bug == "clip-local-norm":
            norm = local_norm(model.parameters())
            coeff = torch.clamp(a.clip_grad_norm / (norm + 1e-6), max=1.0)
            for p in model.parameters():
                p.grad.mul_(coeff.item())
        elif a.clip_grad_norm > 0:
            norm = clip_grads(model.parameters(), a.clip_grad_norm)
        else:
            norm = grad_norm(model.parameters())
        tracer.value("grad_norm", norm)
        tracer.end()
        if step == 1:
            w.grads(model, "after_clip")
        opt.step()
        opt.zero_grad()
        if a.bug == "norm-drift-one-tp-rank" and a.tp > 1 and mesh.get_coordinate()[1] == 1:
            with torch.no_grad():
                for n, p in model.named_parameters():
                    if "norm" in n:
                        (p.to_local() if hasattr(p, "to_local") else p).add_(1e-2)
        loss = total.detach() / normalizer
        dist.all_reduce(loss, group=mesh["dp"].get_group())
        w.metric(step, loss=loss, grad_norm=norm)
        # The rows this rank trained on (its dp block), gathered: held to world size 1's.
        w.inputs(step, ids[rows])
        if step == 1:
            w.tensors("logits.safetensors", {"logits": _rows(logits, mesh), "loss": loss})
        if step == weights_after:
            w.tensors("final.safetensors", model.state_dict())
    # Each rank's digest of every parameter it holds: replicas that drifted apart show here,
    # where full_tensor() of a replicated DTensor would show rank 0's copy only.
    w.digests(model)
    # Every rank done before any tears down, then out without the interpreter's finalization:
    # under load a rank sometimes aborted there ("terminate called without an active
    # exception", no Python frame left: a native thread still joinable at exit) after every
    # file was written, 1 run in ~30 on two cores.
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _rows(logits, mesh):
    """This step's logits over the whole global batch: the dp ranks' rows concatenated."""
    group = mesh["dp"].get_group()
    parts = [torch.empty_like(logits) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, logits.detach().contiguous(), group=group)
    return torch.cat(parts)


if __name__ == "__main__":
    main()
