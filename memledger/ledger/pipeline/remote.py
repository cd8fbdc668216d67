"""Remote offload inside the ledger: tensors whose class says `offload-pp` may move to later
pipeline ranks; the levelling (memledger.ledger.pipeline.levelling) picks how many bytes each rank sends so that
the highest peak is as low as possible, and the ledger shows the result on both sides:
the sender's items shrink by what left, the receiver gets "hosted for pp rank i" items.

Per micro-batch, a sender moves the same fraction of each micro-batch's movable tensors:
bytes per micro-batch = ⌈sent × (movable per micro-batch) / (movable at the peak)⌉, out in the
forward pass and back in the backward pass (memledger.costs.bandwidth prices it).
"""
from __future__ import annotations

from dataclasses import replace

from memledger.ledger.activations.row import STAGING, item_name
from memledger.ledger.items import Item
from memledger.ledger.pipeline.levelling import Levelling, RankLoad, level_min
from memledger.ledger.runtime import finalize
from memledger.units import ceil_div

SRC = "seed 1 (第四种办法: 流水线 rank 之间远程 offload); memledger.ledger.pipeline.levelling"


def rank_load(parts) -> RankLoad:
    static, fwd_bwd, worst = parts.sums()
    return RankLoad(phase=static + fwd_bwd + worst, floor=static + parts.step.bytes,
                    movable=sum(mv.movable_bytes for mv in parts.moves))


def sent_per_micro_batch(moves, sent: int) -> int:
    movable = sum(mv.movable_bytes for mv in moves)
    per_mb = sum(mv.movable_bytes_per_micro_batch for mv in moves)
    return ceil_div(sent * per_mb, movable) if movable else 0


def _shrink(items: tuple[Item, ...], moves, sent: int) -> list[Item]:
    takes: dict[str, int] = {}
    left = sent
    for mv in sorted((mv for mv in moves if mv.offload == "pp"), key=lambda mv: -mv.movable_bytes):
        take = min(left, mv.movable_bytes)
        if take:
            takes[item_name(mv)] = take
        left -= take
    out = []
    for i in items:
        if i.name == STAGING["pp"] and not sent:
            continue  # a rank that sends nothing needs no staging buffers
        take = takes.get(i.name, 0) if i.row == "activations" else 0
        out.append(Item(i.row, i.name, i.bytes - take,
                        f"{i.formula}; {take} B held by later pp ranks", i.source) if take else i)
    return out


def apply_levelling(parts: list, lev: Levelling) -> list:
    """RankParts with the levelling's transfers written into their items."""
    out = []
    for x in parts:
        r = x.place.r
        items = _shrink(x.items, x.moves, lev.sent(r))
        for tr in lev.transfers:
            if tr.dst == r:
                items.append(Item("activations", f"hosted for pp rank {tr.src}", tr.bytes,
                                  f"activations of pp rank {tr.src} kept here until its backward",
                                  SRC))
        out.append(replace(x, items=tuple(items)))
    return out


def remote_offload(parts: list, rt):
    """Finalised RankLedgers after the lowest-peak levelling of the offload-pp tensors."""
    lev = level_min([rank_load(x) for x in parts])
    moved = apply_levelling(parts, lev)
    return tuple(finalize(x, rt, tuple(tr for tr in lev.transfers if x.place.r in (tr.src, tr.dst)))
                 for x in moved)
