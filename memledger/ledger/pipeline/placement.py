"""A pipeline rank's placement: computed once per rank in `build_ledger` and handed to every row.

Everything a row needs to know about where rank r sits in the pipeline, in one value:
  stages        its virtual stages, in the order its chunks are numbered (ParallelSpec.rank_stages)
  stage_layers  the layer indices of each of those stages (schedules.stage_layers); `layers`
                all of them in that order
  holds_first   it holds the model's first stage (embedding, first-stage tensors)
  holds_last    it holds the last stage, `last_stage`, where the loss is computed (final norm,
                head, logits, loss)
  flights       (stage, micro-batches held) at the activation peak (schedules.in_flight)
  first, last   micro-batches of the first / last stage held here (0 where it holds none)
  loss          of the last stage's, those whose loss graph is alive (schedules.last_stage_open)
`stage_placement` is the part that needs no micro-batch count (the held parameter groups of the
planner and the advisor); `rank_placement` adds the in-flight counts; `probe` builds one with
given counts (the planner's one-layer probes); `only` is one stage's share (the Pipeline page's
per-stage split). The rules stay in `schedules`, `order` and `engines`: this module decides
nothing of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from memledger.errors import SpecError
from memledger.ledger.pipeline.schedules import (first_stage_rank, in_flight, last_stage_open,
                                                 last_stage_rank, stage_layers)
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec


@dataclass(frozen=True, kw_only=True)
class RankPlacement:
    """Plain data, read by the rows without calling back here (`layers` is derived once)."""

    r: int
    last_stage: int  # the model's last stage (n_stages - 1): the one that computes the loss
    stages: tuple[int, ...]  # this rank's, in chunk order
    stage_layers: tuple[range, ...]  # the layers of each of `stages`
    holds_first: bool
    holds_last: bool
    flights: tuple[tuple[int, int], ...] = ()  # (stage, micro-batches held at the peak)
    first: int = 0  # micro-batches of stage 0 held here
    last: int = 0  # micro-batches of the last stage held here
    loss: int = 0  # of those, the ones whose loss is alive
    layers: tuple[int, ...] = field(init=False)  # layer indices held, in the stages' order

    def __post_init__(self):
        if len(self.stage_layers) != len(self.stages):
            raise SpecError("placement", f"{len(self.stage_layers)} layer ranges for "
                                         f"{len(self.stages)} stages {self.stages}")
        if not 0 <= self.loss <= self.last:
            raise SpecError("placement", f"loss micro-batches must be in 0..last={self.last}, "
                                         f"got {self.loss}")
        object.__setattr__(self, "layers", tuple(i for rng in self.stage_layers for i in rng))

    def only(self, stage: int) -> RankPlacement:
        """The rank's share of one of its stages: that stage's layers and micro-batches, and the
        first / last stage's counts only where the stage is one of them."""
        n = dict(self.flights).get(stage, 0)
        last = self.last if stage == self.last_stage else 0
        return RankPlacement(r=self.r, last_stage=self.last_stage, stages=(stage,),
                             stage_layers=(self.stage_layers[self.stages.index(stage)],),
                             holds_first=self.holds_first and stage == 0,
                             holds_last=self.holds_last and stage == self.last_stage,
                             flights=((stage, n),), first=self.first if stage == 0 else 0,
                             last=last, loss=self.loss if last else 0)


def stage_placement(m: ModelSpec, p: ParallelSpec, r: int, flights=(), first: int = 0,
                    last: int = 0, loss: int = 0) -> RankPlacement:
    """Rank r's stages and layers and whether it holds the first / last stage; the in-flight
    counts as given (none by default: they need the micro-batches and the engine,
    `rank_placement`)."""
    layers, stages = stage_layers(m, p), p.rank_stages(r)
    return RankPlacement(r=r, last_stage=p.n_stages - 1, stages=stages,
                         stage_layers=tuple(layers[s] for s in stages),
                         holds_first=r == first_stage_rank(p), holds_last=r == last_stage_rank(p),
                         flights=flights, first=first, last=last, loss=loss)


def rank_placement(m: ModelSpec, p: ParallelSpec, t, rt, r: int) -> RankPlacement:
    """Rank r's placement with the micro-batches of each of its stages in flight at the
    activation peak (TrainSpec t: micro-batches; RuntimeSpec rt: the engine and what W holds).
    SpecError when the engine refuses the micro-batch count (schedules.in_flight)."""
    flights = in_flight(p, r, t.micro_batches, rt.pipeline_engine, rt.zb_w_holds)
    held = dict(flights)
    first = held.get(0, 0) if r == first_stage_rank(p) else 0
    last = held.get(p.n_stages - 1, 0) if r == last_stage_rank(p) else 0
    loss = last_stage_open(p, r, t.micro_batches, rt) if last else 0
    return stage_placement(m, p, r, flights, first, last, loss)


def probe(m: ModelSpec, p: ParallelSpec, flights, first: int = 0, last: int = 0,
          loss: int | None = None) -> RankPlacement:
    """A placement holding the given (stage, micro-batches) and first / last counts — not
    necessarily a real rank's: the planner's and the tests' one-layer probes."""
    layers, stages = stage_layers(m, p), tuple(s for s, _ in flights)
    return RankPlacement(r=0, last_stage=p.n_stages - 1, stages=stages,
                         stage_layers=tuple(layers[s] for s in stages), holds_first=bool(first),
                         holds_last=bool(last), flights=tuple(flights), first=first, last=last,
                         loss=last if loss is None else loss)
