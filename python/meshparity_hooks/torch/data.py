"""The tokens every layout trains on: one global batch per step, drawn from (seed, step) alone.

A parity check compares layouts on the same tokens, so the batches cannot come from a reader
whose order depends on the number of data-parallel readers. Each row's first `row % 3 + 1`
labels are ignored (-100, torch's and transformers' ignore index), as a prompt's are, so the
data-parallel ranks' counts of counted tokens differ and a loss normalized by a rank's own count
(instead of the global one) shows. Shared by the torchtitan and Hugging Face adapters.
"""

import torch

IGNORE_INDEX = -100


def global_batch(seed, step, batch, seq, vocab):
    """Step `step`'s (1-based) inputs and labels, `[batch, seq]` each, the same at every world
    size: `labels[:, t]` is the token after `inputs[:, t]`."""
    g = torch.Generator().manual_seed(seed * 1000 + step)
    ids = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    labels = ids[:, 1:].clone()
    for r in range(batch):
        labels[r, : r % 3 + 1] = IGNORE_INDEX
    return ids[:, :-1].contiguous(), labels


def rows(batch, ranks, rank):
    """The rows of a global batch of `batch` that data-parallel rank `rank` of `ranks` trains."""
    if batch % ranks:
        raise ValueError(f"the global batch {batch} does not split over {ranks} data-parallel ranks")
    per = batch // ranks
    return slice(rank * per, (rank + 1) * per)
