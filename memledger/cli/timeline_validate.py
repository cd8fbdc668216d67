"""`memledger validate --timeline`: measure the timeline grid, print and store it; and print a
stored one re-predicted (`--rescore timeline-cpu.json`). Output for the CLI face only."""
from __future__ import annotations

import json
from pathlib import Path

from memledger.validation.timeline_report import measure_grid, rescore_timeline


def print_records(doc: dict) -> int:
    records = rescore_timeline(doc)
    for r in records:
        print(f"{r['case']:<32} {r['loop']:<22} worst event {100 * r['worst_mark']:5.2f}%  "
              f"peak {100 * r['peak_error']:+6.2f}%  {'ok' if r['ok'] else 'MISS'}")
    return 0 if all(r["ok"] for r in records) else 1


def run_timeline(device: str, out: str | None, force: bool = False) -> int:
    from memledger.cli.outfiles import keep_existing
    if out:
        keep_existing([Path(out) / f"timeline-{device}.json"], force)
    doc = measure_grid(device, log=lambda x: print(f"measured {x['case']} | {x['loop']}", flush=True))
    if out:
        path = Path(out) / f"timeline-{device}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1) + "\n")
    return print_records(doc)
