"""The planner's mirror of a dense layer's backward working set
(`memledger.ledger.activations.transients.layer_backward_set`): per candidate rank and micro-batch
size, what a dense layer's backward adds above the staircase when recompute is off or
selective (under full recompute it rides on the recompute set: `evaluate.combine`,
`lifetimes.on_demand_alloc` add `ba.bwd` to one dense layer's inventory). Ignores MoE layers,
as the ledger does.
"""
from __future__ import annotations

import numpy as np


def layer_backward(has_d, ba, freed) -> np.ndarray:
    """[R, 1, B]: the set on the ranks holding a dense layer ([R, B] `has_d`), net of the last
    stage's tensors the loss backward freed (`freed`, [R, B]; the ledger's
    timeline_shape.transient_classes); <= 0 where the rank has none, so max(·, logits) is the
    logits as before."""
    return (has_d * ba.bwd[None] - freed)[:, None]
