"""The step-time model's track record on the Planner page: the rows of
`memledger.planner.answer.reference.report` (what `memledger reference` prints and the tests check) as
two tables — each published training (fits, predicted against published TFLOP/s per GPU, rank
among the planner's fitting layouts and configurations, its predicted step against the
fastest's) and each layout comparison of Narayanan et al. 2021 (predicted TFLOP/s per layout,
whether the order is the measured one). Computes nothing itself beyond calling `report` once
per process; formats for reading (the exact values: the CLI's `--json`)."""
from __future__ import annotations

from functools import lru_cache

import pandas as pd

from memledger.planner.answer.reference import report

CAPTION = ("The ranking above comes from this step-time model; here is how it does on published "
           "trainings (docs/step-time.md; `memledger reference` prints the same, `--json` the "
           "exact values). Rank 1 = the planner's fastest for that model, GPU count, sequence "
           "and batch: among layouts (the rows of the table above; vpp and recompute are knobs "
           "within a row) and among configurations; step vs fastest: how much longer the "
           "published layout's predicted step is than the fastest's, to read against the "
           "error column; TFLOP/s in each paper's own FLOP convention.")


@lru_cache(maxsize=1)
def record() -> dict:
    """The whole reference report, once per server process (~14 searches, some seconds; it
    depends on no input, so every session shares it)."""
    return report()


def runs_table(rec: dict) -> pd.DataFrame:
    rows = []
    for r in rec["runs"]:
        rank = r["rank"]
        rows.append({
            "published training": r["name"], "fits": "yes" if r["fits"] else "no",
            "predicted TFLOP/s": _round(r["predicted_tflops_per_gpu"]),
            "published TFLOP/s": r["published_tflops_per_gpu"],
            "error %": None if r["error"] is None else round(100 * r["error"], 1),
            "layout rank": r["layout_rank"], "of layouts": r["n_layouts"],
            "in the fastest": None if rank is None else _share(r["layout_fraction"]),
            "fastest 10 %": None if rank is None else "yes" if r["in_fastest_tenth"] else "no",
            "step vs fastest %": None if r["behind_fastest"] is None
            else round(100 * r["behind_fastest"], 1),
            "configuration rank": rank, "of configurations": r["n_fits"]})
    return pd.DataFrame(rows)


def figures_table(rec: dict) -> pd.DataFrame:
    rows = []
    for f in rec["figures"]:
        for b in f["batches"]:
            predicted = " · ".join(f"{label} {'—' if t is None else round(t)}"
                                   for label, t in zip(f["labels"], b["tflops_per_gpu"]))
            rows.append({"comparison": f["name"], "batch": b["global_batch"],
                         "measured": f["measured"], "predicted TFLOP/s per GPU": predicted,
                         "same order": "yes" if b["agrees"] else "no"})
    return pd.DataFrame(rows)


def _share(fraction: float) -> str:
    pct = 100 * fraction
    return f"{pct:.1f} %" if pct >= 1 else f"{pct:.2g} %"


def _round(x):
    return None if x is None else round(x, 1)
