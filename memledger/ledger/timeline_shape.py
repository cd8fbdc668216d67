"""The per-layer quantities a rank's step timeline moves: what one micro-batch of each held
layer keeps for backward, what each layer's gradients weigh, and the transients by class.

Everything is taken from the rank's ledger items (so the timeline and the rows agree by
construction): activation bytes per layer-micro-batch from the TensorMoves (`gpu_bytes` is per
copy), checkpoints placed on every (full) or every k-th (every-k) layer, amp's autocast weight
casts per layer (act_rows.autocast_copies), first/last-stage tensors per micro-batch, gradients
per layer from the gradient row's "<kind> layers" items, head/MTP/embedding gradients apart.
What it does not place (offload staging buffers, …) is `fixed_acts`, alive from the first
forward to the last backward; at the first backward the timeline holds the activation row.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from memledger.ledger.activations.finetune import graphless_layers
from memledger.ledger.activations.torchtitan_ac import interval_checkpointed
from memledger.ledger.activations.titan_block_forward import live_peak
from memledger.ledger.activations.transients import BACKWARD_SET, autocast_cache
from memledger.ledger.fsdp2 import UNITS_KEPT, pp_walk_grads
from memledger.ledger.static.sharding import shard_divisor
from memledger.model.params import layer_groups, layer_kind, padded_vocab
from memledger.units import format_bytes


@dataclass(frozen=True)
class StageShape:
    stage: int
    in_flight: int  # micro-batches held at the first backward
    layers: tuple[tuple[int, int, int], ...]  # (layer index, act bytes per micro-batch, grad bytes)
    first_acts: int  # first-stage tensors per micro-batch (0 unless stage 0)
    last_acts: int  # last-stage tensors per micro-batch (0 unless the last stage)
    end_grads: int  # gradients allocated when the stage's backward ends (embedding)
    loss_grads: int  # gradients allocated at the loss backward (head, MTP)
    # FSDP2 under PP: at the stage's last micro-batch's backward its unsharded gradients are
    # reduce-scattered (the bytes the walked gradients fall by) and its units resharded (the
    # bytes the buffers fall by) — ledger.fsdp2, "PP grad sync"
    release_grads: int = 0
    release_comm: int = 0

    @property
    def acts_per_mb(self) -> int:
        return sum(a for _, a, _ in self.layers) + self.first_acts + self.last_acts


@dataclass(frozen=True)
class RankShape:
    r: int
    schedule: str
    pp: int
    micro_batches: int
    on_demand: bool
    stages: tuple[StageShape, ...]
    fixed_acts: int
    static_bytes: int  # weights + optimizer states (+ gradients: see grads)
    grads: int  # the gradient row
    other_grads: int  # gradients no layer owns: allocated at the first backward
    comm: int
    t_fwd: int  # forward working set at the end of every forward (amp cast cache)
    t_fwd_last: int  # + the last stage's logits working set at its forward end
    t_loss: int  # loss backward transient (logits gradients)
    t_layer: int  # recompute working set, during a layer's backward
    step: int  # optimizer-step temporaries
    step_name: str
    t_loss_blocks: tuple[int, ...] = ()  # t_loss as its separate tensors (reserved replay)
    t_fwd_last_blocks: tuple[int, ...] = ()  # t_fwd_last as its separate tensors
    # torchtitan's root units (ledger.titan_lifetimes): the head unit out of `comm` but at the
    # loss; `comm`'s change at the head unit's and the embedding unit's reduce-scatter; a tied
    # head's gradient held to the embedding's backward, `comm`'s change where the two meet;
    # the embedding's sharded gradients after that unit's reduce-scatter input (tied under TP)
    loss_release_comm: int = 0
    head_rs_delta: int = 0
    end_rs_delta: int = 0
    tied_head_grad: int = 0
    end_acc_delta: int = 0
    end_grads_after_rs: bool = False
    layer_release: int = 0  # units kept without PP: one layer's, resharded after its backward
    # a layer's forward working set (titan_block_forward: compiled torchtitan 2024-12 blocks
    # under full AC), its peak and its allocations / frees in op order (reserved replay)
    t_fwd_layer: int = 0
    fwd_layer_ops: tuple[int, ...] = ()
    # the rank's (F|B, stage, micro-batch) actions as its engine runs them, where the coarse
    # walk (timeline.action_order) is not that order: torch.distributed.pipelining's
    # interleaved ranks (pipeline.order.rank_order); () elsewhere
    order: tuple[tuple[str, int, int], ...] = ()
    # the optimizer steps each parameter inside the backward (ledger.step_in_backward): no
    # gradient accumulates, `step` is one parameter's temporaries
    step_in_backward: bool = False

    @property
    def feasible(self) -> bool:
        """Whether the staircase (schedules.in_flight) can be reached by running m micro-batches:
        interleaved with m < pp asks for more micro-batches of a chunk than exist, or none of
        another (Megatron-Core requires m divisible by pp there). The events of an infeasible
        rank run the in-flight counts as given and may rise above the staircase."""
        return all(1 <= s.in_flight <= self.micro_batches for s in self.stages)


def _per_layer_acts(moves, kinds) -> tuple[dict, int, dict]:
    """(bytes per layer-micro-batch by kind, checkpoint bytes each, stage-section bytes/mb)."""
    unit, ckpt, section = Counter(), 0, Counter()
    for mv in moves:
        if mv.section in ("dense layers", "moe layers"):
            unit[mv.section.split()[0]] += mv.gpu_bytes
        elif mv.section == "checkpoints":
            ckpt += mv.gpu_bytes
        else:
            section[mv.section] += mv.gpu_bytes
    return unit, ckpt, section


def _cast_per_layer(m, p, t, kinds) -> dict:
    """amp: each layer's bf16 weight casts saved per micro-batch (act_rows.autocast_copies)."""
    r = t.recipe
    if not (r.weight_fmt == "fp32" and r.act_fmt in ("bf16", "fp16")) or r.param_fmt \
            or t.recompute in ("full", "every-k"):
        return {}
    return {k: format_bytes(r.act_fmt, sum(-(-g.count // shard_divisor(g, p))
                                           for g in layer_groups(m, k)
                                           if g.matrix and not g.expert and not g.fp32))
            for k in kinds}


def _head_cast(m, p, t) -> int:
    r = t.recipe
    if not (r.weight_fmt == "fp32" and r.act_fmt in ("bf16", "fp16")) or r.param_fmt or not m.vocab:
        return 0
    return format_bytes(r.act_fmt, -(-padded_vocab(m, p.tp, t.pad_multiple()) // p.tp) * m.hidden)


def _grads_by_section(items) -> Counter:
    out = Counter()
    for i in items:
        if i.row == "gradients":
            out[i.name.split(" / ")[0]] += i.bytes
    return out


class Transients(NamedTuple):
    fwd: int  # forward working set at the end of every forward (amp's cast cache)
    fwd_last: int  # the last stage's forward working set (logits, upcast, cast cache)
    loss: int  # loss backward (logits gradients)
    layer: int  # recompute / backward working set during a layer's backward
    last_acts: int = 0  # last-stage tensors of one micro-batch, freed before the layers' backward
    loss_blocks: tuple[int, ...] = ()  # the loss transient's separate tensors (reserved replay)
    fwd_last_blocks: tuple[int, ...] = ()  # fwd_last's separate tensors (reserved replay)
    layer_fwd: int = 0  # a layer forward's working set (titan_block_forward), on the staircase

    @property
    def largest(self) -> int:
        """The most a transient adds to the staircase (the recompute set meets it less the
        last stage's tensors)."""
        return max(self.fwd, self.fwd_last, self.loss, self.layer - self.last_acts,
                   self.layer_fwd, 0)


def transient_classes(m, p, t, parts) -> Transients:
    """Split the rank's transient candidates (activations.transients) by the event
    that carries them."""
    t_cache = getattr(autocast_cache(parts.acts), "bytes", 0)
    t_fwd = t_loss = t_layer = 0
    for x in parts.transients:
        if x.name.startswith("forward working set"):
            t_fwd = x.bytes
        elif x.name.startswith(("recompute working set", BACKWARD_SET)):
            t_layer = max(t_layer, x.bytes)
        else:
            t_loss = max(t_loss, x.bytes)
    place = parts.place
    holds_last = place.holds_last
    # the first backward starts with the loss only if the last stage has a micro-batch in flight
    loss_first = holds_last and dict(place.flights).get(place.last_stage, 0) > 0
    last = last_stage_acts(m, p, t, parts.moves) if loss_first and t_layer else 0
    fwd_last = t_fwd if holds_last else 0
    return Transients(min(t_cache, t_fwd), fwd_last, t_loss, t_layer, last,
                      loss_blocks(parts.acts, t_loss), forward_blocks(parts.acts, t_cache, fwd_last))


def forward_blocks(acts, t_cache: int, fwd_last: int) -> tuple[int, ...]:
    """The last stage's forward working set as its tensors (the cast cache, each forward-class
    loss tensor), when they make it up; else ()."""
    if acts is None or not fwd_last or acts.chunked_loss:
        return ()
    # forward-class entries are not gathered (activations.transients: only class "logits" is)
    parts = [t_cache] + [e.bytes for e in acts.outer["transients"] if e.tensor.cls == "forward"]
    parts = tuple(x for x in parts if x)
    return parts if sum(parts) == fwd_last else ()


def loss_blocks(acts, t_loss: int) -> tuple[int, ...]:
    """The loss-backward transient as the tensors it stands for (ActTensor.pieces equal parts),
    when one of the rank's loss transients is it; else ()."""
    if acts is None or not t_loss or acts.chunked_loss:  # a chunked loss has no logits tensors
        return ()
    for e in acts.outer["transients"]:
        if e.tensor.cls == "forward":
            continue
        n = e.bytes * (acts.logits_gathered if e.tensor.cls == "logits" else 1)
        if n == t_loss:
            k = e.tensor.pieces
            return tuple(n // k + (i < n % k) for i in range(k))
    return ()


def last_stage_acts(m, p, t, moves) -> int:
    """One micro-batch's last-stage tensors (final norm, head input, log-probs, head cast)."""
    return sum(mv.gpu_bytes for mv in moves if mv.section == "last stage") + _head_cast(m, p, t)


class LazyShape:
    """rank_shape computed on first use: the persistent-gradient peak needs none of it."""

    def __init__(self, *args):
        self.args, self.value = args, None

    def get(self) -> RankShape:
        if self.value is None:
            self.value = rank_shape(*self.args)
        return self.value


def rank_shape(m, p, t, loop, parts, step_bytes: int, rows=None,
               fwd_ops: tuple[int, ...] = (), engine: str = "") -> RankShape:
    """The timeline inputs of one rank (parts: ledger.RankParts); `fwd_ops`: a layer forward's
    allocations where the ledger models them (activations.titan_block_forward); `engine`: the
    pipeline engine as resolved (RuntimeSpec.pipeline_engine)."""
    place = parts.place
    flights = dict(place.flights)
    skip = graphless_layers(m, t)  # fine-tuning: leading layers keep nothing
    kinds = Counter(layer_kind(m, i) for i in place.layers if i >= skip)
    unit, ckpt, section = _per_layer_acts(parts.moves, kinds)
    cast = _cast_per_layer(m, p, t, [k for k, n in kinds.items() if n])
    grads = _grads_by_section(parts.items)
    if rows is None:
        rows = Counter()
        for i in parts.items:
            rows[i.row] += i.bytes
    pp_held, pp_of = pp_walk_grads(parts.items, rows["gradients"])
    if pp_held:  # FSDP2 under PP: the unsharded accumulators are the step's gradients
        grads = Counter({k: v * pp_held // pp_of for k, v in grads.items()})
    kept = sum(i.bytes for i in parts.items if i.name.startswith(UNITS_KEPT))
    kept, release = (kept, 0) if pp_held else (0, kept // max(1, len(place.layers)))
    g_layer = {k: grads[f"{k} layers"] // n for k, n in kinds.items() if n}
    every = t.checkpoint_every(m.n_layers) if t.recompute == "every-k" else 1
    last_stage = place.last_stage
    out, placed_g, counted = [], 0, 0
    for s, rng in zip(place.stages, place.stage_layers):
        layers = []
        wrapped = interval_checkpointed(rng, t.recompute_every, counted) \
            if t.recompute == "interval" else None
        counted += len(rng)
        for j, i in enumerate(rng):
            k = layer_kind(m, i)
            live = i >= skip
            if not live:
                a = 0
            elif wrapped is not None:  # torchtitan interval: a checkpointed block keeps its input
                a = ckpt if wrapped[j] else unit[k] + cast.get(k, 0)
            else:
                a = unit[k] + cast.get(k, 0) + (ckpt if j % every == 0 else 0)
            g = g_layer.get(k, 0) if live else 0
            layers.append((i, a, g))
            placed_g += g
        first = section["first stage"] if s == 0 else 0
        last = section["last stage"] + _head_cast(m, p, t) if s == last_stage else 0
        loss_g = grads["head"] + grads["mtp"] if s == last_stage else 0
        end_g = grads["embedding"] if s == 0 else 0
        placed_g += loss_g + end_g
        stage_g = sum(g for _, _, g in layers) + loss_g + end_g
        out.append(StageShape(stage=s, in_flight=flights.get(s, 0), layers=tuple(layers),
                              first_acts=first, last_acts=last, end_grads=end_g, loss_grads=loss_g,
                              release_grads=stage_g - stage_g * pp_of // pp_held if pp_held else 0,
                              release_comm=kept * len(rng) // max(1, len(place.layers))))
    staircase = sum(st.in_flight * st.acts_per_mb for st in out)
    tr = transient_classes(m, p, t, parts)
    return RankShape(
        r=place.r, schedule=p.schedule, pp=p.pp, micro_batches=t.micro_batches,
        on_demand=loop.on_demand, stages=tuple(out), fixed_acts=rows["activations"] - staircase,
        static_bytes=rows["weights"] + rows["optimizer"], grads=rows["gradients"],
        other_grads=(pp_held or rows["gradients"]) - placed_g,
        comm=rows["communication"] - pp_held,
        t_fwd=tr.fwd, t_fwd_last=tr.fwd_last, t_loss=tr.loss, t_layer=tr.layer, step=step_bytes,
        step_name="", t_loss_blocks=tr.loss_blocks, t_fwd_last_blocks=tr.fwd_last_blocks,
        t_fwd_layer=live_peak(fwd_ops), fwd_layer_ops=fwd_ops,
        order=exact_order(p, t, place, engine), layer_release=release)


def exact_order(p, t, place, engine: str) -> tuple:
    """torch.distributed.pipelining's interleaved order for a rank of several stages: with more
    micro-batches than pp, ScheduleInterleaved1F1B alternates its chunks' backwards in rounds of
    m / (m // pp) micro-batches, so both chunks' FSDP2 gradients are unsharded at once (torch
    pipelining/schedules.py `ScheduleInterleaved1F1B`; measured: Llama-3 8B pp 2 × 2 chunks,
    8 micro-batches, 16.3 GB of fp32 unsharded gradients on rank 0). () for other schedules
    and engines: the coarse walk, which the planner mirrors."""
    if engine != "pytorch" or p.schedule != "interleaved" or len(place.stages) < 2:
        return ()
    from memledger.ledger.pipeline.order import rank_order
    return rank_order("interleaved", p.pp, len(place.stages), t.micro_batches, place.r, engine)
