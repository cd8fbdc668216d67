"""Throughput of a configuration from its predicted step time: tokens/s, model TFLOP/s per GPU
and MFU (model FLOPs utilisation: 3 × the model's forward FLOPs per token, recompute not
counted, over the GPUs' dense bf16 peak — the convention of Chowdhery et al. 2022, PaLM,
Appendix B), and the breakdown of one layout's step into the terms of
`memledger.costs.stepmodel` (`timing.PARTS`).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from memledger.model.flops import head_forward_flops_per_token, layer_forward_flops_per_token
from memledger.model.params import layer_kind
from memledger.planner.spec import Constraints, PlanSpec
from memledger.planner.timing import PARTS


def forward_flops_per_token(m, seq: int) -> int:
    """The whole model's forward FLOPs per token: every layer and the head."""
    layers = sum(layer_forward_flops_per_token(m, layer_kind(m, i), seq) for i in range(m.n_layers))
    return layers + (head_forward_flops_per_token(m, m.vocab) if m.vocab else 0)


def throughput(spec: PlanSpec, seconds, world):
    """(tokens/s, model TFLOP/s per GPU, MFU in %) of steps of `seconds` on `world` GPUs."""
    seconds, world = np.asarray(seconds, np.float64), np.asarray(world, np.float64)
    tokens = spec.global_batch * spec.seq
    tps = tokens / seconds
    tflops = 3.0 * forward_flops_per_token(spec.model, spec.seq) * tps / world / 1e12
    return tps, tflops, 100.0 * tflops * 1e12 / spec.hardware.bf16_flops


def breakdown(spec: PlanSpec, row: dict) -> dict[str, float]:
    """Seconds per step of each term (PARTS) for the configuration `row` (a Plan row); they
    sum to its predicted step time."""
    from memledger.planner import plan
    fixed = {k: row[k] for k in ("tp", "pp", "vpp", "ep", "etp", "cp", "dp", "zero",
                                 "micro_batch", "recompute", "schedule")}
    one = replace(spec, worlds=(row["world"],), constraints=Constraints(
        **fixed, max_tp=row["tp"], max_etp=row["etp"]))
    result = plan(one, keep_all=True, parts=True)
    cols = result.evaluated.columns()
    hit = np.flatnonzero(cols["balanced"] == (row.get("layout") == "balanced"))
    if not len(hit):
        raise ValueError(f"configuration not in the space: {row}")
    i = int(hit[0])
    return {k: float(result.evaluated.parts[k][i]) for k in PARTS}


LABELS = {"compute": "compute", "recompute": "recompute", "tp": "TP comm", "cp": "CP ring",
          "ep": "EP all-to-all", "pp_p2p": "PP send/recv", "bubble": "bubble",
          "dp_sync": "DP sync", "zero3": "ZeRO-3 gathers", "optimizer": "optimizer",
          "grad_accum": "grad accumulation"}


def annotate(spec: PlanSpec, rows: list[dict], explain: int | None = None) -> list[dict]:
    """Rows with tokens_per_s, tflops_per_gpu and mfu_pct; the first `explain` (default all)
    also with the step's breakdown (seconds per term) and `why`: the terms that make it slower
    than the first row (or, for the first, its largest terms besides compute). Each
    explanation is one single-configuration search."""
    out, first = [], None
    for i, row in enumerate(rows):
        tps, tflops, mfu = throughput(spec, row["seconds"], row["world"])
        row = row | {"tokens_per_s": float(tps), "tflops_per_gpu": float(tflops),
                     "mfu_pct": float(mfu)}
        if explain is None or i < explain:
            parts = breakdown(spec, row)
            first = first or parts
            row |= {"breakdown": parts, "why": why(parts, first, row["seconds"])}
        out.append(row)
    return out


def why(parts: dict, first: dict, seconds: float) -> str:
    """One phrase: what this step spends beyond the fastest one, largest first."""
    if parts is first:
        big = sorted((v, k) for k, v in parts.items() if k != "compute" and v > 0)[::-1][:2]
        rest = ", ".join(f"{LABELS[k]} {v / seconds:.0%}" for v, k in big)
        return f"fastest; compute {parts['compute'] / seconds:.0%}" + (f", {rest}" if rest else "")
    delta = sorted(((parts[k] - first[k], k) for k in parts), reverse=True)
    gains = [f"+{d:.2f} s {LABELS[k]}" for d, k in delta[:2] if d > 1e-3]
    return "; ".join(gains) or "ties the fastest (smaller peak first)"
