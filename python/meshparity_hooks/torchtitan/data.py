"""The data every layout trains on: one global batch per step, drawn from (seed, step) alone.

A parity check compares layouts on the same tokens, so the batches cannot come from a dataset
reader whose order depends on the number of data-parallel readers. `Tokens` is a torchtitan
dataloader (its `BaseDataLoader`, built by the trainer as any other) that draws the step's
global batch — `[global_batch, seq + 1]` token ids below the model's vocabulary — and yields this
data-parallel rank's rows of it, in chunks of the size the trainer asks for (its local batch, or
one pipeline microbatch). Each row's first `row % 3 + 1` labels are ignored, as a prompt's are,
so the ranks' counts of counted tokens differ and a loss normalized by a rank's own count
(instead of the global one) shows. Each row is one document (`positions` 0..seq-1), so
block-causal attention is causal. `Untokenized` stands for the tokenizer, which nothing reads.
"""

from dataclasses import dataclass

import torch
from torchtitan.components.dataloader import BaseDataLoader
from torchtitan.components.tokenizer import BaseTokenizer

from ..torch.data import global_batch  # noqa: F401  (the draw both adapters share)


class Tokens(BaseDataLoader):
    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        seed: int = 0
        global_batch: int = 1
        vocab: int = 2

    def __init__(self, config, *, dp_world_size, dp_rank, tokenizer, seq_len, local_batch_size,
                 snapshot_every_n_steps=None):
        if config.global_batch % dp_world_size:
            raise ValueError(
                f"the global batch {config.global_batch} does not split over "
                f"{dp_world_size} data-parallel ranks")
        self.config = config
        self.ranks, self.rank = dp_world_size, dp_rank
        self.seq, self.chunk = seq_len, local_batch_size
        self.step = 0

    def __iter__(self):
        per_rank = self.config.global_batch // self.ranks
        while True:
            self.step += 1
            ids, labels = global_batch(self.config.seed, self.step, self.config.global_batch,
                                       self.seq, self.config.vocab)
            rows = slice(self.rank * per_rank, (self.rank + 1) * per_rank)
            ids, labels = ids[rows], labels[rows]
            positions = torch.arange(self.seq).expand(per_rank, self.seq).contiguous()
            for start in range(0, per_rank, self.chunk):
                part = slice(start, start + self.chunk)
                yield {"input": ids[part], "positions": positions[part]}, labels[part]

    def state_dict(self):
        return {"step": self.step}

    def load_state_dict(self, state_dict):
        self.step = state_dict["step"]


class Untokenized(BaseTokenizer):
    @dataclass(kw_only=True, slots=True)
    class Config(BaseTokenizer.Config):
        vocab: int = 2

    def __init__(self, config, *, tokenizer_path=None):
        super().__init__()
        self.vocab = config.vocab

    def encode(self, *args, **kwargs):
        raise NotImplementedError("meshparity's tokens are drawn, not encoded")

    def decode(self, *args, **kwargs):
        raise NotImplementedError("meshparity's tokens are drawn, not decoded")

    def get_vocab_size(self):
        return self.vocab
