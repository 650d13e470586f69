"""meshparity's artifacts from a torch.distributed program, written safely from every rank.

    from meshparity_hooks.torch import Writer, Tracer, grad_norm, replica_digests
    w = Writer(args.out)                        # call every method on EVERY rank
    tracer = Tracer(model, args.trace_dir, mesh=mesh, layouts={"*.w1": "shard:-1"})
    w.tensors("init.safetensors", model.state_dict())     # DTensors gathered, rank 0 writes
    for step in range(1, steps + 1):
        tracer.begin(step - 1)                  # traces step indices meshparity asks for
        loss = model(batch).loss(); loss.backward()
        tracer.grads(model)                     # finalized gradients, grad.NAME
        tracer.end()
        w.grads(model, "before_clip")           # written if the spec's point is before_clip
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        w.grads(model, "after_clip")
        w.metric(step, loss=loss, grad_norm=norm)
    w.digests(model)                            # replicas' agreement, checked by meshparity
    w.tensors("final.safetensors", model.state_dict())

Why a writer of its own: a DTensor, an AsyncCollectiveTensor or an FSDP2 parameter is only
whole after a collective every rank joins, and an error on one rank (a tensor subclass numpy
refuses, a full disk) must not leave the others waiting in the next collective. So each call
(1) checks what it was given on every rank and agrees on it, (2) gathers on every rank in one
order, (3) writes on rank 0, and agrees again: if any rank failed, every rank raises
`WriterError` with that rank's message instead of one rank dying and the rest hanging.
"""

from .checkpoint import roundtrip
from .collective import WriterError, agree, full
from .determinism import deterministic, dropout_mask
from .norm import clip_grads, grad_norm
from .replicas import replica_digests
from .trace import Tracer
from .writer import Writer

__all__ = [
    "WriterError",
    "Writer",
    "Tracer",
    "full",
    "grad_norm",
    "clip_grads",
    "replica_digests",
    "agree",
    "dropout_mask",
    "roundtrip",
    "deterministic",
]
