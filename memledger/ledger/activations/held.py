"""What one pipeline rank holds of the activation inventory, computed once and passed down.

Two steps, each done once:
  tables    per layer kind (dense, moe) and configuration: every tensor the profile saves, its
            bytes for one micro-batch on this rank, its formula and its storage decision
            (memledger.ledger.activations.policy) — the same on every rank and layer, so cached;
  held      per rank: how many layer-micro-batches of each kind it holds at the activation peak
            (micro-batches in flight × layers of the kind in each stage: the rank's placement,
            pipeline.placement, computed once in build_ledger),
            how many layers one micro-batch passes through, the checkpoints every-k keeps, and
            the micro-batches of the first / last stage it holds.
The row (`row`) and the transients (`transients`) read a `HeldActivations`; nothing below it
calls back up.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from memledger.ledger.activations import get_profile
from memledger.ledger.activations.finetune import graphless_layers
from memledger.ledger.activations.inventory import ActTensor, formula, tensor_bytes
from memledger.ledger.activations.policy import _decision
from memledger.ledger.activations.titan_moe import titan_moe_tensors
from memledger.ledger.activations.torchtitan_ac import (cp_gathered, fused_rms_norm,
                                                      interval_checkpointed)
from memledger.ledger.activations.torchtitan_loss import replace_loss
from memledger.ledger.pipeline.placement import RankPlacement
from memledger.model.flops import layer_forward_flops_per_token
from memledger.model.params import layer_kind
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import TrainSpec

KINDS = ("dense", "moe")


@dataclass(frozen=True)
class Entry:
    """One saved tensor on this rank: bytes of one micro-batch's copy and its formula."""

    tensor: ActTensor
    bytes: int
    formula: str


@dataclass(frozen=True)
class KindTable:
    """One layer of a kind: its tensors with their storage decisions (inside a layer)."""

    kind: str
    entries: tuple[Entry, ...]
    decisions: tuple[tuple, ...]  # policy._decision of each entry, in order
    full_bytes: int  # every tensor kept as the profile stores it
    forward_flops: int  # one layer's forward, one micro-batch, per GPU (re-run by full recompute)
    # per entry, its TensorMove's fields but the section, copies and the formula's head, in
    # TensorMove's order (row.activation_moves: every rank builds a move per entry from these)
    templates: tuple[tuple, ...] = ()


def entry(x: ActTensor, m, t, p) -> Entry:
    return Entry(x, tensor_bytes(x, m, t, p), formula(x, m, t, p))


@lru_cache(maxsize=4096)
def kind_table(m: ModelSpec, kind: str, t: TrainSpec, p: ParallelSpec,
               compiled: bool = False, torchtitan: bool = False,
               cp_gathered_kv: bool = False) -> KindTable:
    """One layer kind's inventory; `torchtitan`: as it runs (its fused RMSNorm kernel, its MoE
    router and combine: torchtitan_ac.fused_rms_norm, titan_moe.titan_moe_tensors);
    `cp_gathered_kv`: its CP's gathered K, V (torchtitan_ac.cp_gathered)."""
    layer = get_profile(t.profile).layer(m, kind, t, p)
    if torchtitan:
        layer = fused_rms_norm(layer)
        layer = cp_gathered(layer, m, p.cp) if cp_gathered_kv else layer
        if kind == "moe":
            layer = titan_moe_tensors(layer, shared=m.moe.n_shared > 0)
    entries = tuple(entry(x, m, t, p) for x in layer)
    tokens = t.micro_batch * t.seq
    decisions = tuple(_decision(e.tensor, m, t, p, True, e.bytes, compiled) for e in entries)
    return KindTable(
        kind=kind, entries=entries, decisions=decisions,
        full_bytes=sum(e.bytes for e in entries),
        forward_flops=layer_forward_flops_per_token(m, kind, t.seq) * tokens // (p.tp * p.cp),
        templates=tuple(_template(e, d) for e, d in zip(entries, decisions)))


def _template(e: Entry, decision: tuple) -> tuple:
    """((tensor, cls, policy), (native, stored, gpu, paid, producer, bits, offload), formula
    prefix, formula tail) of one entry's move: `policy.move` without the per-rank fields
    (section, copies, per micro-batch), which go between the two field runs."""
    policy, native, stored, gpu, bits, off, producer, paid, prefix, suffix = decision
    return ((e.tensor.name, e.tensor.cls, policy), (native, stored, gpu, paid, producer, bits, off),
            prefix, e.formula + suffix)


@lru_cache(maxsize=4096)
def outer_entries(m: ModelSpec, t: TrainSpec, p: ParallelSpec,
                  torchtitan: bool = False) -> dict[str, tuple[Entry, ...]]:
    """Tensors outside the layers: first stage, last stage, the layer input (checkpoints) and
    the last stage's transients (logits and their gradients). `torchtitan`: as it runs, the final
    norm as the fused RMSNorm kernel keeps it (torchtitan_ac.fused_rms_norm) and no RoPE cos /
    sin (its RoPE reads slices of the per-layer cache, static.titan_buffers)."""
    prof = get_profile(t.profile)
    last = prof.last_stage(m, t, p)
    first = prof.first_stage(m, t, p)
    if torchtitan:
        first = tuple(x for x in first if x.cls != "rope")
    return {"first stage": tuple(entry(x, m, t, p) for x in first),
            "last stage": tuple(entry(x, m, t, p)
                                for x in (fused_rms_norm(last) if torchtitan else last)),
            "layer input": (entry(prof.layer_input(m, t, p), m, t, p),),
            "transients": tuple(entry(x, m, t, p) for x in prof.transients(m, t, p))}


@dataclass(frozen=True)
class HeldActivations:
    """A rank's share of the inventory at its activation peak."""

    m: ModelSpec
    p: ParallelSpec
    t: TrainSpec
    layer_mbs: dict[str, int]  # kind -> layer-micro-batches held
    per_mb: dict[str, int]  # kind -> layers one micro-batch passes through on this rank
    checkpoints: int  # every-k: layer inputs kept, × micro-batches
    checkpoints_per_mb: int
    first: int  # micro-batches of the first stage held here (0: not on this rank)
    last: int  # micro-batches of the last stage held here
    loss: int  # of those, the ones whose loss graph (class "logits") is still alive: fewer
    # when a zero-bubble I has detached the loss while W still holds the stage
    tables: dict[str, KindTable]  # the kinds this rank holds
    outer: dict[str, tuple[Entry, ...]]
    chunked_loss: bool = False  # a fused linear cross-entropy keeps no logits-sized tensor
    ckpt_mbs: dict | None = None  # interval: kind -> layer-micro-batches of checkpointed blocks
    ckpt_per_mb: dict | None = None  # interval: kind -> checkpointed blocks one micro-batch passes
    compiled: bool = False  # torch.compile's partitioner decides the saved set (torchtitan_ac)
    logits_gathered: int = 1  # tp when torchtitan runs without loss parallel: full V per rank
    fused_qkv: bool = True  # op SAC: torchtitan 0.3's one wqkv mm (0.2: wq, wk, wv)
    torchtitan: bool = False  # torchtitan as it runs: its MoE combine's backward (titan_moe)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(k for k in KINDS if self.layer_mbs.get(k))


def _per_kind(m, stages, flights, skip: int = 0) -> Counter:
    """Layer-micro-batches by kind; the first `skip` layers keep nothing (finetune.graphless_layers)."""
    out = Counter()
    for stage, n in flights:
        for kind, count in _stage_kinds(m, stages[stage], skip):
            out[kind] += n * count
    return out


@lru_cache(maxsize=4096)  # asked twice per rank, per stage
def _stage_kinds(m, layers: tuple, skip: int) -> tuple[tuple[str, int], ...]:
    return tuple(Counter(layer_kind(m, i) for i in layers if i >= skip).items())


def _checkpoints(m, stages, t, flights, skip: int = 0) -> int:
    k = t.checkpoint_every(m.n_layers)
    return sum(n * -(-sum(i >= skip for i in stages[s]) // k) for s, n in flights)


def _interval_per_kind(m, stages, t, flights) -> Counter:
    """interval: layer-micro-batches of the blocks torchtitan checkpoints (every k-th block the
    rank wraps, counted over its stages in order: torchtitan_ac.interval_checkpointed)."""
    out, start = Counter(), 0
    for stage, n in flights:
        layers = stages[stage]
        for i, ck in zip(layers, interval_checkpointed(layers, t.recompute_every, start)):
            out[layer_kind(m, i)] += n * ck
        start += len(layers)
    return out


def held_activations(m: ModelSpec, p: ParallelSpec, t: TrainSpec, place: RankPlacement,
                     chunked_loss: bool = False, compiled: bool = False,
                     logits_gathered: int = 1, fused_qkv: bool = True,
                     loss_form: str = "profile", torchtitan: bool = False,
                     cp_gathered_kv: bool = False) -> HeldActivations:
    """`place` (memledger.ledger.pipeline.placement): the rank's stages and layers, its
    (stage, micro-batches held) `flights`, the micro-batches of the first/last stage held on
    this rank (0 if it does not hold that stage) and, of the last stage's, those whose loss is
    alive (pipeline.schedules.last_stage_open); `chunked_loss`: the loop's loss keeps no
    logits (Liger's fused linear cross-entropy, Megatron's fused vocab-parallel CE);
    `loss_form`: torchtitan's compiled or DTensor loss-parallel cross-entropy in place of the
    profile's logits tensors (memledger.ledger.activations.torchtitan_loss);
    `torchtitan`: torchtitan as it runs — RMSNorms keep what the fused CUDA kernel keeps
    (torchtitan_ac.fused_rms_norm), no RoPE cos / sin, its MoE combine's backward (titan_moe),
    `cp_gathered_kv` its CP's gathered K, V."""
    flights, first, last, loss = place.flights, place.first, place.last, place.loss
    stages = dict(zip(place.stages, place.stage_layers))
    skip = graphless_layers(m, t)  # fine-tuning: leading layers without a graph
    layer_mbs = _per_kind(m, stages, flights, skip)
    ones = tuple((s, 1) for s, _ in flights)
    every_k = t.recompute == "every-k"
    interval = t.recompute == "interval"
    return HeldActivations(
        m=m, p=p, t=t, layer_mbs=dict(layer_mbs), per_mb=dict(_per_kind(m, stages, ones, skip)),
        checkpoints=_checkpoints(m, stages, t, flights, skip) if every_k else 0,
        checkpoints_per_mb=_checkpoints(m, stages, t, ones, skip) if every_k else 0,
        first=first, last=last, loss=loss,
        tables={k: kind_table(m, k, t, p, compiled, torchtitan, cp_gathered_kv)
                for k, n in layer_mbs.items() if n},
        outer=replace_loss(outer_entries(m, t, p, torchtitan), loss_form, m, t, p, entry),
        chunked_loss=chunked_loss,
        ckpt_mbs=dict(_interval_per_kind(m, stages, t, flights)) if interval else None,
        ckpt_per_mb=dict(_interval_per_kind(m, stages, t, ones)) if interval else None,
        compiled=compiled, logits_gathered=logits_gathered, fused_qkv=fused_qkv,
        torchtitan=torchtitan)


def layer_bytes(m: ModelSpec, kind: str, t: TrainSpec, p: ParallelSpec) -> int:
    """One layer's full inventory for one micro-batch on this rank."""
    return kind_table(m, kind, t, p).full_bytes
