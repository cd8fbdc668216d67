"""TrainSpec plus the two tables it names: precision recipes and optimizers.

A recipe says in which format weights, gradients, master weights, optimizer states and saved
activations live (docs/design.md §4 table; Megatron-LM distributed-optimizer docs for 18 and 6+12/d).
An optimizer says how many state values it keeps per parameter of a group (matrix or vector).
Ignores: loss-scaler state, gradient-norm scratch, and EMA copies of the weights.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from memledger.errors import (SpecError, require, require_choice, require_non_negative,
                              require_positive)
from memledger.specs.bounds import check_bound, check_bounds
from memledger.specs.finetune import FinetuneSpec
from memledger.specs.hashing import cache_hash
from memledger.specs.policy import ActivationPolicy


@dataclass(frozen=True, kw_only=True)
class Recipe:
    name: str
    weight_fmt: str
    grad_fmt: str
    master_fmt: str | None  # fp32 master copy kept by the optimizer; None when weights are it
    state_fmt: str  # format of optimizer moments (unless the optimizer fixes its own)
    act_fmt: str  # format of saved activations
    fp8_matrices: bool = False  # linear weights stored in fp8 (+ a transposed fp8 copy)
    main_grad_fmt: str | None = None  # extra high-precision grad copy kept by the optimizer
    param_fmt: str | None = None  # FSDP2 MixedPrecisionPolicy.param_dtype: the unsharded copy
    reduce_fmt: str | None = None  # FSDP2 MixedPrecisionPolicy.reduce_dtype
    description: str = ""


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(name="mixed16", weight_fmt="bf16", grad_fmt="bf16", master_fmt="fp32",
               state_fmt="fp32", act_fmt="bf16",
               description="textbook mixed precision: 2 + 2 + (4 + 8) = 16 bytes/param (seed 2)"),
        Recipe(name="megatron", weight_fmt="bf16", grad_fmt="fp32", master_fmt="fp32",
               state_fmt="fp32", act_fmt="bf16",
               description="Megatron bf16 with fp32 main-grads: 18 bytes/param, 6 + 12/d distributed"),
        Recipe(name="fp16", weight_fmt="fp16", grad_fmt="fp16", master_fmt="fp32",
               state_fmt="fp32", act_fmt="fp16", main_grad_fmt="fp32",
               description="Megatron fp16 with loss scaling: fp32 master and fp32 grad copy: "
                           "20 bytes/param, 4 + 16/d distributed"),
        Recipe(name="bf16", weight_fmt="bf16", grad_fmt="bf16", master_fmt=None,
               state_fmt="bf16", act_fmt="bf16",
               description="pure bf16: weights, grads and optimizer states in bf16"),
        Recipe(name="fp32", weight_fmt="fp32", grad_fmt="fp32", master_fmt=None,
               state_fmt="fp32", act_fmt="fp32", description="everything in fp32"),
        Recipe(name="amp", weight_fmt="fp32", grad_fmt="fp32", master_fmt=None,
               state_fmt="fp32", act_fmt="bf16",
               description="fp32 weights and grads, bf16 autocast compute (torch.autocast)"),
        Recipe(name="fp8", weight_fmt="bf16", grad_fmt="fp32", master_fmt="fp32",
               state_fmt="fp32", act_fmt="bf16", fp8_matrices=True,
               description="TE fp8 params: linear weights 1 byte + 1 byte transpose, fp32 main-grads"),
        Recipe(name="fsdp2-mixed", weight_fmt="fp32", grad_fmt="fp32", master_fmt=None,
               state_fmt="fp32", act_fmt="bf16", param_fmt="bf16", reduce_fmt="fp32",
               description="torchtitan: FSDP2 MixedPrecisionPolicy(param_dtype=bf16, "
                           "reduce_dtype=fp32) over fp32 parameters: 4 + 4 + 8 = 16 bytes/param "
                           "sharded, a bf16 unsharded copy of each unit while it computes"),
        # reduce_dtype == param_dtype: FSDP2 clamps it to None (no cast), so the unsharded
        # gradients stay bf16 — the reduce-scatter input, the PP-accumulated gradients
        # (_fsdp_param.py init_dtype_attrs, to_accumulated_grad_if_needed)
        Recipe(name="fsdp2-bf16-reduce", weight_fmt="fp32", grad_fmt="fp32", master_fmt=None,
               state_fmt="fp32", act_fmt="bf16", param_fmt="bf16", reduce_fmt="bf16",
               description="torchtitan mixed_precision_reduce = bfloat16: fsdp2-mixed with "
                           "reduce_dtype=bf16 — the same 16 bytes/param sharded; unsharded "
                           "gradients, the reduce-scatter and PP's held gradients in bf16"),
    )
}


@dataclass(frozen=True, kw_only=True)
class Optimizer:
    name: str
    matrix_states: str  # "n:K" = K values per param; "factored" = rows + cols per matrix
    vector_states: int  # values per param for 1-D params (and for matrices Muon does not take)
    fixed_fmt: str | None = None  # state format independent of the recipe
    description: str = ""


OPTIMIZERS: dict[str, Optimizer] = {
    o.name: o
    for o in (
        Optimizer(name="adamw", matrix_states="n:2", vector_states=2, description="m and v"),
        Optimizer(name="adamw-bf16", matrix_states="n:2", vector_states=2, fixed_fmt="bf16",
                  description="m and v in bf16"),
        Optimizer(name="adam8bit", matrix_states="n:2", vector_states=2, fixed_fmt="int8-block2048",
                  description="block-wise 8-bit m and v (Dettmers et al. 2021)"),
        Optimizer(name="muon", matrix_states="n:1", vector_states=2,
                  description="momentum on 2-D hidden matrices; AdamW m, v on the rest"),
        Optimizer(name="adafactor", matrix_states="factored", vector_states=1,
                  description="factored second moment (rows + cols), no first moment"),
        Optimizer(name="sgd", matrix_states="n:0", vector_states=0, description="no state"),
        Optimizer(name="sgd-momentum", matrix_states="n:1", vector_states=1, description="momentum"),
        Optimizer(name="lion", matrix_states="n:1", vector_states=1, description="momentum"),
    )
}

PROFILES = ("megatron", "megatron-local", "paper", "hf", "hf-cpu")
ATTENTION_IMPLS = ("flash", "eager")
RECOMPUTE = ("none", "selective", "full", "every-k", "op", "interval", "memory-budget")
# torchtitan's activation_checkpoint modes (torchtitan/distributed/activation_checkpoint.py):
# op = SelectiveAC (per-operator save list), interval = selective_ac_option "<k>" (torchtitan
# 0.2: every k-th block fully checkpointed), memory-budget = MemoryBudgetAC (torch.compile's
# partitioner at activation_memory_budget = recompute_budget_pct / 100)


@cache_hash
@dataclass(frozen=True, kw_only=True)
class TrainSpec:
    micro_batch: int = 1
    seq: int = 4096
    micro_batches: int = 1  # per step per pipeline (gradient accumulation)
    precision: str = "megatron"
    optimizer: str = "adamw"
    profile: str = "megatron"  # or "traced:<name>" registered with memledger.ledger.activations
    attention: str = "flash"
    recompute: str = "none"
    recompute_every: int = 0  # every-k: checkpoint every k layers, 0 = ceil(sqrt(L)) (Chen 2016);
    # interval: every k-th block fully checkpointed (k >= 1 required)
    recompute_budget_pct: int = 50  # memory-budget: torchtitan memory_budget × 100 (0..100)
    vocab_pad: int = 0  # pad vocab to a multiple of vocab_pad*tp; 0 = profile default (128 / 1 for hf)
    # hidden dropout in percent (Megatron's --hidden-dropout × 100; its default 0.1 is 10): the
    # megatron profile keeps a bool mask per dropout when > 0; the probability itself moves nothing
    hidden_dropout_pct: int = 0
    policy: ActivationPolicy = ActivationPolicy()  # per-class storage rules on top of `recompute`
    finetune: FinetuneSpec = FinetuneSpec()  # which parameters train (specs/finetune.py)

    def __post_init__(self):
        for f in ("micro_batch", "seq", "micro_batches"):
            require_positive(f, getattr(self, f))
        require_choice("precision", self.precision, RECIPES)
        require_choice("optimizer", self.optimizer, OPTIMIZERS)
        if not self.profile.startswith("traced:"):
            require_choice("profile", self.profile, PROFILES + ("traced:<name>",))
        require_choice("attention", self.attention, ATTENTION_IMPLS)
        require_choice("recompute", self.recompute, RECOMPUTE)
        require_non_negative("recompute_every", self.recompute_every)
        if self.recompute == "interval":
            require(self.recompute_every >= 1, "recompute_every",
                    f"recompute=interval needs k >= 1 (torchtitan selective_ac_option='<k>': "
                    f"every k-th block fully checkpointed), got {self.recompute_every}")
        require(isinstance(self.recompute_budget_pct, int) and not isinstance(
            self.recompute_budget_pct, bool) and 0 <= self.recompute_budget_pct <= 100,
            "recompute_budget_pct", f"must be an integer 0..100 (torchtitan memory_budget × 100), "
                                    f"got {self.recompute_budget_pct!r}")
        require_non_negative("vocab_pad", self.vocab_pad)
        require(isinstance(self.hidden_dropout_pct, int) and not isinstance(
            self.hidden_dropout_pct, bool) and 0 <= self.hidden_dropout_pct <= 99,
            "hidden_dropout_pct", f"must be a whole percentage 0..99 (Megatron --hidden-dropout "
                                  f"× 100), got {self.hidden_dropout_pct!r}")
        check_bounds(self, ("micro_batch", "seq", "micro_batches", "recompute_every", "vocab_pad"))
        check_bound("tokens_per_step", self.micro_batch * self.seq * self.micro_batches,
                    "micro_batches")
        require(isinstance(self.policy, ActivationPolicy), "policy",
                f"must be an ActivationPolicy, got {type(self.policy).__name__}")
        require(isinstance(self.finetune, FinetuneSpec), "finetune",
                f"must be a FinetuneSpec, got {type(self.finetune).__name__}")
        if self.finetune.mode == "qlora" and self.recipe.fp8_matrices:
            raise SpecError("base_weights", f"qlora keeps a {self.finetune.base_weights} base that "
                                            f"is dequantised to {self.finetune.compute_dtype}; "
                                            f"precision={self.precision} stores fp8 matrices "
                                            f"(Transformer Engine), which cannot wrap it; valid "
                                            f"precisions: {', '.join(r for r in RECIPES if not RECIPES[r].fp8_matrices)}")
        if self.attention == "eager" and self.profile in ("megatron", "megatron-local"):
            raise SpecError("attention", f"profile={self.profile} assumes flash attention; use "
                                         "profile=hf or profile=paper for eager attention")

    @property
    def recipe(self) -> Recipe:
        return RECIPES[self.precision]

    @property
    def opt(self) -> Optimizer:
        return OPTIMIZERS[self.optimizer]

    @property
    def tokens_per_micro_batch(self) -> int:
        return self.micro_batch * self.seq

    def checkpoint_every(self, n_layers: int) -> int:
        return self.recompute_every or max(1, math.isqrt(n_layers - 1) + 1 if n_layers > 1 else 1)

    def pad_multiple(self) -> int:
        if self.vocab_pad:
            return self.vocab_pad
        return 1 if self.profile.startswith(("hf", "traced:")) else 128


def dropout_pct(p: float) -> int:
    """A dropout probability as TrainSpec's whole percentage: any p > 0 keeps masks, so a
    probability under 0.5 % still counts as 1 %."""
    return max(1, round(p * 100)) if p > 0 else 0
