"""Pipeline placement and schedules: which layers each rank holds, and how many micro-batches of
each of its stages are in flight at the activation peak (the start of the first backward).

In-flight counts (docs/design.md §6; p ranks, rank r, m micro-batches per step, v chunks):
  gpipe        m for every stage
  1f1b         min(p - r, m)                                  (Narayanan et al. 2021)
  interleaved, zb-h1, zb-v, dualpipe, dualpipev
               walked from the order of F / B (I, W) actions the chosen engine runs
               (memledger.ledger.pipeline.order; rules and sources in docs/schedules.md)
The closed forms of gpipe and 1f1b equal the walked orders (tests/test_schedule_order.py).
"""
from __future__ import annotations

from functools import lru_cache

from memledger.errors import SpecError
from memledger.ledger.pipeline.engines import resolve_engine
from memledger.ledger.pipeline.order import stage_flights, stage_open
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec


def balanced_layout(n_layers: int, n_stages: int) -> tuple[int, ...]:
    """Spread layers over stages; the remainder goes to middle stages first, because the first
    and last stages also carry the embedding and the output head."""
    base, rem = divmod(n_layers, n_stages)
    order = list(range(1, n_stages - 1)) + [0, n_stages - 1] if n_stages > 2 else list(range(n_stages))
    extra = set(order[:rem])
    return tuple(base + (1 if s in extra else 0) for s in range(n_stages))


def torchtitan_layout(n_layers: int, n_stages: int, input_weight: int = 1,
                      output_weight: int = 1) -> tuple[int, ...]:
    """torchtitan 0.3's split (distributed/pipeline_parallel.py `_generate_llm_fqn_per_model_part`):
    tok_embeddings counts as input_weight layers on the first stage and [norm, lm_head] as
    output_weight on the last (pipeline_parallel_first/last_stage_less_layers, default 1); the
    n_layers + weights effective layers are spread evenly, the remainder to the first stages.
    126 layers on 8 / 16 stages: 15, 16 × 6, 15 / 7, 8 × 14, 7 (= balanced_layout); 32 on 4:
    8, 9, 8, 7. The Dec 2024 rule (parallelisms/pipelining_utils.py `generate_split_points`:
    stage 0 gets n // s, the middle stages one more while the remainder lasts, the last the
    rest) gives the same 126-layer splits."""
    if n_stages == 1:
        return (n_layers,)
    base, extra = divmod(n_layers + input_weight + output_weight, n_stages)
    if base < max(input_weight, output_weight, 1):
        raise SpecError("pp", f"{n_stages} stages leave {base} effective layers per stage for "
                              f"{n_layers} layers (torchtitan needs >= {max(input_weight, 1)})")
    out = [base + (s < extra) for s in range(n_stages)]
    out[0] -= input_weight
    out[-1] -= output_weight
    return tuple(out)


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


def in_flight(p: ParallelSpec, r: int, m: int, engine: str = "auto",
              w_holds: str = "graph") -> tuple[tuple[int, int], ...]:
    """(stage, micro-batches held) for each stage on rank r at the activation peak. SpecError
    when the engine (by default: the first that runs m, docs/schedules.md) refuses m."""
    pp, stages, s = p.pp, p.rank_stages(r), p.schedule
    if s not in ("gpipe", "1f1b"):
        return stage_flights(s, pp, p.vpp, m, r, engine, w_holds)
    resolve_engine(s, engine, pp, m)
    if s == "gpipe":
        return tuple((st, m) for st in stages)
    return ((stages[0], min(pp - r, m)),)


def last_stage_open(p: ParallelSpec, r: int, m: int, rt) -> int:
    """Micro-batches of the last stage on rank r whose loss is alive at the peak (those held,
    except zero-bubble ones past I whose W is pending; RuntimeSpec rt picks engine and I/W)."""
    last = p.n_stages - 1
    if p.schedule in ("gpipe", "1f1b"):
        return dict(in_flight(p, r, m, rt.pipeline_engine, rt.zb_w_holds)).get(last, 0)
    return stage_open(p.schedule, p.pp, p.vpp, m, r, last, rt.pipeline_engine, rt.zb_w_holds)


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
