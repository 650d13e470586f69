"""The rows each rank trained on, step by step, as digests: `inputs.jsonl`.

meshparity holds them to the world-size-1 reference's rows at the same step (the curve and
oracle levels, `artifacts.inputs`): each rank's rows must be among them, and together the ranks
must take them all. A data loader whose position is not restored on resumption is then named
("rank 0 trained at step 3 on the rows the reference took at step 1 …") instead of showing
only as a drifting loss. Hand each rank the rows it trains on *whole* (before a context-parallel
split), as token ids.

A row's digest is FNV-1a (64 bits) of its token ids as little-endian int64, 16 lower-case hex
digits — the same as the meshparity binary's (`meshparity_engine::inputs::row_digest`).
"""

import json
import os

__all__ = ["row_digests", "write"]

_OFFSET = 0xCBF29CE484222325
_PRIME = 0x100000001B3


def row_digests(batch):
    """One digest per row of `batch` (a 2-D array of token ids: numpy, JAX, torch or lists)."""
    import numpy as np

    from . import to_numpy

    ids = to_numpy(batch).astype("<i8")
    if ids.ndim == 1:
        ids = ids.reshape(1, -1)
    if ids.ndim != 2:
        raise ValueError(f"row_digests takes a [rows, tokens] array, not shape {ids.shape}")
    data = np.ascontiguousarray(ids).view(np.uint8).reshape(ids.shape[0], -1)
    h = np.full(ids.shape[0], _OFFSET, dtype=np.uint64)
    prime = np.uint64(_PRIME)
    with np.errstate(over="ignore"):
        for col in data.T:  # FNV-1a runs byte by byte; every row at once
            h = (h ^ col.astype(np.uint64)) * prime
    return [f"{int(x):016x}" for x in h]


def write(path, step, ranks, truncate=False):
    """Append step `step`'s lines to `path`: `ranks` maps each rank to the rows it trained on
    (a 2-D array of token ids, or its `row_digests`). `truncate` empties the file first."""
    lines = []
    for rank in sorted(ranks):
        rows = ranks[rank]
        if not (isinstance(rows, list) and all(isinstance(r, str) for r in rows)):
            rows = row_digests(rows)
        lines.append(json.dumps({"step": int(step), "rank": int(rank), "rows": rows}))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w" if truncate else "a") as f:
        f.write("".join(line + "\n" for line in lines))
