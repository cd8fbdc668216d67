"""The three static rows — weights, gradients, optimizer states — for one pipeline rank.

Per parameter group held by the rank: n_local = ceil(count / shard divisor) × instances.
weights  = n_local in the recipe's weight format (fp8 recipe: linear matrices 1 byte plus a
           1-byte transposed copy, the rest bf16), ÷ zero group under ZeRO-3;
gradients = n_local in the gradient format, ÷ zero group under ZeRO ≥ 2;
optimizer = master copy + states per the optimizer table, ÷ zero group under ZeRO ≥ 1.
ZeRO paper (arXiv 1910.02054) §5: stage 0 N(w+γ+o), 1 N(w+γ+o/d), 2 N(w+(γ+o)/d), 3 N(w+γ+o)/d.
Ignores: padding of the distributed-optimizer buffer to bucket multiples (< 0.1%).
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.ledger.fsdp2 import expert_local, n_experts
from memledger.ledger.static.sharding import (ZERO_SHARDED, dense_group_label, shard_divisor,
                                             zero_divisor, zero_group)
from memledger.model.params import ParamGroup
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import Optimizer, Recipe, TrainSpec
from memledger.units import ceil_div, format_bytes

SOURCE_ZERO = "ZeRO (arXiv 1910.02054) §5; Megatron-LM distributed optimizer docs"
# torch 2.13 torch/optim/adam.py (_init_group; AdamW is Adam): a requires_grad=False parameter
# keeps .grad None and gets no state (`if p.grad is not None`); DDP/FSDP skip it likewise
FROZEN = "frozen (requires_grad=False): no .grad, no optimizer state"


@dataclass(frozen=True)
class Held:
    """A parameter group held `instances` times on a rank (e.g. one per layer of a kind)."""

    section: str  # "dense layers", "moe layers", "embedding", "head", "mtp"
    group: ParamGroup
    instances: int


def local_params(h: Held, p: ParallelSpec) -> int:
    return ceil_div(h.group.count, shard_divisor(h.group, p)) * h.instances


def sharded_params(row: str, h: Held, p: ParallelSpec, pad: str = ""):
    """n_local / z, or FSDP2's dim-0 chunk for a 3-D expert tensor (memledger.ledger.fsdp2:
    `pad` = expert_sharding(...): "", "dim0" or "dim1-if-fewer")."""
    z = zero_divisor(row, h.group, p)
    if pad and h.group.expert and row in ZERO_SHARDED[p.zero] and (
            pad == "dim0" or zero_group(h.group, p) * p.ep <= n_experts(h.group)):
        return expert_local(h.group, p, z, h.instances)
    return ceil_div(local_params(h, p), z)


def weight_fmt(g: ParamGroup, r: Recipe) -> str:
    if g.store:
        return g.store
    if g.fp32:
        return "fp32"
    return "fp8" if r.fp8_matrices and g.matrix else r.weight_fmt


def state_values(g: ParamGroup, n: int, opt: Optimizer) -> int:
    """Optimizer state values for n local params of group g."""
    if not g.matrix:
        return n * opt.vector_states
    if opt.matrix_states == "factored":
        return ceil_div(n * (g.rows + g.cols), g.rows * g.cols)
    return n * int(opt.matrix_states.split(":")[1])


def weights_bytes(h: Held, p: ParallelSpec, t: TrainSpec, pad: str = "") -> tuple[int, str]:
    n = sharded_params("weights", h, p, pad)
    f = weight_fmt(h.group, t.recipe)
    if ":" in f:  # a quantised base: constants per tensor (specs/finetune.py, units._quantised)
        k = h.instances * (h.group.count // (h.group.rows * h.group.cols))
        k = k + (k == 0)  # array-safe max(k, 1) (the planner passes arrays)
        return format_bytes(f, ceil_div(n, k)) * k, f"N_local/z in {k} tensors × {f}"
    copies = 2 if f == "fp8" and not h.group.store else 1  # TE keeps a transposed fp8 copy
    return format_bytes(f, n) * copies, f"N_local/z × {f}" + (" × 2 (fp8 + transpose)" if copies == 2 else "")


def gradients_bytes(h: Held, p: ParallelSpec, t: TrainSpec, pad: str = "") -> tuple[int, str]:
    if h.group.frozen:
        return 0, FROZEN
    n = sharded_params("gradients", h, p, pad)
    f = "fp32" if h.group.fp32 else t.recipe.grad_fmt
    return format_bytes(f, n), f"N_local/z × {f}"


def optimizer_bytes(h: Held, p: ParallelSpec, t: TrainSpec, pad: str = "") -> tuple[int, str]:
    if h.group.frozen:
        return 0, FROZEN
    n = sharded_params("optimizer", h, p, pad)
    opt, r = t.opt, t.recipe
    state_fmt = opt.fixed_fmt or ("fp32" if h.group.fp32 else r.state_fmt)
    total = format_bytes(state_fmt, state_values(h.group, n, opt))
    parts = [f"{opt.name} states in {state_fmt}"]
    if r.master_fmt and weight_fmt(h.group, r) != r.master_fmt:  # an fp32 weight is its own master
        total += format_bytes(r.master_fmt, n)
        parts.insert(0, f"{r.master_fmt} master")
    if r.main_grad_fmt:
        total += format_bytes(r.main_grad_fmt, n)
        parts.insert(1, f"{r.main_grad_fmt} grad copy")
    return total, f"N_local/z × ({' + '.join(parts)})"


ROW_FUNCS = {"weights": weights_bytes, "gradients": gradients_bytes, "optimizer": optimizer_bytes}


def zero_note(row: str, h: Held, p: ParallelSpec) -> str:
    d = zero_divisor(row, h.group, p)
    if d == 1:
        return ""
    kind = "expert-dp" if h.group.expert else dense_group_label(p)
    return f", z = {kind} = {zero_group(h.group, p)} (ZeRO-{p.zero})"


def flat_static_bytes(n_params: int, t: TrainSpec, zero: int, d: int) -> dict[str, int]:
    """Static rows for n_params held in one flat group (a matrix) replicated over d data-parallel
    ranks at ZeRO stage `zero` — the textbook ledger (seed 2's 16N, the ZeRO paper's Figure 1)."""
    g = ParamGroup("model", n_params, "replicated", True, 1, 1)
    p = ParallelSpec(dp=d, zero=zero)
    h = Held("model", g, 1)
    return {row: fn(h, p, t)[0] for row, fn in ROW_FUNCS.items()}
