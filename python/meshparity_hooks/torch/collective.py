"""The collective-safe core: tensors made whole on every rank, and one rank's error turned
into an error on every rank (`agree`) instead of a rank dying while the rest wait."""

import torch
import torch.distributed as dist


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


def _gather(x, group, dim):
    """Every rank's `x` of `group` concatenated along `dim`, in group rank order."""
    n = dist.get_world_size(group)
    if n == 1:
        return x
    # Contiguous receive buffers: `empty_like` keeps a strided tensor's strides, and gloo's
    # all-gather fills its outputs as contiguous memory.
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(parts, x, group=group)
    return torch.cat(parts, dim=dim)
