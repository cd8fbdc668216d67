"""Per-pipeline-shape tables: what every pipeline rank holds and keeps in flight.

For a Pipe and a set of micro-batch counts m, from the core's `stage_layers`, `in_flight`,
`first_stage_rank` / `last_stage_rank` and `held_groups`: per rank, the layers it holds by
kind, whether it holds the first / last stage, and per m the layer-micro-batches in flight by
kind (m ascending; once a rank's in-flight counts reach their m → ∞ values they are reused —
every schedule's count is a min(·, m)) (Σ over its stages of in-flight × layers of the kind — `activations.held`
summed per stage once instead of per layer) and the first / last stage's micro-batches.

Candidate ranks: two ranks with the same signature (dense layers, MoE layers, first, last) have
the same static rows, buffers and step temporaries; if one's in-flight counts are ≤ the other's
for every m and kind, its peak is ≤ the other's in every configuration, so only undominated
ranks are evaluated (exact: every term of the peak is non-negative and non-decreasing in them).

Mirrors memledger/ledger/pipeline/schedules.py and static/held.py per pipeline rank; held
equal by tests/test_planner_equality.py::test_vectorised_peak_equals_scalar_ledger_byte_for_byte.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memledger.errors import SpecError
from memledger.ledger.pipeline.engines import resolve_engine
from memledger.ledger.pipeline.schedules import (bubble_fraction, first_stage_rank, in_flight,
                                                 last_stage_rank, stage_layers)
from memledger.ledger.pipeline.placement import stage_placement
from memledger.ledger.static.held import held_groups
from memledger.model.params import layer_kind
from memledger.planner.memory.lifetimes import backward_corners
from memledger.planner.question.space import Pipe
from memledger.specs.model import ModelSpec
from memledger.specs.train import TrainSpec

SATURATED = 1 << 40  # an m beyond every in-flight limit


@dataclass
class PipeTables:
    pipe: Pipe
    ranks: np.ndarray  # candidate pp ranks
    n_dense: np.ndarray  # layers held, per candidate
    n_moe: np.ndarray
    first: np.ndarray  # holds stage 0
    last: np.ndarray  # holds the last stage
    l_dense: np.ndarray  # [candidate, m] layer-micro-batches in flight, dense layers
    l_moe: np.ndarray
    first_mb: np.ndarray  # [candidate, m] micro-batches of stage 0 in flight (0 if not held)
    last_mb: np.ndarray
    all_dense: np.ndarray  # layers held by every rank (for the time model)
    all_moe: np.ndarray
    all_last: np.ndarray
    bubble: np.ndarray  # [m] bubble fraction
    runs: np.ndarray  # [m] whether the engine runs that many micro-batches
    n_mb: np.ndarray | None = None  # [candidate, m] micro-batches in flight of its first stage
    corners: list | None = None  # per candidate: planner.memory.lifetimes.backward_corners


def pipe_tables(m: ModelSpec, pipe: Pipe, ms: np.ndarray, engine: str = "auto",
                w_holds: str = "graph", prune: bool = True) -> PipeTables:
    """Micro-batch counts the engine refuses (`runs` False) keep zero counts; the evaluator
    drops them, as the ledger refuses them. prune=False keeps every rank: with on-demand
    gradients the peak is not monotone in the in-flight counts (a rank whose staircase recurs
    after its first backward carries every gradient there), so the dominance argument below
    does not hold."""
    p = pipe.parallel()
    stages = stage_layers(m, p)
    dense = np.array([sum(layer_kind(m, i) == "dense" for i in s) for s in stages], dtype=np.int64)
    moe = np.array([len(s) for s in stages], dtype=np.int64) - dense
    f_rank, l_rank, last_stage = first_stage_rank(p), last_stage_rank(p), p.n_stages - 1
    n_r, n_m = pipe.pp, len(ms)
    l_d, l_m = np.zeros((n_r, n_m), np.int64), np.zeros((n_r, n_m), np.int64)
    f_mb, l_mb = np.zeros((n_r, n_m), np.int64), np.zeros((n_r, n_m), np.int64)
    n_mb = np.zeros((n_r, n_m), np.int64)
    runs = np.array([_runs(p, int(x), engine) for x in ms], dtype=bool)
    for r in range(n_r):
        limit, flights, row = _limit(p, r, engine, w_holds), None, None
        for j, mb_count in enumerate(ms.tolist()):
            if not runs[j]:
                continue
            if flights != limit or row is None:  # every count grows to its limit and stays
                flights = in_flight(p, r, mb_count, engine, w_holds)
                held = dict(flights)
                row = (sum(n * dense[s] for s, n in flights), sum(n * moe[s] for s, n in flights),
                       held.get(0, 0) if r == f_rank else 0,
                       held.get(last_stage, 0) if r == l_rank else 0, flights[0][1])
            l_d[r, j], l_m[r, j], f_mb[r, j], l_mb[r, j], n_mb[r, j] = row
    own = [p.rank_stages(r) for r in range(n_r)]
    all_d = np.array([dense[list(s)].sum() for s in own], dtype=np.int64)
    all_m = np.array([moe[list(s)].sum() for s in own], dtype=np.int64)
    first = np.arange(n_r) == f_rank
    last = np.arange(n_r) == l_rank
    keep = _undominated(np.stack([all_d, all_m, first, last], 1),
                        np.concatenate([l_d, l_m, f_mb, l_mb, l_d > 0, l_m > 0], 1)) if prune \
        else np.arange(n_r)
    corners = [backward_corners([layer_kind(m, i) for s in p.rank_stages(r) for i in stages[s]])
               for r in keep.tolist()]
    bubble = np.array([bubble_fraction(p, int(x)) for x in ms], dtype=np.float64)
    return PipeTables(pipe, keep, all_d[keep], all_m[keep], first[keep], last[keep], l_d[keep],
                      l_m[keep], f_mb[keep], l_mb[keep], all_d, all_m, last, bubble, runs,
                      n_mb[keep], corners)


def _limit(p, r: int, engine: str, w_holds: str):
    try:
        return in_flight(p, r, SATURATED, engine, w_holds)
    except SpecError:  # an engine that refuses a huge m (torch rounds): no shortcut
        return None


def _runs(p, mb_count: int, engine: str) -> bool:
    try:
        resolve_engine(p.schedule, engine, p.pp, mb_count)
    except SpecError:
        return False
    return True


def _undominated(sig: np.ndarray, feat: np.ndarray) -> np.ndarray:
    keep = []
    for r in range(len(sig)):
        same = np.flatnonzero((sig == sig[r]).all(1))
        ge = (feat[same] >= feat[r]).all(1)
        gt = (feat[same] > feat[r]).any(1)
        # r is dropped if another rank of its signature is >= everywhere and > somewhere,
        # or equal everywhere and earlier (one representative per tie)
        dominated = (ge & gt).any() or (ge & ~gt & (same < r)).any()
        if not dominated:
            keep.append(r)
    return np.array(keep, dtype=np.int64)


def rank_held(m: ModelSpec, tb: PipeTables, tp: int, t: TrainSpec, cache: dict, loop=None, *,
              sp: bool) -> list:
    """`held_groups` of each candidate rank at this tp (vocabulary padding depends on tp).
    The held list is a function of the signature (layers by kind, first, last), so it is
    computed once per signature and tp (`cache`, shared by the group's pipeline shapes)."""
    p = None
    out = []
    for j, r in enumerate(tb.ranks.tolist()):
        key = (tp, int(tb.n_dense[j]), int(tb.n_moe[j]), bool(tb.first[j]), bool(tb.last[j]))
        if key not in cache:
            p = p or tb.pipe.parallel(tp=tp, sp=sp)
            cache[key] = held_groups(m, p, t, stage_placement(m, p, r), loop)
        out.append(cache[key])
    return out
