"""Seeds, deterministic kernels, and dropout masks drawn at world size 1's positions."""

import hashlib
import os

import torch


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
