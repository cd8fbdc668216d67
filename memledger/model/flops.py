"""FLOPs and compute time: the currency in which recompute is paid and offload windows are sized.

Forward FLOPs per token of one layer = 2 × (its active matmul parameters) + causal attention
a·s·(d_qk + d_v) (QKᵀ and AV, half the s² pairs). A training step costs 3× forward (backward =
2× forward; Narayanan et al. 2021, eq. 3), plus the forward FLOPs of whatever is recomputed.
The output head adds 2·h·V per token on the last stage. Per-rank FLOPs and time:
memledger.costs.compute.
Ignores: element-wise ops (norms, activations, softmax) in the matmul count, and MoE imbalance.
"""
from __future__ import annotations

from memledger.model.params import layer_groups, layer_kind, padded_vocab
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import TrainSpec


def attention_flops_per_token(m: ModelSpec, seq: int) -> int:
    if m.mla is not None:
        d_qk, d_v = m.mla.qk_dim, m.mla.v_dim
    else:
        d_qk = d_v = m.head_dim
    return m.n_heads * seq * (d_qk + d_v)


def layer_forward_flops_per_token(m: ModelSpec, kind: str, seq: int) -> int:
    """Forward FLOPs of one layer per token (active experts only)."""
    matmul = sum(g.count for g in layer_groups(m, kind, active=True) if g.matrix)
    return 2 * matmul + attention_flops_per_token(m, seq)


def head_forward_flops_per_token(m: ModelSpec, vocab: int) -> int:
    return 2 * m.hidden * vocab
