"""Shrink a Hugging Face config.json so that its model traces on a laptop CPU in seconds, in a
way that lets the traces be scaled back to the full model (memledger.trace.fit).

What changes: the layer count becomes `layers` (2-4): one leading dense layer when the model
mixes dense and MoE layers, MoE layers after it (so both kinds are traced; two or more layers
so that tensors every layer shares, RoPE cos/sin, are told apart from a layer's own). Every
*width* is divided by one integer `divisor`: hidden, intermediate and expert FFN sizes, an
explicit head_dim, the MLA ranks and head dims, the vocabulary. Head counts, KV heads and
top-k stay, so per-token counts made of them (attention scores a·s, top-k indices) stay exact.
The routed-expert count is divided too when every traced divisor leaves at least top-k experts;
DeepSeek's group-limited routing then runs with one group (transformers computes the group
mask under no_grad: it saves nothing whatever the grouping).

Why it scales back: a tensor saved for backward holds, per token, a sum of terms that are a
fixed count (heads, top-k, 1) times at most one width (activations are vectors, not matrices
of two widths), so its bytes per token are affine in w = 1/divisor and two widths fix its value
at w = 1. Pure dict work plus the ModelSpec importer (for validation and parameter counts).
Ignores: fields that do not set a shape (RoPE scaling, sliding windows, dropout, token ids);
MoE widths stay multiples of 8 (grouped_mm needs 16-byte strides);
a model whose saved tensors depend on a width non-linearly (padding to kernel tile sizes on
CUDA at tiny head dims) is caught by the residual check, not here.
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.errors import SpecError
from memledger.model.hf_config import from_hf_config
from memledger.model.params import n_params

WIDTH_KEYS = ("hidden_size", "intermediate_size", "moe_intermediate_size",
              "shared_expert_intermediate_size", "head_dim", "q_lora_rank", "kv_lora_rank",
              "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "vocab_size")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
# Not shapes, or not for a from-scratch CPU build: dropped from the shrunk config.
_DROP = ("quantization_config", "auto_map", "torch_dtype", "dtype", "_name_or_path",
         "transformers_version")
_QWEN_MOE = ("qwen2_moe", "qwen3_moe")
_DEEPSEEK = ("deepseek_v2", "deepseek_v3", "kimi_k2")
BUILD_TYPE = {"kimi_k2": "deepseek_v3"}  # transformers has no kimi_k2 class; same layout
FIT_FACTORS = (2, 4)  # the fit traces divide the widths by 2k and 4k; the check trace by k
DEFAULT_BUDGET_PARAMS = 25_000_000  # parameters of the check model when the scale is chosen


@dataclass(frozen=True)
class Shrink:
    k: int  # width divisor of the check trace; the fits use k·FIT_FACTORS
    layers: int
    experts: bool  # routed-expert count divided along with the widths
    head_multiple: int = 2  # head dims stay multiples of this (8 for CUDA kernels)

    @property
    def divisors(self) -> tuple[int, ...]:
        """Fit divisors first, then the check divisor."""
        return tuple(self.k * f for f in FIT_FACTORS) + (self.k,)

    def config(self, cfg: dict, divisor: int) -> dict:
        """The config dict of the model traced at `divisor` (validated: SpecError on failure)."""
        out = {k: v for k, v in cfg.items() if k not in _DROP}
        out.update(_layer_pattern(cfg, self.layers))
        for key in WIDTH_KEYS:
            if isinstance(cfg.get(key), int) and cfg[key] > 0:
                out[key] = _divide(cfg, key, divisor)
        if self.experts:
            for key in EXPERT_KEYS:
                if isinstance(cfg.get(key), int):
                    out[key] = _divide(cfg, key, divisor)
            if "n_group" in cfg:
                out["n_group"] = out["topk_group"] = 1
        _check_heads(out, self.head_multiple)
        _check_strides(out)
        from_hf_config(out)  # the importer's own checks (head_dim, top_k <= experts, ...)
        return out


def _divide(cfg: dict, key: str, divisor: int) -> int:
    value = cfg[key]
    if value % divisor or value // divisor < 1:
        raise SpecError("scale", f"{key}={value} is not divisible by {divisor}: pick a --scale "
                                 f"whose fit divisors ({divisor}) divide every width")
    return value // divisor


def _check_heads(cfg: dict, multiple: int) -> None:
    """Head dims stay multiples of `multiple`: 2 for the rotary halves, 8 on CUDA, where the
    fused attention kernels need it (a smaller head dim would pick another kernel)."""
    if cfg["model_type"] in _DEEPSEEK:
        dims = {k: cfg.get(k) for k in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")}
    elif isinstance(cfg.get("head_dim"), int):
        dims = {"head_dim": cfg["head_dim"]}
    else:
        dims = {"hidden_size/num_attention_heads": cfg["hidden_size"] / cfg["num_attention_heads"]}
    for key, dim in dims.items():
        if not isinstance(dim, (int, float)) or dim < multiple or dim % multiple:
            raise SpecError("scale", f"{key} becomes {dim}: head dims must stay multiples of "
                                     f"{multiple}; pick a smaller --scale")


def _check_strides(cfg: dict) -> None:
    """torch's grouped_mm (transformers' default expert kernel) needs 16-byte row strides."""
    if not any(isinstance(cfg.get(k), int) for k in EXPERT_KEYS):
        return
    ffn = "intermediate_size" if cfg["model_type"] == "mixtral" else "moe_intermediate_size"
    for key in ("hidden_size", ffn):
        if isinstance(cfg.get(key), int) and cfg[key] % 8:
            raise SpecError("scale", f"{key} becomes {cfg[key]}: expert kernels need a multiple "
                                     "of 8; pick a smaller --scale")


def _layer_pattern(cfg: dict, layers: int) -> dict:
    """Fields that make layer 0 dense and the rest MoE when the full model has both kinds."""
    spec = from_hf_config(cfg)
    mixed = spec.moe is not None and 0 < spec.n_moe_layers < spec.n_layers
    mt = cfg["model_type"]
    out: dict = {"num_hidden_layers": layers}
    if isinstance(cfg.get("layer_types"), list):
        out["layer_types"] = cfg["layer_types"][:layers]
    if mt in _QWEN_MOE:
        out.update(mlp_only_layers=[0] if mixed else [], decoder_sparse_step=1)
    elif mt in _DEEPSEEK and spec.moe is not None:
        out.update(first_k_dense_replace=1 if mixed else 0, moe_layer_freq=1)
    return out


def _experts_scalable(cfg: dict, k: int) -> bool:
    key = next((x for x in EXPERT_KEYS if isinstance(cfg.get(x), int)), None)
    if key is None:
        return False
    top_k, smallest = cfg.get("num_experts_per_tok") or 1, k * max(FIT_FACTORS)
    return cfg[key] % smallest == 0 and cfg[key] // smallest >= top_k


def check_model_params(cfg: dict, s: Shrink) -> int:
    return n_params(from_hf_config(s.config(cfg, s.k)))


def choose_shrink(cfg: dict, layers: int = 2, scale: int | None = None,
                  budget_params: int = DEFAULT_BUDGET_PARAMS, head_multiple: int = 2) -> Shrink:
    """The Shrink for `cfg`: width divisor `scale` when given, else the smallest power of two
    whose check model has at most `budget_params` parameters (the largest valid one if none)."""
    from_hf_config(cfg)  # a malformed config fails here, with the importer's message
    if not 2 <= layers <= 4:
        raise SpecError("layers", f"must be 2..4 (traced layers), got {layers}")
    if scale is not None:
        if scale < 1:
            raise SpecError("scale", f"must be an integer >= 1, got {scale}")
        s = Shrink(scale, layers, _experts_scalable(cfg, scale), head_multiple)
        for d in s.divisors:
            s.config(cfg, d)
        return s
    valid = None
    for p in range(12):
        s = Shrink(2 ** p, layers, _experts_scalable(cfg, 2 ** p), head_multiple)
        try:
            for d in s.divisors:
                s.config(cfg, d)
        except SpecError:
            break  # larger powers of two fail too (divisibility, head dims)
        valid = s
        if check_model_params(cfg, s) <= budget_params:
            return s
    if valid is None:
        raise SpecError("scale", f"no power-of-two width divisor k makes k·{max(FIT_FACTORS)} "
                                 "divide every width of this config; give --scale explicitly")
    return valid
