"""One layout's step time by term (`time.timing.PARTS`, the terms of `memledger.costs.stepmodel`),
from a single-configuration search, and the Planner's rows annotated with throughput and the
terms that make each slower than the fastest.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from memledger.planner.answer.search import plan
from memledger.planner.question.spec import Constraints, PlanSpec
from memledger.planner.time.throughput import LABELS, throughput
from memledger.planner.time.timing import PARTS


def breakdown(spec: PlanSpec, row: dict) -> dict[str, float]:
    """Seconds per step of each term (PARTS) for the configuration `row` (a Plan row); they
    sum to its predicted step time."""
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
