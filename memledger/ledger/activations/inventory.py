"""The activation inventory: every tensor a layer saves for backward, with its storage rules.

A tensor is `values` numbers per token (or per routed token-expert row) in a format, divided
across ranks by one split rule. Bytes on a rank for one micro-batch:
    n = ceil(rows · values / divisor);  bytes = format_bytes(fmt, n)
with rows = tokens on the rank (b·s/cp) or, for routed tensors, the rank's token-expert rows.
The symbolic format "act" resolves to the recipe's activation format (bf16, or fp32 for fp32).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from memledger.specs.model import ModelSpec
from memledger.specs.parallel import ParallelSpec
from memledger.specs.train import TrainSpec
from memledger.units import ceil_div, format_bytes

SPLITS = ("tp", "sp", "none", "etp")


@dataclass(frozen=True)
class ActTensor:
    name: str  # e.g. "attn.q"
    cls: str  # policy class: norm, qkv, attn_core, attn_out, mlp_in, mlp_fc1, mlp_act, router, ...
    values: int  # numbers per token (or per routed row), before any parallel division
    fmt: str = "act"
    split: str = "sp"  # tp: values ÷ tp; sp: tokens ÷ tp under SP; none; etp: values ÷ etp
    per: str = "token"  # "token" or "routed"
    flops: int = 0  # forward FLOPs per token (or row) to re-create it from kept inputs
    pieces: int = 1  # equal separate tensors it stands for (the reserved replay allocates each)


class Profile(Protocol):
    """A source of inventories. `selective` lists the classes selective recompute drops."""

    name: str
    selective: frozenset[str]

    def layer(self, m: ModelSpec, kind: str, t: TrainSpec, p: ParallelSpec) -> tuple[ActTensor, ...]: ...

    def first_stage(self, m: ModelSpec, t: TrainSpec, p: ParallelSpec) -> tuple[ActTensor, ...]: ...

    def last_stage(self, m: ModelSpec, t: TrainSpec, p: ParallelSpec) -> tuple[ActTensor, ...]: ...

    def layer_input(self, m: ModelSpec, t: TrainSpec, p: ParallelSpec) -> ActTensor: ...

    def transients(self, m: ModelSpec, t: TrainSpec, p: ParallelSpec) -> tuple[ActTensor, ...]: ...


def tokens_on_rank(t: TrainSpec, p: ParallelSpec) -> int:
    """Tokens of one micro-batch on one rank before the SP split: b·s/cp."""
    return ceil_div(t.micro_batch * t.seq, p.cp)


def routed_rows(m: ModelSpec, t: TrainSpec, p: ParallelSpec) -> int:
    """Token-expert rows an expert rank processes per micro-batch under balanced routing.

    Tokens leave the rank split by SP (b·s/(cp·tp)); each goes to K experts; the all-to-all over
    ep ranks returns, on average, as many rows as were sent; ETP ranks share their rows.
    """
    k = m.moe.top_k if m.moe else 0
    return ceil_div(tokens_on_rank(t, p), p.tp if p.sp else 1) * k * p.etp


def divisor(x: ActTensor, p: ParallelSpec) -> int:
    if x.split == "tp":
        return p.tp
    if x.split == "sp":
        return p.tp if p.sp else 1
    if x.split == "etp":
        return p.etp
    return 1


@lru_cache(maxsize=65536)
def tensor_bytes(x: ActTensor, m: ModelSpec, t: TrainSpec, p: ParallelSpec, fmt: str | None = None) -> int:
    """Bytes of one micro-batch's copy of `x` on one rank (optionally stored in `fmt`)."""
    rows = routed_rows(m, t, p) if x.per == "routed" else tokens_on_rank(t, p)
    n = ceil_div(rows * x.values, divisor(x, p))
    f = fmt or (t.recipe.act_fmt if x.fmt == "act" else x.fmt)
    return format_bytes(f, n)


@lru_cache(maxsize=65536)
def formula(x: ActTensor, m: ModelSpec, t: TrainSpec, p: ParallelSpec) -> str:
    """A readable one-liner with the numbers of this configuration."""
    if x.per == "routed":
        rows = f"{routed_rows(m, t, p)} routed rows (b·s/cp/tp_sp·K·etp)"
    else:
        rows = f"{tokens_on_rank(t, p)} tokens (b·s/cp)"
    d = divisor(x, p)
    div = f" / {d} ({'tp' if x.split in ('tp', 'sp') else x.split})" if d > 1 else ""
    f = t.recipe.act_fmt if x.fmt == "act" else x.fmt
    return f"{rows} × {x.values} values{div} × {f}"
