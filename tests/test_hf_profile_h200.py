"""The `hf` profile's CUDA variant against saved-tensor traces taken on one H200.

Data: tests/data/hf_traces_h200.json (torch 2.11 + cu130, cuDNN attention, transformers 5.17;
see its "meta"). No torch needed here. The traces are exact up to three documented offsets:
- sdpa on CUDA keeps a philox seed and offset (two int64 scalars): 16 bytes per layer;
- transformers 5.17's grouped_mm masks sentinel rows unconditionally (a bool per routed row,
  T·K bytes per MoE layer); 5.24, which the profile follows, masks only under expert parallel;
- the constants the profile ignores: 4·E bytes of int32 offsets per MoE layer, 4 bytes of loss
  weight and 8 bytes of padded labels when the batch is one sequence.
Under gradient checkpointing 5.17 saves the layer inputs outside the layer modules' hooks, so
totals (layers + outside) are compared.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from memledger.ledger.activations import tensor_bytes
from memledger.ledger.activations.profiles.hf import HFProfile
from memledger.model.params import layer_kind
from memledger.specs import MLASpec, ModelSpec, MoESpec, ParallelSpec, TrainSpec

DATA = json.loads((Path(__file__).parent / "data" / "hf_traces_h200.json").read_text())["traces"]
P = ParallelSpec()


def spec(arch: str, h: int) -> ModelSpec:
    base = dict(name=arch, n_layers=2, hidden=h, n_heads=4, n_kv_heads=2, head_dim=16,
                ffn_hidden=96, vocab=128)
    if arch == "llama":
        return ModelSpec(**base)
    if arch == "mixtral":
        return ModelSpec(**base, moe=MoESpec(n_experts=4, top_k=2, expert_ffn=96))
    if arch == "qwen3moe":
        return ModelSpec(**base, qk_norm=True, moe=MoESpec(n_experts=4, top_k=2, expert_ffn=32))
    mla = MLASpec(q_lora_rank=32, kv_lora_rank=32, qk_rope_dim=16, qk_nope_dim=32, v_dim=32)
    moe = MoESpec(n_experts=8, top_k=2, expert_ffn=32, n_shared=1, first_k_dense=1, router_bias=True)
    return ModelSpec(**{**base, "n_kv_heads": 4}, mla=mla, moe=moe)


def expected(key: str) -> tuple[dict[str, int], int]:
    arch, attn, prec, h, b, s, gc = key.split("|")
    b, s, m = int(b), int(s), spec(arch, int(h))
    t = TrainSpec(micro_batch=b, seq=s, precision=prec, profile="hf",
                  attention="eager" if attn == "eager" else "flash")
    prof = HFProfile()  # device="cuda"

    def total(xs):
        return sum(tensor_bytes(x, m, t, P) for x in xs)
    outside = total(prof.first_stage(m, t, P) + prof.last_stage(m, t, P)) + 4 + (8 if b == 1 else 0)
    layers = {}
    for i in range(m.n_layers):
        n = total(prof.layer(m, layer_kind(m, i), t, P)) + (16 if attn == "sdpa" else 0)
        if m.is_moe_layer(i):
            n += 4 * m.moe.n_experts + b * s * m.moe.top_k
        layers[str(i)] = n
    if gc == "1":
        rope = total(x for x in prof.first_stage(m, t, P) if x.cls == "rope")
        layers = {str(i): total([prof.layer_input(m, t, P)]) for i in range(m.n_layers)}
        outside -= rope
    return layers, outside


@pytest.mark.parametrize("key", sorted(DATA))
def test_cuda_profile_matches_h200_trace(key):
    layers, outside = expected(key)
    got = DATA[key]
    if key.endswith("|1"):
        assert sum(got["layers"].values()) + got["outside"] == sum(layers.values()) + outside
    else:
        assert (got["layers"], got["outside"]) == (layers, outside)


def test_h200_sdpa_used_cudnn_for_gqa_and_mla():
    kernels = {k.split("|")[0]: v["sdpa_kernel"] for k, v in DATA.items() if "|sdpa|" in k and k.endswith("|0")}
    assert set(map(tuple, kernels.values())) == {("ScaledDotProductCudnnAttentionBackward0",)}
