"""torchtitan's chunked loss under FSDP2: what its last chunk's backward holds above the
forward's tensors (one runtime transient of the loss backward, on the rank holding the head).

torchtitan 0.3 `ChunkedLossWrapper` (components/loss.py) runs the head and the loss chunk by
chunk *inside* the loss call: the final hidden states are split into `num_chunks` (8) chunks
along the sequence; for each, `logits = lm_head(chunk)`, the chunk's cross-entropy and
`chunk_loss.backward()`; each chunk's input gradient is copied into a `GradAccumulator`, an fp32
buffer the size of the hidden states (`torch.zeros_like(local, dtype=torch.float32)`), later
handed to the decoder's backward. The head's FSDP unit stays unsharded over the chunks
(`set_reshard_after_forward(False)`) and syncs its gradient only at the last chunk
(`set_requires_gradient_sync(False)` before it). FSDP2 under MixedPrecisionPolicy(bf16, fp32)
(torch 2.13 fsdp/_fully_shard/_fsdp_param.py `to_accumulated_grad_if_needed`,
`accumulate_unsharded_grad_if_needed`; _fsdp_collectives.py `foreach_reduce`) therefore holds,
at the last chunk's post-backward:

  head gradient, unsharded, accumulated in reduce_dtype   V_l · h × fp32
  its reduce-scatter input (dim 0 padded to z chunks)     ⌈V_l/z⌉·z · h × fp32
  its reduce-scatter output (this rank's shard)           ⌈V_l/z⌉ · h × fp32
  the GradAccumulator buffer                              T · h × fp32
  the chunk's logits (the loop's `logits` name keeps them
  alive through chunk_loss.backward())                    ⌈T/8⌉ · V_l × bf16

The chunk's cross-entropy backward runs before the head's post-backward, with the head
gradient accumulated over the earlier chunks already alive; the set is the larger of it and the
reduce-scatter's two buffers. With tp > 1 it is `_LossParallelCrossEntropy`'s (components/loss.py):
the saved fp32 log-probs, `zeros_like` grad_input, `exp(log_probs)` and their sum (then the
product), 4 × ⌈T/8⌉·V_l × fp32; with tp = 1 `F.cross_entropy` on the fp32 upcast logits: the
saved `_log_softmax` output, `nll_loss_backward`'s gradient and `_log_softmax_backward_data`'s,
3 × ⌈T/8⌉·V × fp32 (torch tools/autograd/derivatives.yaml `_log_softmax`, `nll_loss_forward`).
The wrapper's chunks of the final hidden states are `.contiguous()` slices along the sequence:
with b > 1 they are copies, T · h × bf16 alive through the loop (`_chunk_local`).

V_l = vocab / tp (ColwiseParallel head), h = hidden, T = b·s/cp tokens (the norm's output is
replicated over tp before chunking), z = dp·cp (the FSDP shard group). The head's unsharded
bf16 weight is the "root unit unsharded" communication item; no layer unit is gathered at the
loss, so the timeline adds this set net of the layer-unit buffers (runtime.fsdp_discounted).
Measured: `memledger validate --engine torchtitan` (validation/engine-torchtitan.json), the
peak of every op-SAC case lies here.
Ignores: loss="chunked" outside torchtitan-as-it-runs (Liger's fused linear cross-entropy keeps
its own chunk buffers), the head without FSDP2 (its gradient is the gradient row's), reduce_dtype
equal to the parameters' (no fp32 accumulator: not a torchtitan default).
"""
from __future__ import annotations

from memledger.ledger.activations.inventory import tokens_on_rank
from memledger.ledger.fsdp2 import fsdp2, torchtitan_runs
from memledger.ledger.items import Item
from memledger.ledger.static.sharding import dense_group_label
from memledger.model.params import padded_vocab
from memledger.specs.loop import CHUNKED_LOSS_CHUNKS
from memledger.units import ceil_div, format_bytes

NUM_CHUNKS = CHUNKED_LOSS_CHUNKS
NAME = "chunked loss: head gradient reduce-scatter (last chunk)"
SRC = ("torchtitan 0.3 components/loss.py (ChunkedLossWrapper, GradAccumulator); torch 2.13 "
       "fsdp/_fully_shard/_fsdp_param.py (to_accumulated_grad_if_needed), "
       "_fsdp_collectives.py (foreach_reduce)")


def chunked_loss_transient(m, p, t, rt, loop, last: int) -> Item | None:
    """The loss-backward transient of torchtitan's ChunkedLossWrapper on the head's rank."""
    if not (last and m.vocab and loop.loss == "chunked" and torchtitan_runs(t, loop)
            and fsdp2(p, rt) and t.recipe.reduce_fmt):
        return None
    h, z, tokens = m.hidden, p.dense_dp, tokens_on_rank(t, p)
    v = ceil_div(padded_vocab(m, p.tp, t.pad_multiple()), p.tp)
    red, act = t.recipe.reduce_fmt, t.recipe.param_fmt
    rows, chunk = ceil_div(v, z), ceil_div(tokens, NUM_CHUNKS)
    parts = (format_bytes(red, v * h), format_bytes(red, rows * z * h),
             format_bytes(red, rows * h), format_bytes("fp32", tokens * h),
             format_bytes(act, chunk * v))
    copies = format_bytes(act, tokens * h) if t.micro_batch > 1 else 0  # contiguous() chunks
    n_ce = 4 if p.tp > 1 else 3  # _LossParallelCrossEntropy / F.cross_entropy backward
    ce, rs = n_ce * format_bytes("fp32", chunk * v), parts[1] + parts[2]
    return Item("runtime", NAME, parts[0] + parts[3] + parts[4] + copies + max(rs, ce),
                f"V_l·h × {red} accumulated head gradient {parts[0]} + GradAccumulator T·h × "
                f"fp32 {parts[3]} + one chunk's logits ⌈T/{NUM_CHUNKS}⌉·V_l × {act} {parts[4]} + "
                + (f"the hidden states' chunk copies T·h × {act} {copies} (b > 1) + " if copies
                   else "")
                + f"the larger of the reduce-scatter input ⌈V_l/z⌉·z·h × {red} + output ({rs}) "
                f"and the {'loss-parallel ' if p.tp > 1 else ''}cross-entropy backward {n_ce} × "
                f"⌈T/{NUM_CHUNKS}⌉·V_l × fp32 ({ce}); V_l = {v}, h = {h}, T = {tokens} (b·s/cp), "
                f"z = {z} ({dense_group_label(p)})", SRC + "; derivatives.yaml (_log_softmax)")
