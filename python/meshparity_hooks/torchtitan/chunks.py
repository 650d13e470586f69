"""Context parallelism: each rank holds chunks of every sequence, in the load balancer's order,
so a sequence-valued tensor is whole only once its chunks are gathered and put back in order.

torchtitan shards the inputs, labels, positions and attention masks along the sequence
(`prepare_context_parallel_input`), rearranged by its load balancer (head-tail: rank r holds
chunks r and 2·cp−1−r) so causal attention costs every rank alike. The order needs no model of
the balancer: the adapter's data makes each row one document, so a column's position is its
place in the sequence, and the positions torchtitan sharded alongside the inputs say where each
gathered column belongs.
"""

import torch
import torch.distributed as dist

from ..torch.collective import _gather


def group(parallel_dims):
    """The context-parallel group, or None without context parallelism."""
    if not parallel_dims.cp_enabled:
        return None
    return parallel_dims.get_mesh("cp").get_group()


def in_order(parallel_dims, x, positions, seq):
    """`x` ([rows, columns, ...], its rows already whole) with its sequence whole and in order:
    gathered over the context-parallel ranks if it still holds one rank's columns, then each
    row's columns sorted by `positions` (this rank's, as torchtitan sharded them)."""
    cp = group(parallel_dims)
    if cp is None:
        return x
    if x.shape[1] != seq:
        x = _gather(x, cp, 1)
    if positions is None:
        raise ValueError("context parallelism: the batch has no `positions`, so the order of "
                         "a sequence's chunks cannot be told")
    where = _gather(positions.detach().contiguous(), cp, 1)
    if parallel_dims.dp_enabled:
        batch = parallel_dims.get_optional_mesh("batch")
        if batch is not None and dist.get_world_size(batch.get_group()) > 1:
            where = _gather(where, batch.get_group(), 0)
    where = where.to(torch.int64)
    every = torch.arange(where.shape[1], dtype=torch.int64).expand_as(where)
    if not torch.equal(torch.sort(where, dim=1).values.cpu(), every):
        # Only one document per row has each column's place as its position.
        raise ValueError("context parallelism: a row's positions are not 0 … S−1 once "
                         "gathered, so they cannot put its chunks in order")
    order = torch.argsort(where, dim=1)
    index = order.reshape(order.shape + (1,) * (x.dim() - 2)).expand_as(x)
    return torch.gather(x, 1, index.to(x.device))
