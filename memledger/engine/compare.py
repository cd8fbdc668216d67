"""Predicted vs measured per rank and row, the staircase check, and re-scoring of stored runs
(pure: no torch). Measurements are facts of a run; predictions are re-derived from the current
ledger every time (as `memledger.validation.report.rescore` does for the GPU run).

Rows and bars (issue 11): weights, gradients, optimizer states within 0.5%; activations within
3%; peak within 10%. The predicted peak is the ledger's peak_allocated of the rank's pipeline
position plus the input ids the step keeps alive (measured, as in memledger.validation).
Under ZeRO-1 the optimizer row is the measured rank's own dp rank of the greedy partition
(`memledger.ledger.static.engines`; the ledger's row is the most loaded dp rank). Held micro-batches: the forwards each chunk has run when the rank's first backward starts,
against the ledger's in-flight count — exactly.
"""
from __future__ import annotations

from memledger.engine.cases import EngineCase, case_from_dict, predict
from memledger.ledger.build import dp_optimizer_rows

TOLERANCE = {"weights": 0.005, "gradients": 0.005, "optimizer": 0.005, "activations": 0.03,
             "peak_allocated": 0.10}


def _rel(p: int, m: int) -> float:
    return (p - m) / m if m else (0.0 if p == 0 else float("inf"))


def predicted_rank(led, pp_rank: int, inputs_bytes: int, dp_rank: int = 0) -> dict:
    """The ledger's rows for one rank; the optimizer row of its own dp rank where dp ranks
    differ (ZeroRedundancyOptimizer's whole-tensor partition), else the pipeline rank's row."""
    r = led.ranks[pp_rank]
    per_dp = dp_optimizer_rows(led.model, led.parallel, led.train, led.runtime, pp_rank)
    return {"weights": r.rows["weights"], "gradients": r.rows["gradients"],
            "optimizer": per_dp[dp_rank] if per_dp else r.rows["optimizer"],
            "activations": r.rows["activations"],
            "peak_allocated": r.peak_allocated_bytes + inputs_bytes,
            "held": {str(s): n for s, n in r.in_flight}}


def measured_rank(m: dict) -> dict:
    return {"weights": m["weights"], "gradients": m["gradients"], "optimizer": m["optimizer"],
            "activations": m["activations"], "peak_allocated": m["peak_live"]}


def compare_case(case: EngineCase, ranks: list[dict], led=None) -> list[dict]:
    """One record per rank and row, plus one `held` record per rank for pipeline cases."""
    led = led or predict(case)
    out = []
    for m in ranks:
        pr = m["coords"]["pp"]
        pred = predicted_rank(led, pr, m.get("inputs", 0), m["coords"]["dp"])
        meas = measured_rank(m)
        base = {"case": case.name, "strategy": case.strategy, "rank": m["rank"], "pp_rank": pr,
                "dp_rank": m["coords"]["dp"], "tp_rank": m["coords"]["tp"], "world": case.world}
        for row, tol in TOLERANCE.items():
            if case.ep > 1 and row in EP_REPORTED:
                continue
            err = _rel(pred[row], meas[row])
            out.append({**base, "row": row, "predicted_bytes": pred[row],
                        "measured_bytes": meas[row], "rel_error": err, "tolerance": tol,
                        "ok": abs(err) <= tol})
        if case.pp > 1:
            held_p = sum(pred["held"].values())
            held_m = sum(m["held"].values())
            out.append({**base, "row": "held", "predicted_bytes": held_p, "measured_bytes": held_m,
                        "rel_error": _rel(held_p, held_m), "tolerance": 0.0,
                        "ok": pred["held"] == m["held"]})
    if case.ep > 1:
        out += _ep_records(case, ranks, led)
    return out


EP_REPORTED = ("activations", "peak_allocated")  # the harness dispatcher saves its own tensors


def _ep_records(case: EngineCase, ranks: list[dict], led) -> list[dict]:
    """The dispatch buffer: rows each EP rank received per MoE layer and micro-batch. Routing
    decides each rank's share; the mean over the ep ranks is the ledger's `dynamic` size T·K
    exactly (every token-expert pair lands somewhere), within the dropless worst case."""
    items = {i.name: i for i in led.ranks[0].items}
    one = items["moe all-to-all / dispatch"].bytes
    h_bytes = 2 * case.config["hidden_size"]  # bf16 rows
    per = [r["ep_received_rows"] for r in sorted(ranks, key=lambda r: r["rank"])]
    mean = sum(map(sum, per)) * h_bytes // (len(per) * len(per[0]))
    base = {"case": case.name, "strategy": case.strategy, "rank": -1, "pp_rank": 0, "dp_rank": -1,
            "tp_rank": 0, "world": case.world}
    return [{**base, "row": "a2a dispatch (mean over ep)", "predicted_bytes": one,
             "measured_bytes": mean, "rel_error": _rel(one, mean), "tolerance": 0.0,
             "ok": one == mean}]


def rescore(doc: dict) -> list[dict]:
    """Records for a stored engine run, predicted by the ledger as it is now (each measurement
    keeps the case it ran, so a stored run stays checkable when the case list changes)."""
    records = []
    for entry in doc["measurements"]:
        records += compare_case(case_from_dict(entry["spec"]), entry["ranks"])
    return records


def load_runs(folder) -> tuple[list[dict], list[str]]:
    """Every engine-*.json of the torch engine in `folder` (docs), and one problem line per file
    that cannot be read. Other engines' files (torchtitan, Megatron-Core: their `engine` field)
    are theirs to re-predict (engine/titan_compare.py, engine/megatron_compare.py)."""
    import json
    from pathlib import Path
    docs, problems = [], []
    for path in sorted(Path(folder).glob("engine-*.json")):
        try:
            doc = json.loads(path.read_text())
            if isinstance(doc, dict) and doc.get("engine", "torch") != "torch":
                continue
            rescore(doc)  # fails here, not on the page, if a stored case no longer builds
            docs.append(doc)
        except (OSError, ValueError, KeyError, TypeError) as e:
            problems.append(f"{path.name}: cannot be read as an engine run ({e})")
    return docs, problems


def tracker_rows(docs: list[dict]) -> list[dict]:
    """FSDP cases where PyTorch's FSDPMemTracker ran: its peak next to the ledger's and the
    measured one (bytes), per case (rank 0; FSDP ranks are alike)."""
    out = []
    for doc in docs:
        for entry in doc["measurements"]:
            r0 = entry["ranks"][0]
            est = r0.get("fsdp_tracker_peak", {}).get("Total")
            if not est:
                continue
            case = case_from_dict(entry["spec"])
            pred = predicted_rank(predict(case), r0["coords"]["pp"], r0.get("inputs", 0))
            out.append({"case": case.name, "scale": doc["scale"], "world": case.world,
                        "measured_bytes": r0["peak_live"], "memledger_bytes": pred["peak_allocated"],
                        "fsdpmemtracker_bytes": est})
    return out
