"""The `hf` profile's router and routed experts: what a transformers 5.x MoE block saves for
backward between its input and its shared experts, per token (router) or per token-expert row
(experts). Checked exactly against traces in tests/test_hf_profile.py (transformers 5.24,
torch 2.13 CPU); the block's input, shared experts and Qwen2-MoE's shared_expert_gate are in
memledger/ledger/activations/profiles/hf.py.

Router families (MoESpec.router; "auto" infers: router_bias -> deepseek_v3, qk_norm -> qwen,
else mixtral), from transformers' models/*/modeling_*.py:
- mixtral (MixtralTopKRouter): softmax(fp32) probabilities E, top-K indices, renormalised, so the
  division keeps the K fp32 weights and their sum; routing weights stay fp32.
- qwen (Qwen2MoeTopKRouter, Qwen3MoeTopKRouter): the same, renormalised only when
  norm_topk_prob (MoESpec.norm_topk: false in Qwen2-MoE configs, true in Qwen3-MoE's), and the
  weights are cast back to the logits' dtype: the experts keep them in the activation format.
- deepseek_v2 (DeepseekV2TopkRouter): an fp32 Linear over an fp32 copy of its input (kept by
  hf.py), softmax(fp32), top-K indices, never renormalised (transformers ignores
  norm_topk_prob); topk_method group_limited_greedy (MoESpec.group_limited) masks the
  differentiable scores first, and masked_fill keeps its E-byte bool mask. Weights stay fp32,
  amp included (the softmax asks for fp32).
- deepseek_v3 (DeepseekV3TopkRouter): sigmoid over the fp32 Linear (bf16 under amp: autocast),
  bias-corrected group top-K on a branch that keeps nothing, gather keeps the K indices,
  renormalised (norm_topk_prob true in V3 and Kimi K2 configs).
Experts (default `experts="grouped_mm"`, transformers 5.x default): every token-expert row
(T·K rows whatever the routing, so `per="routed"` is exact) keeps the gathered input, gate‖up
output, activation, product, routed output, its routing weight and three int64 indices
(gather, sort permutation, inverse permutation). `experts="eager"` is the per-expert loop:
rows still sum to T·K; each keeps its input, fc1/act/product, output, weight, a cast of the
weighted output, and two int64 indices (torch.where's row/position pair share one storage).
Ignores: the E int32 expert offsets per MoE layer (a constant), the router logits (returned,
unused by the loss, their nodes die).
"""
from __future__ import annotations

from memledger.ledger.activations.inventory import ActTensor as A
from memledger.specs.model import ModelSpec


def family(m: ModelSpec) -> str:
    """MoESpec.router, or for "auto" the rule that predates the field."""
    if m.moe.router != "auto":
        return m.moe.router
    if m.moe.router_bias:
        return "deepseek_v3"
    return "qwen" if m.qk_norm else "mixtral"


def _score_fmt(fam: str, md) -> str:
    """Scores in fp32 (softmax(dtype=float32); DeepSeek's fp32 Linear), except DeepSeek-V3
    under amp, whose autocast Linear yields bf16 logits for the sigmoid."""
    return "act" if (fam == "deepseek_v3" and md.amp) else "fp32"


def router(m: ModelSpec, md, fam: str, device: str) -> list[A]:
    """Scores, top-K indices, DeepSeek-V2's group mask, the renormalisation's operands."""
    x, E, K = m.moe, m.moe.n_experts, m.moe.top_k
    rfmt = _score_fmt(fam, md)
    # CUDA autocast runs `sum` in fp32 (CPU autocast does not), hence the denominator's format.
    sfmt = "fp32" if device == "cuda" else rfmt
    out = [A("moe.router_probs", "router", E, rfmt, flops=2 * m.hidden * E),
           A("moe.topk_idx", "router", K, "int64")]
    if x.group_limited:  # scores.masked_fill(~mask, 0.0) keeps its bool mask
        out.append(A("moe.group_mask", "router", E, "bool"))
    if x.norm_topk:
        out += [A("moe.topk_sum", "router", 1, sfmt, flops=K),
                A("moe.topk_weights", "router", K, rfmt, flops=E)]
    return out


def experts(m: ModelSpec, md, fam: str, impl: str) -> list[A]:
    """Per routed row; the routing weight in Qwen's activation format, else the scores'."""
    h, fe = m.hidden, m.moe.expert_ffn
    wfmt = "act" if fam == "qwen" else _score_fmt(fam, md)
    # grouped_mm runs in the weights' dtype (fp32 under amp); the eager loop's Linears autocast.
    X = md.stream if impl == "grouped_mm" else "act"

    def r(name, cls, v, fmt, split="none", flops=0):
        return A(f"experts.{name}", cls, v, fmt, split=split, per="routed", flops=flops)

    body = [r("fc1_out", "expert_fc1", 2 * fe, X, "etp", 4 * h * fe),
            r("act_out", "expert_act", fe, X, "etp", 4 * fe),
            r("down_in", "expert_act", fe, X, "etp", fe),
            r("weight", "router", 1, wfmt),
            r("in", "expert_in", h, X), r("out", "expert_out", h, X, flops=2 * fe * h)]
    if impl == "grouped_mm":
        return body + [r("idx", "expert_idx", 3, "int64")]
    # Eager loop: Linear under autocast keeps a bf16 cast of the fp32 input; the weighted
    # output is cast (or, when already in that format, kept) in the residual format.
    return body + [r("out_cast", "expert_out", h, md.stream, flops=h), r("idx", "expert_idx", 2, "int64")]
