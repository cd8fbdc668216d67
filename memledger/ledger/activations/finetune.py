"""Fine-tuning on the activation inventory: what autograd keeps when weights are frozen.

PyTorch's generated autograd nodes save an input only when a gradient that needs it will be
computed (torch/csrc/autograd/generated: `if (grad_fn->should_compute_output(i))` around each
SavedVariable; derivatives.yaml mm: grad of mat2 needs self, grad of self needs mat2). So:
- a tensor a layer keeps only for the weight gradient of a frozen module is not kept
  (`KEPT_FOR`: the tensor -> the parameter pieces whose weight gradient is its only reader;
  e.g. the norm output that q/k/v's Linears keep, the normalised input RMSNorm's weight mul
  keeps, the MLP's down-projection input); tensors that the backward of an input gradient also
  reads (attention q, k, v, output, the activation function's input, the norms' fp32 input
  and rstd) stay, because gradients still flow to the adapters in earlier layers;
- each adapter (peft/tuners/lora/layer.py Linear.forward:
  `result + lora_B(lora_A(dropout(x))) * scaling` after `x = self._cast_input_dtype(x,
  lora_A.weight.dtype)`) keeps: with dropout, the bool mask (native_dropout) and the dropped
  input in the adapter dtype (lora_A's input); without dropout, lora_A's input = the input cast
  to the adapter dtype (a copy per adapter when the dtypes differ; the base input itself,
  shared, when they match); and lora_A's rank-r output in the adapter dtype (lora_B's input).
- a frozen embedding: layer 0's norm keeps nothing (`_NO_INPUT_GRAD`, hf profiles), and the
  layers before the first one with a trainable parameter keep nothing at all
  (`graphless_layers`: no graph there; activations/held.py and the timeline skip them).
- with dropout, the mask: bool on CUDA (native_dropout), the noise in the input dtype on the
  CPU (aten Dropout.cpp _dropout_impl).
Ignores: `enable_input_require_grads()` (HF Trainer with gradient checkpointing on a peft
model, peft's prepare_model_for_kbit_training), under which layer 0 keeps its pair after all
(4h + 4 bytes per token, once); layer 0's q/k/v adapters' dropout masks, not kept when the
embedding is frozen (n_qkv · h mask values per token, once), and its q/k norms (Qwen3) after
a projection without adapter (their input needs no gradient); a layer 0 whose first trained
op is not q/k/v (targets only o or the MLP: its attention keeps nothing either); frozen
layers after trained ones keep the inventory of a live layer (only input-gradient tensors in
PyTorch; docs/finetune.md, limits); the adapters' fp32 result (out values, forward transient).
"""
from __future__ import annotations

from functools import lru_cache

from memledger.ledger.activations.inventory import ActTensor
from memledger.ledger.static.finetune import live_pieces
from memledger.specs.model import ModelSpec
from memledger.specs.train import TrainSpec

_QKV = ("attn.q", "attn.kv:k", "attn.kv:v")
_HF = {
    "norm1.normed": ("norm.attn",), "norm2.normed": ("norm.mlp",),
    "final_norm.normed": ("final_norm",), "attn.q_norm.normed": ("attn.qk_norm", "attn.q_norm"),
    "attn.k_norm.normed": ("attn.qk_norm",), "attn.kv_norm.normed": ("attn.kv_norm",),
    "attn.qkv_in": _QKV, "attn.qkv_in.cast0": ("attn.q",), "attn.qkv_in.cast1": ("attn.kv:k",),
    "attn.qkv_in.cast2": ("attn.kv:v",),
    "attn.down_in": ("attn.q_down", "attn.kv_down"), "attn.down_in.cast0": ("attn.q_down",),
    "attn.down_in.cast1": ("attn.kv_down",), "attn.q_up_in": ("attn.q_up",),
    "attn.kv_up_in": ("attn.kv_up",), "attn.o_in": ("attn.o",),
    "mlp.in": ("mlp.fc1:gate", "mlp.fc1:up"), "mlp.in.cast0": ("mlp.fc1:gate",),
    "mlp.in.cast1": ("mlp.fc1:up",), "mlp.down_in": ("mlp.fc2",),
    "shared.in.cast0": ("shared.fc1:gate",), "shared.in.cast1": ("shared.fc1:up",),
    "shared.down_in": ("shared.fc2",), "moe.router_in": ("moe.router",),
    "moe.in": ("moe.router", "shared.fc1:gate", "shared.fc1:up"),
    "shared.gate_in": ("moe.shared_gate",),
    "experts.in": ("experts.fc1:gate", "experts.fc1:up"), "experts.down_in": ("experts.fc2",),
    "head.in": ("head",), "embedding.ids": ("embedding",),
}
_MEGATRON = {
    "attn.qkv_in": _QKV, "attn.down_in": ("attn.q_down", "attn.kv_down"),
    "attn.q_normed": ("attn.q_up",), "attn.kv_normed": ("attn.kv_up",),
    "mlp.in": ("mlp.fc1:gate", "mlp.fc1:up"), "mlp.act_out": ("mlp.fc2",),
    "moe.in": ("moe.router", "shared.fc1:gate", "shared.fc1:up"),
    "experts.in": ("experts.fc1:gate", "experts.fc1:up"), "experts.act_out": ("experts.fc2",),
    "shared.act_out": ("shared.fc2",), "head.input": ("head",),
    "embedding.ids": ("embedding",),
}
# Per profile: which tensors are kept only for some weights' gradients.
KEPT_FOR = {"hf": _HF, "hf-cpu": _HF, "megatron": _MEGATRON}
# The tensor an adapted piece reads (its input), per profile.
_INPUT = {
    "hf": {"attn.q": "attn.qkv_in", "attn.kv": "attn.qkv_in", "attn.o": "attn.out",
           "attn.q_down": "attn.down_in", "attn.kv_down": "attn.down_in",
           "attn.q_up": "attn.q_up_in", "attn.kv_up": "attn.kv_up_in", "mlp.fc1": "mlp.in",
           "mlp.fc2": "mlp.down_in", "shared.fc1": "moe.in", "shared.fc2": "shared.down_in",
           "experts.fc1": "experts.in", "experts.fc2": "experts.down_in"},
    "megatron": {"attn.q": "attn.qkv_in", "attn.kv": "attn.qkv_in", "attn.o": "attn.out",
                 "attn.q_down": "attn.down_in", "attn.kv_down": "attn.down_in",
                 "attn.q_up": "attn.q_normed", "attn.kv_up": "attn.kv_normed",
                 "mlp.fc1": "mlp.in", "mlp.fc2": "mlp.act_out", "shared.fc1": "moe.in",
                 "shared.fc2": "shared.act_out", "experts.fc1": "experts.in",
                 "experts.fc2": "experts.act_out"},
}
_INPUT["hf-cpu"] = _INPUT["hf"]


# A frozen embedding's output needs no gradient, so the first layer's RMSNorm keeps neither
# its fp32 input nor rstd (they serve only the input gradient). Every layer's inventory still
# lists its norm's pair; the final norm's pair (same size: h + 1 fp32 values per token) is
# dropped instead: the same total with one pipeline stage, layer 0's pair counted where the
# final norm's would be. With several stages (the rule does not depend on the layout, so the
# planner's per-layout tables stay exact) the first rank is over and the last rank under by
# one pair per micro-batch each holds. Under full / every-k recompute layer 0's pair is not in
# the kept inventory (its input is, as a checkpoint) while the final norm's still is: the last
# rank is then under by one pair per micro-batch (the rule does not depend on the recompute
# either, for the same reason).
_NO_INPUT_GRAD = {"hf": ("final_norm.x_fp32", "final_norm.rstd"),
                  "hf-cpu": ("final_norm.x_fp32", "final_norm.rstd")}


def embeddings_train(spec) -> bool:
    if spec.adapters:
        return spec.train_embeddings
    return spec.mode == "full" or "embeddings" not in spec.frozen_pieces


def applies(t: TrainSpec) -> bool:
    return not t.finetune.trains_everything and t.profile in KEPT_FOR


def _trains(keeper: str, trains: frozenset[str]) -> bool:
    return keeper in trains or keeper.split(":")[0] in trains


def _drop_frozen(tensors, table, trains) -> list[ActTensor]:
    out = []
    for x in tensors:
        keepers = table.get(x.name)
        if keepers is None or any(_trains(k, trains) for k in keepers):
            out.append(x)
    return out


def finetune_tensors(tensors: tuple[ActTensor, ...], m: ModelSpec, kind: str,
                     t: TrainSpec, outer: bool = False) -> tuple[ActTensor, ...]:
    """The inventory of a layer of `kind` (or, `outer`, the first/last stage's) under
    t.finetune; unchanged for full fine-tuning and for profiles without a table."""
    if not applies(t):
        return tensors
    spec, table = t.finetune, KEPT_FOR[t.profile]
    if outer:
        free = spec.mode == "freeze"  # embedding backward needs the ids for the weight only
        if kind == "last" and t.profile in _NO_INPUT_GRAD and not embeddings_train(spec):
            tensors = tuple(x for x in tensors if x.name not in _NO_INPUT_GRAD[t.profile])
        trains = frozenset(x for x, on in (
            ("head", spec.train_head or (free and "head" not in spec.frozen_pieces)),
            ("embedding", spec.train_embeddings or (free and "embeddings" not in spec.frozen_pieces)),
            ("final_norm", free and "norms" not in spec.frozen_pieces)) if on)
        return tuple(_drop_frozen(tensors, table, trains))
    trains, adapted = live_pieces(m, kind, spec)
    kept = _drop_frozen(tensors, table, trains)
    per_row = m.moe.n_experts if m.moe is not None else 1
    adapted = tuple((piece, d_in, n // per_row if expert else n, expert)
                    for piece, d_in, n, expert in adapted)
    return tuple(kept + _adapter_tensors(tensors, kept, adapted, t))


def _adapter_tensors(tensors, kept, adapted, t: TrainSpec) -> list[ActTensor]:
    spec, by_name = t.finetune, {x.name: x for x in tensors}
    kept_names = {x.name for x in kept}
    fmt = spec.lora_dtype
    same_dtype = fmt == t.recipe.act_fmt
    out: list[ActTensor] = []
    shared_inputs: set[str] = set()
    for piece, d_in, n, _expert in adapted:
        base = piece.split(":")[0]
        src = by_name.get(_INPUT[t.profile].get(base, ""))
        per = src.per if src is not None else "token"
        split = src.split if src is not None else "none"
        cls = src.cls if src is not None else "norm_out"
        tag = f"lora.{piece}"  # n adapted matrices of the piece (k and v of attn.kv), each its own
        if spec.lora_dropout_pct:  # CUDA native_dropout keeps a bool mask; the CPU kernel
            # (aten/src/ATen/native/Dropout.cpp _dropout_impl) a noise tensor in the input dtype
            mask = fmt if t.profile == "hf-cpu" else "bool"
            out += [ActTensor(f"{tag}.dropout_mask", cls, n * d_in, mask, split, per),
                    ActTensor(f"{tag}.dropout_out", cls, n * d_in, fmt, split, per)]
        elif not same_dtype:  # x.to(lora dtype): one copy per adapter
            out.append(ActTensor(f"{tag}.x_cast", cls, n * d_in, fmt, split, per))
        elif src is not None and src.name not in kept_names and src.name not in shared_inputs:
            shared_inputs.add(src.name)  # the base input itself, kept once for every adapter
            out.append(src)
        out.append(ActTensor(f"{tag}.rank_out", cls, n * spec.lora_rank, fmt, "none", per))
    return out


@lru_cache(maxsize=4096)
def graphless_layers(m: ModelSpec, t: TrainSpec) -> int:
    """Leading layers that keep nothing for backward: with a frozen embedding, no tensor
    requires grad before the first layer holding a trainable parameter, so autograd records no
    graph there (not even checkpoints: a checkpointed region without grad-requiring inputs or
    parameters saves nothing). 0 when the embedding trains or everything does."""
    spec = t.finetune
    if spec.trains_everything or embeddings_train(spec):
        return 0
    from memledger.model.params import layer_kind
    ranges = spec.frozen_ranges
    kinds = ("dense", "moe") if m.moe is not None else ("dense",)
    live = {k: any(live_pieces(m, k, spec)) for k in kinds}
    for i in range(m.n_layers):
        if not any(lo <= i <= hi for lo, hi in ranges) and live[layer_kind(m, i)]:
            return i
    return m.n_layers
