"""Predicted vs measured, row by row, with the relative error the accuracy bar is judged on.

Bar (issue "Truth"): weights, gradients, optimizer states within 0.5%; activations within 3%;
peak_allocated within 10%. The prediction for peak_allocated adds what the environment holds
outside the model — the measured cuBLAS workspace and the input ids/labels — never a fudge.
"""
from __future__ import annotations

from memledger.validation.cases import Case, predict

TOLERANCE = {"weights": 0.005, "gradients": 0.005, "optimizer": 0.005, "activations": 0.03,
             "peak_allocated": 0.10}


def predicted_rows(case: Case, workspace_bytes: int, inputs_bytes: int,
                   device: str = "cuda") -> dict[str, int]:
    led = predict(case, device)
    r = led.ranks[0]
    return {"weights": r.rows["weights"], "gradients": r.rows["gradients"],
            "optimizer": r.rows["optimizer"], "activations": r.rows["activations"],
            "peak_allocated": r.peak_allocated_bytes + workspace_bytes + inputs_bytes}


def compare(case: Case, measured: dict, env: dict, workspace_bytes: int = 0) -> list[dict]:
    """One record per row that was measured: predicted, measured, relative error, verdict."""
    device = "cuda" if env.get("device") == "cuda" else "cpu"
    pred = predicted_rows(case, workspace_bytes, measured.get("inputs", 0), device)
    out = []
    for row, tol in TOLERANCE.items():
        if row not in measured:
            continue
        m, p = measured[row], pred[row]
        err = (p - m) / m if m else 0.0
        out.append({"case": case.name, "row": row, "predicted_bytes": p, "measured_bytes": m,
                    "rel_error": err, "tolerance": tol, "ok": abs(err) <= tol,
                    "device": env.get("gpu", env.get("device", "cpu")),
                    "measured_on": "cuda" if env.get("device") == "cuda" else "cpu",
                    "seq": case.seq, "micro_batch": case.micro_batch,
                    "micro_batches": case.micro_batches, "precision": case.precision,
                    "optimizer": case.optimizer, "attention": case.attention,
                    "recompute": case.recompute, "finetune": case.finetune.mode})
    return out


def worst_by_row(records: list[dict]) -> dict[str, float]:
    worst: dict[str, float] = {}
    for r in records:
        worst[r["row"]] = max(worst.get(r["row"], 0.0), abs(r["rel_error"]))
    return worst


def rescore(doc: dict) -> list[dict]:
    """Records for stored measurements, predicted by the ledger as it is now. Measurements are
    facts of a run; predictions are re-derived, so a stored GPU run keeps checking the model."""
    from memledger.validation.cases import CPU_CASES, FINETUNE_CPU_CASES, GPU_CASES
    by_name = {c.name: c for c in GPU_CASES + CPU_CASES + FINETUNE_CPU_CASES}
    env = doc["environment"]
    ws = env.get("cublas_workspace_bytes", 0)
    records = []
    for m in doc["measurements"]:
        case = by_name.get(m["case"])
        if case is not None:
            records += compare(case, m, env, ws)
    return records
