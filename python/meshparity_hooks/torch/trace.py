"""`Tracer`: per-site traces for localization, by module hooks, in world-size-1 shapes."""

import fnmatch
import os

import torch

from .. import to_numpy
from .collective import _collective, _dist, _gather, _is_dtensor, _rank, _settle


class Tracer:
    """Per-site traces for localization, written into `trace_dir` (meshparity's `{{trace_dir}}`;
    empty or None: nothing is traced and the hooks cost nothing).

    Forward hooks record every named module's output (site: the module's name), tensor hooks on
    those outputs the gradient arriving at it (`NAME.bwd.in`), and `grads()` the finalized
    parameter gradients (`grad.NAME`). At `end()` every value is made world-size-1 shaped:
    DTensors by `full_tensor()`, plain local tensors by their `layouts` entry (a glob on the
    site name → `"shard:D"`: concatenated along dim D over the mesh's `tp` dim; `"replicate"`,
    the default: the local copy), then the batch rows of the `dp` mesh dim concatenated along
    dim 0 — except for `"global"`: the same value on every rank, with no batch rows (rotary
    embeddings' cos/sin for one position row). Writes `sites.txt` (the first traced step's order;
    after it `!NAME: why` for each site `left_out` names) and `step{N}.safetensors`.

    A module called more than once in a step (a MoE's experts' activation, called once per
    expert on the tokens routed to it; a module object shared by several layers) has no one
    value per step: keeping its last call wrote a value that depends on which tokens reached
    which expert last, and localization named it as a correct run's first divergence. Such a
    site is left out of the step's trace on every rank (the ranks agree on the set, so their
    collectives match), its gradient too; `repeated` lists what was left out.

    `steps`: the 0-based step indices to trace (meshparity's traces are of the first steps);
    `modules`: globs of module names to hook (default: every module with no children).

    `tp` and `dp` say which ranks split a value, by the program's own names: a dim name of
    `mesh` (torchtitan's `dp_shard`, `fsdp`), a tuple of them (`("dp_replicate", "dp_shard")`:
    the rows are split over both), a 1-D DeviceMesh, or a process group — so no 2-D (dp, tp)
    submesh is needed (torchtitan has none when dp = 1) and `mesh` only where names are used.

    `copies` (default on): a gradient replicated over the `tp` ranks (a norm's weight) is
    written as each tp rank's copy (`grad.NAME@0`, `@1`; listed `grad.NAME@tp`), and a value
    (`value()`, the gradient norm) as every rank's copy over `dp` and `tp` — so a rank that kept
    its own share where the sum belongs is seen as such, on its axis, instead of rank 0's copy
    standing for all.

    `stages` (a process group, or None): pipeline parallelism's — each rank then holds only its
    stages' sites. Every rank makes the union of sites whole in one order (`site_key`, default
    the order first seen), a site by the ranks of the stage that holds it, and the stages'
    values are merged over `stages` before rank 0 writes them."""

    def __init__(self, model, trace_dir, mesh=None, steps=(0, 1), modules=None, layouts=None,
                 tp="tp", dp="dp", copies=True):
        self.dir = trace_dir or None
        self.mesh, self.tp, self.dp = mesh, tp, dp
        self.copies = copies
        self.steps = set(steps)
        self.layouts = layouts or {}
        self.step = None
        self.values = {}
        self.scalars = set()
        self.calls = {}
        self.repeated = set()
        self.order = None
        # Sites left out on purpose, with why: written to sites.txt as `!NAME: why`.
        self.left_out = {}
        self.handles = []
        self.stages = None
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
            self.calls[name] = self.calls.get(name, 0) + 1
            if self.calls[name] > 1:
                self.values.pop(name, None)
                return
            self.values[name] = out.detach().clone()
            if out.requires_grad:
                def grad_hook(g, name=name):
                    if self._active() and self.calls.get(name, 0) == 1:
                        self.values[f"{name}.bwd.in"] = g.detach().clone()
                out.register_hook(grad_hook)
        return hook

    def begin(self, step):
        """Start step `step` (0-based): traced if meshparity asked for it."""
        self.values = {}
        self.scalars = set()
        self.calls = {}
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

    def _names(self, which):
        """The mesh dim names `which` gives (a name or a tuple of them), else ()."""
        if isinstance(which, str):
            return (which,)
        if isinstance(which, tuple) and all(isinstance(n, str) for n in which):
            return which
        return ()

    def _group(self, which):
        """The process group of the ranks `which` names, or None when this run has none."""
        import torch.distributed as dist
        from torch.distributed.device_mesh import DeviceMesh

        if which is None:
            return None
        if isinstance(which, DeviceMesh):
            group = which.get_group() if which.ndim == 1 else which._flatten().get_group()
            return group if dist.get_world_size(group) > 1 else None
        names = self._names(which)
        if not names:
            return which if dist.get_world_size(which) > 1 else None  # a process group
        present = set(self.mesh.mesh_dim_names or ()) if self.mesh is not None else set()
        names = tuple(n for n in names if n in present)
        if not names:
            return None
        sub = self.mesh[names] if len(names) > 1 else self.mesh[names[0]]
        group = sub.get_group() if len(names) == 1 else sub._flatten().get_group()
        return group if dist.get_world_size(group) > 1 else None

    def _whole(self, name, x):
        x = _settle(x)
        rows_whole = False
        if _is_dtensor(x):
            dims = set(x.device_mesh.mesh_dim_names or ())
            rows_whole = bool(dims & set(self._names(self.dp)))
            x = x.full_tensor()
        else:
            tp = self._group(self.tp)
            layout = next((v for g, v in self.layouts.items() if fnmatch.fnmatch(name, g)),
                          "replicate")
            if layout.startswith("shard:"):
                if tp is not None:
                    x = _gather(x, tp, int(layout.split(":")[1]))
            elif layout == "global":
                rows_whole = True
            elif layout != "replicate":
                raise ValueError(f"layout of {name}: shard:D, replicate or global, not {layout!r}")
        batch_valued = not (name.startswith("grad.") or name in self.scalars or rows_whole)
        dp = self._group(self.dp) if batch_valued else None
        if dp is not None:
            x = _gather(x, dp, 0)
        return x.cpu()

    def _axes_group(self, names):
        """The group of the ranks of meshparity's axes `names` (major first), and the axes of
        it that have more than one rank; (None, ()) when none has."""
        import torch.distributed as dist

        groups = [(a, self._group(self.tp if a == "tp" else self.dp)) for a in names]
        groups = [(a, g) for a, g in groups if g is not None]
        if not groups:
            return None, ()
        if len(groups) == 1:
            return groups[0][1], (groups[0][0],)
        # dp and tp together: every rank, when the world is exactly those ranks with dp major
        # (a rank's world index is its dp index × tp's size + its tp index, on every rank).
        (_, dp), (_, tp) = groups
        if dist.get_world_size(dp) * dist.get_world_size(tp) != dist.get_world_size():
            return None, ()
        mine = dist.get_rank(dp) * dist.get_world_size(tp) + dist.get_rank(tp)
        ordered = torch.tensor([int(mine == dist.get_rank())])
        dist.all_reduce(ordered, op=dist.ReduceOp.MIN)
        if not ordered.item():
            return None, ()
        return dist.group.WORLD, tuple(a for a, _ in groups)

    def _replicated_local(self, x, group):
        """This rank's copy of `x` if `x` is replicated over `group`'s ranks (a DTensor
        Replicate on that mesh dim, made whole on the others; a plain tensor as it is), else
        None."""
        import torch.distributed as dist

        if not _is_dtensor(x):
            return x
        from torch.distributed.tensor import Replicate

        mesh = x.device_mesh
        want = sorted(dist.get_process_group_ranks(group))
        # A DTensor over ranks that include no other rank of `group` (FSDP's shard mesh under
        # HF TP, which leaves a norm's weight a plain per-tp-rank tensor): whole over its own
        # mesh, this rank's copy over `group`.
        spanned = set(mesh.mesh.flatten().tolist())
        if spanned & set(want) == {dist.get_rank()}:
            return x.full_tensor()
        dims = [i for i in range(mesh.ndim)
                if sorted(dist.get_process_group_ranks(mesh.get_group(i))) == want]
        if len(dims) != 1 or not x.placements[dims[0]].is_replicate():
            return None
        placements = [p if i == dims[0] else Replicate() for i, p in enumerate(x.placements)]
        return x.redistribute(mesh, placements).to_local()

    def _copies(self, name, x):
        """Each rank's copy of `x` over the axes it is replicated on, with those axes, or None
        (written whole): gradients over tp (not a layout's shard), values over dp and tp."""
        import torch.distributed as dist

        if not self.copies or not dist.is_initialized():
            return None
        if name in self.scalars:
            group, axes = self._axes_group(("dp", "tp"))
        elif name.startswith("grad."):
            sharded = any(fnmatch.fnmatch(name, g) and v != "replicate"
                          for g, v in self.layouts.items())
            group, axes = (None, ()) if sharded else self._axes_group(("tp",))
        else:
            return None
        if group is None:
            return None
        local = self._replicated_local(_settle(x), group)
        if local is None:
            return None
        local = _settle(local).detach().contiguous()
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, local, group=group)
        return [p.cpu() for p in parts], axes

    def end(self):
        """Make this step's values whole (collective) and write them (rank 0)."""
        if not self._active():
            return
        self._drop_repeated()
        names = self._sites()
        fwd = [n for n in names if ".bwd." not in n and not n.startswith("grad.")]
        fwd = [n for n in fwd if n not in self.scalars]
        bwd = [n for n in names if ".bwd." in n]
        grads = [n for n in names if n.startswith("grad.")]
        order = fwd + bwd + grads + [n for n in names if n in self.scalars]

        def made(n):
            if n not in self.values:
                return None  # another pipeline stage's site, made whole by its ranks
            copies = self._copies(n, self.values[n])
            return copies if copies is not None else self._whole(n, self.values[n])

        whole = {n: _collective(f"trace {n}", lambda n=n: made(n)) for n in order}
        whole = self._merged(whole)
        listed = [f"{n}@{','.join(whole[n][1])}" if isinstance(whole[n], tuple) else n
                  for n in order]
        if self.order is None:
            self.order = listed

        def write():
            if _rank() != 0:
                return
            from safetensors.numpy import save_file
            arrays = {}

            def put(key, t):
                a = to_numpy(t)
                arrays[key] = a.reshape(1) if a.ndim == 0 else a

            for n in order:
                if isinstance(whole[n], tuple):
                    for k, t in enumerate(whole[n][0]):
                        put(f"{n}@{k}", t)
                else:
                    put(n, whole[n])
            save_file(arrays, os.path.join(self.dir, f"step{self.step}.safetensors"))
            skipped = [f"!{n}: {why}" for n, why in sorted(self.left_out.items())]
            with open(os.path.join(self.dir, "sites.txt"), "w") as f:
                f.write("\n".join(self.order + skipped) + "\n")

        _collective(f"writing trace step {self.step}", write)
        self.values = {}
        self.step = None

    def _sites(self):
        """This step's sites: this rank's, or under pipelining every stage's (every rank the same
        list, so their collectives match), in `site_key` order."""
        names = list(self.values)
        if self.stages is None or not _dist():
            return names
        import torch.distributed as dist

        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, [(n, n in self.scalars) for n in names])
        union = {}
        for held in every:
            for n, scalar in held:
                union.setdefault(n, scalar)
        self.scalars |= {n for n, scalar in union.items() if scalar}
        first = {n: i for i, n in enumerate(union)}
        return sorted(union, key=lambda n: (self.site_key(n), first[n]))

    def site_key(self, name):
        """Where `name` comes in the model's order (pipelining only; default: as first seen)."""
        return 0

    def _merged(self, whole):
        """Each site's value from the pipeline stage that holds it (`stages`), on every rank."""
        if self.stages is None or not _dist():
            return whole
        import torch.distributed as dist

        mine = {n: v for n, v in whole.items() if v is not None}
        seen = [None] * dist.get_world_size(self.stages)
        dist.all_gather_object(seen, mine, group=self.stages)
        out = {}
        for part in seen:
            for n, v in part.items():
                out.setdefault(n, v)
        return {n: out[n] for n in whole}

    def _drop_repeated(self):
        """Leave out every site some rank called more than once this step (and its gradient):
        the union over ranks, so every rank makes the same sites whole."""
        mine = sorted(n for n, k in self.calls.items() if k > 1)
        every = [mine]
        if _dist():
            import torch.distributed as dist
            every = [None] * dist.get_world_size()
            dist.all_gather_object(every, mine)
        for names in every:
            for n in names:
                self.repeated.add(n)
                self.left_out[n] = ("called more than once in a step (a module shared, or one "
                                    "call per expert): no one value per step")
                self.values.pop(n, None)
                self.values.pop(f"{n}.bwd.in", None)

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []
