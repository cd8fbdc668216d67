"""Which parameter groups a pipeline rank holds, and their weights / gradients / optimizer items.

A rank holds the layers of its stages (counted per layer kind), the embedding on the first stage,
the head (and MTP modules, with an embedding copy when MTP sits away from the embedding) on the
last stage (docs/design.md §4). Each group's three static items come from the sharding table
(`sharding`) and the per-row byte functions (`rows`); cached, because middle ranks hold the same
groups. Ignores: parameters outside the transformer (none in the supported families).
"""
from __future__ import annotations

from functools import lru_cache

from memledger.ledger.items import Item
from memledger.ledger.optimizer_step import muon_coverage
from memledger.ledger.pipeline.placement import RankPlacement
from memledger.ledger.static.finetune import finetune_held, frozen_layer_counts
from memledger.ledger.static.rows import ROW_FUNCS, SOURCE_ZERO, Held, zero_note
from memledger.ledger.fsdp2 import RULES, n_experts
from memledger.ledger.static.sharding import shard_divisor, zero_group
from memledger.model.params import (embedding_groups, head_groups, layer_groups, layer_kind,
                                    mtp_groups, padded_vocab)
from memledger.specs.loop import LoopSpec
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import TrainSpec
from memledger.units import ceil_div


def composition(m: ModelSpec, t: TrainSpec, place: RankPlacement) -> tuple:
    """What a rank's parameter groups depend on of its placement: layers per kind, first / last
    stage, and (fine-tuning) the frozen layers per kind — equal on most pipeline ranks."""
    layers = place.layers
    kinds = [layer_kind(m, i) for i in layers]
    frozen = (tuple(sorted(frozen_layer_counts(m, layers, t.finetune).items()))
              if t.finetune.mode != "full" else ())
    return (kinds.count("dense"), kinds.count("moe"), place.holds_first, place.holds_last, frozen)


def held_groups(m: ModelSpec, p: ParallelSpec, t: TrainSpec, place: RankPlacement,
                loop: LoopSpec | None = None) -> list[Held]:
    """Parameter groups on the rank placed at `place` (pipeline.placement: its layers, first /
    last stage): its layers by kind, embedding, head, MTP modules (the loop decides which
    optimizer owns the experts: optimizer_step.muon_coverage)."""
    return list(composed_groups(m, p, t, loop, composition(m, t, place)))


@lru_cache(maxsize=4096)
def composed_groups(m: ModelSpec, p: ParallelSpec, t: TrainSpec, loop: LoopSpec | None,
                    comp: tuple) -> tuple[Held, ...]:
    """`held_groups` of a rank with composition `comp` (cached: middle ranks share one)."""
    n_dense, n_moe, first, last, frozen = comp
    held: list[Held] = []
    for kind, n in (("dense", n_dense), ("moe", n_moe)):
        held += [Held(f"{kind} layers", g, n) for g in layer_groups(m, kind)] if n else []
    vocab = padded_vocab(m, p.tp, t.pad_multiple())
    if first:
        held += [Held("embedding", g, 1) for g in embedding_groups(m, vocab)]
    if last:
        held += [Held("head", g, 1) for g in head_groups(m, vocab, m.tied_embeddings and first)]
        if m.n_mtp_layers:
            held += [Held("mtp", g, m.n_mtp_layers) for g in mtp_groups(m)]
            if not first:  # MTP re-embeds tokens: the last stage keeps an embedding copy
                held += [Held("mtp", g, 1) for g in embedding_groups(m, vocab)[:1]]
    if t.finetune.mode != "full":  # frozen groups, adapters, a quantised base (static/finetune.py)
        held = finetune_held(held, t.finetune, dict(frozen))
    return tuple(muon_coverage(held, t, loop))


@lru_cache(maxsize=65536)
def held_items(h: Held, p: ParallelSpec, t: TrainSpec, pad: str = "") -> tuple[Item, ...]:
    """The weights, gradients and optimizer items of one held group (cached: middle pipeline
    ranks hold the same groups); `pad`: FSDP2's expert sharding (ledger.fsdp2)."""
    n = ceil_div(h.group.count, shard_divisor(h.group, p))
    out = []
    for row, fn in ROW_FUNCS.items():
        b, f = fn(h, p, t, pad)
        note, src = zero_note(row, h, p), SOURCE_ZERO
        if pad and b != fn(h, p, t)[0]:
            note += (f", FSDP2 dim-0 chunks: ⌈{n_experts(h.group) // p.ep} experts / "
                     f"{zero_group(h.group, p)} ranks⌉ per rank (padded)")
            src = RULES["dim-0 padding"][1]
        out.append(Item(row, f"{h.section} / {h.group.name}", b,
                        f"{h.instances} × {n} params{note}: {f}", src))
    return tuple(out)


def static_items(held: list[Held], p: ParallelSpec, t: TrainSpec, pad: str = "") -> list[Item]:
    per_group = [held_items(h, p, t, pad) for h in held]
    # a frozen group has weights only: its zero gradient and optimizer items are not listed
    return [g[k] for k in range(len(ROW_FUNCS)) for g, h in zip(per_group, held)
            if k == 0 or not h.group.frozen]
