"""Peak reserved bytes of a rank: the caching-allocator model (memledger.ledger.allocator)
replayed over the rank's step timeline (memledger.ledger.timeline), computed only when asked
(`reserved_peak`; the ledger's build never runs it).

The timeline has aggregates, not tensors, so the allocation list is derived (approximate):
  static      one allocation per weights / optimizer item of the rank (an item is a group of
              parameters; PyTorch allocates one tensor per parameter, so the 2 MiB rounding of
              each large tensor's segment is undercounted: at most 2 MiB per parameter tensor)
  gradients   each rise of the gradient column one allocation (on-demand: per layer, at its
              backward), all freed at zero_grad; persistent gradients one allocation up front.
              Under FSDP2 the sharded gradients are views of the reduce-scatter output, which
              is allocated on the reduce-scatter stream (_grad_stream); PP's unsharded fp32
              gradients, accumulated by autograd, on the default stream
  activations each rise one allocation tagged with its (stage, micro-batch); each fall frees
              that micro-batch's most recent allocations (a layer's saved tensors as one block)
  buffers     the communication items, allocated at the first event and freed before the
              optimizer step; FSDP's all-gather and reduce-scatter buffers on their own streams
              (FSDP2 runs them on separate streams, torch/distributed/fsdp/_fully_shard/
              _fsdp_param_group.py: all_gather_copy_in / reduce_scatter streams)
  layer fwd   a compiled torchtitan 2024-12 block's forward under full AC: its tensors in op
              order, each freed after its last reader (activations.titan_block_forward)
  transient   allocated at its event and freed before the next; the loss forward's and
              backward's as the separate tensors they stand for (ActTensor.pieces: hf's fp32 log-prob and logit
              gradients are two blocks, torch's loss-parallel backward three)
peak_reserved is the allocator's max_reserved; nothing is released (empty_cache is never
called), so it is also what the allocator holds after the step.
Ignores: tensors below the aggregates (many small tensors fragment more than one block per
layer does), the second step (the first step's cache is reused; reserved rarely grows after
it), NCCL's own buffers (cudaMalloc'd outside the allocator; they are in the communication row).
"""
from __future__ import annotations

from memledger.ledger.allocator import (FSDP_UNIT_ITEMS, MOE_A2A_ITEMS, AllocatorSpec,
                                        CachingAllocator)
from memledger.ledger.fsdp2 import PP_GRADS_ITEM

STREAM_OF = {"zero-3 gather + prefetch": "all-gather", "zero-3 reduce-scatter input": "reduce-scatter"}


def _static_blocks(rank, shape) -> list[int]:
    sizes = [i.bytes for i in rank.items if i.row in ("weights", "optimizer") and i.bytes > 0]
    rest = shape.static_bytes - sum(sizes)
    if rest < 0:  # the items do not decompose the static bytes: one block
        return [shape.static_bytes] if shape.static_bytes else []
    return sizes + ([rest] if rest else [])


def _comm_blocks(rank, shape, fsdp: bool) -> list[tuple[int, str, bool]]:
    """(bytes, stream, freed at the loss) per communication item: FSDP's layer units on their
    own streams, and under torchtitan's discounted walk (`replay_shape`) a MoE layer's
    all-to-all buffers, which live inside the layer (runtime.loss_free_moe_bytes)."""
    moe = fsdp and rank.replay_shape is not None
    # FSDP2's unsharded PP gradients are in the timeline's gradient column (ledger.fsdp2)
    out = [(i.bytes, STREAM_OF[i.name] if fsdp and i.name in FSDP_UNIT_ITEMS else "default",
            (fsdp and i.name in FSDP_UNIT_ITEMS) or (moe and i.name in MOE_A2A_ITEMS))
           for i in rank.items if i.row == "communication" and i.bytes > 0
           and i.name != PP_GRADS_ITEM]
    rest = shape.comm - sum(b for b, _, _ in out)
    if rest < 0:
        return [(shape.comm, "default", False)] if shape.comm else []
    return out + ([(rest, "default", False)] if rest else [])


def replay(rank, fsdp: bool = True, spec: AllocatorSpec = AllocatorSpec()) -> CachingAllocator:
    """The allocator after the rank's step (max_reserved, max_allocated). A rank whose events
    are discounted at the loss (`RankLedger.replay_shape`: torchtitan's FSDP layer units
    resharded there) is replayed on its undiscounted shape with the units freed into their own
    streams' pools for the loss-side transients, as the closed form's are."""
    tl = rank.replay_shape or rank.lazy_shape
    shape = tl.get()
    a = CachingAllocator(spec)
    for size in _static_blocks(rank, shape):
        a.malloc(size)
    grads, acts, comm, loss_free = [], {}, [], []
    level = {"g": 0, "a": 0, "c": 0}
    pp_unsharded = any(i.name == PP_GRADS_ITEM and i.bytes > 0 for i in rank.items)
    fsdp_sharded = fsdp and any(i.name in FSDP_UNIT_ITEMS and i.bytes > 0 for i in rank.items)
    for ev in tl.events():
        if ev.communication > level["c"] and not comm:
            blocks = _comm_blocks(rank, shape, fsdp)
            comm = [a.malloc(b, s) for b, s, _ in blocks]
            loss_free = [i for i, (_, _, free) in enumerate(blocks) if free]
            level["c"] = ev.communication
        elif ev.communication < level["c"]:
            for b in comm:
                a.free(b)
            comm, level["c"] = [], 0
        if ev.gradients > level["g"]:
            grads.append(a.malloc(ev.gradients - level["g"],
                                  _grad_stream(fsdp_sharded, rising=True, pp_unsharded=pp_unsharded)))
        elif ev.gradients < level["g"]:
            for b in grads:
                a.free(b)
            grads = [a.malloc(ev.gradients, _grad_stream(fsdp_sharded, rising=False,
                                                         pp_unsharded=pp_unsharded))
                     ] if ev.gradients else []
        level["g"] = ev.gradients
        _move_acts(a, acts, (ev.stage, ev.micro_batch), ev.activations - level["a"])
        level["a"] = ev.activations
        if ev.transient > 0 and _layer_forward(shape, ev):
            _run_ops(a, shape.fwd_layer_ops)
        elif ev.transient > 0:
            _transient(a, ev, comm, blocks=_blocks(shape, ev), loss_free=tuple(loss_free),
                       loss_side_free=fsdp and (not shape.on_demand
                                                or rank.replay_shape is not None))
    return a


def _grad_stream(fsdp_sharded: bool, rising: bool, pp_unsharded: bool) -> str:
    """The stream a gradient-column allocation is made on. FSDP2's sharded gradients are
    `torch.as_strided` views of the reduce-scatter output, allocated inside
    `with stream(reduce_scatter_stream)` (torch distributed/fsdp/_fully_shard/
    _fsdp_collectives.py `foreach_reduce`: "the RS output is allocated in the RS stream and
    used in the default stream (for optimizer)"), so zero_grad returns them to that stream's
    pool, which the default stream's activations and loss cannot reuse. Under PP × FSDP2 a
    rise of the column is the unsharded fp32 gradients that autograd accumulates on the
    default stream (`_fsdp_param.py` `to_accumulated_grad_if_needed`); what is left after a
    fall (a stage's last backward reduce-scattered) is sharded, on the reduce-scatter stream."""
    if not fsdp_sharded or (rising and pp_unsharded):
        return "default"
    return "reduce-scatter"


LOSS_SIDE = ("forward", "loss-forward", "loss-backward")


def _layer_forward(shape, ev) -> bool:
    """A layer forward's working set (timeline.events: the event before the layer's output)."""
    return (ev.phase == "forward" and ev.layer >= 0 and bool(shape.fwd_layer_ops)
            and ev.transient == shape.t_fwd_layer)


def _run_ops(a: CachingAllocator, ops: tuple[int, ...]) -> None:
    """The working set's tensors in op order: n > 0 allocates n bytes, ~k frees the k-th
    (activations.titan_block_forward); all are freed by the end."""
    blocks = []
    for n in ops:
        if n > 0:
            blocks.append(a.malloc(n))
        else:
            a.free(blocks[~n])


def _blocks(shape, ev) -> tuple[int, ...]:
    """A transient's allocations: the loss forward's and backward's separate tensors where the
    shape knows them (timeline_shape.forward_blocks / loss_blocks: e.g. the fp32 log-prob and
    logit gradients, two blocks, not one of twice the size), else the transient as one block."""
    parts = {"loss-backward": shape.t_loss_blocks,
             "loss-forward": shape.t_fwd_last_blocks}.get(ev.phase, ())
    return parts if parts and sum(parts) == ev.transient else (ev.transient,)


def _transient(a: CachingAllocator, ev, comm: list, loss_side_free: bool,
               blocks: tuple[int, ...] = (), loss_free: tuple[int, ...] = ()) -> None:
    """A loss-side transient runs while FSDP's layer units are resharded (as the ledger's
    closed form has it: runtime.fsdp_discounted): their blocks go back to their own streams'
    pools, which the default stream cannot reuse — the all-gather stream's segments stay
    reserved beside the transient's; torchtitan's MoE all-to-all buffers go back to the
    default pool, which it can (`loss_free`: the indices of both in `comm`)."""
    units = list(loss_free) if (loss_side_free and ev.phase in LOSS_SIDE) else []
    sizes = [(i, comm[i].size, comm[i].pool[0]) for i in units]
    for i in units:
        a.free(comm[i])
    for b in [a.malloc(n) for n in blocks or (ev.transient,)]:
        a.free(b)
    for i, size, stream in sizes:
        comm[i] = a.malloc(size, stream)


def _move_acts(a: CachingAllocator, acts: dict, tag, delta: int) -> None:
    if delta > 0:
        acts.setdefault(tag, []).append((delta, a.malloc(delta)))
        return
    need = -delta
    order = [tag] + [k for k in acts if k != tag]
    for k in order:
        stack = acts.get(k, [])
        while need > 0 and stack:
            n, b = stack.pop()
            a.free(b)
            if n > need:  # a fall smaller than the block: keep the remainder as one block
                stack.append((n - need, a.malloc(n - need)))
            need -= min(n, need)
        if need <= 0:
            return


MAX_REPLAY_EVENTS = 50_000  # ~0.1 s of replay; more (m in the thousands) is not replayed


def events(rank) -> int:
    """The rank's timeline events counted from its shape, without building them (an upper
    bound: per micro-batch and stage a forward and a backward per layer plus two)."""
    sh = rank.shape
    if sh is None:
        return 0
    # + the layer forward's working-set event; + the post-backward step (step_in_backward)
    per_layer = 2 + bool(sh.t_fwd_layer) + sh.step_in_backward
    # + the root units' reduce-scatter events (timeline: head_rs_delta, end_rs_delta)
    return sh.micro_batches * sum(per_layer * len(s.layers) + 4 for s in sh.stages) + 2


def reserved_peak(ledger, rank: int | None = None, spec: AllocatorSpec = AllocatorSpec()) -> int:
    """Peak reserved bytes of pipeline rank `rank` (default: the most loaded) under `spec`."""
    r = ledger.peak if rank is None else ledger.ranks[rank]
    return replay(r, fsdp=r.fsdp_streams, spec=spec).max_reserved
