"""torchtitan releases as rules: what differs between the eras whose published runs memledger is
checked against (validation/published-torchtitan.json), and float8's effect on FSDP2's buffers.

Each era (RuntimeSpec.torchtitan_version) is one row of ERAS, every field with the file it comes
from at that commit:
  fused_qkv        op SAC's mm sequence: one wqkv mm (0.3) or wq, wk, wv (older)
  compiles_loss    whether `training.compile` / `compile.enable` also compiles the loss function
  root_unit        FSDP2 units are the blocks and the root model only (tok_embeddings, norm and
                   output in the root unit, which torch's 2024 `_lazy_init` never reshards
                   after forward), and the "default" policy keeps the last block unsharded
                   from its forward to its backward (ledger.fsdp2.torchtitan_units,
                   last_block_kept); later eras wrap tok_embeddings and [norm, output] apart
  rope_per_layer   0.3 builds a RoPE module, with its own cache buffer, in every attention layer
                   (models/common/rope.py); older eras keep one freqs_cis per model
  cuda_graphs      0.3 runs each step's forward + backward under a CUDA graph unless
                   `training.disable_cuda_graphs` (trainer.py): gradients zeroed, not freed
                   (ledger.titan_graphs); older eras have no such step
  cp_gathered_kv   0.3's CP all-gathers K and V in each FlexAttention (distributed/
                   context_parallel/api.py `flex_cp_allgather`): a block that keeps its tensors
                   keeps them gathered (activations.torchtitan_ac.cp_gathered); older eras ran
                   torch's ring attention (`context_parallel`), not measured here
Eager loss parallel (tp > 1) keeps the vocab-parallel log-softmax's fp32 working set in every
era: torch's DTensor `loss_parallel()` ops (torch/distributed/tensor/parallel/loss.py) before
0.3, 0.3's own `_LossParallelCrossEntropy` (components/loss.py: the same fp32 upcast, shifted,
exp and saved log-probabilities forward; zeros, exp and their sum backward).
The loss form a rank runs (`loss_form`): "compiled" (inductor fuses cross-entropy), "dtensor"
(torch's eager vocab-parallel log_softmax / nll_loss), or "profile" (the activation profile's own
materialised loss: transformers-style fused log_softmax, which eager torchtitan without TP runs).
Float8 (torchao Float8Linear, torchtitan `model.converters = ["float8"]`): under any AC the
matmul outputs stay bf16 and the saved set does not change (the SAC policy sees `aten.mm` on the
Float8 subclass: TorchDispatchMode runs before the subclass's dispatch, so the mm count and the
save list apply as for bf16); only `enable_fsdp_float8_all_gather` changes memory here: the
layers' Linear weights are all-gathered as float8 (1 byte) — `float8_gather_params`.
Ignores: the per-tensor amax/scale scalars (aten.max outputs the op policy saves), 0.3's
ChunkedLossWrapper (memledger.ledger.activations chunked loss), float8 without AC (the fp8 casts
Float8Linear saves for backward in place of the bf16 input are not in any profile: a warning).
"""
from __future__ import annotations

from typing import NamedTuple

from memledger.specs.runtime import RuntimeSpec


class Era(NamedTuple):
    fused_qkv: bool
    compiles_loss: bool
    root_unit: bool
    rope_per_layer: bool  # every attention layer keeps its own RoPE cache (static/titan_buffers)
    cp_gathered_kv: bool  # CP keeps the all-gathered K, V (activations.torchtitan_ac.cp_gathered)
    cuda_graphs: bool  # the step under a CUDA graph by default (ledger.titan_graphs)
    source: str


ERAS = {
    "0.3": Era(True, False, False, True, True, True,
               "torchtitan 0.3 models/common/attention.py (wqkv); components/loss.py "
               "ChunkedLossWrapper / _LossParallelCrossEntropy (its own vocab-parallel CE: "
               "forward logits.float(), shifted, exp, log_probs saved; backward zeros_like, "
               "exp, their sum, × grad_output)"),
    "0.2": Era(False, True, False, False, False, False,
               "torchtitan 0.2 config/job_config.py Compile.components = ['model', 'loss']; "
               "components/loss.py build_cross_entropy_loss (torch.compile when 'loss' in "
               "components); distributed/utils.py get_train_context (loss_parallel())"),
    "2025-06": Era(False, True, False, False, False, False,
                   "torchtitan e7c0cae (2025-06-13) components/loss.py build_cross_entropy_loss: "
                   "`if job_config.training.compile: loss_fn = torch.compile(loss_fn)`; "
                   "distributed/utils.py get_train_context (loss_parallel())"),
    "2024-12": Era(False, False, True, False, False, False,
                   "torchtitan 9dec370 (2024-12-26) train.py: loss_fn left eager (its comment: "
                   "compiling the loss caused CUDA errors); "
                   "parallelisms/parallelize_llama.py apply_compile (per TransformerBlock only); "
                   "utils.get_train_context (loss_parallel()); parallelize_llama.py apply_fsdp "
                   "(read at 004b314 and 582fe7d, either side of 9dec370): fully_shard per "
                   "block with `reshard_after_forward = int(layer_id) < len(model.layers) - 1` "
                   "unless PP, then fully_shard(model); torch 2024 _composable/fsdp/"
                   "_fsdp_state.py _lazy_init: the root's post_forward_mesh_info = None"),
}


def era(rt: RuntimeSpec) -> Era:
    return ERAS[rt.torchtitan_version]


def loss_compiled(rt: RuntimeSpec) -> bool:
    """The loss function runs under torch.compile: `compile_loss` on, or auto and the era
    compiles it with the model."""
    if rt.compile_loss != "auto":
        return rt.compile_loss == "on"
    return rt.torch_compile and era(rt).compiles_loss


def loss_form(p, t, rt: RuntimeSpec, loop) -> str:
    """'compiled', 'dtensor' or 'profile' (see the module docstring); torchtitan loops only, and
    only for a materialised loss (a chunked loss keeps no logits: ledger.chunked_loss)."""
    if loop.name.split("+")[0] != "torchtitan" or loop.loss == "chunked":
        return "profile"
    if loss_compiled(rt):
        return "compiled"
    if p.tp > 1 and rt.loss_parallel and rt.tp_engine == "dtensor":  # Megatron-style TP: the
        return "dtensor"  # profile's loss on its vocab-parallel logits
    return "profile"


def float8_gather_params(rt: RuntimeSpec) -> bool:
    """FSDP2 all-gathers the layers' float8 Linear weights as float8 (torchao
    float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather: the sharded
    weight cast to e4m3 before the all-gather, one byte per element)."""
    return rt.float8 != "off" and rt.float8_fsdp_all_gather and rt.zero3_impl == "fsdp"


def float8_warnings(t, rt: RuntimeSpec) -> tuple[str, ...]:
    """float8 settings the ledger does not model, named."""
    out = []
    if rt.float8 != "off" and t.recompute == "none":
        out.append("float8 without activation checkpointing: Float8Linear saves float8 casts of "
                   "its input (and, without float8_force_recompute_weight, of its weight) for "
                   "backward in place of the bf16 input; the activation profile's bf16 inputs are "
                   "counted (torchao float8/float8_linear.py matmul_with_hp_or_float8_args)")
    if rt.float8 in ("rowwise", "rowwise_with_gw_hp"):
        out.append(f"float8 recipe {rt.float8}: rowwise scales (one per row) are not counted; "
                   "the bf16 all-gather stays (torchtitan float8: FSDP float8 all-gather is "
                   "tensorwise only)")
    return tuple(out)
