"""plan(): one search, start to answer — the question's layouts enumerated (`question.space`),
every configuration evaluated (`sweep.evaluate`), the kept rows returned as a `Plan`
(`answer.result`). `memledger.planner.plan` is this function.
"""
from __future__ import annotations

import time

from memledger.planner.answer.result import Plan
from memledger.planner.question.space import enumerate_space
from memledger.planner.question.spec import PlanSpec
from memledger.planner.sweep.evaluate import evaluate
from memledger.planner.sweep.memhint import small_pages


def plan(spec: PlanSpec, keep_all: bool = False, admit=None, parts: bool = False,
         progress=None) -> Plan:
    """Search the space of `spec`. keep_all=True keeps over-capacity configurations too (tests);
    parts=True keeps every step-time term (small searches: the breakdown of one layout).
    `admit(n)`, when given, sees the number of configurations before any is evaluated and may
    raise (a server's per-request budget). `progress(stage, done, total)`, when given, is called
    as the search goes: stage "layouts" (0 of 1, then 1 of 1) while the layouts are enumerated,
    then "configurations" with the configurations evaluated so far, from 0 to the total
    `admit` sees. It only observes: the result is the same with or without it.
    The search runs on small pages (`memhint`: where memory comes from, not a value)."""
    with small_pages():
        return _plan(spec, keep_all, admit, parts, progress)


def _plan(spec, keep_all, admit, parts, progress) -> Plan:
    t0 = time.perf_counter()
    report = progress or (lambda stage, done, total: None)
    report("layouts", 0, 1)
    space = enumerate_space(spec)
    report("layouts", 1, 1)
    tick = None
    if admit is not None or progress is not None:
        from memledger.planner.sweep.size import n_configurations
        total = n_configurations(spec, space)
        if admit is not None:
            admit(total)
        if progress is not None:
            tick = _ticker("configurations", total, progress)
    ev = evaluate(spec, space, keep_all=keep_all, parts=parts, tick=tick)
    return Plan(spec=spec, evaluated=ev, n_structural=space.n_structural,
                n_invalid=space.n_invalid, invalid_reasons=dict(space.reasons),
                invalid_examples=dict(space.examples), wall_s=time.perf_counter() - t0)


def _ticker(stage: str, total: int, progress):
    """tick(n): n more of `total` done, reported as progress(stage, done, total)."""
    done = [0]
    progress(stage, 0, total)

    def tick(n: int) -> None:
        done[0] = min(done[0] + n, total)
        progress(stage, done[0], total)
    return tick
