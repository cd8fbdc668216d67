"""Import a Hugging Face `config.json` as a ModelSpec.

Supported `model_type`s: llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe,
deepseek_v2, deepseek_v3 and kimi_k2 (Kimi K2 ships the deepseek_v3 layout under its own type).

Reads: the sizes (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
head_dim, intermediate_size, vocab_size), tie_word_embeddings, hidden_act, the bias flags that
transformers honours for the type (attention_bias, mlp_bias, qkv_bias), the MoE fields (expert
count under any of num_experts / num_local_experts / n_routed_experts, num_experts_per_tok,
moe_intermediate_size, n_shared_experts or shared_expert_intermediate_size, and which layers
are MoE: mlp_only_layers + decoder_sparse_step for Qwen, first_k_dense_replace + moe_layer_freq
for DeepSeek), the MLA ranks, topk_method and num_nextn_predict_layers; for the routers that
the `hf` activation profile tells apart, the family (MoESpec.router: qwen2_moe -> "qwen",
deepseek_v2 -> "deepseek_v2"), norm_topk_prob (qwen2_moe) and group-limited top-K (deepseek_v2
topk_method group_limited_greedy). Other types keep router "auto" (inferred as before).

Ignores: RoPE settings, context length, sliding windows, dropout, norm epsilons, token ids,
router coefficients and scoring functions, quantization_config (a storage format, not the
architecture), torch_dtype, auto_map and architectures. Only JSON is read: nothing from a model
repository is imported or evaluated.

Defaults: null means absent. An absent field takes a structural default (num_key_value_heads =
heads for llama, head_dim = hidden/heads, no bias, untied, step 1, no MTP); where transformers'
config class would fill it with a model-specific constant instead (Mistral's 8 KV heads,
Qwen3's head_dim 128, DeepSeek's q_lora_rank 1536, n_shared_experts and first_k_dense_replace)
the field is required, so that the spec never silently differs from what transformers
instantiates from the same file.

Two places where this follows the model's reference code rather than transformers 5.24:
`moe_layer_freq` (DeepSeek's modeling_deepseek.py makes layer i MoE iff i >= first_k_dense_replace
and i % moe_layer_freq == 0; transformers ignores the field, every published config has 1) and
`num_nextn_predict_layers` (kept as n_mtp_layers; transformers does not instantiate MTP modules).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from memledger.errors import SpecError
from memledger.specs.bounds import check_bound, check_length
from memledger.specs.model import MLASpec, ModelSpec, MoESpec

_DENSE = ("llama", "mistral", "qwen2", "qwen3")
_QWEN_MOE = ("qwen2_moe", "qwen3_moe")
_MLA = ("deepseek_v2", "deepseek_v3", "kimi_k2")
SUPPORTED_MODEL_TYPES = _DENSE + ("mixtral",) + _QWEN_MOE + _MLA

# Types whose transformers config class defaults num_key_value_heads to a constant, not to heads.
_KV_HEADS_REQUIRED = ("mistral", "mixtral", "qwen2", "qwen3") + _QWEN_MOE
_QK_NORM = ("qwen3", "qwen3_moe")
_EXPERT_ALIASES = ("num_experts", "num_local_experts", "n_routed_experts")
_MISSING = object()
# ModelSpec / MoESpec field -> config.json key, for errors raised by the specs' own checks.
_CONFIG_KEY = {"top_k": "num_experts_per_tok", "n_kv_heads": "num_key_value_heads"}

# transformers keeps these routers' weights in fp32 (_keep_in_fp32_modules_strict "gate.weight")
FP32_ROUTER_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2"})


# -- field readers -----------------------------------------------------------------------------
def _raw(cfg: dict, key: str, default=_MISSING):
    value = cfg.get(key)
    if value is not None:
        return value
    if default is _MISSING:
        raise SpecError(key, f"missing from the config (model_type {cfg['model_type']!r} needs it)")
    return default


def _int(cfg: dict, key: str, default=_MISSING, minimum: int = 1) -> int:
    value = _raw(cfg, key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(key, f"must be an integer, got {value!r}")
    if value < minimum:
        raise SpecError(key, f"must be an integer >= {minimum}, got {value}")
    return value


def _flag(cfg: dict, key: str, default: bool) -> bool:
    value = _raw(cfg, key, default)
    if not isinstance(value, bool):
        raise SpecError(key, f"must be true or false, got {value!r}")
    return value


def _int_list(cfg: dict, key: str, n_layers: int) -> list[int]:
    value = _raw(cfg, key, [])
    if not isinstance(value, list):
        raise SpecError(key, f"must be a list of layer indices, got {value!r}")
    check_length("dense_layers", len(value), key)
    for i in value:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layers:
            raise SpecError(key, f"entry {i!r} is not a layer index in [0, {n_layers})")
    return value


def _null_or_missing(cfg: dict, key: str):
    """Explicit null means "no such projection" (0); an absent key is an error."""
    return 0 if key in cfg and cfg[key] is None else _MISSING


def _n_experts(cfg: dict, minimum: int) -> int:
    """The routed-expert count, whichever of the three names the file uses (they must agree)."""
    found = {k: cfg[k] for k in _EXPERT_ALIASES if cfg.get(k) is not None}
    if not found:
        raise SpecError("num_experts", f"missing; give one of {', '.join(_EXPERT_ALIASES)}")
    if len(set(map(repr, found.values()))) > 1:
        raise SpecError("num_experts", f"aliases disagree: {found}")
    return _int(cfg, next(iter(found)), minimum=minimum)


# -- architecture pieces -----------------------------------------------------------------------
def _mlp_kind(cfg: dict) -> str:
    """Every supported type has a gated MLP (gate, up, down): ModelSpec calls that "swiglu".

    A GeGLU (gelu* gate) has the same matrices and saved tensors, so it maps to the same kind.
    """
    act = _raw(cfg, "hidden_act", "silu")
    if not isinstance(act, str) or not (act in ("silu", "swish") or act.startswith("gelu")):
        raise SpecError("hidden_act",
                        f"unsupported {act!r} for a gated MLP; valid: silu, swish, gelu*")
    return "swiglu"


def _biases(cfg: dict, mt: str) -> dict:
    """Bias flags as transformers applies them for `mt`, mapped onto qkv_bias / linear_bias."""
    if mt == "qwen2":
        return {"qkv_bias": True}  # Qwen2Attention hard-codes bias on q, k, v; no config flag
    if mt == "qwen2_moe":
        return {"qkv_bias": _flag(cfg, "qkv_bias", True)}
    if mt in ("mistral", "mixtral"):
        return {}  # transformers builds these without biases whatever the file says
    attn = _flag(cfg, "attention_bias", False)
    mlp = _flag(cfg, "mlp_bias", False) if mt in ("llama", "deepseek_v2") else False
    if mt == "llama" and attn and mlp:
        return {"linear_bias": True}  # bias on q, k, v, o, gate, up, down = every linear
    if attn or mlp:
        field = "attention_bias" if attn else "mlp_bias"
        raise SpecError(field, f"true is not supported for model_type {mt!r} (ModelSpec has "
                               "qkv_bias for q,k,v only and linear_bias for every linear)")
    return {}


def _attention(cfg: dict, mt: str, hidden: int, heads: int) -> dict:
    if mt in _MLA:
        mla = MLASpec(q_lora_rank=_int(cfg, "q_lora_rank", _null_or_missing(cfg, "q_lora_rank"),
                                       minimum=0),
                      kv_lora_rank=_int(cfg, "kv_lora_rank"),
                      qk_rope_dim=_int(cfg, "qk_rope_head_dim"),
                      qk_nope_dim=_int(cfg, "qk_nope_head_dim"),
                      v_dim=_int(cfg, "v_head_dim"))
        # MLA has no KV-head grouping of its own; head_dim is the per-head value size.
        return {"mla": mla, "n_kv_heads": heads, "head_dim": mla.v_dim}
    kv_default = _MISSING if mt in _KV_HEADS_REQUIRED else heads
    if mt == "qwen3":
        head_dim = _int(cfg, "head_dim")  # Qwen3Config's default is 128, not hidden/heads
    else:
        if cfg.get("head_dim") is None and hidden % heads:
            raise SpecError("head_dim", f"missing and hidden_size={hidden} is not a multiple "
                                        f"of num_attention_heads={heads}")
        head_dim = _int(cfg, "head_dim", hidden // heads)
    return {"n_kv_heads": _int(cfg, "num_key_value_heads", kv_default), "head_dim": head_dim,
            "qk_norm": mt in _QK_NORM}


def _canonical_layers(is_moe, n_layers: int) -> dict:
    """Turn a per-layer rule into first_k_dense (leading dense run) + the other dense indices."""
    dense = [i for i in range(n_layers) if not is_moe(i)]
    first_k = next((k for k in range(n_layers) if is_moe(k)), n_layers)
    return {"first_k_dense": first_k, "dense_layers": tuple(i for i in dense if i >= first_k)}


def _moe(cfg: dict, mt: str, n_layers: int) -> MoESpec | None:
    if mt not in ("mixtral",) + _QWEN_MOE + _MLA:
        return None
    # Qwen-MoE with num_experts 0 builds dense MLPs everywhere; elsewhere 0 experts is an error.
    n_experts = _n_experts(cfg, minimum=0 if mt in _QWEN_MOE else 1)
    if n_experts == 0:
        return None
    common = {"n_experts": n_experts, "top_k": _int(cfg, "num_experts_per_tok")}
    if mt == "mixtral":
        return MoESpec(**common, expert_ffn=_int(cfg, "intermediate_size"))
    if mt in _QWEN_MOE:
        skip = set(_int_list(cfg, "mlp_only_layers", n_layers))
        step = _int(cfg, "decoder_sparse_step", 1)
        layers = _canonical_layers(lambda i: i not in skip and (i + 1) % step == 0, n_layers)
        shared = {}
        if mt == "qwen2_moe":  # one shared expert of its own size, scaled by a sigmoid gate h -> 1
            shared = {"n_shared": 1, "shared_gate": True, "router": "qwen",
                      "norm_topk": _flag(cfg, "norm_topk_prob", False),  # Qwen2MoeConfig's default
                      "shared_ffn": _int(cfg, "shared_expert_intermediate_size")}
        return MoESpec(**common, expert_ffn=_int(cfg, "moe_intermediate_size"), **layers, **shared)
    first_k = _int(cfg, "first_k_dense_replace", minimum=0)
    if first_k > n_layers:  # would silently make every layer dense
        raise SpecError("first_k_dense_replace", f"{first_k} exceeds num_hidden_layers={n_layers}")
    freq = _int(cfg, "moe_layer_freq", 1)
    layers = _canonical_layers(lambda i: i >= first_k and i % freq == 0, n_layers)
    topk_method = _raw(cfg, "topk_method", "greedy" if mt == "deepseek_v2" else "noaux_tc")
    # transformers' DeepseekV2TopkRouter: softmax, greedy or group-limited top-K, and it never
    # renormalises (it ignores norm_topk_prob; false in every released V2 config anyway).
    v2 = {"router": "deepseek_v2", "norm_topk": False,
          "group_limited": topk_method == "group_limited_greedy"} if mt == "deepseek_v2" else {}
    return MoESpec(**common, expert_ffn=_int(cfg, "moe_intermediate_size"),
                   n_shared=_int(cfg, "n_shared_experts", _null_or_missing(cfg, "n_shared_experts"),
                                 minimum=0),
                   router_bias=topk_method == "noaux_tc",
                   router_fp32=mt in FP32_ROUTER_TYPES, **layers, **v2)


def _n_mtp_layers(cfg: dict, mt: str) -> int:
    if mt not in _MLA:
        return 0
    key = "num_nextn_predict_layers" if "num_nextn_predict_layers" in cfg else "num_mtp_layers"
    return _int(cfg, key, 0, minimum=0)


# -- entry points ------------------------------------------------------------------------------
def from_hf_config(cfg: dict, name: str | None = None) -> ModelSpec:
    """The ModelSpec of a parsed Hugging Face config.json; SpecError names the offending field."""
    if not isinstance(cfg, dict):
        raise SpecError("config", f"must be a JSON object, got {type(cfg).__name__}")
    mt = cfg.get("model_type")
    if mt not in SUPPORTED_MODEL_TYPES:
        raise SpecError("model_type", f"unsupported {mt!r}; supported: "
                                      f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    try:
        return _spec(cfg, mt, name)
    except SpecError as e:  # cross-field checks in the specs use spec names: give the file's key
        if e.field not in _CONFIG_KEY:
            raise
        raise SpecError(_CONFIG_KEY[e.field], e.message) from None


def _spec(cfg: dict, mt: str, name: str | None) -> ModelSpec:
    n_layers = _int(cfg, "num_hidden_layers")
    check_bound("n_layers", n_layers, "num_hidden_layers")  # before any per-layer rule runs
    hidden, heads = _int(cfg, "hidden_size"), _int(cfg, "num_attention_heads")
    return ModelSpec(
        name=name or str(cfg.get("_name_or_path") or mt),
        n_layers=n_layers, hidden=hidden, n_heads=heads,
        ffn_hidden=_int(cfg, "intermediate_size"),
        vocab=_int(cfg, "vocab_size"),
        mlp=_mlp_kind(cfg),
        tied_embeddings=_flag(cfg, "tie_word_embeddings", False),
        moe=_moe(cfg, mt, n_layers),
        n_mtp_layers=_n_mtp_layers(cfg, mt),
        source=f"Hugging Face config.json (model_type {mt})",
        **_attention(cfg, mt, hidden, heads), **_biases(cfg, mt))


def load_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Read a config.json (the only file I/O here); the name defaults to the file's stem."""
    from memledger.safe_json import load_file
    path = Path(path)
    cfg = load_file(path, "config")  # bounded in size and nesting before parsing
    spec = from_hf_config(cfg, name or path.stem)
    return replace(spec, source=f"{path.name[:200]} (model_type {cfg['model_type']})")
