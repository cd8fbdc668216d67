"""Pipeline placement and schedules: which layers each rank holds, and how many micro-batches of
each of its stages are in flight at the activation peak (the start of the first backward).

In-flight counts (docs/design.md §6; p ranks, rank r, m micro-batches per step, v chunks):
  gpipe        m for every stage
  1f1b, zb-h1  min(p - r, m)                                  (Narayanan et al. 2021; Qi et al. 2023)
  interleaved  N = min(2(p - r - 1) + (v - 1)·p + 1, m·v) chunk-micro-batches, assigned to
               chunks in Megatron's forward order (groups of p micro-batches per chunk)
  zb-v         min(p, m) per chunk: flat across ranks at 1F1B's rank-0 peak (Qi et al. 2024)
  dualpipe     p + 1 stage-micro-batches split over the two mirrored stages (DeepSeek-V3 §3.2.1)
  dualpipev    min(p + 1, m) per chunk of the V (DualPipe "cut-in-half")
Ignores: warm-up asymmetries of zero-bubble schedules beyond their published peaks.
"""
from __future__ import annotations

from functools import lru_cache

from memledger.errors import SpecError
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec


def balanced_layout(n_layers: int, n_stages: int) -> tuple[int, ...]:
    """Spread layers over stages; the remainder goes to middle stages first, because the first
    and last stages also carry the embedding and the output head."""
    base, rem = divmod(n_layers, n_stages)
    order = list(range(1, n_stages - 1)) + [0, n_stages - 1] if n_stages > 2 else list(range(n_stages))
    extra = set(order[:rem])
    return tuple(base + (1 if s in extra else 0) for s in range(n_stages))


@lru_cache(maxsize=4096)
def stage_layers(m: ModelSpec, p: ParallelSpec) -> tuple[range, ...]:
    """Layer indices of every pipeline stage (virtual stages in order)."""
    n = p.n_stages
    if p.layout is not None:
        layout = p.layout
        if sum(layout) != m.n_layers:
            raise SpecError("layout", f"entries sum to {sum(layout)}, but the model has "
                                      f"n_layers={m.n_layers}")
    else:
        if m.n_layers % n:
            raise SpecError("pp", f"{n} pipeline stages (pp={p.pp}, chunks per rank={p.chunks}) do "
                                  f"not divide n_layers={m.n_layers}; choose pp·vpp dividing "
                                  f"{m.n_layers} or give a layout (e.g. 'balanced')")
        layout = (m.n_layers // n,) * n
    out, start = [], 0
    for k in layout:
        out.append(range(start, start + k))
        start += k
    return tuple(out)


def in_flight(p: ParallelSpec, r: int, m: int) -> tuple[tuple[int, int], ...]:
    """(stage, micro-batches held) for each stage on rank r at the activation peak."""
    pp, stages, s = p.pp, p.rank_stages(r), p.schedule
    if s == "gpipe":
        return tuple((st, m) for st in stages)
    if s in ("1f1b", "zb-h1"):
        return ((stages[0], min(pp - r, m)),)
    if s == "interleaved":
        return _interleaved(pp, p.vpp, r, m)
    if s == "zb-v":
        return tuple((st, min(pp, m)) for st in stages)
    if s == "dualpipe":
        own, mirror = -(-(pp + 1) // 2), (pp + 1) // 2
        return ((stages[0], min(own, -(-m // 2))), (stages[1], min(mirror, m // 2 or 1)))
    if s == "dualpipev":
        return tuple((st, min(pp + 1, m)) for st in stages)
    raise SpecError("schedule", f"unknown schedule {s!r}")


def _interleaved(pp: int, v: int, r: int, m: int) -> tuple[tuple[int, int], ...]:
    total = min(2 * (pp - r - 1) + (v - 1) * pp + 1, m * v)
    counts = [0] * v
    full_groups, rest = divmod(total, pp * v)
    for c in range(v):
        counts[c] = full_groups * pp + min(max(rest - c * pp, 0), pp)
    return tuple((c * pp + r, n) for c, n in enumerate(counts))


@lru_cache(maxsize=4096)
def first_stage_rank(p: ParallelSpec) -> int:
    return next(r for r in range(p.pp) if 0 in p.rank_stages(r))


@lru_cache(maxsize=4096)
def last_stage_rank(p: ParallelSpec) -> int:
    last = p.n_stages - 1
    return next(r for r in range(p.pp) if last in p.rank_stages(r))


def bubble_fraction(p: ParallelSpec, m: int) -> float:
    """Idle fraction of a step: (p-1)/(v·m + p - 1) for 1F1B-family; zero-bubble ~0; DualPipe
    halves the 1F1B bubble. Used by the planner's step-time estimate."""
    pp = p.pp
    if pp == 1:
        return 0.0
    s = p.schedule
    if s in ("zb-v",):
        return 0.0
    if s == "zb-h1":
        return (pp - 1) / (3 * m + pp - 1)
    if s in ("dualpipe", "dualpipev"):
        return (pp / 2 - 1) / (m + pp / 2 - 1) if pp > 2 else 0.0
    v = p.vpp if s == "interleaved" else 1
    return (pp - 1) / (v * m + pp - 1)
