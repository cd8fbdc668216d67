"""Pipeline schedules as the engines run them: per-rank action orders, and the micro-batches each
stage holds at the rank's activation peak, found by walking the order.

An order is a tuple of actions (kind, stage, micro-batch) per pipeline rank, kinds F (forward),
B (full backward), I (input gradient) and W (weight gradient). A stage's micro-batch is held from
its F until its B, or, for a zero-bubble I/W split, until the pass that frees it (`W_HOLDS`):
  graph     until W: PyTorch keeps the whole autograd graph of the stage between I and W
            (torch/distributed/pipelining/_backward.py `stage_backward_input` calls autograd.grad
            with retain_graph=True; stage.py keeps it in `backward_state` until
            `backward_weight_one_chunk`), torch 2.13 — the default
  w-inputs  until I: a runtime that keeps only W's inputs (DeepSeek DualPipe's WeightGradStore,
            the zero-bubble repo's) frees the graph at I; the W inputs are not charged here
The peak of a rank is the first state, over its order, with the most held stage-micro-batches
(for the 1F1B family: the start of the first backward, docs/design.md §6).
Counts depend only on the rank's own order, not on the cross-rank timing.

Orders, by engine (facts carried over, not code; sources):
  gpipe        all F, then all B (GPipe, Huang et al. 2019; torch ScheduleGPipe)
  1f1b         min(p-r-1, m) warm-up F, then F B pairs (Megatron-Core schedules.py
               forward_backward_pipelining_without_interleaving; torch Schedule1F1B, m >= p)
  interleaved  forward table in groups of g micro-batches per chunk, warm-up
               2(p-r-1) + (v-1)·g capped at m·v, backward table with chunks reversed.
               megatron: g = p, a last short group keeps its size (Megatron-Core
               get_schedule_table; needs m >= p); pytorch: g = m // max(1, m // p), refused when
               that does not divide m (torch ScheduleInterleaved1F1B, "rounds")
  zb-h1        torch ScheduleInterleavedZeroBubble (ZB1P) on one stage per rank: 1F1B with I for
               B, rank r delaying its W's by r (Qi et al. 2023, arXiv 2401.10241); same rounds rule
  zb-v         torch ScheduleZBVZeroBubble: the V of Qi et al. 2024 §6, generated for
               max(2p-1, m) micro-batches and truncated to m (so m < 2p-1 holds less)
  dualpipe     DeepSeek DualPipe (github.com/deepseek-ai/DualPipe dualpipe.py, 8 steps; m even,
               m >= 2p), m/2 micro-batches from each end
  dualpipev    torch ScheduleDualPipeV = DeepSeek DualPipeV (m >= 2p, the V's stage count)
Ignores: communication actions and idle slots (they do not change what a rank holds).
"""
from __future__ import annotations

from collections import deque
from functools import lru_cache

from memledger.errors import SpecError
from memledger.ledger.pipeline.engines import resolve_engine
from memledger.specs.runtime import W_HOLDS

# beyond this many rounds of p micro-batches every schedule is steady: counts stop changing
STEADY_ROUNDS = 3

Action = tuple[str, int, int]


def rank_stages(schedule: str, p: int, v: int, r: int) -> tuple[int, ...]:
    """Stages on rank r (ParallelSpec.rank_stages, repeated so this module needs no spec)."""
    if schedule in ("zb-v", "dualpipev"):
        return (r, 2 * p - 1 - r)
    if schedule == "dualpipe":
        return (r, p - 1 - r)
    return tuple(c * p + r for c in range(v))


@lru_cache(maxsize=8192)
def rank_order(schedule: str, p: int, v: int, m: int, r: int, engine: str) -> tuple[Action, ...]:
    """Rank r's actions in the order `engine` runs them (engine as resolved: not "auto")."""
    if schedule == "gpipe":
        stages = rank_stages(schedule, p, v, r)
        return tuple(("F", s, i) for i in range(m) for s in stages) + tuple(
            ("B", s, i) for i in range(m) for s in reversed(stages))
    if schedule == "1f1b":
        return _one_f_one_b(p, 1, m, r, m, min(p - r - 1, m), zb_delay=None)
    if schedule in ("interleaved", "zb-h1"):
        g = p if engine == "megatron" else m // max(1, m // p)
        factor = 2 if schedule == "interleaved" else 1
        warm = min(factor * (p - r - 1) + (v - 1) * g, m * v)
        return _one_f_one_b(p, v, m, r, g, warm, zb_delay=r if schedule == "zb-h1" else None)
    if schedule == "zb-v":
        return _zb_v(p, m, r)
    if schedule == "dualpipev":
        return _dualpipe(p, m, (r, 2 * p - 1 - r), r)
    if schedule == "dualpipe":
        h = min(r, p - 1 - r)
        return _dualpipe(p // 2, m // 2, (h, p - 1 - h), h)
    raise SpecError("schedule", f"unknown schedule {schedule!r}")


def _table(m: int, v: int, g: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) in forward order: groups of g micro-batches per chunk, the last
    group of whatever is left (Megatron-Core get_schedule_table)."""
    out = []
    for start in range(0, m, g):
        end = min(start + g, m)
        out += [(mb, c) for c in range(v) for mb in range(start, end)]
    return out


def _one_f_one_b(p, v, m, r, g, warm, zb_delay):
    """Warm-up forwards, then one forward and one backward, then the backwards (Megatron-Core and
    torch _get_1f1b_rank_ops). zb_delay: I for B and W after `zb_delay` I's (torch ZB1P)."""
    fwd = [("F", c * p + r, mb) for mb, c in _table(m, v, g)]
    bwd_kind = "B" if zb_delay is None else "I"
    bwd = [(bwd_kind, (v - 1 - c) * p + r, mb) for mb, c in _table(m, v, g)]
    out, pending = list(fwd[:warm]), deque()
    for k in range(len(bwd)):
        if warm + k < len(fwd):
            out.append(fwd[warm + k])
        out.append(bwd[k])
        if zb_delay is not None:
            pending.append(bwd[k])
            if k >= zb_delay:
                _, s, mb = pending.popleft()
                out.append(("W", s, mb))
    out += [("W", s, mb) for _, s, mb in pending]
    return tuple(out)


class _Emit:
    """Numbers micro-batches per (stage, pass) as actions are appended; a full B counts as the
    stage's I and W; an I queues its W, popped oldest first."""

    def __init__(self, m: int):
        self.m, self.out, self.n, self.queue = m, [], {}, deque()

    def __call__(self, kind: str, stage: int) -> None:
        n = self.n
        key = (stage, "I" if kind == "B" else kind)
        mb = n.get(key, 0)
        n[key] = mb + 1
        if kind == "I":
            self.queue.append((stage, mb))
        self.out.append((kind, stage, mb))

    def w(self) -> None:
        if self.queue:
            s, mb = self.queue.popleft()
            self.out.append(("W", s, mb))

    def w_of(self, stage: int) -> None:
        """W of the stage's oldest I without one (for orders that pick the stage)."""
        mb = self.n.get((stage, "W"), 0)
        self.n[stage, "W"] = mb + 1
        self.out.append(("W", stage, mb))

    def result(self) -> tuple[Action, ...]:
        return tuple(a for a in self.out if a[2] < self.m)


def _zb_v(p: int, m: int, r: int) -> tuple[Action, ...]:
    """torch ScheduleZBVZeroBubble: warm-up F0 ×(2(p-r)-1), (F1 F0) ×r, (F1 I1 W1) ×(p-r), steady
    (F0 I0 W0 F1 I1 W1) until max(2p-1, m) are in, cool-down (I0 I1) ×r, (I0 W0) ×(p-r), then
    the W1's and W0's left; actions of micro-batches >= m dropped."""
    n = max(2 * p - 1, m)
    c0, c1 = r, 2 * p - 1 - r
    e = _Emit(m)
    for _ in range(2 * (p - r) - 1):
        e("F", c0)
    for _ in range(r):
        e("F", c1), e("F", c0)
    for _ in range(p - r):
        e("F", c1), e("I", c1), e.w_of(c1)
    f0, f1 = 2 * (p - r) - 1 + r, p
    while f1 < f0 or f0 < n:
        if f0 < n:
            e("F", c0)
            f0 += 1
        e("I", c0), e.w_of(c0), e("F", c1), e("I", c1), e.w_of(c1)
        f1 += 1
    for _ in range(r):
        e("I", c0), e("I", c1)
    for _ in range(p - r):
        e("I", c0), e.w_of(c0)
    for c in (c1, c0):
        for _ in range(e.n.get((c, "I"), 0) - e.n.get((c, "W"), 0)):
            e.w_of(c)
    return e.result()


def _dualpipe(n_ranks: int, n_chunks: int, stages: tuple[int, int], h: int):
    """DeepSeek's eight steps (DualPipe on its half-ranks, DualPipeV on all ranks): stages[0] is
    the phase fed first. n_ranks: ranks of one direction (p/2 for DualPipe); n_chunks:
    micro-batches per direction; h: the rank's index within its direction (half_rank)."""
    c0, c1 = stages
    e = _Emit(n_chunks)
    for _ in range(2 * (n_ranks - h - 1)):
        e("F", c0)
    for _ in range(h + 1):
        e("F", c0), e("F", c1)
    for _ in range(n_ranks - h - 1):
        e("I", c1), e.w(), e("F", c1)
    for _ in range(n_chunks - 2 * n_ranks + h + 1):
        e("F", c0), e("B", c1), e("F", c1), e("B", c0)  # F before B of each overlapped pair
    for _ in range(n_ranks - h - 1):
        e("B", c1), e("F", c1), e("B", c0)
    zb = False
    for i in range(h + 1):
        zb = zb or (i == (h + 1) // 2 and h % 2 == 1)
        e("I" if zb else "B", c1)
        zb = zb or (i == (h + 1) // 2 and h % 2 == 0)
        e("I" if zb else "B", c0)
    for _ in range(n_ranks - h - 1):
        e.w(), e("I", c0)
    for _ in range(h + 1):
        e.w()
    while e.queue:
        e.w()
    return e.result()


def peak_counts(order: tuple[Action, ...], stages: tuple[int, ...],
                w_holds: str) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """At the peak of one rank's order: micro-batches held per stage, those of them not yet
    through I or B per stage (the loss's graph: torch detaches the loss at I), and the I's
    whose W is pending."""
    frees = {"B", "I" if w_holds == "w-inputs" else "W"}
    held, open_ = dict.fromkeys(stages, 0), dict.fromkeys(stages, 0)
    total, pending = 0, 0
    best, best_total = ((0,) * len(stages), (0,) * len(stages), 0), -1
    for kind, s, _ in order:
        if kind == "F":
            held[s] += 1
            open_[s] += 1
            total += 1
            if total > best_total:
                best_total = total
                best = (tuple(held.values()), tuple(open_.values()), pending)
            continue
        if kind in frees:
            held[s] -= 1
            total -= 1
        if kind in ("I", "B"):
            open_[s] -= 1
        pending += (kind == "I") - (kind == "W")
    return best


def steady_m(schedule: str, p: int, v: int) -> int:
    """A micro-batch count beyond which no rank's peak changes: every warm-up is over within
    2p micro-batches (tests/test_schedule_order.py walks the orders beyond it); a multiple of p,
    so torch's rounds are groups of p, and even, as DualPipe needs."""
    return STEADY_ROUNDS * p


def stage_flights(schedule: str, p: int, v: int, m: int, r: int, engine: str = "auto",
                  w_holds: str = "graph") -> tuple[tuple[int, int], ...]:
    """(stage, micro-batches held) for each stage on rank r at its activation peak."""
    held, _ = peak_state(schedule, p, v, m, r, engine, w_holds)
    return held


def stage_open(schedule: str, p: int, v: int, m: int, r: int, stage: int, engine: str = "auto",
               w_holds: str = "graph") -> int:
    """Micro-batches of `stage` on rank r whose forward has not yet met its I or B at the peak:
    the loss tensors of the last stage live that long (torch `stage_backward_input` detaches
    the loss; DeepSeek frees the graph at I)."""
    return dict(peak_state(schedule, p, v, m, r, engine, w_holds)[1]).get(stage, 0)


@lru_cache(maxsize=65536)
def peak_state(schedule: str, p: int, v: int, m: int, r: int, engine: str = "auto",
               w_holds: str = "graph"):
    """((stage, held), ...), ((stage, not yet through I/B), ...) at rank r's peak."""
    if w_holds not in W_HOLDS:
        raise SpecError("zb_w_holds", f"must be one of {', '.join(W_HOLDS)}, got {w_holds!r}")
    e = resolve_engine(schedule, engine, p, m)
    cap = steady_m(schedule, p, v)
    if m > cap and (e != "pytorch" or schedule not in ("interleaved", "zb-h1") or m % p == 0):
        m = cap  # torch's rounds give groups of g = p only when p divides m
    stages = rank_stages(schedule, p, v, r)
    held, open_, _ = peak_counts(rank_order(schedule, p, v, m, r, e), stages, w_holds)
    return tuple(zip(stages, held)), tuple(zip(stages, open_))
