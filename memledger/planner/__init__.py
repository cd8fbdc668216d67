"""The planner: every parallel layout of a model on a GPU budget that fits, ranked by an
estimated step time (docs/design.md §10).

    plan(PlanSpec(model=..., hardware=..., worlds=(2048,), seq=4096, global_batch=15360))

enumerates the structural layouts through the core's validity checks (`space`), evaluates the
most-loaded-rank peak of every (layout, ZeRO stage, micro-batch size, recompute mode) with numpy
— byte for byte `build_ledger(...).peak.peak_total_bytes` (`evaluate`) — estimates its step
time (`memledger.costs.steptime`), and returns a `Plan` (`result`).

The package reads top-down by the stage of a search; each stage imports only the ones above it
(tests/test_architecture.py):

    question/  the request and its layouts: spec (PlanSpec, Constraints), space (the structural
               layouts through the core's validity checks)
    memory/    the per-rank peak's pieces, each a mirror of a ledger rule on numpy arrays: vec
               (array stand-ins for ParallelSpec/TrainSpec), coeffs (static rows, buffers,
               optimizer step), ranks (per pipeline rank: stages, layers, in flight), acts (the
               activation terms), bwdset (a dense layer's backward set), lifetimes (on-demand
               gradients), segmax (the max over a shape's ranks)
    time/      step time: timing (the step-time arrays), throughput (tokens/s, TFLOP/s, MFU)
    sweep/     running the search: evaluate (the block loop), cells (a block's peaks, fit test
               and step times, numpy), fused (the same, one compiled numba pass), lane (the
               second thread), sink (the kept rows), blocks (what is kept), memhint (small pages),
               size (the count before evaluating)
    answer/    what comes back: search (plan()), result (Plan), groups (the page's table),
               breakdown (one layout's step by term), reference (published trainings)
"""
from __future__ import annotations

from memledger.planner.answer.result import Plan, describe
from memledger.planner.answer.search import plan
from memledger.planner.question.spec import Constraints, PlanSpec

__all__ = ["Constraints", "Plan", "PlanSpec", "describe", "plan"]
