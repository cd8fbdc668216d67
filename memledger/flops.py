"""FLOPs and compute time: the currency in which recompute is paid and offload windows are sized.

Forward FLOPs per token of one layer = 2 × (its active matmul parameters) + causal attention
a·s·(d_qk + d_v) (QKᵀ and AV, half the s² pairs). A training step costs 3× forward (backward =
2× forward; Narayanan et al. 2021, eq. 3), plus the forward FLOPs of whatever is recomputed.
The output head adds 2·h·V per token on the last stage. Time = FLOPs / (peak bf16 FLOP/s × MFU).
Ignores: element-wise ops (norms, activations, softmax) in the matmul count, and MoE imbalance.
"""
from __future__ import annotations

from .params import layer_groups, layer_kind, padded_vocab
from .schedules import stage_layers
from .specs.hardware import Hardware
from .specs.model import ModelSpec
from .specs.parallel import ParallelSpec
from .specs.train import TrainSpec

DEFAULT_MFU_PCT = 40


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


def rank_forward_flops(m: ModelSpec, p: ParallelSpec, t: TrainSpec, r: int) -> int:
    """Forward FLOPs of one micro-batch on pipeline rank r, over all its stages, per GPU
    (the layer work is split tp·cp ways; experts ep·etp ways over the same tokens)."""
    stages = stage_layers(m, p)
    tokens = t.micro_batch * t.seq
    total = 0
    for s in p.rank_stages(r):
        for i in stages[s]:
            total += layer_forward_flops_per_token(m, layer_kind(m, i), t.seq) * tokens
    if p.n_stages - 1 in p.rank_stages(r) and m.vocab:
        total += head_forward_flops_per_token(m, padded_vocab(m, p.tp, t.pad_multiple())) * tokens
    return total // (p.tp * p.cp)


def seconds(flops: int, hw: Hardware, mfu_pct: int = DEFAULT_MFU_PCT) -> float:
    return flops / (hw.bf16_flops * mfu_pct / 100)
