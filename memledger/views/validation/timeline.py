"""The Validation page's timeline section: stored timeline measurements (validation/timeline-*.json,
written by `memledger validate --timeline`) overlaid on the ledger's predicted timeline.
Predictions are re-derived on every load (memledger.validation.timeline_report)."""
from __future__ import annotations

import json
from pathlib import Path

from memledger.validation.timeline_report import (CASES, MARK_BAR, PEAK_BAR, ledger_for,
                                                  measured_by_event, rescore_timeline, stored_run)
from memledger.views.staircase.timeline_charts import timeline_chart


def load_timeline(folder: Path) -> dict | None:
    """The first timeline-*.json in `folder`, or None when there is none or it cannot be read."""
    for path in sorted(folder.glob("timeline-*.json")):
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None
    return None


def run_names(doc: dict) -> list[str]:
    return [f"{x['case']} | {x['loop']}" for x in doc["runs"]]


def summary(doc: dict) -> str:
    recs = rescore_timeline(doc)
    worst = max(r["worst_mark"] for r in recs)
    peak = max(abs(r["peak_error"]) for r in recs)
    ok = sum(r["ok"] for r in recs)
    return (f"{ok} of {len(recs)} runs within the bars: worst event {100 * worst:.2f}% "
            f"(bar {100 * MARK_BAR:g}%), worst peak {100 * peak:.2f}% (bar {100 * PEAK_BAR:g}%).")


def overlay(doc: dict, index: int):
    """The predicted timeline of one stored run with its measured marks as a line."""
    x = doc["runs"][index]
    run = stored_run(x)
    led = ledger_for(CASES[x["case"]], run, doc.get("environment", {}).get("device", "cpu"))
    fig = timeline_chart(led, 0, measured=measured_by_event(led, x["marks"]))
    fig.update_layout(title_text=f"Predicted timeline and measured bytes: {x['case']}, {x['loop']}")
    fig.update_traces(connectgaps=True, selector=dict(name="measured"))
    return fig
