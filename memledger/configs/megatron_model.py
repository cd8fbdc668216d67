"""Megatron-LM model flags → a ModelSpec (when no Hugging Face config is given).

Defaults are Megatron's (megatron/training/arguments.py and
megatron/core/transformer/transformer_config.py): LayerNorm, GeLU, biases on every linear,
learned absolute positions, tied embeddings, kv heads = heads unless --group-query-attention,
ffn = 4·hidden (with --swiglu int(4·hidden·2/3 / 64)·64), moe_ffn = ffn. The MLA sizes have no
default here: a launch that turns MLA on must give them (memledger does not guess DeepSeek's).
The vocabulary is --vocab-size, else the Hub config of --tokenizer-model in memledger's offline
catalog, else GPT-2's 50,257 for --tokenizer-type GPT2BPETokenizer.
Ignores: RoPE settings, norm epsilons, dropout, the MoE router's scoring function.
`--moe-layer-freq` takes an integer or the `([0]*k+[1]*n)` / `[0,1,…]` list forms — parsed as
text, never evaluated.
"""
from __future__ import annotations

import json
import re

from memledger.configs.rules import as_bool, as_int
from memledger.specs.model import MLASpec, ModelSpec, MoESpec

SRC = "megatron/training/arguments.py"
_FREQ = re.compile(r"^\(?\s*(\[[01]\]\s*\*\s*\d+\s*(?:\+\s*\[[01]\]\s*\*\s*\d+\s*)*)\)?$")
GPT2_VOCAB = 50257  # GPT2BPETokenizer (megatron/training/tokenizer/gpt2_tokenization.py)
MODEL_KEYS = ("num_layers", "hidden_size", "num_attention_heads")


class ModelFlagError(ValueError):
    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


def _get(f: dict, key: str, conv=as_int, default=None, **kw):
    if key not in f:
        return default
    try:
        return conv(f[key], **kw)
    except ValueError as e:
        raise ModelFlagError(key, str(e)) from None


def moe_layer_pattern(v, n_layers: int) -> list[bool]:
    """--moe-layer-freq: every k-th layer MoE, or an explicit 0/1 pattern (1 = MoE)."""
    if isinstance(v, int) or (isinstance(v, str) and v.strip().isdigit()):
        k = as_int(v)
        return [i % k == 0 for i in range(n_layers)]
    text = str(v).strip()
    m = _FREQ.match(text)
    if m:
        pattern = []
        for bit, count in re.findall(r"\[([01])\]\s*\*\s*(\d+)", m.group(1)):
            if int(count) > 100_000:
                raise ValueError(f"pattern too long: {count}")
            pattern += [bit == "1"] * int(count)
    else:
        try:
            pattern = [bool(as_int(x, 0)) for x in json.loads(text)]
        except (ValueError, TypeError):
            raise ValueError(f"expected an integer, ([0]*k+[1]*n) or [0,1,…], got {text[:80]!r}") from None
    if len(pattern) != n_layers:
        raise ValueError(f"pattern has {len(pattern)} entries for num_layers={n_layers}")
    return pattern


def _vocab(f: dict) -> int:
    if "vocab_size" in f:
        return _get(f, "vocab_size")
    tok = f.get("tokenizer_model")
    if isinstance(tok, str):
        from memledger.model.hub import catalog
        path = catalog().get(tok.strip())
        if path is not None:
            return int(json.loads(path.read_text())["vocab_size"])
    if f.get("tokenizer_type") == "GPT2BPETokenizer":
        return GPT2_VOCAB
    raise ModelFlagError("vocab_size", "the vocabulary size is unknown offline: give "
                                       "--vocab-size or a --tokenizer-model in memledger's catalog")


def _moe(f: dict, n_layers: int, ffn: int) -> MoESpec | None:
    n = _get(f, "num_experts")
    if not n:
        return None
    pattern = moe_layer_pattern(f.get("moe_layer_freq", 1), n_layers) if "moe_layer_freq" in f \
        else [True] * n_layers
    first_k = next((i for i, moe in enumerate(pattern) if moe), n_layers)
    expert_ffn = _get(f, "moe_ffn_hidden_size", default=ffn)
    shared = _get(f, "moe_shared_expert_intermediate_size", default=0, minimum=0)
    return MoESpec(n_experts=n, top_k=_get(f, "moe_router_topk", default=2),
                   expert_ffn=expert_ffn, n_shared=1 if shared else 0, shared_ffn=shared,
                   first_k_dense=first_k,
                   dense_layers=tuple(i for i in range(first_k, n_layers) if not pattern[i]),
                   router_bias=_get(f, "moe_router_enable_expert_bias", as_bool, False),
                   router_fp32=f.get("moe_router_dtype") == "fp32")


def _mla(f: dict) -> MLASpec | None:
    if not _get(f, "multi_latent_attention", as_bool, False):
        return None
    need = ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
    for k in need:
        if k not in f:
            raise ModelFlagError(k, "needed with --multi-latent-attention")
    return MLASpec(q_lora_rank=_get(f, "q_lora_rank", default=0, minimum=0),
                   kv_lora_rank=_get(f, "kv_lora_rank"), qk_rope_dim=_get(f, "qk_pos_emb_head_dim"),
                   qk_nope_dim=_get(f, "qk_head_dim"), v_dim=_get(f, "v_head_dim"))


def model_from_flags(f: dict, name: str) -> ModelSpec | None:
    """The ModelSpec the flags describe, or None when they name no model (no --num-layers)."""
    if not any(k in f for k in MODEL_KEYS):
        return None
    for k in MODEL_KEYS:
        if k not in f:
            raise ModelFlagError(k, "needed to describe the model (or give --hf-id/--hf-config)")
    n_layers, hidden, heads = (_get(f, k) for k in MODEL_KEYS)
    swiglu = _get(f, "swiglu", as_bool, False)
    ffn = _get(f, "ffn_hidden_size", default=int(4 * hidden * 2 / 3 / 64) * 64 if swiglu
               else 4 * hidden)
    gqa = _get(f, "group_query_attention", as_bool, False)
    kv = _get(f, "num_query_groups", default=heads) if gqa else heads
    mla = _mla(f)
    bias = not _get(f, "disable_bias_linear", as_bool, False)
    if "add_bias_linear" in f:
        bias = _get(f, "add_bias_linear", as_bool)
    pos = f.get("position_embedding_type", "learned_absolute")
    if _get(f, "use_rotary_position_embeddings", as_bool, False):
        pos = "rope"
    seq = _get(f, "seq_length", default=0, minimum=0)
    return ModelSpec(
        name=name, n_layers=n_layers, hidden=hidden, n_heads=heads, n_kv_heads=kv,
        head_dim=mla.v_dim if mla else _get(f, "kv_channels", default=hidden // heads),
        ffn_hidden=ffn, vocab=_vocab(f), mlp="swiglu" if swiglu else "gelu",
        norm="rmsnorm" if str(f.get("normalization", "LayerNorm")).lower() == "rmsnorm"
        else "layernorm",
        tied_embeddings=not _get(f, "untie_embeddings_and_output_weights", as_bool, False),
        qkv_bias=_get(f, "add_qkv_bias", as_bool, False) and not bias, linear_bias=bias,
        qk_norm=_get(f, "qk_layernorm", as_bool, False),
        pos_embeddings=_get(f, "max_position_embeddings", default=seq, minimum=0)
        if pos == "learned_absolute" else 0,
        mla=mla, moe=_moe(f, n_layers, ffn), n_mtp_layers=_get(f, "mtp_num_layers", default=0,
                                                               minimum=0),
        source=f"Megatron-LM model flags ({SRC})")
