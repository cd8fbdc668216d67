"""The activation row of a pipeline rank split by the stages it holds, at the rank's peak.

Each stage's share is the activation row recomputed for that stage alone — its micro-batches in
flight (memledger.ledger.pipeline.order) × its layers' kept tensors, plus the first-stage tensors on
stage 0 and the last stage's (final norm, head input, loss) on the last stage, counted with the
micro-batches that stage holds at the peak. Whatever belongs to the rank as a whole (offload
staging buffers, amp weight casts, every-k checkpoints rounded per rank) is the remainder,
`rank_wide_bytes`. Used by the Pipeline staircase page to draw a V's two legs; adds nothing to
the ledger.
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.ledger import Ledger
from memledger.ledger.activations.held import held_activations
from memledger.ledger.activations.row import activation_items, activation_moves
from memledger.ledger.pipeline.placement import rank_placement
from memledger.ledger.pipeline.schedules import last_stage_rank


@dataclass(frozen=True)
class StageShare:
    stage: int
    micro_batches: int  # held at the rank's peak
    bytes: int  # activation bytes of this stage on the rank
    first: bool  # holds the model's first stage (embedding)
    last: bool  # holds the model's last stage (head, logits, loss)


@dataclass(frozen=True)
class RankStages:
    rank: int
    stages: tuple[StageShare, ...]
    rank_wide_bytes: int  # the activation row minus the stages' shares


def rank_stage_split(led: Ledger, r: int) -> RankStages:
    """The activation row of rank r, per stage it holds (in the rank's chunk order)."""
    m, p, t, rt = led.model, led.parallel, led.train, led.runtime
    rank = led.ranks[r]
    place = rank_placement(m, p, t, rt, r)
    shares = []
    for s, n in rank.in_flight:
        one = place.only(s)
        acts = held_activations(m, p, t, one)
        items = activation_items(acts, activation_moves(acts))
        shares.append(StageShare(stage=s, micro_batches=n, bytes=sum(i.bytes for i in items),
                                 first=bool(one.first), last=bool(one.last)))
    rest = rank.rows["activations"] - sum(x.bytes for x in shares)
    return RankStages(rank=r, stages=tuple(shares), rank_wide_bytes=max(rest, 0))


def stage_split(led: Ledger) -> tuple[RankStages, ...]:
    return tuple(rank_stage_split(led, r) for r in range(len(led.ranks)))


def loss_rank(led: Ledger) -> int:
    """The pipeline rank that holds the last stage: head, logits and loss (rank 0 on a V)."""
    return last_stage_rank(led.parallel)
