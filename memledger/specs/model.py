"""ModelSpec: the architecture of a decoder-only transformer, dense or MoE, MHA/GQA or MLA.

One canonical form per concept: which layers are MoE is `first_k_dense` plus an explicit tuple of
further dense layer indices (the HF importer turns `decoder_sparse_step`, `moe_layer_freq` and
`mlp_only_layers` into it). Ignores: encoder-decoder models, vision towers, sliding-window
attention (it changes FLOPs, not saved activations with flash kernels), biases other than those
flagged below.
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.errors import (SpecError, require, require_choice, require_non_negative,
                              require_positive)
from memledger.specs.bounds import check_bound, check_bounds, check_length
from memledger.specs.hashing import cache_hash

MLP_KINDS = ("swiglu", "gelu")
NORM_KINDS = ("rmsnorm", "layernorm")
# The router as transformers implements it (what its top-k path saves, see the `hf` profile):
# "auto" infers it as before this field existed (router_bias -> deepseek_v3, qk_norm -> qwen,
# else mixtral); set explicitly by the HF importer for qwen2_moe and deepseek_v2.
ROUTER_KINDS = ("auto", "mixtral", "qwen", "deepseek_v2", "deepseek_v3")


@cache_hash
@dataclass(frozen=True, kw_only=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2). q_lora_rank 0 = no q compression."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_rope_dim: int
    qk_nope_dim: int
    v_dim: int

    def __post_init__(self):
        require_non_negative("q_lora_rank", self.q_lora_rank)
        for f in ("kv_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_dim"):
            require_positive(f, getattr(self, f))
        check_bounds(self, ("q_lora_rank", "kv_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_dim"))

    @property
    def qk_dim(self) -> int:
        return self.qk_nope_dim + self.qk_rope_dim


@cache_hash
@dataclass(frozen=True, kw_only=True)
class MoESpec:
    """Routed experts (E, top-K, FFN size fe), shared experts, and which layers are dense."""

    n_experts: int
    top_k: int
    expert_ffn: int
    n_shared: int = 0
    shared_ffn: int = 0  # FFN size of each shared expert; 0 means expert_ffn
    first_k_dense: int = 0
    dense_layers: tuple[int, ...] = ()  # further dense layer indices (mlp_only_layers etc.)
    router_bias: bool = False  # DeepSeek-V3 e_score_correction_bias (E values)
    shared_gate: bool = False  # Qwen2-MoE shared_expert_gate: Linear(h, 1)
    router_fp32: bool = False  # router weight kept in fp32 (HF DeepSeek-V3 _keep_in_fp32_modules)
    router: str = "auto"  # router family (ROUTER_KINDS): softmax/sigmoid, which dtype it yields
    norm_topk: bool = True  # top-K weights renormalised to sum 1 (norm_topk_prob; Mixtral always)
    group_limited: bool = False  # DeepSeek-V2 group_limited_greedy: scores masked before top-K

    def __post_init__(self):
        require_positive("n_experts", self.n_experts)
        require_positive("top_k", self.top_k)
        require(self.top_k <= self.n_experts, "top_k",
                f"top_k={self.top_k} exceeds n_experts={self.n_experts}")
        require_positive("expert_ffn", self.expert_ffn)
        require_non_negative("n_shared", self.n_shared)
        require_non_negative("shared_ffn", self.shared_ffn)
        require_non_negative("first_k_dense", self.first_k_dense)
        require_choice("router", self.router, ROUTER_KINDS)
        for f in ("norm_topk", "group_limited"):
            require(isinstance(getattr(self, f), bool), f,
                    f"must be true or false, got {getattr(self, f)!r}")
        require(not self.group_limited or self.router == "deepseek_v2", "group_limited",
                f"group-limited routing is DeepSeek-V2's (router='deepseek_v2'), got "
                f"router={self.router!r}")
        check_bounds(self, ("n_experts", "expert_ffn", "n_shared", "shared_ffn"))
        check_bound("n_layers", self.first_k_dense, "first_k_dense")
        require(isinstance(self.dense_layers, tuple), "dense_layers",
                f"must be a tuple of layer indices, got {type(self.dense_layers).__name__}")
        check_length("dense_layers", len(self.dense_layers))
        for i in self.dense_layers:
            require_non_negative("dense_layers", i)

    @property
    def shared_ffn_size(self) -> int:
        return self.shared_ffn or self.expert_ffn


@cache_hash
@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    name: str
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_hidden: int  # dense MLP intermediate size
    vocab: int  # 0 = vocabulary not counted (Korthikanti Figure 1 convention)
    mlp: str = "swiglu"
    norm: str = "rmsnorm"
    tied_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2: bias on q, k, v only
    linear_bias: bool = False  # GPT-2/3: bias on every linear
    qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k
    pos_embeddings: int = 0  # learned absolute positions (GPT-3: 2048); 0 = RoPE
    mla: MLASpec | None = None
    moe: MoESpec | None = None
    n_mtp_layers: int = 0  # DeepSeek-V3 multi-token prediction modules (not in HF's count)
    source: str = ""

    def __post_init__(self):
        require(isinstance(self.name, str), "name", f"must be text, got {type(self.name).__name__}")
        check_length("name", len(self.name))
        for f in ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim", "ffn_hidden"):
            require_positive(f, getattr(self, f))
        require_non_negative("vocab", self.vocab)
        require_non_negative("pos_embeddings", self.pos_embeddings)
        require_non_negative("n_mtp_layers", self.n_mtp_layers)
        check_bounds(self, ("n_layers", "hidden", "n_heads", "n_kv_heads", "head_dim",
                            "ffn_hidden", "vocab", "pos_embeddings", "n_mtp_layers"))
        require_choice("mlp", self.mlp, MLP_KINDS)
        require_choice("norm", self.norm, NORM_KINDS)
        require(self.n_heads % self.n_kv_heads == 0, "n_kv_heads",
                f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")
        if self.moe is not None:
            require(self.moe.first_k_dense <= self.n_layers, "first_k_dense",
                    f"first_k_dense={self.moe.first_k_dense} exceeds n_layers={self.n_layers}")
            bad = [i for i in self.moe.dense_layers if i >= self.n_layers]
            if bad:
                more = f", ... ({len(bad)} in all)" if len(bad) > 8 else ""
                raise SpecError("dense_layers", f"layer indices [{', '.join(map(str, bad[:8]))}"
                                                f"{more}] are >= n_layers={self.n_layers}")

    # -- layer kinds -------------------------------------------------------------------------
    def is_moe_layer(self, i: int) -> bool:
        moe = self.moe
        return moe is not None and i >= moe.first_k_dense and i not in moe.dense_layers

    @property
    def n_moe_layers(self) -> int:
        # a count, not a loop over layers: the leading dense run, then the other dense indices
        moe = self.moe
        if moe is None:
            return 0
        later_dense = {i for i in moe.dense_layers if moe.first_k_dense <= i < self.n_layers}
        return max(0, self.n_layers - moe.first_k_dense - len(later_dense))

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    @property
    def attention(self) -> str:
        if self.mla is not None:
            return "mla"
        return "mha" if self.n_kv_heads == self.n_heads else "gqa"

    @property
    def norm_params(self) -> int:
        """Parameters of one norm over `hidden` (LayerNorm has a bias)."""
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    def norm_params_of(self, dim: int) -> int:
        return dim * (2 if self.norm == "layernorm" else 1)
