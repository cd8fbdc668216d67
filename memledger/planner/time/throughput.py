"""Throughput of a configuration from its predicted step time: tokens/s, model TFLOP/s per GPU
and MFU (model FLOPs utilisation: 3 × the model's forward FLOPs per token, recompute not
counted, over the GPUs' dense bf16 peak — the convention of Chowdhery et al. 2022, PaLM,
Appendix B), and the labels of the step-time terms (`timing.PARTS`). One layout's step by
term is `answer.breakdown` (it runs a search, a later stage).
"""
from __future__ import annotations

import numpy as np

from memledger.model.flops import head_forward_flops_per_token, layer_forward_flops_per_token
from memledger.model.params import layer_kind
from memledger.planner.question.spec import PlanSpec


def forward_flops_per_token(m, seq: int) -> int:
    """The whole model's forward FLOPs per token: every layer and the head."""
    layers = sum(layer_forward_flops_per_token(m, layer_kind(m, i), seq) for i in range(m.n_layers))
    return layers + (head_forward_flops_per_token(m, m.vocab) if m.vocab else 0)


def throughput(spec: PlanSpec, seconds, world):
    """(tokens/s, model TFLOP/s per GPU, MFU in %) of steps of `seconds` on `world` GPUs."""
    seconds, world = np.asarray(seconds, np.float64), np.asarray(world, np.float64)
    tokens = spec.global_batch * spec.seq
    tps = tokens / seconds
    tflops = 3.0 * forward_flops_per_token(spec.model, spec.seq) * tps / world / 1e12
    return tps, tflops, 100.0 * tflops * 1e12 / spec.hardware.bf16_flops


LABELS = {"compute": "compute", "recompute": "recompute", "tp": "TP comm", "cp": "CP ring",
          "ep": "EP all-to-all", "pp_p2p": "PP send/recv", "bubble": "bubble",
          "dp_sync": "DP sync", "zero3": "ZeRO-3 gathers", "optimizer": "optimizer",
          "grad_accum": "grad accumulation"}
