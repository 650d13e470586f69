"""Replica digests: each rank's hash and norm of every parameter, grouped by the ranks that
must hold the same bytes."""

import hashlib

import torch
import torch.distributed as dist

from .collective import _dist, _is_dtensor, _settle


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
    under DDP or a hand-written all-reduce). meshparity checks each group agrees (TrainCheck's
    BLOOM-176B finding: layer-norm weights drifting apart across TP ranks, which
    `full_tensor()` of rank 0's copy never shows). Collective: call on every rank."""
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
            g = groups.setdefault(
                key, {"param": n, "group": key, "ranks": [], "digests": [], "norms": []}
            )
            g["ranks"].append(r)
            g["digests"].append(h)
            g["norms"].append(norm)
    return {"version": 1, "world_size": world, "groups": list(groups.values())}
