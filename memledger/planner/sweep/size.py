"""How many configurations a plan evaluates, counted before evaluating any.

The count is exactly `evaluate`'s `n_evaluated`: for every valid layout (pipeline shape x
width) of the space, the micro-batch sizes its dp allows times the ZeRO stages times the
recompute modes searched. It costs one divisor list per distinct dp, so a server can refuse a
search over its budget in milliseconds instead of discovering the cost by paying it.
"""
from __future__ import annotations

from memledger.planner.sweep.evaluate import _axes, micro_batch_sizes
from memledger.planner.sweep.sink import n_configurations as count
from memledger.planner.question.space import Space
from memledger.planner.question.spec import PlanSpec


def n_configurations(spec: PlanSpec, space: Space) -> int:
    zs, rcs = _axes(spec)
    return count(space.groups, zs, rcs, lambda dp: micro_batch_sizes(spec, dp))
