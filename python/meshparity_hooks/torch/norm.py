"""The global gradient norm as world size 1 computes it, and clipping by it."""

import torch

from .collective import _is_dtensor, _settle, full


def grad_norm(parameters):
    """The global L2 norm of the parameters' gradients, as world size 1 computes it: a DTensor
    gradient's squares summed over its shards (each counted once, replicas once), a plain
    tensor's taken as this rank's whole copy (a replicated parameter). Parameters may mix the
    two (`clip_grad_norm_`'s foreach norm refuses that: TP without SP leaves the norms plain).
    Collective for DTensors: call on every rank."""
    total = torch.zeros((), dtype=torch.float64)
    for p in parameters:
        g = getattr(p, "grad", p)
        if g is None:
            continue
        g = _settle(g.detach())
        sq = g.double().pow(2).sum() if not _is_dtensor(g) else g.to(torch.float64).pow(2).sum()
        total += full(sq).to(torch.float64)
    return total.sqrt()


def clip_grads(parameters, max_norm):
    """Clips the parameters' gradients to global norm `max_norm` (torch's coefficient,
    max_norm / (norm + 1e-6), at most 1) and returns the norm before clipping ([`grad_norm`])."""
    parameters = [p for p in parameters if p.grad is not None]
    norm = grad_norm(parameters)
    coeff = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for p in parameters:
        p.grad.mul_(coeff.to(p.grad.dtype).item())
    return norm


def local_clip(parameters, max_norm):
    """A bug, for the adapters' switches to replay: clipping by the norm of this rank's own
    gradient shards — what `clip_grad_norm_` returns under FSDP2 or ZeRO when the sum of squares
    is not reduced (pytorch#170862, DeepSpeed#7718). Clips the local gradients in place and
    returns that local norm."""
    grads = []
    for p in parameters:
        if p.grad is not None:
            g = p.grad
            grads.append(g.to_local() if hasattr(g, "to_local") else g)
    norm = torch.stack([g.double().pow(2).sum() for g in grads]).sum().sqrt()
    coeff = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coeff.to(g.dtype))
    return norm.float()
