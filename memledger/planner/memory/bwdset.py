"""The planner's mirror of a dense layer's backward working set
(`memledger.ledger.activations.transients.layer_backward_set`): per candidate rank and micro-batch
size, what a dense layer's backward adds above the staircase when recompute is off or
selective (under full recompute it rides on the recompute set: `evaluate.combine` adds
`dense_only` to one dense layer's inventory).
Only on ranks holding no MoE layer and under persistent gradients (planner.memory.lifetimes, the
on-demand path, leaves it out), as the ledger does.

Mirrors memledger/ledger/activations/transients.py (layer_backward_set); held equal by
tests/test_planner_equality.py::test_vectorised_peak_equals_scalar_ledger_byte_for_byte
(and tests/test_layer_backward_torch.py against torch).
"""
from __future__ import annotations

import numpy as np


def dense_only(has_d, has_m, ba) -> np.ndarray:
    """[R, 1, B] the set where a rank holds dense layers and no MoE layer, else 0."""
    return ((has_d & ~has_m) * ba.bwd[None])[:, None]


def layer_backward(has_d, has_m, ba, freed) -> np.ndarray:
    """[R, 1, B]: the set on the ranks holding dense layers and no MoE layer ([R, B] `has_d`,
    `has_m`: layer-micro-batches in flight, as the ledger's `HeldActivations.kinds`), net of the last
    stage's tensors the loss backward freed (`freed`, [R, B]; the ledger's
    timeline_shape.transient_classes); <= 0 where the rank has none, so max(·, logits) is the
    logits as before."""
    return dense_only(has_d, has_m, ba) - freed[:, None]
