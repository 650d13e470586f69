"""What torchtitan needs to train on a CPU with gloo, each adaptation with why.

torchtitan targets accelerators: it picks its device from `torch._utils` at import time and
falls back to CUDA, its memory monitor reads a CUDA-like device module, its language models
attend with FlexAttention (compiled, and without a backward pass on a CPU), and FSDP's sum
reduction (divide factor 1) goes out as PREMUL_SUM, which gloo lacks. None of this changes what
is computed on an accelerator; on a CPU each is replaced by the same arithmetic:

1. `use_cpu()`: the device is `cpu` (before torchtitan is imported: its modules read it then),
   and the device module answers what torchtitan asks of a GPU's (name, memory, peak stats) with
   the machine's memory and no statistics.
2. `flex_attention_on_cpu()`: FlexAttention's kernel is replaced by the same attention written
   out (the BlockMask's `mask_mod` made dense, softmax over the allowed keys, its log-sum-exp
   for the backends that ask): the mask torchtitan builds from the documents' positions is kept,
   so block-causal attention stays block-causal.
3. `force_sum_reductions(model_parts)`: every FSDP module reduces gradients with a plain SUM
   (`set_force_sum_reduction_for_comms`), the divide factor 1 torchtitan sets meaning exactly
   that.
4. `contiguous_stage_outputs(model_parts)`: what a pipeline stage sends — its output, and the
   gradient of its input — is made contiguous. The schedule allocates the receiving stage's
   buffer with the sent tensor's strides, and under TP with SP both are strided views; NCCL's
   point-to-point ops accept that, gloo's refuse it ("input tensor has to be contiguous"). The
   values are the same.
5. `uneven_all_to_all_on_gloo()`: `torch.distributed.all_to_all` with chunks of different
   sizes — the token exchange of expert parallelism on `spmd_types`, each rank sending each
   expert's share of its routed tokens — goes out as one `all_to_all_single` with split sizes
   (gloo's alltoallv). gloo's list form demands equal chunks ("invalid tensor size at index 1");
   NCCL's takes any. Each chunk arrives where it would have, with the same values.
"""

import os
import types

import torch
import torch._utils


class _CpuDevice(types.ModuleType):
    """`torch.cpu` with the CUDA-module calls torchtitan makes of its device module."""

    def __getattr__(self, name):
        return getattr(torch.cpu, name)

    def get_device_name(self, *_):
        return "cpu"

    def get_device_properties(self, *_):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return types.SimpleNamespace(name="cpu", total_memory=total)

    def memory_stats(self, *_):
        return {}

    def reset_peak_memory_stats(self, *_):
        pass

    def empty_cache(self):
        pass

    def current_device(self):
        return 0

    def device_count(self):
        return 1

    def set_device(self, *_):
        pass

    def synchronize(self, *_):
        pass


_CPU = _CpuDevice("cpu")


def use_cpu():
    """Run torchtitan on the CPU. Must be called before torchtitan is imported."""
    original = torch._utils._get_device_module
    torch._utils._get_available_device_type = lambda: "cpu"
    torch._utils._get_device_module = lambda t="cuda": _CPU if t == "cpu" else original(t)


def _attention(q, k, v, *, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
               return_aux=None, kernel_options=None):
    """flex_attention's result, written out: (B, N, L, H) in, (out, aux) out."""
    from torch.nn.attention.flex_attention import AuxOutput, create_mask

    if score_mod is not None:
        raise NotImplementedError(
            "meshparity_hooks.torchtitan: a FlexAttention score_mod has no CPU form here")
    batch, heads, length, head_dim = q.shape
    if k.shape[1] != heads:
        k = k.repeat_interleave(heads // k.shape[1], dim=1)
        v = v.repeat_interleave(heads // v.shape[1], dim=1)
    scale = head_dim ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if block_mask is not None:
        mask = create_mask(block_mask.mask_mod, batch, 1, length, k.shape[2], device=q.device)
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.softmax(scores, dim=-1) @ v
    want_lse = return_aux is not None and getattr(return_aux, "lse", False)
    return out, AuxOutput(lse=lse if want_lse else None)


def flex_attention_on_cpu():
    """FlexAttention's compiled kernel replaced by [`_attention`] (it has no CPU backward)."""
    from torchtitan.models.common import attention

    attention.FlexAttention._compiled_flex_attn = _attention


def force_sum_reductions(model_parts):
    """FSDP's gradient reduction as a plain SUM on every FSDP module (gloo has no PREMUL_SUM)."""
    from torch.distributed.fsdp import FSDPModule

    for part in model_parts:
        for m in part.modules():
            if isinstance(m, FSDPModule):
                m.set_force_sum_reduction_for_comms(True)


def contiguous_stage_outputs(model_parts):
    """Each pipeline stage's output and its input's gradient contiguous (gloo's send and
    receive need it)."""

    def contiguous(t):
        return t.contiguous() if isinstance(t, torch.Tensor) else t

    def inputs(_module, args):
        for a in args:
            if isinstance(a, torch.Tensor) and a.requires_grad:
                a.register_hook(contiguous)

    def output(_module, _inputs, out):
        return contiguous(out)

    for part in model_parts:
        part.register_forward_pre_hook(inputs)
        part.register_forward_hook(output)


def uneven_all_to_all_on_gloo():
    """`torch.distributed.all_to_all` on a gloo group as one `all_to_all_single` over the
    chunks flattened end to end, each rank's split its chunk's element count (gloo's
    alltoallv); other backends keep their own."""
    import torch.distributed as dist

    if getattr(dist.all_to_all, "_meshparity", False):
        return
    original = dist.all_to_all

    def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op=False):
        if dist.get_backend(group) != "gloo" or async_op:
            return original(output_tensor_list, input_tensor_list, group=group,
                            async_op=async_op)
        sent = torch.cat([t.reshape(-1) for t in input_tensor_list])
        got = sent.new_empty(sum(t.numel() for t in output_tensor_list))
        dist.all_to_all_single(
            got, sent,
            output_split_sizes=[t.numel() for t in output_tensor_list],
            input_split_sizes=[t.numel() for t in input_tensor_list], group=group)
        for out, part in zip(output_tensor_list,
                             got.split([t.numel() for t in output_tensor_list])):
            out.copy_(part.view(out.shape))
        return None

    all_to_all._meshparity = True
    dist.all_to_all = all_to_all
