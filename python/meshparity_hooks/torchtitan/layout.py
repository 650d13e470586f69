"""A torchtitan tensor made whole — world size 1's shape — whatever backend produced it.

- A DTensor (torchtitan's DTensor backends; every parameter and gradient under FSDP or TP):
  its `full_tensor()`.
- A plain tensor with SPMD types (torchtitan's default `spmd_types` backend, read while the
  forward ran under type checking): each tensor dimension its partition spec shards is gathered
  over that axis's group, a Partial one summed.
- A plain tensor with neither: taken as whole only where every rank of every group that could
  split it holds the same bytes; otherwise refused, naming the tensor — never a rank's shard
  written as the whole tensor (the hooks once wrote rank 0's vocabulary shard as the logits).

Rows: a batch-valued tensor whose layout does not already cover the data-parallel axes (a
DTensor over the TP mesh only, an unannotated activation) is concatenated over the batch mesh.
"""

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from ..torch.collective import _gather


class LayoutUnknown(RuntimeError):
    """A plain per-rank tensor whose layout nothing declares and whose copies differ."""


def _meshes(parallel_dims):
    return parallel_dims.get_all_one_dimensional_meshes()


def _group_of(axis, parallel_dims):
    from spmd_types._mesh_axis import MeshAxis

    for mesh in _meshes(parallel_dims).values():
        group = mesh.get_group()
        if MeshAxis.of(group) == axis:
            return group
    raise LayoutUnknown(f"no mesh of this run is the SPMD axis {axis}")


def _same_everywhere(x, group):
    """Whether every rank of `group` holds `x` with the same shape and bytes."""
    n = dist.get_world_size(group)
    if n == 1:
        return True
    mine = torch.tensor([float(x.numel()), float(x.double().sum()), float(x.double().abs().sum())],
                        dtype=torch.float64)
    parts = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(parts, mine, group=group)
    return all(torch.equal(p, parts[0]) for p in parts)


def spmd_layout(x):
    """`x`'s SPMD types (partition spec, local types), or None: read them before any op on it —
    outside the type-checked region an op's result carries none."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor

    import spmd_types as spmd

    if isinstance(x, (DTensor, AsyncCollectiveTensor)) or not spmd.has_local_type(x):
        return None
    return (spmd.get_partition_spec(x), dict(spmd.get_local_type(x)))


def whole(name, x, parallel_dims, batch_valued=True, trusted=False, layout=None):
    """`x` as world size 1 holds it (see the module's text). Collective: every rank calls it.
    `trusted`: a plain tensor is taken as whole over tensor parallelism without the check (only
    a bug switch asks for that). `layout`: its SPMD types, read earlier (`spmd_layout`) where
    `x` is a copy made since."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor

    if isinstance(x, AsyncCollectiveTensor):
        x = x.wait()
    if layout is None:
        layout = spmd_layout(x)
    typed = layout is not None
    x = x.detach()
    batch = parallel_dims.get_optional_mesh("batch") if parallel_dims.dp_enabled else None
    rows_whole = batch is None
    if isinstance(x, DTensor):
        names = set(x.device_mesh.mesh_dim_names or ())
        rows_whole = rows_whole or bool(names & {"dp", "dp_shard", "dp_replicate", "fsdp", "batch"})
        x = x.full_tensor()
    elif typed:
        x, rows_whole = _from_spmd(name, x, layout, parallel_dims, rows_whole)
    else:
        tp = parallel_dims.get_optional_mesh("tp") if parallel_dims.tp_enabled else None
        if tp is not None and not trusted and not _same_everywhere(x, tp.get_group()):
            raise LayoutUnknown(
                f"`{name}` is a plain per-rank tensor {tuple(x.shape)} that differs across "
                f"the tensor-parallel ranks, and nothing declares its layout: run the "
                f"spmd_types backend with its type checking (the adapter does for the "
                f"values it records), or make it a DTensor")
    if batch_valued and not rows_whole:
        x = _gather(x, batch.get_group(), 0)
    return x.cpu()


def _from_spmd(name, x, layout, parallel_dims, rows_whole):
    spec, local = layout
    batch = parallel_dims.get_optional_mesh("batch") if parallel_dims.dp_enabled else None
    from spmd_types._mesh_axis import MeshAxis

    batch_axis = MeshAxis.of(batch.get_group()) if batch is not None else None
    sharded_axes = set()
    if spec is not None:
        for dim, entry in enumerate(spec):
            if entry is None:
                continue
            axes = entry if isinstance(entry, tuple) else (entry,)
            for axis in reversed(axes):
                x = _gather(x, _group_of(axis, parallel_dims), dim)
                sharded_axes.add(axis)
                if dim == 0 and batch_axis is not None and axis <= batch_axis:
                    rows_whole = True
    for axis, kind in local.items():
        text = str(kind)
        if text in ("P", "Partial"):
            x = x.clone()
            dist.all_reduce(x, group=_group_of(axis, parallel_dims))
        elif text in ("V", "Varying") and axis not in sharded_axes:
            raise LayoutUnknown(
                f"`{name}` varies over the SPMD axis {axis} but its partition spec does not say "
                f"along which dimension: its layout is unknown")
    return x, rows_whole
