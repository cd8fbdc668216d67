"""Gradient checkpointing arithmetic: how many layer checkpoints to keep, and what they cost.

Chen, Xu, Zhang, Guestrin 2016, "Training Deep Nets with Sublinear Memory Cost" (arXiv
1604.06174), §4: cut an n-layer chain into k segments, keep only each segment's input (k
checkpoints) and re-run one segment's forward during backward, which needs that segment's
⌈n/k⌉ layers of activations at once. Peak activation memory, in units of one layer's
activations, is k + ⌈n/k⌉, smallest near k = √n: O(√n) memory for one extra forward pass.

Seed 2 counts it more simply: keep ⌈√L⌉ + 1 checkpoints, so activations shrink to about
(⌈√L⌉ + 1)/L of storing every layer (32 layers → 7 ≈ 22%, 80 layers → 10 ≈ 13%). That count
leaves out the segment being recomputed; `segment_peak_layers` includes it. Both treat a
checkpoint as one layer's worth of activations; the ledger itself (`ledger.activations.row`, recompute
"every-k") keeps only each layer's input, which is smaller. Layers are uniform here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from memledger.errors import require_positive


def seed_checkpoints(n_layers: int) -> int:
    """Checkpoints seed 2 keeps for L layers: ⌈√L⌉ + 1."""
    require_positive("n_layers", n_layers)
    return math.isqrt(n_layers - 1) + 2  # isqrt(L - 1) + 1 = ⌈√L⌉ for L >= 1


def seed_fraction(n_layers: int) -> float:
    """Seed 2's activation share under checkpointing: checkpoints kept / layers (at most 1)."""
    return min(seed_checkpoints(n_layers), n_layers) / n_layers


def seed_percent(n_layers: int) -> int:
    """Seed 2's printed percentage, rounded half up as its script's toFixed(0) does (12.5 → 13)."""
    kept = min(seed_checkpoints(n_layers), n_layers)
    return (200 * kept + n_layers) // (2 * n_layers)


def segment_peak_layers(n_layers: int, k: int) -> int:
    """Chen et al.: k checkpoints kept plus one segment of ⌈L/k⌉ layers being recomputed."""
    require_positive("n_layers", n_layers)
    require_positive("checkpoints", k)
    return min(k, n_layers) + -(-n_layers // k)


def optimum(n_layers: int) -> int:
    """The number of checkpoints with the smallest `segment_peak_layers`; k + ⌈L/k⌉ is flat
    around √L, so a tie goes to the k nearest √L."""
    root = math.sqrt(n_layers)
    return min(range(1, n_layers + 1),
               key=lambda k: (segment_peak_layers(n_layers, k), abs(k - root), k))


@dataclass(frozen=True)
class CurvePoint:
    checkpoints: int
    kept_layers: int  # seed 2's count: checkpoints kept
    peak_layers: int  # Chen et al.: kept + one recomputed segment

    def kept_share(self, n_layers: int) -> float:
        return self.kept_layers / n_layers

    def peak_share(self, n_layers: int) -> float:
        return self.peak_layers / n_layers


def curve(n_layers: int) -> tuple[CurvePoint, ...]:
    """Activation memory against the number of checkpoints k = 1..L (k = L: keep everything)."""
    require_positive("n_layers", n_layers)
    return tuple(CurvePoint(k, k, min(segment_peak_layers(n_layers, k), n_layers))
                 for k in range(1, n_layers + 1))


def checkpointed_bytes(full_bytes: int, n_layers: int) -> int:
    """Seed 2's estimate of activations under ⌈√L⌉ + 1 checkpoints, from the full figure."""
    return -(-full_bytes * min(seed_checkpoints(n_layers), n_layers) // n_layers)
