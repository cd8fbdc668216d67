"""Seed 2's textbook ledger: 16 bytes per parameter, and what each technique cuts.

Mixed precision with Adam keeps, per parameter N (seed 2; ZeRO paper arXiv 1910.02054 §3,
K = 12): fp16/bf16 parameters 2, gradients 2, optimizer states 12 = fp32 master 4 + Adam m 4 +
v 4, so 16N bytes. Without mixed precision (fp32 training) the weights are the master copy:
4 + 4 + 8. ZeRO over d data-parallel GPUs (ZeRO paper §5): stage 1 shards the optimizer states,
stage 2 also the gradients, stage 3 also the parameters. Checkpointing keeps seed 2's
(⌈√L⌉ + 1)/L share of the activations (`memledger.costs.checkpointing`).
Ignores: buffers, fragmentation, vocabulary padding; activation bytes are the caller's (the
ledger's activation row), because they depend on the model's shape, not on N.
"""
from __future__ import annotations

from dataclasses import dataclass

from memledger.costs.checkpointing import checkpointed_bytes, seed_checkpoints
from memledger.errors import require_positive
from memledger.units import ceil_div

MIXED_BYTES = {"weights": 2, "gradients": 2, "optimizer": 12}
OPTIMIZER_PARTS = {"fp32 master copy": 4, "Adam m (fp32)": 4, "Adam v (fp32)": 4}
FP32_BYTES = {"weights": 4, "gradients": 4, "optimizer": 8}
ZERO_SHARDS = {0: (), 1: ("optimizer",), 2: ("optimizer", "gradients"),
               3: ("optimizer", "gradients", "weights")}


def static_bytes(n_params: int, per_param: dict[str, int] = MIXED_BYTES) -> dict[str, int]:
    """The three static rows for N parameters (default: 2N, 2N, 12N)."""
    require_positive("n_params", n_params)
    return {row: b * n_params for row, b in per_param.items()}


def zero_bytes(n_params: int, d: int, stage: int) -> dict[str, int]:
    """Per-GPU static rows of mixed precision + Adam under ZeRO stage 0-3 over d GPUs."""
    require_positive("d", d)
    rows = static_bytes(n_params)
    return {r: ceil_div(b, d) if r in ZERO_SHARDS[stage] else b for r, b in rows.items()}


@dataclass(frozen=True)
class Column:
    """One step of seed 2's savings path: per-GPU bytes of the four ledgers."""

    label: str
    cuts: str  # which ledger this step cuts, in a few words
    rows: dict[str, int]  # weights, gradients, optimizer, activations


def technique_columns(n_params: int, d: int, act_mixed: int, act_fp32: int,
                      n_layers: int) -> tuple[Column, ...]:
    """fp32 → mixed precision → ZeRO-1/2/3 on d GPUs → + checkpointing, each per GPU."""
    ckpt = checkpointed_bytes(act_mixed, n_layers)
    k = seed_checkpoints(n_layers)
    return (
        Column("fp32, no tricks", "baseline: 4 + 4 + 8 bytes/param",
               static_bytes(n_params, FP32_BYTES) | {"activations": act_fp32}),
        Column("mixed precision", "params and grads to 2 bytes, +4 fp32 master; activations halved",
               static_bytes(n_params) | {"activations": act_mixed}),
        Column(f"ZeRO-1 (d={d})", "optimizer states ÷ d",
               zero_bytes(n_params, d, 1) | {"activations": act_mixed}),
        Column(f"ZeRO-2 (d={d})", "also gradients ÷ d",
               zero_bytes(n_params, d, 2) | {"activations": act_mixed}),
        Column(f"ZeRO-3 (d={d})", "also parameters ÷ d",
               zero_bytes(n_params, d, 3) | {"activations": act_mixed}),
        Column("+ checkpointing", f"activations × {min(k, n_layers)}/{n_layers} (⌈√L⌉+1 kept)",
               zero_bytes(n_params, d, 3) | {"activations": ckpt}),
    )


# Seed 2's worked examples: (label, N parameters, L layers) — its script prints 104.3 GiB and
# 7 checkpoints ≈ 22% for the first, 1043.1 GiB and 10 ≈ 13% for the second.
SEED_EXAMPLES = {"seed-7b": ("7B, 32 layers (textbook example)", 7_000_000_000, 32),
                 "seed-70b": ("70B, 80 layers (textbook example)", 70_000_000_000, 80)}
