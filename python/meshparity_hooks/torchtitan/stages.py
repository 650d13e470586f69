"""Pipeline stages: what a rank holds is its stages' part of the model, so what world size 1
holds is the union over the pipeline's ranks.

torchtitan's `pipeline_llm` splits the model into stages (each a pruned copy of the model
keeping its layers' names) and gives each pipeline rank one (1F1B, GPipe) or several
(interleaved: stage s on pipeline rank s mod pp). Everything the adapter writes is made whole
within a stage first (FSDP and TP inside it, by the stage's own groups) and then merged over
the pipeline group, so the files name every parameter once, as world size 1 does.

The logits' pass runs the stages in order, each on its own rank with the whole local batch
(no microbatches: one call per module, so each traced site is one tensor), the activation
handed on point to point over the pipeline group as torchtitan's schedule hands it; the last
stage's logits, made whole there, are then sent to every rank.
"""

import torch
import torch.distributed as dist


def group(parallel_dims):
    """The pipeline group, or None without pipeline parallelism."""
    if not parallel_dims.pp_enabled:
        return None
    return parallel_dims.get_mesh("pp").get_group()


def merged(parallel_dims, mine):
    """{name: value} of every stage: this rank's `mine` and its pipeline peers', in stage order
    (the first pipeline rank's first). Collective over the pipeline group."""
    pp = group(parallel_dims)
    if pp is None:
        return mine
    seen = [None] * dist.get_world_size(pp)
    dist.all_gather_object(seen, mine, group=pp)
    out = {}
    for part in seen:
        for k, v in part.items():
            out.setdefault(k, v)
    return out


def _stages(trainer):
    """(stage index, model part) of this rank, from torchtitan's schedule, and the number of
    stages."""
    schedule = trainer.pp_schedule
    stages = getattr(schedule, "_stages", None) or [schedule._stage]
    by_module = {id(s.submod): s.stage_index for s in stages}
    return [(by_module[id(part)], part) for part in trainer.model_parts], stages[0].num_stages


def indexed(trainer):
    """(stage index, model part) of this rank."""
    return _stages(trainer)[0]


def forward(trainer, inputs, extra):
    """The model's output over this rank's whole local batch, run stage by stage across the
    pipeline ranks: the last stage's output on its ranks, None on the others."""
    pp = group(trainer.parallel_dims)
    me = dist.get_rank(pp)
    mine, count = _stages(trainer)
    held = [None] * dist.get_world_size(pp)
    with _unchecked():
        dist.all_gather_object(held, [s for s, _ in mine], group=pp)
    owner = {s: r for r, stages in enumerate(held) for s in stages}
    parts = dict(mine)
    h = None
    for s in range(count):
        if owner[s] != me:
            continue
        if s > 0 and owner[s - 1] != me:
            box = [None]
            with _unchecked():
                dist.recv_object_list(box, group=pp, group_src=owner[s - 1])
            h = _received(trainer.parallel_dims, *box[0])
        h = parts[s](inputs if s == 0 else h, **extra)
        if s + 1 < count and owner[s + 1] != me:
            with _unchecked():
                sent = _handed_on(trainer.parallel_dims, h)
                dist.send_object_list([sent], group=pp, group_dst=owner[s + 1])
    return h if owner[count - 1] == me else None


def _handed_on(parallel_dims, h):
    """An activation as the schedule hands it to the next stage, by the names of its meshes
    (the next stage's ranks have their own groups): a DTensor as its local tensor, mesh names
    and placements; a plain tensor with its SPMD types, so the receiving stage's type checking
    knows its layout as one model's would."""
    from torch.distributed.tensor import DTensor

    from .layout import spmd_layout

    if isinstance(h, DTensor):
        names = tuple(h.device_mesh.mesh_dim_names or ())
        return h.to_local().detach().cpu(), ("dtensor", names, tuple(h.placements))
    layout = spmd_layout(h)
    if layout is not None:
        names = _axis_names(parallel_dims)
        spec, local = layout
        spec = None if spec is None else [_map(e, names) for e in spec]
        layout = ("spmd", spec, {names[a]: t for a, t in local.items()})
    return h.detach().cpu(), layout


def _received(parallel_dims, h, layout):
    """An activation from the previous stage, on this stage's meshes: a DTensor again, or a
    plain tensor with its SPMD types set on this stage's axes."""
    if layout is None:
        return h
    if layout[0] == "dtensor":
        from torch.distributed.tensor import DTensor

        _, names, placements = layout
        mesh = parallel_dims.get_mesh(list(names) if len(names) > 1 else names[0])
        return DTensor.from_local(h, mesh, placements, run_check=False)
    import spmd_types as spmd

    axes = {name: axis for axis, name in _axis_names(parallel_dims).items()}
    _, spec, local = layout
    spec = None if spec is None else spmd.PartitionSpec(*[_map(e, axes) for e in spec])
    spmd.assert_type(h, {axes[n]: t for n, t in local.items()}, spec)
    return h


def _unchecked():
    """meshparity's own communication, outside SPMD type checking (the pass may be checked)."""
    import contextlib

    try:
        import spmd_types as spmd
    except ImportError:
        return contextlib.nullcontext()
    return spmd.no_typecheck()


def _axis_names(parallel_dims):
    """{SPMD axis: mesh name} of this rank's one-dimensional meshes."""
    from spmd_types._mesh_axis import MeshAxis

    meshes = parallel_dims.get_all_one_dimensional_meshes()
    return {MeshAxis.of(m.get_group()): name for name, m in meshes.items()}


def _map(entry, table):
    """A partition spec entry (None, an axis or a tuple of them) through `table`."""
    if entry is None:
        return None
    if isinstance(entry, tuple):
        return tuple(table[a] for a in entry)
    return table[entry]


def from_last(trainer, value):
    """`value` as the ranks holding the pipeline's last stage have it, on every rank (the
    others pass anything): the loss, the logits. Collective over the pipeline group."""
    pp = group(trainer.parallel_dims)
    if pp is None:
        return value
    flags = [None] * dist.get_world_size(pp)
    dist.all_gather_object(flags, bool(trainer.pp_has_last_stage), group=pp)
    box = [value]
    dist.broadcast_object_list(box, group=pp, group_src=flags.index(True))
    return box[0]


def rows(input_dict, labels):
    """A step's microbatches (pipelining hands a list) as one local batch."""
    if not isinstance(input_dict, list):
        return input_dict, labels
    keys = input_dict[0].keys()
    joined = {k: torch.cat([d[k] for d in input_dict]) for k in keys}
    return joined, torch.cat(labels)
