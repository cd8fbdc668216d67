"""torchtitan's activation checkpointing as rules: which tensors a transformer block keeps.

Modes (TrainSpec.recompute; torchtitan/distributed/activation_checkpoint.py, torchtitan 0.3):
  op             SelectiveAC: a per-operator policy inside each block's checkpoint. An op's output
                 is saved when the op is in the save list (OP_SAVE_RULES), except every second
                 mm of the block (`meta["forward_mm_count"] % 2 == 0` → PREFER_RECOMPUTE) and
                 mms whose weight shape matches `force_recompute_mm_shapes_by_fqns` (default
                 "moe.router.gate": the router, not counted). Everything else is recomputed.
                 Plus the block's input (what the checkpoint itself keeps).
  interval       torchtitan 0.2 selective_ac_option="<k>": every k-th block (a per-process
                 counter, `_count % k == 0`) is fully checkpointed, the others keep everything.
  memory-budget  MemoryBudgetAC: torch.compile's partitioner at activation_memory_budget = b;
                 modelled as its definition: kept = full-checkpoint bytes + b × (the compiled
                 default saved set − full-checkpoint bytes), per layer.
torch.compile (RuntimeSpec.torch_compile) without AC: the min-cut partitioner recomputes fused
pointwise outputs rather than saving them — COMPILE_RECOMPUTES (the norm outputs, SwiGLU's
activation); the matmul outputs and attention outputs stay.
CP (0.3, FlexAttention; `cp_gathered`): each attention all-gathers K and V over the cp ranks
(distributed/context_parallel/api.py apply_cp_to_forward: `flex_cp_allgather`) and attends to
the whole sequence, so a block that keeps its tensors keeps the gathered K, V (cp × the local
ones), and its RoPE reads the cache at CP's load-balanced `positions` (models/common/rope.py
`_reshape_cache`: an indexed copy, T × head_dim × 4 B, per layer) where without CP it slices.
RMSNorm (every mode, `fused_rms_norm`): torchtitan's norms are nn.RMSNorm, whose
`torch.rms_norm` runs the fused `aten::_fused_rms_norm` CUDA kernel when the input and weight
dtypes match (bf16 under FSDP2's param_dtype): its autograd node keeps the input itself and the
fp32 rstd — no fp32 copy of the input, no normalised product (the hf profile's RMSNorm).
The mm sequences follow the modules' forward order (torchtitan/models/common/attention.py,
feed_forward.py, moe.py: routed experts, then shared experts; MLA wq_a, wq_b, wkv_a, wkv_b, wo).
Ignores: the D2H token-count copies the policy also saves (a few bytes), DeepEP's dispatch ops
(saved like all_to_all when installed), float8's aten.max outputs (scalars per tensor).
"""
from __future__ import annotations

from functools import lru_cache

from memledger.ledger.activations.inventory import ActTensor as A
from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec

SRC_AC = "torchtitan/distributed/activation_checkpoint.py (SelectiveAC._get_custom_policy)"
# op -> (saved by the op policy?, source); what the block's ops are, in this table's terms
OP_SAVE_RULES = {
    "aten.mm": (True, "torch/_functorch/partitioners.py get_default_op_list: compute_intensive_ops"
                      " — every second one recomputed (forward_mm_count % 2 == 0)"),
    "aten._scaled_dot_product_flash_attention": (True, "compute_intensive_ops (output + logsumexp)"),
    "aten.topk": (True, "_get_default_save_ops compute_ops: MoE expert assignment kept stable"),
    "_c10d_functional.reduce_scatter_tensor": (True, "_get_default_save_ops comm_ops"),
    "_c10d_functional.all_to_all_single": (True, "_get_default_save_ops comm_ops (EP dispatch, "
                                                 "combine)"),
    "_c10d_functional.all_gather_into_tensor": (False, "not in the save list: re-gathered"),
    "torch._grouped_mm": (False, "not in compute_intensive_ops: routed experts recomputed"),
    "router gate mm": (False, "force_recompute_mm_shapes_by_fqns=['moe.router.gate']"),
    "pointwise / norms / rope": (False, "not in the save list: PREFER_RECOMPUTE"),
}
COMPILE_RECOMPUTES = frozenset({"norm_out", "mlp_act", "expert_act"})
SRC_COMPILE = ("torch/_functorch/partitioners.py min_cut_rematerialization_partition: fusible "
               "pointwise ops are recomputed in backward, not saved")


def _mlp_mms(m: ModelSpec, f: int, prefix: str) -> list[A]:
    """w1, w3, w2 of torchtitan's FeedForward: w2(silu(w1(x)) * w3(x))."""
    h = m.hidden
    out = [A(f"{prefix}.w1_out", "mlp_fc1", f, split="tp", flops=2 * h * f)]
    if m.mlp == "swiglu":
        out.append(A(f"{prefix}.w3_out", "mlp_fc1", f, split="tp", flops=2 * h * f))
    # RowwiseParallel: the mm's output is the Partial sum, every token, full h
    out.append(A(f"{prefix}.w2_out", "mlp_out", h, split="none", flops=2 * f * h))
    return out


def _attention_mms(m: ModelSpec, fused_qkv: bool) -> list[A]:
    h = m.hidden
    if m.mla is None:
        a, g = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
        if fused_qkv:  # torchtitan 0.3: one wqkv Linear (attention.py FusedQKVAttention)
            return [A("attn.wqkv_out", "qkv", a + 2 * g, split="tp", flops=2 * h * (a + 2 * g)),
                    A("attn.wo_out", "attn_proj", h, split="none", flops=2 * a * h)]
        return [A("attn.wq_out", "qkv", a, split="tp", flops=2 * h * a),
                A("attn.wk_out", "qkv", g, split="tp", flops=2 * h * g),
                A("attn.wv_out", "qkv", g, split="tp", flops=2 * h * g),
                A("attn.wo_out", "attn_proj", h, split="none", flops=2 * a * h)]
    x, a = m.mla, m.n_heads
    kv_in = x.kv_lora_rank + x.qk_rope_dim
    out = []
    if x.q_lora_rank:
        out += [A("attn.wq_a_out", "mla_down", x.q_lora_rank, split="none",
                  flops=2 * h * x.q_lora_rank),
                A("attn.wq_b_out", "mla_up", a * x.qk_dim, split="tp",
                  flops=2 * x.q_lora_rank * a * x.qk_dim)]
    else:
        out.append(A("attn.wq_out", "mla_up", a * x.qk_dim, split="tp", flops=2 * h * a * x.qk_dim))
    out += [A("attn.wkv_a_out", "mla_down", kv_in, split="none", flops=2 * h * kv_in),
            A("attn.wkv_b_out", "mla_up", a * (x.qk_nope_dim + x.v_dim), split="tp",
              flops=2 * x.kv_lora_rank * a * (x.qk_nope_dim + x.v_dim)),
            A("attn.wo_out", "attn_proj", h, split="none", flops=2 * a * x.v_dim * h)]
    return out


def mm_sequence(m: ModelSpec, kind: str, fused_qkv: bool = True) -> list[A]:
    """The block's counted mms in forward order (the router's gate is force-recomputed and not
    counted; grouped expert GEMMs are not mms). `fused_qkv`: torchtitan 0.3's wqkv (0.2: wq,
    wk, wv; MLA models have no fused projection)."""
    out = _attention_mms(m, fused_qkv)
    if kind == "moe":
        x = m.moe
        if x.n_shared:
            out += _mlp_mms(m, x.n_shared * x.shared_ffn_size, "shared")
    else:
        out += _mlp_mms(m, m.ffn_hidden, "mlp")
    return out


def moe_stays_sequence_sharded(m: ModelSpec, kind: str, p: ParallelSpec) -> bool:
    """With EP, torchtitan's MoE reuses the TP axis to split tokens: its input and output stay
    sequence-sharded, so a MoE block without shared experts has no FFN reduce-scatter (shared
    experts still gather their input and reduce-scatter their Partial output). torchtitan 0.3
    models/common/moe_sharding.py `_moe_sharding_config`, `_shared_experts_sharding_configs`."""
    return kind == "moe" and p.ep > 1 and not m.moe.n_shared


@lru_cache(maxsize=4096)
def op_saved(m: ModelSpec, kind: str, p: ParallelSpec, fused_qkv: bool = True) -> tuple[A, ...]:
    """Every tensor one block keeps under torchtitan's op-level SAC (per token / routed row)."""
    h = m.hidden
    saved = [A("block.input", "layer_input", h)]  # the checkpoint's own input
    saved += [x for i, x in enumerate(mm_sequence(m, kind, fused_qkv), start=1) if i % 2 == 1]
    v_dim = m.mla.v_dim if m.mla is not None else m.head_dim
    saved += [A("attn.sdpa_out", "attn_out", m.n_heads * v_dim, split="tp"),
              A("attn.sdpa_lse", "attn_core", m.n_heads, "fp32", split="tp")]
    if p.tp > 1 and p.sp:  # RowwiseParallel's reduce-scatter after wo and after the FFN
        saved.append(A("attn.reduce_scatter", "attn_proj", h))
        if not moe_stays_sequence_sharded(m, kind, p):
            saved.append(A("ffn.reduce_scatter", "mlp_out", h))
    if kind == "moe":
        k = m.moe.top_k
        saved += [A("moe.topk_values", "router", k, "fp32"), A("moe.topk_ids", "router", k, "int64")]
        if p.ep > 1:
            saved += [A("experts.dispatch_a2a", "expert_in", h, split="none", per="routed"),
                      A("experts.combine_a2a", "expert_out", h, split="none", per="routed")]
    return tuple(saved)


def interval_checkpointed(n_layers_in_order: list[int], k: int, start: int = 0) -> list[bool]:
    """Which blocks, in the order the rank wraps them, torchtitan 0.2 checkpoints with
    selective_ac_option=str(k): its counter `_count` is 1-based and global to the process."""
    return [(start + j + 1) % k == 0 for j in range(len(n_layers_in_order))]


SRC_FUSED_NORM = ("torch 2.13 aten/src/ATen/native/layer_norm.cpp rms_norm_symint → "
                  "_fused_rms_norm (CUDA kernel); tools/autograd/derivatives.yaml _fused_rms_norm: "
                  "backward reads input, weight, result1 (rstd)")


def fused_rms_norm(tensors: tuple[A, ...]) -> tuple[A, ...]:
    """A profile's RMSNorm entries as the fused kernel keeps them: `<norm>.x_fp32` becomes the
    input itself (`<norm>.x`, in the activation format), `<norm>.normed` is not kept, the rstd
    stays; the norm's output is kept by its readers as before."""
    out = []
    for x in tensors:
        base, _, what = x.name.rpartition(".")
        if x.cls == "norm_in" and what == "x_fp32":
            out.append(A(f"{base}.x", x.cls, x.values, "act", split=x.split, per=x.per,
                         flops=x.flops))
        elif not (x.cls == "norm_in" and what == "normed"):
            out.append(x)
    return tuple(out)


def cp_gathered(tensors: tuple[A, ...], m: ModelSpec, cp: int) -> tuple[A, ...]:
    """A block's kept tensors under 0.3's CP (module docstring): K, V all-gathered, and the
    RoPE cache indexed at the CP positions."""
    if cp == 1:
        return tensors
    out = [A(x.name, x.cls, x.values * cp, x.fmt, split=x.split, per=x.per, flops=x.flops)
           if x.name in ("attn.k", "attn.v") else x for x in tensors]
    if not m.pos_embeddings:  # RoPE over the head dim (MLA: its rope part)
        dim = m.mla.qk_rope_dim if m.mla is not None else m.head_dim
        out.append(A("attn.rope_cache", "rope", dim, "fp32", split="none"))
    return tuple(out)
