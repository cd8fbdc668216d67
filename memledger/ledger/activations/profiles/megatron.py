"""The `megatron` profile: tensors Megatron-Core + Transformer Engine save, flash attention (its
dropout inside the kernel), hidden dropout's bool masks when `hidden_dropout_pct` > 0
(docs/design.md §5). Per token per layer: norm-1 input h, QKV input h, Q a·dh, K and V g·dh,
attention output a·dh (+ fp32 log-sum-exp a), norm-2 input h, MLP input h, fc1 output 2f
(SwiGLU) or f, activation output f; norms keep fp32 rstd (and mean for LayerNorm).
MoE (megatron-core 0.16.1, softmax top-k router with a load-balancing loss, unfused permute;
measured by `memledger validate --engine megatron-core`, docs/megatron-validation.md): per token
the router's input h, the top-k indices (int64 K) and fp32 top-k probabilities (K), the
load-balancing loss's fp32 scores (E), the dispatcher's expert-major routing map (bool E) and
probabilities (E) and its token order (int64 K); per routed row the permuted input h, the
row's probability (1), fc1 output 2fe/etp and activation output fe/etp. The expert output is not
kept: the probabilities scale the activation before fc2 (experts.py TEGroupedMLP.forward,
weighted_bias_swiglu_impl), so the combine only scatters. MLA keeps the compressed q/kv and their
normed copies.
Ignores: RoPE cos/sin caches (shared, tiny), TE fp8 amax histories, the switch loss's E int64
token counts and fp32 loss per MoE layer (not per token), the sigmoid router (DeepSeek-V3's
score function keeps its own set), TE's fused permute (moe_permute_fusion, off by default).
"""
from __future__ import annotations

from memledger.ledger.activations.inventory import ActTensor as A
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import TrainSpec

# `--recompute-granularity selective` recomputes `recompute_modules`, by default ["core_attn"]
# (megatron-core 0.16.1 transformer_config.py:1193-1194; Megatron-LM arguments.py passes
# --recompute-modules default None): under TE's flash attention the checkpoint keeps q, k, v and
# the output projection keeps its input, so the logsumexp is what is dropped. The norm outputs,
# the activation outputs and the expert activations go only with non-default modules
# ("layernorm", "mlp", "moe_act"), which memledger spells as policy rules.
SELECTIVE = frozenset({"attn_core"})


def norm(m: ModelSpec, name: str) -> list[A]:
    stats = 2 if m.norm == "layernorm" else 1
    return [A(f"{name}.input", "norm_in", m.hidden), A(f"{name}.stats", "norm_in", stats, "fp32")]


def attention(m: ModelSpec) -> list[A]:
    h, a, g, dh = m.hidden, m.n_heads, m.n_kv_heads, m.head_dim
    if m.mla is not None:
        return mla(m)
    return [
        A("attn.qkv_in", "norm_out", h, flops=4 * h),
        A("attn.q", "qkv", a * dh, split="tp", flops=2 * h * a * dh),
        A("attn.k", "qkv", g * dh, split="tp", flops=2 * h * g * dh),
        A("attn.v", "qkv", g * dh, split="tp", flops=2 * h * g * dh),
        A("attn.out", "attn_out", a * dh, split="tp", flops=4 * a * dh),
        A("attn.lse", "attn_core", a, "fp32", split="tp", flops=4 * a * dh),
    ]


def mla(m: ModelSpec) -> list[A]:
    x, h, a = m.mla, m.hidden, m.n_heads
    kv_in = x.kv_lora_rank + x.qk_rope_dim
    out = [A("attn.down_in", "norm_out", h, flops=4 * h)]
    if x.q_lora_rank:
        out += [A("attn.q_compressed", "mla_down", x.q_lora_rank, flops=2 * h * x.q_lora_rank),
                A("attn.q_normed", "norm_out", x.q_lora_rank, flops=4 * x.q_lora_rank)]
    out += [
        A("attn.kv_compressed", "mla_down", kv_in, flops=2 * h * kv_in),
        A("attn.kv_normed", "norm_out", x.kv_lora_rank, flops=4 * x.kv_lora_rank),
        A("attn.q", "mla_up", a * x.qk_dim, split="tp",
          flops=2 * (x.q_lora_rank or h) * a * x.qk_dim),
        A("attn.k", "mla_up", a * x.qk_dim, split="tp", flops=2 * x.kv_lora_rank * a * x.qk_nope_dim),
        A("attn.v", "mla_up", a * x.v_dim, split="tp", flops=2 * x.kv_lora_rank * a * x.v_dim),
        A("attn.out", "attn_out", a * x.v_dim, split="tp", flops=4 * a * x.qk_dim),
        A("attn.lse", "attn_core", a, "fp32", split="tp", flops=4 * a * x.qk_dim),
    ]
    return out


def mlp(m: ModelSpec, f: int, prefix: str, split: str = "tp", per: str = "token") -> list[A]:
    h = m.hidden
    fc1 = 2 * f if m.mlp == "swiglu" else f
    return [
        A(f"{prefix}.fc1_out", "expert_fc1" if per == "routed" else "mlp_fc1", fc1, split=split,
          per=per, flops=2 * h * fc1),
        A(f"{prefix}.act_out", "expert_act" if per == "routed" else "mlp_act", f, split=split,
          per=per, flops=4 * f),
    ]


def moe(m: ModelSpec) -> list[A]:
    x, h, e, k = m.moe, m.hidden, m.moe.n_experts, m.moe.top_k
    out = [
        # RouterGatingLinearFunction keeps its input (moe_utils.py:1186), the pre-MLP norm's
        # output, which the shared experts' fc1 reads too
        A("moe.in", "norm_out", h, flops=4 * h),
        # topk_routing_with_score_function (moe_utils.py:713-714, 741): torch.topk keeps the
        # indices (the scatter building routing_probs keeps the same tensor), softmax over the
        # top-k in fp32 keeps its output
        A("moe.topk_idx", "router", k, "int64", flops=2 * h * e),
        A("moe.topk_probs", "router", k, "fp32", flops=4 * k),
        # compute_routing_scores_for_aux_loss (moe_utils.py:781): softmax(logits, fp32) over all
        # E for the switch loss (router.py _apply_aux_loss); its own top-k's indices die with
        # their unused values
        A("moe.aux_scores", "router", e, "fp32", flops=2 * h * e + 4 * e),
        # permute (moe_utils.py:363-370): masked_select keeps the expert-major routing map and
        # its input probs.T.contiguous(); index_select keeps the token order (T·K indices)
        A("moe.routing_map", "router", e, "bool"),
        A("moe.dispatch_probs", "router", e, flops=4 * k),
        A("moe.sorted_idx", "router", k, "int64"),
        A("experts.in", "expert_in", h, split="none", per="routed"),
        # WeightedSwiGLUFunction (fusions/fused_bias_swiglu.py:196) keeps the row's probability
        A("experts.probs", "router", 1, split="none", per="routed"),
    ]
    out += mlp(m, x.expert_ffn, "experts", split="etp", per="routed")
    if x.n_shared:
        out += mlp(m, x.n_shared * x.shared_ffn_size, "shared")
    return out


def dropout(m: ModelSpec, t: TrainSpec, name: str) -> list[A]:
    """--hidden-dropout > 0: the residual branch's bias-dropout-add keeps its bool mask, h per
    token, split like the hidden state under SP (fusions/fused_bias_dropout.py
    `_bias_dropout_add_func`, F.dropout → CUDA native_dropout's bool mask; the embedding's
    `embedding_dropout` after the SP scatter, models/common/embeddings/language_model_embedding.py).
    Attention dropout runs inside the flash / cuDNN kernel: no mask."""
    if not t.hidden_dropout_pct:
        return []
    return [A(f"{name}.dropout_mask", "dropout", m.hidden, "bool")]


class MegatronProfile:
    name = "megatron"
    selective = SELECTIVE

    def layer(self, m: ModelSpec, kind: str, t: TrainSpec, p: ParallelSpec) -> tuple[A, ...]:
        ffn = moe(m) if kind == "moe" else [A("mlp.in", "norm_out", m.hidden, flops=4 * m.hidden)] + mlp(
            m, m.ffn_hidden, "mlp")
        return tuple(norm(m, "norm1") + attention(m) + dropout(m, t, "attn") + norm(m, "norm2") + ffn
                     + dropout(m, t, "mlp"))

    def first_stage(self, m, t, p) -> tuple[A, ...]:
        if not m.vocab:
            return ()
        return (A("embedding.ids", "embedding", 1, "int64", split="none"), *dropout(m, t, "embedding"))

    def last_stage(self, m, t, p) -> tuple[A, ...]:
        if not m.vocab:
            return ()
        return tuple(norm(m, "final_norm")) + (
            A("head.input", "norm_out", m.hidden, flops=4 * m.hidden),
            A("loss.softmax", "logits", _vocab(m, t, p), "fp32", split="tp",
              flops=2 * m.hidden * _vocab(m, t, p)),
        )

    def layer_input(self, m, t, p) -> A:
        return A("layer.input", "layer_input", m.hidden)

    def transients(self, m, t, p) -> tuple[A, ...]:
        if not m.vocab:
            return ()
        return (A("logits.grad", "logits", _vocab(m, t, p), split="tp"),)


def local_extras(m: ModelSpec) -> list[A]:
    """What Megatron-Core's local (non-Transformer-Engine) layer spec keeps beyond TE's, per
    layer (measured to the byte: docs/megatron-validation.md): the unfused RoPE's cos and sin,
    computed and saved once for q and once for k (`rope_utils.py` `_apply_rotary_pos_emb_bshd`:
    four (tokens, rotary dim) tensors in the activation dtype, not split by tp), and V taken as a
    view of the fused QKV projection (`attention.py` `get_query_key_value_tensors`), which keeps
    the whole projection alive: its q and k parts beside the rotated q and k attention saves.
    Learned positions: no RoPE. MLA: not measured, none added."""
    if m.mla is not None:
        return []
    a, g, dh = m.n_heads, m.n_kv_heads, m.head_dim
    rope = [] if m.pos_embeddings else [A("attn.rope_cos_sin (unfused, q and k)", "rope", 4 * dh,
                                          split="none")]
    return rope + [A("attn.qkv_proj (kept by V's view)", "qkv", (a + g) * dh, split="tp")]


class MegatronLocalProfile(MegatronProfile):
    """Megatron-Core with its local layer spec (`--transformer-impl local`): the megatron
    profile plus `local_extras` in every layer."""

    name = "megatron-local"

    def layer(self, m: ModelSpec, kind: str, t: TrainSpec, p: ParallelSpec) -> tuple[A, ...]:
        return super().layer(m, kind, t, p) + tuple(local_extras(m))


def _vocab(m: ModelSpec, t: TrainSpec, p: ParallelSpec) -> int:
    from memledger.model.params import padded_vocab
    return padded_vocab(m, p.tp, t.pad_multiple())
