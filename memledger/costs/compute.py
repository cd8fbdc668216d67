"""Compute per pipeline rank and its time: the window in which offloads must move and what a
recompute costs in seconds.

FLOPs of one micro-batch on rank r = Σ over its stages' layers of the per-token forward FLOPs
(memledger.model.flops) × tokens, plus the head on the last stage, ÷ tp·cp (the layer work is
split that many ways; experts ep·etp ways over the same tokens). Time = FLOPs / (peak bf16
FLOP/s × MFU), with one MFU for every kernel (40 % by default, a typical Megatron-LM figure for
GPT models on A100/H100 — Narayanan et al. 2021, Table 1).
Ignores: element-wise ops, MoE imbalance, kernel efficiency by shape.
"""
from __future__ import annotations

from memledger.ledger.pipeline.schedules import stage_layers
from memledger.model.flops import head_forward_flops_per_token, layer_forward_flops_per_token
from memledger.model.params import layer_kind, padded_vocab
from memledger.specs.hardware import Hardware
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import TrainSpec

DEFAULT_MFU_PCT = 40


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
