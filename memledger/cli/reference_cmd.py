"""`memledger reference`: the step-time model against published trainings, as the tests check it
(docs/step-time.md): for each published run, does its layout fit, the predicted against the
published TFLOP/s per GPU, and its rank among the planner's fitting layouts and configurations
(`planner.answer.reference`); for each of the paper's layout comparisons (Narayanan et al. 2021 Figs.
12–16), the predicted TFLOP/s of every layout and whether their order is the one measured.
--match picks entries by name."""
from __future__ import annotations

import json

from memledger.planner.answer.reference import report


def add(sub) -> None:
    p = sub.add_parser("reference", help="the step-time model against published trainings")
    p.add_argument("--match", default=None,
                   help="only entries whose name contains this text (case-insensitive)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(run=run)


def run(args) -> int:
    try:
        out = report(args.match)
    except ValueError as e:
        raise ValueError(f"--match: {e}") from None
    print(json.dumps(out) if args.json else render(out))
    return 0


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:+.1f} %"


def render(out: dict) -> str:
    lines = []
    if out["runs"]:
        lines.append(f"{'run':42} {'fits':>4} {'predicted':>9} {'published':>9} {'error':>8} "
                     f"{'layout rank':>22} {'vs fastest':>10}  configuration rank")
    for r in out["runs"]:
        pred, pub = r["predicted_tflops_per_gpu"], r["published_tflops_per_gpu"]
        ranks = ("—", "—") if r["rank"] is None else (
            f"{r['layout_rank']:,} / {r['n_layouts']:,} ({100 * r['layout_fraction']:.1f} %)",
            f"{r['rank']:,} / {r['n_fits']:,} ({100 * r['rank_fraction']:.1f} %)")
        lines.append(f"{r['name']:42} {'yes' if r['fits'] else 'no':>4} "
                     f"{'—' if pred is None else f'{pred:.0f}':>9} "
                     f"{'—' if pub is None else f'{pub:.0f}':>9} {_pct(r['error']):>8} "
                     f"{ranks[0]:>22} {_pct(r['behind_fastest']):>10}  {ranks[1]}")
    if out["runs"]:
        lines.append("TFLOP/s per GPU in each paper's FLOP convention; rank 1 = the planner's "
                     "fastest for the same model, GPUs, sequence and batch,")
        lines.append("among layouts (the Planner's table rows; vpp and recompute are knobs "
                     "within a row) and among configurations; vs fastest = the published")
        lines.append("layout's predicted step time against the fastest configuration's")
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
