"""`memledger reference`: the step-time model against published trainings, as the tests check it
(docs/step-time.md): for each published run, does its layout fit, the predicted against the
published TFLOP/s per GPU, and its rank among the planner's fitting configurations; for each
of the paper's layout comparisons (Narayanan et al. 2021 Figs. 12–16), the predicted TFLOP/s of
every layout and whether their order is the one measured. --match picks entries by name."""
from __future__ import annotations

import json
from dataclasses import asdict

from memledger.costs.published import LAYOUT_FIGURES, REFERENCE_RUNS
from memledger.planner.reference import check, figure_seconds, order_agrees, tflops_per_gpu


def add(sub) -> None:
    p = sub.add_parser("reference", help="the step-time model against published trainings")
    p.add_argument("--match", default=None,
                   help="only entries whose name contains this text (case-insensitive)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(run=run)


def _picked(entries, match: str | None):
    return [e for e in entries if match is None or match.lower() in e.name.lower()]


def run(args) -> int:
    if args.match is not None and not args.match.strip():
        raise ValueError("--match: empty; give part of an entry's name (or leave it out)")
    runs, figs = _picked(REFERENCE_RUNS, args.match), _picked(LAYOUT_FIGURES, args.match)
    if not runs and not figs:
        names = "; ".join(e.name for e in REFERENCE_RUNS + LAYOUT_FIGURES)
        raise ValueError(f"--match: no entry's name contains {args.match!r}; names: {names}")
    out = {"runs": [_run_row(r) for r in runs], "figures": [_figure_row(f) for f in figs]}
    print(json.dumps(out) if args.json else render(out))
    return 0


def _run_row(run) -> dict:
    c = check(run)
    best = c.best or {}
    return {"name": run.name, "source": run.source, "layout": run.layout, "fits": c.fits,
            "predicted_tflops_per_gpu": c.tflops_per_gpu, "published_tflops_per_gpu":
            run.tflops_per_gpu, "error": c.error, "seconds": c.seconds, "rank": c.rank,
            "n_fits": c.n_fits, "rank_fraction": c.rank_fraction,
            "fastest": {k: best.get(k) for k in ("tp", "pp", "vpp", "ep", "cp", "dp", "zero",
                                                 "micro_batch", "schedule", "seconds")}}


def _figure_row(fig) -> dict:
    per_batch = []
    for b in fig.global_batches:
        secs = figure_seconds(fig, b)
        tflops = [None if s is None else tflops_per_gpu(fig.run(layout, b), s)
                  for layout, s in zip(fig.layouts, secs)]
        per_batch.append({"global_batch": b, "seconds": secs, "tflops_per_gpu": tflops,
                          "agrees": order_agrees(fig, secs)})
    measured = (f"fastest at {fig.fastest.label(fig.shows)}" if fig.fastest
                else "each layout slower than the one before")
    return {"name": fig.name, "layouts": [asdict(x) for x in fig.layouts],
            "labels": [x.label(fig.shows) for x in fig.layouts], "measured": measured,
            "batches": per_batch}


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:+.1f} %"


def render(out: dict) -> str:
    lines = []
    if out["runs"]:
        lines.append(f"{'run':42} {'fits':>4} {'predicted':>9} {'published':>9} {'error':>8} "
                     "rank / fitting")
    for r in out["runs"]:
        pred, pub = r["predicted_tflops_per_gpu"], r["published_tflops_per_gpu"]
        rank = "—" if r["rank"] is None else (
            f"{r['rank']:,} / {r['n_fits']:,} ({100 * r['rank_fraction']:.1f} %)")
        lines.append(f"{r['name']:42} {'yes' if r['fits'] else 'no':>4} "
                     f"{'—' if pred is None else f'{pred:.0f}':>9} "
                     f"{'—' if pub is None else f'{pub:.0f}':>9} {_pct(r['error']):>8} {rank}")
    if out["runs"]:
        lines.append("TFLOP/s per GPU in each paper's FLOP convention; rank 1 = the planner's "
                     "fastest for the same model, GPUs, sequence and batch")
    for f in out["figures"]:
        lines.append(f"{f['name']} — measured: {f['measured']}")
        heads = "  ".join(f["labels"])
        lines.append(f"  {'batch':>5}  {heads}  (predicted TFLOP/s per GPU)")
        for b in f["batches"]:
            vals = "  ".join(f"{'—' if t is None else f'{t:.0f}':>{len(h)}}" for t, h in
                             zip(b["tflops_per_gpu"], heads.split("  ")))
            lines.append(f"  {b['global_batch']:>5}  {vals}  "
                         f"{'same order' if b['agrees'] else 'DIFFERENT order'}")
    return "\n".join(lines)
