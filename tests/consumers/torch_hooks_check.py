"""meshparity_hooks.torch under torchrun (CPU, gloo), on a (dp, tp) mesh of the world's size:

    torchrun --standalone --nproc-per-node 4 tests/consumers/torch_hooks_check.py OUT

Each check raises on a wrong result; every rank prints `rank R: ok` at the end. Run by
tests/torch_hooks.rs at world sizes 2 and 4.
"""

import copy
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from safetensors.numpy import load_file
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from meshparity_hooks.torch import Tracer, Writer, WriterError, full, replica_digests, roundtrip

VOCAB, HIDDEN, FFN, BATCH, SEQ = 11, 8, 16, 8, 5


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)
        self.w1 = nn.Linear(HIDDEN, FFN, bias=False)
        self.w2 = nn.Linear(FFN, HIDDEN, bias=False)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        x = x + self.w2(torch.relu(self.w1(self.norm(x))))
        return self.head(x)


def batch():
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)


def step(model, ids, rows, dp_group, tracer):
    """One forward and backward on `rows` of the global batch, the loss normalized by the
    global token count, gradients summed over `dp_group`."""
    tracer.begin(0)
    logits = model(ids[rows, :-1])
    loss = nn.functional.cross_entropy(
        logits.reshape(-1, VOCAB), ids[rows, 1:].reshape(-1), reduction="sum"
    ) / (BATCH * SEQ)
    loss.backward()
    if dp_group is not None:
        for p in model.parameters():
            g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
            dist.all_reduce(g, group=dp_group)
    tracer.grads(model)
    tracer.end()


def check_writer(mesh, out):
    rank, tp = dist.get_rank(), mesh["tp"].size()
    whole = torch.arange(4.0 * tp * 3).reshape(4 * tp, 3)
    w = Writer(os.path.join(out, "writer"))
    reduced = funcol.all_reduce(torch.ones(3) * (rank + 1), "sum", mesh["tp"])
    w.tensors(
        "t.safetensors",
        {
            "dtensor": distribute_tensor(whole, mesh["tp"], [Shard(0)]),
            "async": reduced,
            "half": whole.to(torch.bfloat16),
        },
    )
    w.metric(1, loss=torch.tensor(2.5), grad_norm=distribute_tensor(torch.tensor(3.0), mesh["tp"]))
    if rank == 0:
        got = load_file(os.path.join(out, "writer", "t.safetensors"))
        assert (got["dtensor"] == whole.numpy()).all(), got["dtensor"]
        assert got["half"].dtype.name == "float32"
        # rank 0's tp group holds global ranks 0..tp-1: Σ (r + 1).
        assert (got["async"] == sum(range(1, tp + 1))).all(), got["async"]
        row = json.loads(open(os.path.join(out, "writer", "metrics.jsonl")).read())
        assert row == {"step": 1, "loss": 2.5, "grad_norm": 3.0}, row


def views():
    """Tensors whose memory is not their logical order: transposed, sliced with a step,
    expanded (stride 0), a DTensor's transposed full tensor, and numpy's transpose."""
    import numpy as np

    base = torch.arange(24.0).reshape(4, 6)
    return {
        "transposed": base.t(),
        "sliced": base[:, 1::2],
        "expanded": torch.arange(3.0).expand(4, 3),
        "half_transposed": base.to(torch.bfloat16).t(),
        "numpy_transposed": np.arange(6.0).reshape(2, 3).T,
    }


def check_views(mesh, out):
    """Every writer writes what a tensor means, not its memory: a transposed view was written
    in storage order (scrambled) and an expanded one read past its storage. Writer, Recorder
    and Tracer (a module whose output is a view, a value(), a parameter's gradient) read back
    equal to the tensors' logical values."""
    import numpy as np

    from meshparity_hooks import Recorder

    want = {k: (v.float().numpy() if hasattr(v, "numpy") else v) for k, v in views().items()}
    want = {k: np.array(v.tolist(), dtype=np.float32 if "half" in k else v.dtype)
            for k, v in want.items()}
    Writer(os.path.join(out, "views")).tensors("w.safetensors", views())
    if dist.get_rank() == 0:
        Recorder(os.path.join(out, "views")).tensors("r.safetensors", views())
    dist.barrier()

    class Transposing(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Linear(3, 4, bias=False)

        def forward(self, x):
            return self.w(x).t()  # the model's output a view; `w`'s own output is whole

    torch.manual_seed(1)
    m = Transposing()
    x = torch.arange(6.0).reshape(2, 3)
    tracer = Tracer(m, os.path.join(out, "views-trace"), steps=(0,), modules=["w"])
    tracer.begin(0)
    y = m(x)
    (y * torch.arange(8.0).reshape(4, 2)).sum().backward()
    tracer.value("viewed", torch.arange(6.0).reshape(2, 3).t())
    tracer.grads(m)
    tracer.end()
    if dist.get_rank() != 0:
        return
    for name in ["w.safetensors", "r.safetensors"]:
        got = load_file(os.path.join(out, "views", name))
        for k, v in want.items():
            assert got[k].shape == v.shape and (got[k] == v).all(), (name, k, got[k], v)
    traced = load_file(os.path.join(out, "views-trace", "step0.safetensors"))
    assert (traced["w"] == (x @ m.w.weight.detach().t()).numpy()).all(), traced["w"]
    assert (traced["viewed"] == np.arange(6.0).reshape(2, 3).T).all(), traced["viewed"]
    # The gradient arriving at `w`'s output: the weighting's transpose, as a view.
    assert (traced["w.bwd.in"] == np.arange(8.0).reshape(4, 2).T).all(), traced["w.bwd.in"]
    assert (traced["grad.w.weight"] == m.w.weight.grad.numpy()).all()


def check_abort(out):
    """One rank's failure is every rank's error, naming that rank; nobody hangs."""
    rank, world = dist.get_rank(), dist.get_world_size()
    w = Writer(os.path.join(out, "abort"))
    bad = torch.empty(3, device="meta") if rank == world - 1 else torch.zeros(3)
    try:
        w.tensors("x.safetensors", {"x": bad})
    except WriterError as e:
        assert f"rank {world - 1}: x.safetensors: gathering x" in str(e), e
    else:
        raise AssertionError("a meta tensor on the last rank was written")
    blocker = os.path.join(out, "not-a-directory")
    if rank == 0:
        open(blocker, "w").close()
    dist.barrier()
    try:
        Writer(os.path.join(blocker, "sub"))
    except WriterError as e:
        assert str(e).startswith("rank 0: opening"), e
    else:
        raise AssertionError("a writer under a file opened")
    # Different tensors on different ranks: refused on every rank before any gather.
    names = {"a": torch.zeros(1)} if rank == 0 else {"b": torch.zeros(1)}
    if world > 1:
        try:
            w.tensors("y.safetensors", names)
        except WriterError as e:
            assert "the ranks hold different tensors" in str(e), e
        else:
            raise AssertionError("mismatched names were written")


def check_tracer(mesh, out):
    """A TP × DP run's traces equal a world-size-1 run's: forward outputs, the gradients
    arriving at them, and the finalized gradients, all in world-size-1 shape — with the mesh's
    dims named `dp`/`tp`, named as torchtitan names them (`dp_shard`), or given as 1-D groups
    with no 2-D mesh at all."""
    torch.manual_seed(3)
    model = Tiny()
    ids = batch()
    ref_dir = os.path.join(out, "ref")
    step(model, ids, slice(None), None, Tracer(model, ref_dir, steps=(0,)))
    dp, d = mesh["dp"].size(), mesh.get_coordinate()[0]
    rows = slice(d * BATCH // dp, (d + 1) * BATCH // dp)
    titan = init_device_mesh("cpu", tuple(mesh.shape), mesh_dim_names=("dp_shard", "tp"))
    ways = {
        "mesh": dict(mesh=mesh),
        "titan-names": dict(mesh=titan, dp="dp_shard"),
        "groups": dict(tp=mesh["tp"], dp=mesh["dp"].get_group()),
    }
    for way, kw in ways.items():
        par = copy.deepcopy(model)
        parallelize_module(par, mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
        mesh_dir = os.path.join(out, way)
        tracer = Tracer(par, mesh_dir, steps=(0,), layouts={"w1*": "shard:-1"}, **kw)
        step(par, ids, rows, mesh["dp"].get_group(), tracer)
        if dist.get_rank() == 0:
            same_as_reference(ref_dir, mesh_dir)
    dist.barrier()


def same_as_reference(ref_dir, mesh_dir):
    """Every traced value of the mesh equals the reference's; a gradient replicated over tp (the
    norm's, the embedding's: plain parameters here) is written as each tp rank's copy, listed
    `grad.NAME@tp`, and a TP-sharded one (w1's) whole."""
    sites = open(os.path.join(ref_dir, "sites.txt")).read().split()
    listed = open(os.path.join(mesh_dir, "sites.txt")).read().split()
    assert sites == [s.split("@")[0] for s in listed], (sites, listed)
    for want in ["embed", "norm", "w1", "w2", "head", "w1.bwd.in", "head.bwd.in", "grad.w1.weight"]:
        assert want in sites, (want, sites)
    assert "grad.norm.weight@tp" in listed and "grad.w1.weight" in listed, listed
    ref = load_file(os.path.join(ref_dir, "step0.safetensors"))
    got = load_file(os.path.join(mesh_dir, "step0.safetensors"))
    for s in listed:
        name, _, axes = s.partition("@")
        keys = [f"{name}@{k}" for k in range(2)] if axes else [name]
        for k in keys:
            assert ref[name].shape == got[k].shape, (k, ref[name].shape, got[k].shape)
            err = abs(ref[name] - got[k]).max() / max(abs(ref[name]).max(), 1e-30)
            assert err < 1e-5, (mesh_dir, k, err)


def check_digests(mesh, out):
    """Replicas that drift apart are seen: one TP rank's layer norm moved."""
    torch.manual_seed(3)
    par = Tiny()
    parallelize_module(par, mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    clean = replica_digests(par)
    assert all(len(set(g["digests"])) == 1 for g in clean["groups"]), clean
    if dist.get_rank() == 1:
        with torch.no_grad():
            par.norm.weight.add_(1e-3)
    d = Writer(os.path.join(out, "digests")).digests(par)
    differing = sorted(g["param"] for g in d["groups"] if len(set(g["digests"])) > 1)
    assert differing == ["norm.weight"], differing
    if dist.get_rank() == 0:
        on_disk = json.load(open(os.path.join(out, "digests", "digests.json")))
        assert on_disk == d


def check_inputs(mesh, out):
    """Each rank's rows (its dp block of the batch), gathered: rank 0's file holds every rank's
    line for each step, each rank's digests of its own rows, written once per step."""
    from meshparity_hooks.inputs import row_digests

    w = Writer(os.path.join(out, "inputs"))
    dp = mesh["dp"].get_local_rank()
    rows = 4 // mesh["dp"].size()
    for step in (1, 2):
        ids = torch.arange(4 * 6).reshape(4, 6) + 100 * step
        mine = ids[dp * rows:(dp + 1) * rows]
        w.inputs(step, mine.t().contiguous().t())  # a strided view: its logical rows
    if dist.get_rank() == 0:
        lines = [json.loads(line) for line in open(os.path.join(out, "inputs", "inputs.jsonl"))]
        world = dist.get_world_size()
        assert [(x["step"], x["rank"]) for x in lines] == [
            (s, r) for s in (1, 2) for r in range(world)], lines
        # The last rank's rows at step 2: the last dp block.
        last = mesh["dp"].size() - 1
        ids = torch.arange(24).reshape(4, 6) + 200
        assert lines[-1]["rows"] == row_digests(ids[last * rows:(last + 1) * rows]), lines[-1]
        assert all(len(x["rows"]) == rows for x in lines), lines


def check_roundtrip(mesh, out):
    """Full seed → sharded DCP save → load → gathered: the seed, bit for bit."""
    from safetensors.torch import save_file

    torch.manual_seed(5)
    seed = {k: v.contiguous() for k, v in Tiny().state_dict().items()}
    path = os.path.join(out, "seed.safetensors")
    if dist.get_rank() == 0:
        save_file(seed, path)
    dist.barrier()
    torch.manual_seed(6)
    par = Tiny()
    parallelize_module(par, mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    back = roundtrip(par, path, os.path.join(out, "dcp"))
    assert sorted(back) == sorted(seed)
    for k in seed:
        assert torch.equal(back[k], seed[k]), k
    # A fused parameter the state dict saves under other names (torchtitan's wqkv): it crashed
    # ("aten.copy_.default got mixed torch.Tensor and DTensor").
    torch.manual_seed(7)
    fused_seed = {k: v.contiguous() for k, v in Fused().state_dict().items()}
    assert sorted(fused_seed) == ["wk", "wq", "wv"], sorted(fused_seed)
    path = os.path.join(out, "fused-seed.safetensors")
    if dist.get_rank() == 0:
        save_file(fused_seed, path)
    dist.barrier()
    torch.manual_seed(8)
    par = Fused()
    par.wqkv = nn.Parameter(distribute_tensor(par.wqkv.detach(), mesh["tp"], [Shard(0)]))
    back = roundtrip(par, path, os.path.join(out, "fused-dcp"))
    assert sorted(back) == sorted(fused_seed), sorted(back)
    for k in fused_seed:
        assert torch.equal(back[k], fused_seed[k]), k
    whole = par.wqkv.full_tensor()
    assert torch.equal(whole, torch.cat([fused_seed[k] for k in ("wq", "wk", "wv")])), "merged"


class Fused(nn.Module):
    """One fused projection saved as three (torchtitan's `FusedQKVLinear` hooks, in short)."""

    def __init__(self):
        super().__init__()
        self.wqkv = nn.Parameter(torch.randn(3 * 4, 4))
        self._register_state_dict_hook(Fused._split)
        self._register_load_state_dict_pre_hook(Fused._merge, with_module=True)

    @staticmethod
    def _split(module, state, prefix, _meta):
        w = state.pop(prefix + "wqkv")
        if hasattr(w, "redistribute"):
            w = w.redistribute(w.device_mesh, [Replicate()] * w.device_mesh.ndim)
        for i, k in enumerate(("wq", "wk", "wv")):
            state[prefix + k] = w[4 * i:4 * (i + 1)]

    @staticmethod
    def _merge(module, state, prefix, *_):
        parts = [state.pop(prefix + k) for k in ("wq", "wk", "wv")]
        state[prefix + "wqkv"] = torch.cat(parts)


def check_repeated(out):
    """A module called more than once in a step (a MoE's experts' activation, once per expert)
    has no one value: the Tracer leaves it and its gradient out on every rank, also where only
    one rank called it twice (the ranks agree, so their collectives match), and keeps the rest."""

    class Reusing(nn.Module):
        def __init__(self):
            super().__init__()
            self.once = nn.Linear(3, 3, bias=False)
            self.act = nn.SiLU()
            self.lonely = nn.Tanh()

        def forward(self, x):
            h = self.act(self.once(x))
            h = self.lonely(h)
            if dist.get_rank() == 0:
                h = self.lonely(h)  # twice on rank 0 only
            return self.act(h)

    torch.manual_seed(2)
    m = Reusing()
    tracer = Tracer(m, os.path.join(out, "repeated-trace"), steps=(0,))
    tracer.begin(0)
    m(torch.arange(6.0).reshape(2, 3)).sum().backward()
    tracer.grads(m)
    tracer.end()
    assert tracer.repeated == {"act", "lonely"}, tracer.repeated
    if dist.get_rank() != 0:
        return
    traced = load_file(os.path.join(out, "repeated-trace", "step0.safetensors"))
    assert {"once", "once.bwd.in", "grad.once.weight"} <= set(traced), sorted(traced)
    for gone in ["act", "act.bwd.in", "lonely", "lonely.bwd.in"]:
        assert gone not in traced, (gone, sorted(traced))
    # The site list says what was left out and why (`!NAME: why`), for localization's report.
    lines = open(os.path.join(out, "repeated-trace", "sites.txt")).read().splitlines()
    skipped = sorted(line.split(":")[0] for line in lines if line.startswith("!"))
    assert skipped == ["!act", "!lonely"], lines
    assert all("called more than once" in line for line in lines if line.startswith("!")), lines


def main():
    out = sys.argv[1]
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    tp = 2 if world % 2 == 0 else 1
    mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
    check_writer(mesh, out)
    check_views(mesh, out)
    check_abort(out)
    check_tracer(mesh, out)
    check_repeated(out)
    check_digests(mesh, out)
    check_inputs(mesh, out)
    check_roundtrip(mesh, out)
    assert full(3) == 3
    print(f"rank {dist.get_rank()}: ok", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    # Past the interpreter's finalization, where under load a rank sometimes aborted after its
    # work was done (examples/command/torch/train.py says more).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
