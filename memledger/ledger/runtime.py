"""The runtime row and the peak of one rank: optimizer-step temporaries, the largest transient,
allocator slack and the CUDA context, assembled with the other rows into peak_allocated and
peak_total.

peak_allocated = weights + gradients + optimizer + max(activations + communication + the largest
forward/backward transient, optimizer-step temporaries): the two phases never overlap, because
activations are freed before the optimizer step (docs/design-notes.md §1). peak_total adds the
CUDA context and the allocator slack. The runtime row holds context, slack and whatever the
transient adds at the peak, so the six rows always sum to peak_total.
Ignores: fragmentation beyond the slack percentage; NCCL's own host-side memory.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from memledger.ledger.activations import titan_block_forward as block_forward
from memledger.ledger.activations.titan_block_forward import live_peak
from memledger.ledger.activations.transients import BACKWARD_SET
from memledger.ledger.fsdp2 import reshard_after_forward, torchtitan_runs
from memledger.ledger.items import Item, RankLedger, add_rows, sum_rows
from memledger.ledger.optimizer_step import for_loop_temporaries, with_master_cast
from memledger.ledger.pipeline.placement import RankPlacement
from memledger.ledger.static.moves import HostSide, muon_gather_item, opt_partition_params
from memledger.ledger.static.rows import Held
from memledger.ledger.timeline import Timeline, closed_peak, lifetime_item, walked_peak
from memledger.ledger.timeline_shape import LazyShape, Transients, rank_shape, transient_classes
from memledger.ledger.step_in_backward import per_parameter_step
from memledger.ledger.titan_graphs import graphs_run
from memledger.ledger.titan_lifetimes import titan_lifetimes
from memledger.specs.loop import resolve_loop
from memledger.specs.runtime import RuntimeSpec
from memledger.specs.train import TrainSpec
from memledger.units import ceil_div, format_bytes


def step_temporaries(held: list[Held], p, t, rt: RuntimeSpec) -> Item:
    """The optimizer-step phase: the step's temporaries, Muon's Newton-Schulz workspace and its
    gather, whichever is largest (the AdamW part and the Muon part run one after the other).
    Frozen groups (fine-tuning) take no part in the step."""
    held = [h for h in held if not h.group.frozen]
    muon = muon_gather_item([(h.group, h.instances) for h in held if h.group.matrix], p, t, rt)
    loop = resolve_loop(rt, t.profile)
    if rt.optimizer_offload:
        return Item("runtime", "optimizer-step temporaries", 0, "the step runs on the CPU",
                    "ZeRO-Offload (arXiv 2101.06840)")
    if rt.optimizer_in_backward:
        base = per_parameter_step(held, p, t, loop.optimizer_impl)
    elif loop.optimizer_impl == "fused":
        base = Item("runtime", "optimizer-step temporaries", 0, "fused kernel: no temporaries",
                    "Apex/TE/torch fused AdamW")
    elif loop.optimizer_impl == "for-loop":
        base = for_loop_temporaries(held, p, t)
    else:
        n = opt_partition_params(held, p)
        fmt = t.opt.fixed_fmt or t.recipe.state_fmt
        base = Item("runtime", "optimizer-step temporaries", format_bytes(fmt, n),
                    f"foreach step: one {fmt} copy of the {n} local params (sqrt of v)",
                    "torch.optim foreach implementation")
    base = with_master_cast(base, held, p, t, loop)
    if t.optimizer != "muon":
        return base
    ns = muon_workspace(held, t)
    if muon is not None:
        ns = Item("runtime", f"optimizer step: {muon.name} + newton-schulz", ns.bytes + muon.bytes,
                  f"{muon.formula}; {ns.formula}", muon.source)
    return max(base, ns, key=lambda i: i.bytes)


def muon_workspace(held: list[Held], t: TrainSpec) -> Item:
    """Newton-Schulz on the largest matrix: the momentum-mixed update (grad dtype) plus, in bf16,
    the old and new iterate (r·c each) and the Gram matrix and its update (min(r,c)² each)."""
    def need(g):
        rc, mn = g.rows * g.cols, min(g.rows, g.cols)
        return format_bytes(t.recipe.grad_fmt, rc) + format_bytes("bf16", 2 * rc + 2 * mn * mn)
    mats = [h.group for h in held if h.group.matrix]
    if not mats:
        return Item("runtime", "muon newton-schulz workspace", 0, "no matrices on this rank", "")
    g = max(mats, key=need)
    mn = min(g.rows, g.cols)
    return Item("runtime", "muon newton-schulz workspace", need(g),
                f"{g.name} {g.rows}×{g.cols}: update ({t.recipe.grad_fmt}) + 2 bf16 iterates + "
                f"2 bf16 {mn}×{mn} Gram matrices", "torch.optim.Muon (_zeropower_via_newtonschulz)")


@dataclass(frozen=True)
class RankParts:
    """A rank's items before the peak is assembled (and before any remote offload)."""

    place: RankPlacement  # the rank's stages, layers, micro-batches in flight
    items: tuple[Item, ...]
    transients: tuple[Item, ...]
    step: Item
    moves: tuple
    host: HostSide
    ctx: tuple = ()  # (model, parallel, train, loop) for the timeline
    acts: object = None  # activations.held.HeldActivations of the rank
    fsdp_units: int = 0  # the communication row's FSDP per-layer unit buffers (`unit_buffers`)
    # items[:n] are the static part, summed once per composition (build.static_part); later
    # rewrites (pipeline.remote) change activation items only
    static_rows: tuple[int, dict] | None = None
    # (section, its parameters on this rank, unsharded) for "embedding", "head" and both (a tied
    # unit): FSDP2 root-unit sizes (fsdp2.root_unit_params; ledger.titan_lifetimes)
    root_params: tuple[tuple[str, int], ...] = ()

    @cached_property
    def rows(self) -> dict[str, int]:
        """The items' bytes per row (items.sum_rows), summed once."""
        if self.static_rows is None:
            return sum_rows(self.items)
        n, rows = self.static_rows
        return add_rows(rows, self.items[n:])

    def sums(self) -> tuple[int, int, int]:
        """(static, forward/backward-phase bytes, largest transient)."""
        rows = self.rows
        static = rows["weights"] + rows["gradients"] + rows["optimizer"]
        worst = max((i.bytes for i in self.transients), default=0)
        return static, rows["activations"] + rows["communication"], worst


def finalize(parts: RankParts, rt: RuntimeSpec, transfers=()) -> RankLedger:
    """Assemble the peak: the maximum of the rank's step timeline (memledger.ledger.timeline).
    Under on-demand gradients the events are walked; with persistent gradients it is the closed
    form static + max(forward/backward + largest transient, optimizer step), the loss-side
    transients net of FSDP's layer-unit buffers (`transient_at_peak`)."""
    items = list(parts.items)
    static, fwd_bwd, _ = parts.sums()
    step = parts.step
    m, p, t, loop = parts.ctx
    ops = block_forward_ops(m, p, t, loop, rt)
    replayed = None  # the shape the reserved replay walks, when not the events' own
    if loop.on_demand:  # walk the events (torchtitan: the loss side net of the layer units)
        shape = rank_shape(m, p, t, loop, parts, step.bytes, None, ops, rt.pipeline_engine)
        if rt.optimizer_in_backward:
            shape = replace(shape, step_in_backward=True)
        if graphs_run(p, t, rt, loop):  # zero_grad(set_to_none=False): gradients all step long
            shape = replace(shape, on_demand=False)
        if torchtitan_runs(t, loop):
            shape = titan_lifetimes(shape, parts, m, p, t, rt, loop)
            # units not resharded after forward are alive at the loss: no discount but, without
            # PP, the reduce-scatter buffers no backward has made yet
            kept = not reshard_after_forward(p, t, rt, loop)
            rs = sum(i.bytes for i in parts.items if i.name == FSDP_UNIT_ITEMS[1])
            units = (rs * (p.pp == 1) if kept else fsdp_unit_bytes(parts, rt)) \
                + loss_free_moe_bytes(parts)
            replayed, shape = (shape, walk_discounted(shape, units)) if units else (None, shape)
        peak_event = walked_peak(shape)
    else:  # closed form; the events only when asked for (RankLedger.timeline)
        shape = LazyShape(m, p, t, loop, parts, step.bytes, None, ops, rt.pipeline_engine)
        tr = fsdp_discounted(transient_classes(m, p, t, parts), fsdp_unit_bytes(parts, rt))
        tr = tr._replace(layer_fwd=live_peak(ops))
        peak_event = closed_peak(static, fwd_bwd, tr, step.bytes, parts.place.flights)
    peak_alloc = peak_event.bytes
    added = peak_alloc - static - fwd_bwd
    worst, over = transient_at_peak(parts, rt)
    if loop.on_demand:
        items.append(lifetime_item(shape, peak_event, added))
    elif worst is not None and peak_event.phase != "optimizer-step":
        note = "" if over == worst.bytes else (
            f"; FSDP layer units are resharded at the loss: {worst.bytes} - their buffers")
        items.append(Item("runtime", f"largest transient: {worst.name}", added,
                          worst.formula + note, worst.source))
    else:
        items.append(Item("runtime", "largest transient: " + step.name, added,
                          f"{step.formula}, minus the freed activations and buffers", step.source))
    slack = ceil_div(peak_alloc * rt.allocator_slack_pct, 100)
    items.append(Item("runtime", "allocator slack", slack,
                      f"{rt.allocator_slack_pct}% of peak allocated", "PyTorch caching allocator"))
    items.append(Item("runtime", "cuda context", rt.cuda_context_bytes,
                      "CUDA context + library handles", "docs/reference.md: 0.6 GiB on H200, PyTorch 2.11"))
    place = parts.place
    return RankLedger(pp_rank=place.r, items=tuple(items), peak_allocated_bytes=peak_alloc,
                      peak_total_bytes=peak_alloc + slack + rt.cuda_context_bytes,
                      layers=place.layers, in_flight=place.flights,
                      rows=add_rows(parts.rows, items[len(parts.items):]),
                      moves=parts.moves, transfers=tuple(transfers), host=parts.host,
                      peak_event=peak_event, lazy_shape=Timeline(shape),
                      replay_shape=Timeline(replayed) if replayed is not None else None,
                      fsdp_streams=rt.zero3_impl == "fsdp")


def block_forward_ops(m, p, t, loop, rt: RuntimeSpec) -> tuple[int, ...]:
    """A layer forward's allocations where the ledger models them: torchtitan's compiled
    2024-12 blocks under full AC (activations.titan_block_forward), else ()."""
    if not (torchtitan_runs(t, loop) and block_forward.applies(m, t, rt)):
        return ()
    return block_forward.forward_ops(m, t, p, float8=rt.float8 != "off")


LAYER_PHASE = ("recompute working set", BACKWARD_SET)  # inside a layer's backward
from memledger.ledger.allocator import FSDP_UNIT_ITEMS, MOE_A2A_ITEMS  # noqa: E402


def unit_buffers(comm: list[Item]) -> int:
    """Of a rank's communication items, the FSDP per-layer unit buffers (whatever the engine)."""
    return sum(i.bytes for i in comm if i.name in FSDP_UNIT_ITEMS)


def fsdp_unit_bytes(parts: RankParts, rt: RuntimeSpec) -> int:
    """The FSDP per-layer unit buffers of the communication row (0 under DeepSpeed)."""
    return parts.fsdp_units if rt.zero3_impl == "fsdp" else 0


def loss_free_moe_bytes(parts: RankParts) -> int:
    """A MoE layer's all-to-all buffers (torchtitan: `AllToAllTokenDispatcher` allocates them
    inside each MoE layer's forward and backward), not alive at the loss either (measured:
    DeepSeek-V3 16B EP 8 at the chunked loss, +402,653,184 B had they been)."""
    return sum(i.bytes for i in parts.items if i.name in MOE_A2A_ITEMS)


def transient_at_peak(parts: RankParts, rt: RuntimeSpec) -> tuple[Item | None, int]:
    """The largest forward/backward transient and what it adds on top of the activations and
    buffers. Recompute working sets run inside a layer's backward, while its FSDP unit is
    gathered; the loss-side transients (logits, their gradients, the forward's working set) run
    when no layer unit is: FSDP reshards each layer after its forward and gathers it again only
    at its own backward, after the head's (measured: `memledger validate --engine torch`,
    fake-scale Llama-3-8B, Qwen3-30B-A3B). So a loss-side transient adds max(0, T - units)."""
    units = fsdp_unit_bytes(parts, rt)
    best, best_over = None, 0
    for x in parts.transients:
        layer_phase = x.name.startswith(LAYER_PHASE)
        over = x.bytes if layer_phase else max(x.bytes - units, 0)
        if best is None or over > best_over or (over == best_over and x.bytes > best.bytes):
            best, best_over = x, over
    return best, best_over


def walk_discounted(shape, units: int):
    """`fsdp_discounted` for the walked timeline (on-demand gradients): its forward-end, loss
    forward and loss backward events carry the loss-side transients while no layer unit is
    gathered either (measured: torchtitan's chunked-loss peak, ledger.chunked_loss, and its
    materialised loss, the engine's `llama3-8b fsdp4 tp2 op-ac materialized loss`: exact).
    torchtitan only: the planner mirrors the other on-demand loops' walk as it is
    (undiscounted), and no measurement of theirs has asked for it. The reserved replay walks
    the undiscounted shape with the units freed into their own streams' pools at the loss
    (reserved._transient): their segments stay reserved there."""
    if not units:
        return shape
    return replace(shape, t_fwd=max(shape.t_fwd - units, 0),
                   t_fwd_last=max(shape.t_fwd_last - units, 0), t_loss=max(shape.t_loss - units, 0))


def fsdp_discounted(tr: Transients, units: int) -> Transients:
    """The loss-side transients run while no FSDP layer unit is gathered: each adds only what
    exceeds the units' buffers (see `transient_at_peak`)."""
    if not units:
        return tr
    return tr._replace(fwd=max(tr.fwd - units, 0), fwd_last=max(tr.fwd_last - units, 0),
                       loss=max(tr.loss - units, 0))
