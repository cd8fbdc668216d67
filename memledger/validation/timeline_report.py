"""Timeline validation as stored data: measure the grid of (case, loop) runs once, keep the
measured bytes at every mark (validation/timeline-<device>.json), re-predict them with the
current ledger on every load (no torch needed), like `memledger validate --rescore`.

Grid: the CPU cases × the loop knobs `memledger validate --timeline` covers — zero_grad to None
or not, AdamW foreach / fused / for-loop, HF gradient checkpointing. Bars: every mark within
3 %, the step's peak within 10 % (docs/timeline.md).
"""
from __future__ import annotations

from dataclasses import replace

from memledger.ledger import build_ledger
from memledger.model.hf_config import from_hf_config
from memledger.specs import ParallelSpec
from memledger.validation.cases import CPU_CASES, Case
from memledger.validation.timeline_measure import LOOP_RUNS, LoopRun, event_marks, predicted_marks

MARK_BAR, PEAK_BAR = 0.03, 0.10
CASES = {c.name: c for c in CPU_CASES}
CASES["llama-tiny bf16 checkpointing"] = replace(CASES["llama-tiny bf16"],
                                                 name="llama-tiny bf16 checkpointing",
                                                 recompute="full")
RUNS = {r.name: r for r in LOOP_RUNS}
# the chunked loss is written for bf16 (no autocast around it): not run on the amp case
GRID = [(c, r) for c in (*CPU_CASES, CASES["llama-tiny bf16 checkpointing"]) for r in LOOP_RUNS
        if not (r.loss == "chunked" and c.precision == "amp")]


def stored_run(x: dict) -> LoopRun:
    return LoopRun(x["loop"], x["set_to_none"], x["optimizer_impl"], x.get("loss", "materialized"))


def measure_grid(device: str = "cpu", grid=None, log=None) -> dict:
    """Run every (case, loop) of the grid; the measurements only (torch)."""
    from memledger.validation.measure import environment
    from memledger.validation.timeline_measure import measure_marks
    runs = []
    for case, run in grid or GRID:
        m = measure_marks(case, run, device)
        runs.append({"case": case.name, "loop": run.name, "set_to_none": run.set_to_none,
                     "optimizer_impl": run.optimizer_impl, "loss": run.loss, "marks": m["marks"],
                     "peak_measured": m["peak_allocated"], "peak_at": m["peak_at"]})
        if log:
            log(runs[-1])
    return {"environment": environment(), "runs": runs}


def ledger_for(case: Case, run: LoopRun, device: str = "cpu"):
    return build_ledger(from_hf_config(case.config, name=case.name), ParallelSpec(schedule="gpipe"),
                        case.train(device), run.runtime())


def rescore_timeline(doc: dict) -> list[dict]:
    """One record per stored run: predicted vs measured at every mark, and the peaks."""
    device = doc.get("environment", {}).get("device", "cpu")
    out = []
    for x in doc["runs"]:
        case, run = CASES[x["case"]], stored_run(x)
        got = dict(reversed([tuple(m) for m in x["marks"]]))
        rows = [(k, p, got[k]) for k, p in predicted_marks(case, run, device) if k in got]
        worst = max((abs(p - m) / m for _, p, m in rows), default=0.0)
        peak = ledger_for(case, run, device).ranks[0].peak_allocated_bytes
        err = (peak - x["peak_measured"]) / x["peak_measured"]
        out.append({"case": x["case"], "loop": x["loop"], "rows": rows, "worst_mark": worst,
                    "peak_predicted": peak, "peak_measured": x["peak_measured"], "peak_error": err,
                    "ok": worst <= MARK_BAR and abs(err) <= PEAK_BAR})
    return out


def measured_by_event(led, marks) -> list[int | None]:
    """The measured bytes aligned to the ledger's events (None where no mark matches)."""
    got = dict(reversed([tuple(m) for m in marks]))
    labels = [label for label, _ in event_marks(led)]
    return [got.get(label) if label else None for label in labels]
