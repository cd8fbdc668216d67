"""FinetuneSpec: which parameters train, and in which format the frozen base is stored.

Modes: "full" (every parameter trains: the ledger before fine-tuning existed), "lora" (Hu et
al. 2021, arXiv 2106.09685: the base is frozen, rank-r adapters A (r x in) and B (out x r) on
the target linears train), "qlora" (Dettmers et al. 2023, arXiv 2305.14314: LoRA on a base
quantised to NF4 with block-wise absmax constants, themselves quantised to 8 bits in blocks of
256 = "double quantisation"; or int8 / fp8), "freeze" (named modules or layer ranges do not
train, the rest does).
Target and freeze names (`TARGET_SETS`, `MODULES`): Hugging Face module names (q_proj, ...,
down_proj; MLA's q_a_proj ...), Megatron's (linear_qkv, linear_proj, linear_fc1, linear_fc2)
and named sets. "all-linear" is peft's: every nn.Linear except the output layer
(peft/tuners/tuners_utils.py, INCLUDE_LINEAR_LAYERS_SHORTHAND); in transformers 5 the routed
experts and the router are nn.Parameter modules, not nn.Linear, so it does not reach them —
"experts" and "router" name them explicitly (peft target_parameters, Megatron-Bridge).
Defaults are peft's LoraConfig: r=8, lora_alpha=8, lora_dropout=0.0, and for Llama-family
models target_modules=["q_proj", "v_proj"]
(peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
Ignores: LoRA variants (DoRA's magnitude vector, rsLoRA's scaling changes no byte), embedding
adapters, and several adapters at once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from memledger.errors import SpecError, require, require_choice, require_positive
from memledger.specs.bounds import BOUNDS, check_bound, check_length
from memledger.specs.hashing import cache_hash

MODES = ("full", "lora", "qlora", "freeze")
LORA_DTYPES = ("fp32", "bf16", "fp16")
BASE_WEIGHTS = ("bf16", "fp16", "fp32", "nf4", "int8", "fp8")
QUANTISED = ("nf4", "int8", "fp8")
COMPUTE_DTYPES = ("bf16", "fp16", "fp32")

# Module name -> the memledger parameter pieces it is (memledger.model.params group names;
# "attn.kv:k" = the k half of the fused k/v group, "mlp.fc1:gate" the gate half of gate/up).
MODULES: dict[str, tuple[str, ...]] = {
    "q_proj": ("attn.q",), "k_proj": ("attn.kv:k",), "v_proj": ("attn.kv:v",),
    "o_proj": ("attn.o",),
    "q_a_proj": ("attn.q_down",), "q_b_proj": ("attn.q_up",),
    "kv_a_proj_with_mqa": ("attn.kv_down",), "kv_b_proj": ("attn.kv_up",),
    "gate_proj": ("mlp.fc1:gate", "shared.fc1:gate"), "up_proj": ("mlp.fc1:up", "shared.fc1:up"),
    "down_proj": ("mlp.fc2", "shared.fc2"),
    "fc1": ("mlp.fc1", "shared.fc1"), "fc2": ("mlp.fc2", "shared.fc2"),
    "experts": ("experts.fc1", "experts.fc2"), "router": ("moe.router",),
    # Megatron-Core names (Megatron-Bridge LoRA target_modules)
    "linear_qkv": ("attn.q", "attn.kv:k", "attn.kv:v"), "linear_proj": ("attn.o",),
    "linear_fc1": ("mlp.fc1", "shared.fc1"), "linear_fc2": ("mlp.fc2", "shared.fc2"),
}
_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa",
         "kv_b_proj")
_MLP = ("gate_proj", "up_proj", "down_proj", "fc1", "fc2")
TARGET_SETS: dict[str, tuple[str, ...]] = {
    "attention": _ATTN, "mlp": _MLP, "all-linear": _ATTN + _MLP,
}
# Further names only `freeze` takes (not linears an adapter can sit on).
FREEZE_ONLY = ("embeddings", "head", "norms", "layers")
_RANGE = re.compile(r"^layers:(\d+)(?:-(\d+))?$")


def parse_range(text: str) -> tuple[int, int] | None:
    """"layers:A-B" (inclusive) or "layers:A" -> (A, B); anything else -> None."""
    mt = _RANGE.match(text)
    if mt is None:
        return None
    lo = int(mt.group(1))
    hi = int(mt.group(2)) if mt.group(2) is not None else lo
    return lo, hi


def _names(field: str, value, allowed) -> None:
    require(isinstance(value, tuple), field,
            f"must be a tuple of module names, got {type(value).__name__}")
    check_length("lora_targets", len(value), field)
    for name in value:
        ok = isinstance(name, str) and (name in allowed or
                                        (field == "freeze" and parse_range(name) is not None))
        if not ok:
            extra = ", layers:A-B" if field == "freeze" else ""
            raise SpecError(field, f"unknown module {name!r}; valid: {', '.join(allowed)}{extra}")


@cache_hash
@dataclass(frozen=True, kw_only=True)
class FinetuneSpec:
    mode: str = "full"
    lora_rank: int = 8
    lora_alpha: int = 8
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")
    lora_dropout_pct: int = 0
    lora_dtype: str = "fp32"  # peft casts bf16/fp16 adapters to fp32 (autocast_adapter_dtype)
    base_weights: str = "bf16"
    compute_dtype: str = "bf16"  # bnb_4bit_compute_dtype: the dequantised weight's format
    nf4_block: int = 64  # bitsandbytes blocksize / torchao block_size (QLoRA paper: 64)
    double_quant: bool = True  # absmax constants quantised to 8 bits (QLoRA §3)
    dq_block: int = 256  # block of the second quantisation (QLoRA paper, torchao scaler_block_size)
    freeze: tuple[str, ...] = ()
    train_embeddings: bool = False  # peft modules_to_save=["embed_tokens"]
    train_head: bool = False  # peft modules_to_save=["lm_head"]

    def __post_init__(self):
        require_choice("finetune", self.mode, MODES)
        r, top = self.lora_rank, BOUNDS["hidden"].limit
        require(isinstance(r, int) and not isinstance(r, bool) and 1 <= r <= top, "lora_rank",
                f"must be an integer, valid: 1..{top:,} (and at most the narrowest target's "
                f"width), got {r!r}")
        for f in ("lora_alpha", "nf4_block", "dq_block"):
            require_positive(f, getattr(self, f))
        for f in ("nf4_block", "dq_block"):
            require(getattr(self, f) <= 4096, f,
                    f"must be 1..4096 values per block, got {getattr(self, f)}")
        require(isinstance(self.lora_dropout_pct, int) and not isinstance(self.lora_dropout_pct, bool)
                and 0 <= self.lora_dropout_pct < 100, "lora_dropout",
                f"must be a whole percentage 0..99, got {self.lora_dropout_pct!r}")
        require_choice("lora_dtype", self.lora_dtype, LORA_DTYPES)
        require_choice("base_weights", self.base_weights, BASE_WEIGHTS)
        require_choice("compute_dtype", self.compute_dtype, COMPUTE_DTYPES)
        for f in ("double_quant", "train_embeddings", "train_head"):
            require(isinstance(getattr(self, f), bool), f,
                    f"must be true or false, got {getattr(self, f)!r}")
        _names("lora_targets", self.lora_targets, tuple(MODULES) + tuple(TARGET_SETS))
        _names("freeze", self.freeze, tuple(MODULES) + tuple(TARGET_SETS) + FREEZE_ONLY)
        if self.mode in ("lora", "qlora"):
            require(len(self.lora_targets) > 0, "lora_targets",
                    f"{self.mode} needs at least one target; valid: "
                    f"{', '.join(tuple(TARGET_SETS) + tuple(MODULES))}")
        if self.mode == "qlora":
            require(self.base_weights in QUANTISED, "base_weights",
                    f"qlora quantises the base: valid {', '.join(QUANTISED)}, got "
                    f"{self.base_weights!r} (use --finetune lora for a {self.base_weights} base)")
        elif self.base_weights in QUANTISED:
            raise SpecError("base_weights", f"{self.base_weights!r} is a quantised base, which "
                                            f"only qlora runs; with finetune={self.mode!r} valid: "
                                            f"bf16, fp16, fp32")
        for name in self.freeze:
            rng = parse_range(name)
            if rng is not None:
                require(rng[0] <= rng[1], "freeze", f"layer range {name!r} runs backwards")
                check_bound("n_layers", rng[1], "freeze")

    # -- derived -----------------------------------------------------------------------------
    @property
    def adapters(self) -> bool:
        return self.mode in ("lora", "qlora")

    @property
    def trains_everything(self) -> bool:
        return self.mode == "full" or (self.mode == "freeze" and not self.freeze)

    @property
    def target_pieces(self) -> frozenset[str]:
        """The parameter pieces (memledger.model.params names) adapters sit on."""
        return _pieces(self.lora_targets) if self.adapters else frozenset()

    @property
    def frozen_pieces(self) -> frozenset[str]:
        return _pieces(n for n in self.freeze if parse_range(n) is None)

    @property
    def frozen_ranges(self) -> tuple[tuple[int, int], ...]:
        return tuple(r for r in map(parse_range, self.freeze) if r is not None)


def _pieces(names) -> frozenset[str]:
    out: set[str] = set()
    for n in names:
        for module in TARGET_SETS.get(n, (n,)):
            out.update(MODULES.get(module, (module,)))
    return frozenset(out)
