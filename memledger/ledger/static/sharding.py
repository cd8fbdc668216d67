"""Sharding rules as tables (docs/design.md §4, Megatron-Core conventions).

SHARD_DIVISOR: how many ranks split one parameter group (tp for attention/MLP matrices and the
vocab-parallel embedding/head; ep·etp for routed experts; 1 for norms, routers and MLA
down-projections). ZERO_SHARDED: which ledger rows ZeRO stage k shards over the optimizer group
(dp·cp for dense parameters, world/(pp·ep·etp) for expert parameters).
"""
from __future__ import annotations

from memledger.model.params import ParamGroup
from memledger.specs.parallel import ParallelSpec

SHARD_DIVISOR = {
    "tp": lambda p: p.tp,
    "vocab": lambda p: p.tp,
    "replicated": lambda p: 1,
    "expert": lambda p: p.ep * p.etp,
}

ZERO_SHARDED: dict[int, frozenset[str]] = {
    0: frozenset(),
    1: frozenset({"optimizer"}),
    2: frozenset({"optimizer", "gradients"}),
    3: frozenset({"optimizer", "gradients", "weights"}),
}


def shard_divisor(g: ParamGroup, p: ParallelSpec) -> int:
    return SHARD_DIVISOR[g.shard](p)


def zero_group(g: ParamGroup, p: ParallelSpec) -> int:
    """Ranks that share (and, under ZeRO, split) this group's states."""
    return p.expert_dp if g.expert else p.dense_dp


def dense_group_label(p: ParallelSpec) -> str:
    """How the dense shard group is spelled in formulas: dp·cp, over HSDP's copies."""
    return "dp·cp" if p.dp_replicate == 1 else f"dp·cp/{p.dp_replicate} (HSDP)"


def zero_divisor(row: str, g: ParamGroup, p: ParallelSpec) -> int:
    return zero_group(g, p) if row in ZERO_SHARDED[p.zero] else 1
