"""Class of a saved tensor from the module that saved it, its shape, dtype and producer.

The classes are the activation-policy classes of memledger.ledger.activations (so a traced inventory
can be recomputed/quantized/offloaded by class): norm_in (a norm's own saves), norm_out (the
input of a projection that follows a norm), qkv, attn_core (scores, probabilities, log-sum-exp,
rng state), attn_out (o_proj input), mlp_fc1 / mlp_act, router, expert_in / expert_fc1 /
expert_act / expert_out / expert_idx, embedding, logits, loss, other. Rules read Hugging Face,
GPT-2 and Megatron-style module names; a tensor a rule cannot place is "other". Heuristic by
nature: the totals never depend on it.
"""
from __future__ import annotations

_NORM = ("norm", "ln_", "ln1", "ln2", "ln_f")
_ATTN_IN = {"q_proj", "k_proj", "v_proj", "qkv_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa",
            "kv_b_proj", "query_key_value", "c_attn", "wqkv", "wq", "wk", "wv", "query", "key", "value"}
_ATTN_OUT = {"o_proj", "out_proj", "wo", "dense"}
_MLP_IN = {"gate_proj", "up_proj", "gate_up_proj", "fc1", "w1", "w3", "c_fc", "dense_h_to_4h"}
_MLP_OUT = {"down_proj", "fc2", "w2", "dense_4h_to_h"}
_HEAD = {"lm_head", "output", "embed_out"}
_INT = ("int", "uint", "bool", "long")
_ACT_FN = ("Silu", "Gelu", "Relu", "Sigmoid", "Tanh")


def _leaf(module: str) -> str:
    return module.rsplit(".", 1)[-1].lower()


def classify(module: str, kind: str, shape: tuple[int, ...], dtype: str, producer: str) -> str:
    """`module` is the qualified name ("" = root), `kind` its class name."""
    leaf, path, k = _leaf(module), module.lower(), kind.lower()
    integer = dtype.startswith(_INT)
    if "embed" in leaf or k.endswith("embedding"):
        return "embedding"
    if any(leaf.startswith(n) or n in leaf for n in _NORM) or k.endswith("norm"):
        return "norm_in"
    if leaf in _HEAD:
        return "norm_out"
    in_experts = "experts" in path and "shared" not in path
    if in_experts:
        return _expert(leaf, shape, integer, producer)
    if leaf in ("gate", "router") or "router" in k or "gate" in k and "moe" in k:
        return "router"
    if leaf in _ATTN_IN or leaf in _MLP_IN:
        return "norm_out"
    if leaf in _ATTN_OUT or (leaf == "c_proj" and "attn" in path):
        return "attn_out"
    if leaf in _MLP_OUT or leaf == "c_proj":
        return "mlp_act"
    if "attention" in k or leaf in ("self_attn", "attn", "attention"):
        return _attention(shape, dtype, integer, producer)
    if leaf in ("act_fn", "act", "activation") or "activation" in k:
        return "mlp_fc1"
    if "mlp" in k or "mlp" in leaf or "feedforward" in k:
        return "mlp_act" if producer.startswith(_ACT_FN) else "mlp_fc1"
    if module == "":
        if producer.startswith(("LogSoftmax", "Softmax")):
            return "logits"
        return "loss"
    return "other"


def _attention(shape, dtype, integer, producer) -> str:
    if integer or producer.startswith(("Softmax", "SafeSoftmax")):
        return "attn_core"  # rng seed/offset, probabilities
    if dtype == "float32" and not producer and (len(shape) == 3 or (shape and shape[-1] == 1)):
        return "attn_core"  # log-sum-exp: (b, a, s) or (b, a, s, 1)
    if producer.startswith("ScaledDotProduct"):
        return "attn_out"  # the fused kernel's output, also o_proj's input
    if len(shape) >= 2 and shape[-1] == shape[-2] and dtype != "float32":
        return "attn_core"  # s x s probabilities in the activation format (eager)
    return "qkv"


def _expert(leaf, shape, integer, producer) -> str:
    if integer:
        return "expert_idx"
    if leaf in ("act_fn", "act") or producer.startswith("Split"):
        return "expert_fc1"
    if shape and shape[-1] == 1:
        return "router"  # per-row routing weight
    if producer.startswith(_ACT_FN) or producer.startswith("Mul"):
        return "expert_act"
    if producer.startswith(("GroupedMm", "Mm", "ToCopy")):
        return "expert_out"
    return "expert_in"
