"""meshparity's artifacts from a torch.distributed program, written safely from every rank.

    from meshparity_hooks.torch import Writer, Tracer, grad_norm, replica_digests
    w = Writer(args.out)                        # call every method on EVERY rank
    tracer = Tracer(model, args.trace_dir, mesh=mesh, layouts={"*.w1": "shard:-1"})
    w.tensors("init.safetensors", model.state_dict())     # DTensors gathered, rank 0 writes
    for step in range(1, steps + 1):
        tracer.begin(step - 1)                  # traces step indices meshparity asks for
        loss = model(batch).loss(); loss.backward()
        tracer.grads(model)                     # finalized gradients, grad.NAME
        tracer.end()
        w.grads(model, "before_clip")           # written if the spec's point is before_clip
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        w.grads(model, "after_clip")
        w.metric(step, loss=loss, grad_norm=norm)
    w.digests(model)                            # replicas' agreement, checked by meshparity
    w.tensors("final.safetensors", model.state_dict())

Why a writer of its own: a DTensor, an AsyncCollectiveTensor or an FSDP2 parameter is only
whole after a collective every rank joins, and an error on one rank (a tensor subclass numpy
refuses, a full disk) must not leave the others waiting in the next collective. So each call
(1) checks what it was given on every rank and agrees on it, (2) gathers on every rank in one
order, (3) writes on rank 0, and agrees again: if any rank failed, every rank raises
`WriterError` with that rank's message instead of one rank dying and the rest hanging.
"""

import fnmatch
import hashlib
import json
import os

import torch
import torch.distributed as dist

from . import Recorder, to_numpy

__all__ = [
    "WriterError",
    "Writer",
    "Tracer",
    "full",
    "grad_norm",
    "clip_grads",
    "replica_digests",
    "agree",
    "dropout_mask",
    "roundtrip",
    "deterministic",
]


class WriterError(RuntimeError):
    """A write failed on some rank; raised on every rank, with that rank's message."""


def _dist():
    return dist.is_available() and dist.is_initialized()


def _rank():
    return dist.get_rank() if _dist() else 0


def _is_dtensor(x):
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch < 2.4
        from torch.distributed._tensor import DTensor
    return isinstance(x, DTensor)


def _settle(x):
    """A plain tensor or DTensor from an AsyncCollectiveTensor (its collective waited for)."""
    try:
        from torch.distributed._functional_collectives import AsyncCollectiveTensor
    except ImportError:
        return x
    if isinstance(x, AsyncCollectiveTensor):
        return x.wait()
    if _is_dtensor(x):
        local = x.to_local()
        if isinstance(local, AsyncCollectiveTensor):
            local.wait()
    return x


def full(x):
    """`x` whole: a DTensor's full tensor (a collective: call on every rank), an
    AsyncCollectiveTensor waited for, anything else as it is. Detached, on the CPU."""
    if not isinstance(x, torch.Tensor):
        return x
    x = _settle(x.detach())
    if _is_dtensor(x):
        x = x.full_tensor()
    return _settle(x).cpu()


def agree(error=None):
    """Every rank's error message (None: fine) gathered; raises `WriterError` on every rank if
    any rank had one, naming the first such rank."""
    if not _dist():
        if error:
            raise WriterError(f"rank 0: {error}")
        return
    errors = [None] * dist.get_world_size()
    dist.all_gather_object(errors, error)
    for r, e in enumerate(errors):
        if e:
            raise WriterError(f"rank {r}: {e}")


def _collective(what, body):
    """Runs `body()` on this rank; any exception becomes this rank's message for `agree`."""
    try:
        result, error = body(), None
    except Exception as e:  # noqa: BLE001 — every failure must reach the other ranks
        result, error = None, f"{what}: {type(e).__name__}: {e}"
    agree(error)
    return result


def _check_names(tensors):
    names = sorted(tensors)
    kinds = [type(tensors[n]).__name__ for n in names]
    return json.dumps([names, kinds])


class Writer:
    """meshparity's files in `out`, written collectively (see the module's text). Every method
    must be called on every rank, in the same order; only rank 0 touches the disk.

    `grad_point` names where the gradients meshparity compares are taken: `before_clip` or
    `after_clip` (default), usually from the spec through a program argument; `grads()` calls at
    the other point write nothing."""

    def __init__(self, out, grad_point="after_clip", metrics="metrics.jsonl", truncate=True):
        if grad_point not in ("before_clip", "after_clip"):
            raise ValueError(f"grad_point is before_clip or after_clip, not {grad_point!r}")
        self.out = out
        self.grad_point = grad_point
        self.rank = _rank()
        self.rec = _collective(
            "opening " + str(out),
            lambda: Recorder(out, metrics=metrics, rank=self.rank, truncate=truncate),
        )

    def metric(self, step, **values):
        """One line of metrics.jsonl; DTensor values (a clip norm) made whole first."""
        whole = {k: full(v) for k, v in values.items()}
        _collective("metric", lambda: self.rec.metric(step, **whole))

    def tensors(self, name, tensors):
        """`name` (a safetensors file) holding `tensors` made whole: {name: tensor or DTensor}."""
        tensors = dict(tensors)
        mine = _check_names(tensors)
        seen = [None] * (dist.get_world_size() if _dist() else 1)
        if _dist():
            dist.all_gather_object(seen, mine)
            if any(s != mine for s in seen):
                agree(f"{name}: the ranks hold different tensors (names or types)")
        whole = {}
        for k in sorted(tensors):
            whole[k] = _collective(f"{name}: gathering {k}", lambda k=k: full(tensors[k]))
        _collective(f"writing {name}", lambda: self.rec.tensors(name, whole))

    def grads(self, model, point, name="grads.safetensors"):
        """The parameters' gradients under their names, if `point` is the spec's grad point."""
        if point not in ("before_clip", "after_clip"):
            raise ValueError(f"point is before_clip or after_clip, not {point!r}")
        if point != self.grad_point:
            return
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        self.tensors(name, grads)

    def digests(self, model, name="digests.json"):
        """`replica_digests` of `model` written as `name` (rank 0)."""
        d = replica_digests(model)
        path = os.path.join(self.out, name)

        def write():
            if self.rank == 0:
                with open(path, "w") as f:
                    json.dump(d, f)

        _collective(f"writing {name}", write)
        return d


def _digest(t):
    """This rank's copy of `t`: a hash of its bytes and its norm."""
    t = _settle(t.detach())
    if _is_dtensor(t):
        t = t.to_local()
    local = t.cpu().contiguous().flatten()
    h = hashlib.sha256(local.view(torch.uint8).numpy().tobytes()).hexdigest()[:16]
    return h, float(local.double().norm())


def replica_digests(model):
    """For every parameter, each rank's hash and norm of the copy it holds, grouped by the
    ranks that should hold the same bytes: a DTensor's ranks along its Replicate mesh dims
    (its shard index the same), or, for a plain tensor, every rank (a replicated parameter, as
    under DDP or a hand-written all-reduce). meshparity checks each group agrees (TrainCheck's BLOOM-176B
    finding: layer-norm weights drifting apart across TP ranks, which `full_tensor()` of rank
    0's copy never shows). Collective: call on every rank."""
    world = dist.get_world_size() if _dist() else 1
    mine = {}
    for n, p in model.named_parameters():
        key = [n]
        if _is_dtensor(p):
            coords = p.device_mesh.get_coordinate() or []
            dims = p.device_mesh.mesh_dim_names or range(p.device_mesh.ndim)
            for dim, (pl, dname) in enumerate(zip(p.placements, dims)):
                if not pl.is_replicate():
                    key.append(f"{dname}={coords[dim]}")
        mine[n] = ("|".join(key), *_digest(p))
    rows = [None] * world
    if _dist():
        dist.all_gather_object(rows, mine)
    else:
        rows[0] = mine
    groups = {}
    for r, row in enumerate(rows):
        for n, (key, h, norm) in row.items():
            g = groups.setdefault(key, {"param": n, "group": key, "ranks": [], "digests": [], "norms": []})
            g["ranks"].append(r)
            g["digests"].append(h)
            g["norms"].append(norm)
    return {"version": 1, "world_size": world, "groups": list(groups.values())}


def grad_norm(parameters):
    """The global L2 norm of the parameters' gradients, as world size 1 computes it: a DTensor
    gradient's squares summed over its shards (each counted once, replicas once), a plain
    tensor's taken as this rank's whole copy (a replicated parameter). Parameters may mix the
    two (`clip_grad_norm_`'s foreach norm refuses that: TP without SP leaves the norms plain).
    Collective for DTensors: call on every rank."""
    total = torch.zeros((), dtype=torch.float64)
    for p in parameters:
        g = getattr(p, "grad", p)
        if g is None:
            continue
        g = _settle(g.detach())
        sq = g.double().pow(2).sum() if not _is_dtensor(g) else g.to(torch.float64).pow(2).sum()
        total += full(sq).to(torch.float64)
    return total.sqrt()


def clip_grads(parameters, max_norm):
    """Clips the parameters' gradients to global norm `max_norm` (torch's coefficient,
    max_norm / (norm + 1e-6), at most 1) and returns the norm before clipping ([`grad_norm`])."""
    parameters = [p for p in parameters if p.grad is not None]
    norm = grad_norm(parameters)
    coeff = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for p in parameters:
        p.grad.mul_(coeff.to(p.grad.dtype).item())
    return norm


class Tracer:
    """Per-site traces for localization, written into `trace_dir` (meshparity's `{{trace_dir}}`;
    empty or None: nothing is traced and the hooks cost nothing).

    Forward hooks record every named module's output (site: the module's name), tensor hooks on
    those outputs the gradient arriving at it (`NAME.bwd.in`), and `grads()` the finalized
    parameter gradients (`grad.NAME`). At `end()` every value is made world-size-1 shaped:
    DTensors by `full_tensor()`, plain local tensors by their `layouts` entry (a glob on the
    site name → `"shard:D"`: concatenated along dim D over the mesh's `tp` dim; `"replicate"`,
    the default: the local copy), then the batch rows of the `dp` mesh dim concatenated along
    dim 0. Writes `sites.txt` (the first traced step's order) and `step{N}.safetensors`.

    `steps`: the 0-based step indices to trace (meshparity's traces are of the first steps);
    `modules`: globs of module names to hook (default: every module with no children)."""

    def __init__(self, model, trace_dir, mesh=None, steps=(0, 1), modules=None, layouts=None,
                 tp="tp", dp="dp"):
        self.dir = trace_dir or None
        self.mesh, self.tp, self.dp = mesh, tp, dp
        self.steps = set(steps)
        self.layouts = layouts or {}
        self.step = None
        self.values = {}
        self.scalars = set()
        self.order = None
        self.handles = []
        if self.dir is None:
            return
        if _rank() == 0:
            os.makedirs(self.dir, exist_ok=True)
        for name, m in model.named_modules():
            if not name:
                continue
            leaf = not any(True for _ in m.children())
            wanted = any(fnmatch.fnmatch(name, g) for g in modules) if modules else leaf
            if wanted:
                self.handles.append(m.register_forward_hook(self._forward(name)))

    def _active(self):
        return self.dir is not None and self.step is not None

    def _forward(self, name):
        def hook(_module, _inputs, output):
            if not self._active():
                return
            out = output[0] if isinstance(output, (tuple, list)) else output
            if not isinstance(out, torch.Tensor):
                return
            self.values[name] = out.detach().clone()
            if out.requires_grad:
                def grad_hook(g, name=name):
                    if self._active():
                        self.values[f"{name}.bwd.in"] = g.detach().clone()
                out.register_hook(grad_hook)
        return hook

    def begin(self, step):
        """Start step `step` (0-based): traced if meshparity asked for it."""
        self.values = {}
        self.scalars = set()
        self.step = step if step in self.steps else None

    def grads(self, model):
        """Record the finalized gradients (after DP reduction) as `grad.NAME`."""
        if self._active():
            for n, p in model.named_parameters():
                if p.grad is not None:
                    self.values[f"grad.{n}"] = p.grad.detach().clone()

    def value(self, name, x):
        """Record a value of this step under `name` (a scalar such as the gradient norm, which
        no module outputs): a replicated or DTensor value, not batch-valued. Name it
        `grad_norm` and localization reads it as the norm before clipping."""
        if self._active():
            t = x if isinstance(x, torch.Tensor) else torch.tensor(float(x))
            self.values[name] = t.detach().clone()
            self.scalars.add(name)

    def _whole(self, name, x):
        x = _settle(x)
        rows_whole = False
        if _is_dtensor(x):
            rows_whole = self.dp in (x.device_mesh.mesh_dim_names or ())
            x = x.full_tensor()
        elif self.mesh is not None and self.tp in (self.mesh.mesh_dim_names or ()):
            layout = next((v for g, v in self.layouts.items() if fnmatch.fnmatch(name, g)),
                          "replicate")
            if layout.startswith("shard:"):
                x = _gather(x, self.mesh[self.tp].get_group(), int(layout.split(":")[1]))
            elif layout != "replicate":
                raise ValueError(f"layout of {name}: shard:D or replicate, not {layout!r}")
        batch_valued = not (name.startswith("grad.") or name in self.scalars or rows_whole)
        if batch_valued and self.mesh is not None and self.dp in (self.mesh.mesh_dim_names or ()):
            x = _gather(x, self.mesh[self.dp].get_group(), 0)
        return x.cpu()

    def end(self):
        """Make this step's values whole (collective) and write them (rank 0)."""
        if not self._active():
            return
        names = list(self.values)
        fwd = [n for n in names if ".bwd." not in n and not n.startswith("grad.")]
        fwd = [n for n in fwd if n not in self.scalars]
        bwd = [n for n in names if ".bwd." in n]
        grads = [n for n in names if n.startswith("grad.")]
        order = fwd + bwd + grads + [n for n in names if n in self.scalars]
        whole = {n: _collective(f"trace {n}", lambda n=n: self._whole(n, self.values[n]))
                 for n in order}
        if self.order is None:
            self.order = order

        def write():
            if _rank() != 0:
                return
            from safetensors.numpy import save_file
            arrays = {}
            for n in order:
                a = to_numpy(whole[n])
                arrays[n] = a.reshape(1) if a.ndim == 0 else a
            save_file(arrays, os.path.join(self.dir, f"step{self.step}.safetensors"))
            with open(os.path.join(self.dir, "sites.txt"), "w") as f:
                f.write("\n".join(self.order) + "\n")

        _collective(f"writing trace step {self.step}", write)
        self.values = {}
        self.step = None

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def _gather(x, group, dim):
    """Every rank's `x` of `group` concatenated along `dim`, in group rank order."""
    n = dist.get_world_size(group)
    if n == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def roundtrip(model, seed_checkpoint, directory):
    """meshparity's roundtrip level through `torch.distributed.checkpoint`: load the full
    world-size-1 `seed_checkpoint` (safetensors) into the sharded `model`, save it sharded to
    `directory` with DCP, load that back into a fresh state dict of the same layout, and return
    it gathered ({name: full tensor}; write it as `artifacts.roundtrip`). Collective."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
    )

    def load_full():
        from safetensors.torch import load_file
        return load_file(seed_checkpoint)

    seed = _collective(f"reading {seed_checkpoint}", load_full)
    _collective(
        "loading the seed checkpoint",
        lambda: set_model_state_dict(
            model, seed, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
        ),
    )
    sharded = get_model_state_dict(model)
    _collective(f"saving to {directory}", lambda: dcp.save(sharded, checkpoint_id=directory))
    back = {k: torch.zeros_like(v) for k, v in sharded.items()}
    _collective(f"loading {directory}", lambda: dcp.load(back, checkpoint_id=directory))
    return {k: full(v) for k, v in back.items()}


def deterministic(seed):
    """Seeds every generator the same on every rank and asks for deterministic kernels. On a
    CPU mesh (gloo) the collectives' sums still follow the group's order, which is fixed, so a
    run repeats to the bit; world-size-1 equality is another matter (summation order differs:
    meshparity's tolerances are for that). Dropout must draw from world-size-1 positions for
    a mesh to match: see `dropout_mask`."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def dropout_mask(seed, step, site, shape, p, index=None):
    """A dropout keep-mask (1/(1-p) where kept, 0 where dropped) for the world-size-1 tensor of
    `shape`, drawn from (seed, step, site) alone, then cut to this rank's `index` (a tuple of
    slices: its shard of the whole tensor). Every rank draws the whole mask, so a TP or SP rank
    drops exactly what world size 1 drops at those positions (the offset-based idea of torch
    DTensor's OffsetBasedRNGTracker, in its simplest form; fine for the small models parity
    checks use)."""
    key = int.from_bytes(hashlib.sha256(f"{seed}/{step}/{site}".encode()).digest()[:8], "little")
    g = torch.Generator().manual_seed(key % 2**63)
    keep = (torch.rand(shape, generator=g) >= p).to(torch.float32) / (1.0 - p)
    return keep[index] if index is not None else keep
