"""torchtitan's MoE combine, as its backward allocates it (loop torchtitan, MoE layers).

torchtitan scores the routed rows in fp32 after the combine all-to-all:
`(routed_output.to(float32) * topk_scores.reshape(-1, 1)).to(dtype)`, then scatter-adds them
into the tokens (torchtitan 0.3 `models/common/token_dispatcher.py` `combine`; the scatter
keeps only its index, `ops/scatter_add.py`). Multiplication keeps its fp32 operand for the
scores' gradient, and its backward holds four fp32 (T·K, h) tensors at once: that operand,
the upcast incoming gradient (`ToCopyBackward` of the bf16 cast), the rows' gradient
(grad × scores) and the product grad × operand the scores' gradient reduces (torch
`tools/autograd/derivatives.yaml` mul.Tensor, `mul_tensor_backward` for both inputs).

This happens first in the MoE layer's backward, before any of the layer's weight gradients
exist, after the recompute's all-to-all outputs are consumed. The timeline's layer-backward
event holds the unit's unsharded gradient and reduce-scatter input and both all-to-all buffers
(the end of the layer's backward), and the hf profile's MoE inventory holds the bf16 expert
output where torchtitan keeps the fp32 operand: the item is the four tensors net of those
(`freed`, passed in by the caller that built the communication row). Under every AC mode (op
SAC recomputes the `_to_copy`, which is not on its save list). T·K rows = the rank's tokens ×
top-k (balanced routing: what the all-to-all returns). Ignores the bf16 gradient of the scatter
(freed before the multiplication's backward runs).
"""
from __future__ import annotations

from dataclasses import replace

from memledger.ledger.items import Item
from memledger.ledger.activations.inventory import ActTensor as A
from memledger.ledger.activations.inventory import tokens_on_rank
from memledger.units import ceil_div

SRC = ("torchtitan 0.3 models/common/token_dispatcher.py AllToAllTokenDispatcher.combine "
       "(fp32 score product); torch derivatives.yaml mul.Tensor; measured: validate --engine "
       "torchtitan, qwen3-30b-a3b fsdp64 ep8 full-ac")
FP32_TENSORS = 4
ROUTER_FP32 = "moe.router_in_fp32"  # the hf profile's name for the router's fp32 input copy


def titan_moe_tensors(tensors: tuple, shared: bool) -> tuple:
    """A MoE layer's inventory as torchtitan keeps it (held under no AC; under full and op AC
    what the backward re-creates):
      - the combine's fp32 operand of the score product in place of the bf16 expert output
        (measured: Qwen3-30B-A3B tp 2 ep 8 without AC, activations −16.5 % with the bf16
        output, +0.1 % with the operand);
      - the router gate's fp32 copy of its input: the gate runs under
        `torch.autocast(dtype=float32)` (models/common/moe.py TokenChoiceTopKRouter), which on
        CUDA casts the bf16 input and keeps the copy; the bf16 input itself is kept only where
        shared experts read it too (DeepSeek-V3), not by the router (Qwen3).
    Ignores the gate weight's fp32 cast the backward keeps too (E·h × 4 B a layer)."""
    out = [replace(x, fmt="fp32") if x.name == "experts.out" else x for x in tensors]
    if any(x.name == ROUTER_FP32 for x in out):
        return tuple(out)
    norm_out = next((x for x in out if x.name == "moe.in"), None)
    if norm_out is None:
        return tuple(out)
    fp32 = A(ROUTER_FP32, "router", norm_out.values, "fp32", split=norm_out.split,
             flops=norm_out.values)
    return tuple(out if shared else [x for x in out if x is not norm_out]) + (fp32,)


def combine_rows(m, t, p) -> int:
    """Rows the combine scores on this rank: its tokens (÷ tp under SP) × top-k."""
    return ceil_div(tokens_on_rank(t, p), p.tp if p.sp else 1) * m.moe.top_k


def combine_backward_bytes(m, t, p) -> int:
    return FP32_TENSORS * 4 * combine_rows(m, t, p) * m.hidden


def combine_backward_item(m, t, p, hf_out_bytes: int, freed: int) -> Item:
    """`hf_out_bytes`: the MoE inventory's expert output (inside the recompute set the item
    rides on); `freed`: the layer event's buffers not alive yet or any more at this moment."""
    rows = combine_rows(m, t, p)
    net = max(0, combine_backward_bytes(m, t, p) - hf_out_bytes - freed)
    return Item("runtime", "layer backward working set: MoE combine (torchtitan)", net,
                f"{FP32_TENSORS} fp32 tensors × {rows} rows (T·K) × h {m.hidden} − the hf "
                f"inventory's bf16 expert output ({hf_out_bytes}) − the unit's unsharded "
                f"gradient, reduce-scatter input and all-to-all buffers ({freed}), which the "
                f"layer's backward holds only later", SRC)
