"""build_ledger: the six-row memory ledger of every pipeline rank (DESIGN.md §2).

peak_allocated = weights + gradients + optimizer + max(activations + communication + the
largest forward/backward transient, optimizer-step temporaries) — the two phases never overlap,
because activations are freed before the optimizer step (a refinement of DESIGN.md §2, which
adds the largest transient unconditionally). peak_total adds the CUDA context and allocator slack.
The runtime row holds context, slack and whatever the transient adds at the peak, so the six
rows always sum to peak_total.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache

from . import comm
from .act_policy import payments
from .act_rows import activation_items, activation_moves, activation_transients
from .items import ROWS, Item, RankLedger, sum_rows
from .params import (embedding_groups, head_groups, layer_groups, layer_kind, mtp_groups,
                     n_active_params, n_mtp_params, n_params, padded_vocab)
from .schedules import first_stage_rank, in_flight, last_stage_rank, stage_layers
from .sharding import shard_divisor
from .specs.hardware import Hardware
from .specs.model import ModelSpec
from .specs.parallel import ParallelSpec
from .specs.loop import LoopSpec, built_model, resolve_loop
from .specs.runtime import RuntimeSpec
from .specs.train import TrainSpec
from .remote import remote_offload
from .static import ROW_FUNCS, SOURCE_ZERO, Held, zero_note
from .optimizer_step import for_loop_temporaries, muon_coverage, with_master_cast
from .static_moves import HostSide, move_static, muon_gather_item, opt_partition_params
from .timeline import closed_peak, lifetime_item, walked_peak
from .timeline_shape import LazyShape, rank_shape, transient_classes
from .units import ceil_div, format_bytes
from .validate import check_all


@dataclass(frozen=True)
class Ledger:
    model: ModelSpec
    parallel: ParallelSpec
    train: TrainSpec
    runtime: RuntimeSpec
    hardware: Hardware | None
    ranks: tuple[RankLedger, ...]
    n_params: int
    n_active_params: int
    loop: LoopSpec | None = None  # the resolved training loop (None: built before loops)

    @property
    def most_loaded_rank(self) -> int:
        return max(self.ranks, key=lambda r: (r.peak_total_bytes, -r.pp_rank)).pp_rank

    @property
    def peak(self) -> RankLedger:
        return self.ranks[self.most_loaded_rank]

    def to_dict(self) -> dict:
        """The CLI's --json object: every byte figure an integer."""
        return {
            "n_params": self.n_params,
            "n_active_params": self.n_active_params,
            "ranks": [{
                "pp_rank": r.pp_rank,
                "rows": {k: r.rows[k] for k in ROWS},
                "peak_allocated_bytes": r.peak_allocated_bytes,
                "peak_total_bytes": r.peak_total_bytes,
                "items": [{"row": i.row, "name": i.name, "bytes": i.bytes, "formula": i.formula,
                           "source": i.source} for i in r.items],
                "moves": [move_dict(mv) for mv in r.moves if mv.policy != "keep"],
                "payments": payments(r.moves, self.train.micro_batches),
                "transfers": [asdict(x) for x in r.transfers],
                "host": asdict(r.host) if r.host else None,
                "peak_event": r.peak_event._asdict() if r.peak_event else None,
                "timeline": r.timeline_json(),
            } for r in self.ranks],
            "most_loaded_rank": self.most_loaded_rank,
            "config": {"model": asdict(self.model), "parallel": asdict(self.parallel),
                       "train": asdict(self.train), "runtime": asdict(self.runtime),
                       "hardware": asdict(self.hardware) if self.hardware else None,
                       "loop": asdict(self.loop) if self.loop else None},
        }


def move_dict(mv) -> dict:
    """A TensorMove as JSON: its fields plus the derived per-peak / per-micro-batch integers."""
    return {**mv._asdict(), "saved_bytes": mv.saved_bytes, "host_bytes": mv.host_bytes,
            "host_bytes_per_micro_batch": mv.host_bytes_per_micro_batch,
            "movable_bytes": mv.movable_bytes,
            "recompute_flops_per_micro_batch": mv.recompute_flops_per_micro_batch}


def held_groups(m: ModelSpec, p: ParallelSpec, t: TrainSpec, r: int,
                loop: LoopSpec | None = None) -> list[Held]:
    """Parameter groups on rank r: its layers by kind, embedding, head, MTP modules (the loop
    decides which optimizer owns the experts: optimizer_step.muon_coverage)."""
    stages = stage_layers(m, p)
    layers = [i for s in p.rank_stages(r) for i in stages[s]]
    held: list[Held] = []
    for kind in ("dense", "moe"):
        n = sum(layer_kind(m, i) == kind for i in layers)
        held += [Held(f"{kind} layers", g, n) for g in layer_groups(m, kind)] if n else []
    vocab = padded_vocab(m, p.tp, t.pad_multiple())
    first, last = r == first_stage_rank(p), r == last_stage_rank(p)
    if first:
        held += [Held("embedding", g, 1) for g in embedding_groups(m, vocab)]
    if last:
        held += [Held("head", g, 1) for g in head_groups(m, vocab, m.tied_embeddings and first)]
        if m.n_mtp_layers:
            held += [Held("mtp", g, m.n_mtp_layers) for g in mtp_groups(m)]
            if not first:  # MTP re-embeds tokens: the last stage keeps an embedding copy
                held += [Held("mtp", g, 1) for g in embedding_groups(m, vocab)[:1]]
    return muon_coverage(held, t, loop)


@lru_cache(maxsize=65536)
def held_items(h: Held, p: ParallelSpec, t: TrainSpec) -> tuple[Item, ...]:
    """The weights, gradients and optimizer items of one held group (cached: middle pipeline
    ranks hold the same groups)."""
    n = ceil_div(h.group.count, shard_divisor(h.group, p))
    out = []
    for row, fn in ROW_FUNCS.items():
        b, f = fn(h, p, t)
        out.append(Item(row, f"{h.section} / {h.group.name}", b,
                        f"{h.instances} × {n} params{zero_note(row, h, p)}: {f}", SOURCE_ZERO))
    return tuple(out)


def static_items(held: list[Held], p: ParallelSpec, t: TrainSpec) -> list[Item]:
    per_group = [held_items(h, p, t) for h in held]
    return [g[k] for k in range(len(ROW_FUNCS)) for g in per_group]


def comm_items(m, p, t, rt, held: list[Held]) -> list[Item]:
    items = comm.grad_bucket_items(p, t, rt) + comm.nccl_items(p, rt) + comm.pp_items(m, p, t)
    if m.moe is not None and any(h.section == "moe layers" for h in held) and p.ep > 1:
        items += comm.moe_items(m, p, t, rt)
    if p.zero == 3:
        per_layer = {}
        for h in held:
            if h.section.endswith("layers"):
                per_layer[h.section] = per_layer.get(h.section, 0) + ceil_div(
                    h.group.count, shard_divisor(h.group, p))
        items += comm.zero3_items(max(per_layer.values(), default=0), p, t, rt)
    return items


def step_temporaries(held: list[Held], p, t, rt: RuntimeSpec) -> Item:
    """The optimizer-step phase: the step's temporaries, Muon's Newton-Schulz workspace and its
    gather, whichever is largest (the AdamW part and the Muon part run one after the other)."""
    muon = muon_gather_item([(h.group, h.instances) for h in held if h.group.matrix], p, t, rt)
    loop = resolve_loop(rt, t.profile)
    if rt.optimizer_offload:
        return Item("runtime", "optimizer-step temporaries", 0, "the step runs on the CPU",
                    "ZeRO-Offload (arXiv 2101.06840)")
    if loop.optimizer_impl == "fused":
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

    r: int
    items: tuple[Item, ...]
    transients: tuple[Item, ...]
    step: Item
    moves: tuple
    host: HostSide
    layers: tuple[int, ...]
    flights: tuple[tuple[int, int], ...]
    ctx: tuple = ()  # (model, parallel, train, loop) for the timeline

    def sums(self) -> tuple[int, int, int]:
        """(static, forward/backward-phase bytes, largest transient)."""
        rows = sum_rows(self.items)
        static = rows["weights"] + rows["gradients"] + rows["optimizer"]
        worst = max((i.bytes for i in self.transients), default=0)
        return static, rows["activations"] + rows["communication"], worst


def rank_parts(m, p, t, rt, r: int) -> RankParts:
    loop = resolve_loop(rt, t.profile)
    held = held_groups(m, p, t, r, loop)
    flights = in_flight(p, r, t.micro_batches)
    stage_mb = dict(flights)
    first = stage_mb.get(0, 0) if r == first_stage_rank(p) else 0
    last = stage_mb.get(p.n_stages - 1, 0) if r == last_stage_rank(p) else 0
    items, host = move_static(static_items(held, p, t), opt_partition_params(held, p), p, t, rt)
    moves = activation_moves(m, p, t, flights, first, last, loop.loss == "chunked")
    items += activation_items(m, p, t, flights, first, last, moves)
    items += comm_items(m, p, t, rt, held)
    stages = stage_layers(m, p)
    return RankParts(r=r, items=tuple(items),
                     transients=tuple(activation_transients(
                         m, p, t, flights, bool(last) and loop.loss == "materialized", moves)),
                     step=step_temporaries(held, p, t, rt), moves=tuple(moves), host=host,
                     layers=tuple(i for s in p.rank_stages(r) for i in stages[s]), flights=flights,
                     ctx=(m, p, t, loop))


def finalize(parts: RankParts, rt: RuntimeSpec, transfers=()) -> RankLedger:
    """Assemble the peak: the maximum of the rank's step timeline (memledger.timeline); with
    persistent gradients static + max(forward/backward + largest transient, optimizer step)."""
    items = list(parts.items)
    static, fwd_bwd, _ = parts.sums()
    worst = max(parts.transients, key=lambda i: i.bytes, default=None)
    step = parts.step
    m, p, t, loop = parts.ctx
    if loop.on_demand:  # walk the events (memledger.timeline)
        shape = rank_shape(m, p, t, loop, parts, step.bytes)
        peak_event = walked_peak(shape)
    else:  # closed form; the events only when asked for (RankLedger.timeline)
        shape = LazyShape(m, p, t, loop, parts, step.bytes)
        peak_event = closed_peak(static, fwd_bwd, transient_classes(m, p, t, parts), step.bytes,
                                 parts.flights)
    peak_alloc = peak_event.bytes
    added = peak_alloc - static - fwd_bwd
    if loop.on_demand:
        items.append(lifetime_item(shape, peak_event, added))
    elif worst is not None and fwd_bwd + worst.bytes >= step.bytes:
        items.append(Item("runtime", f"largest transient: {worst.name}", added, worst.formula, worst.source))
    else:
        items.append(Item("runtime", "largest transient: " + step.name, added,
                          f"{step.formula}, minus the freed activations and buffers", step.source))
    slack = ceil_div(peak_alloc * rt.allocator_slack_pct, 100)
    items.append(Item("runtime", "allocator slack", slack,
                      f"{rt.allocator_slack_pct}% of peak allocated", "PyTorch caching allocator"))
    items.append(Item("runtime", "cuda context", rt.cuda_context_bytes,
                      "CUDA context + library handles", "REFERENCE.md: 0.6 GiB on H200, PyTorch 2.11"))
    return RankLedger(pp_rank=parts.r, items=tuple(items), peak_allocated_bytes=peak_alloc,
                      peak_total_bytes=peak_alloc + slack + rt.cuda_context_bytes,
                      layers=parts.layers, in_flight=parts.flights, rows=sum_rows(items),
                      moves=parts.moves, transfers=tuple(transfers), host=parts.host,
                      peak_event=peak_event, lazy_shape=shape)



def build_rank(m, p, t, rt, r: int) -> RankLedger:
    return finalize(rank_parts(m, p, t, rt, r), rt)


def build_ledger(model: ModelSpec, parallel: ParallelSpec, train: TrainSpec,
                 runtime: RuntimeSpec | None = None, hardware: Hardware | None = None) -> Ledger:
    """Every pipeline rank's ledger. Raises SpecError on an invalid combination."""
    rt = runtime or RuntimeSpec()
    check_all(model, parallel, train)
    loop = resolve_loop(rt, train.profile)
    built = built_model(model, loop)
    parts = [rank_parts(built, parallel, train, rt, r) for r in range(parallel.pp)]
    if train.policy.uses_pp_offload:  # with pp = 1 nothing moves and no staging is kept
        ranks = remote_offload(parts, rt)
    else:
        ranks = tuple(finalize(x, rt) for x in parts)
    mtp = n_mtp_params(built)
    return Ledger(model=model, parallel=parallel, train=train, runtime=rt, hardware=hardware,
                  ranks=ranks, n_params=n_params(model) + mtp,
                  n_active_params=n_active_params(model), loop=loop)

