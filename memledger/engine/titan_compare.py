"""torchtitan engine runs re-predicted by the ledger, row by row (pure: no torch).

Each stored measurement keeps its case (torchtitan config, layout) and the memledger
configuration that spells it (`titan_cases.ledger_config`); the prediction is re-derived from
the ledger as it is now every time the file is read. Bars (issue 27): static rows within 0.5 %,
activations within 3 %, peak allocated within 5 %. The predicted peak is the ledger's
peak_allocated_bytes of rank 0 plus the token and label ids the step keeps alive (measured).
"""
from __future__ import annotations

from memledger.engine.compare import _rel
from memledger.engine.titan_cases import TitanCase, ledger_config
from memledger.ledger.static.titan_buffers import NAMES as BUFFER_NAMES

TOLERANCE = {"weights": 0.005, "gradients": 0.005, "optimizer": 0.005, "activations": 0.03,
             "peak_allocated": 0.05}


def case_to_dict(case: TitanCase) -> dict:
    from dataclasses import asdict
    return {k: (list(map(list, v)) if k == "hf_config" else v) for k, v in asdict(case).items()}


def case_from_dict(d: dict) -> TitanCase:
    d = dict(d)
    d["hf_config"] = tuple(tuple(kv) for kv in d.get("hf_config", ()))
    return TitanCase(**d)


def case_model(case: TitanCase):
    """The ModelSpec the case names: its preset, else its config.json pairs."""
    from memledger.model.hf_config import from_hf_config
    from memledger.model.presets import model as preset
    return preset(case.preset) if case.preset else from_hf_config(dict(case.hf_config))


def predict(case: TitanCase):
    from memledger.ledger import build_ledger
    from memledger.specs import ParallelSpec, TrainSpec
    from memledger.specs.runtime import RuntimeSpec
    m = case_model(case)
    cfg = ledger_config(case, m.n_layers, moe=m.moe is not None)
    return build_ledger(m, ParallelSpec(**cfg["parallel"]), TrainSpec(**cfg["train"]),
                        RuntimeSpec(**cfg["runtime"]))


def compare(case: TitanCase, meas: dict, led=None) -> list[dict]:
    led = led or predict(case)
    r = led.ranks[case.pp_rank]
    # the measured weights are parameters; the RoPE cache buffers count in the peak only
    buffers = sum(i.bytes for i in r.items if i.name in BUFFER_NAMES)
    pred = {"weights": r.rows["weights"] - buffers, "gradients": r.rows["gradients"],
            "optimizer": r.rows["optimizer"], "activations": r.rows["activations"],
            "peak_allocated": r.peak_allocated_bytes + meas.get("inputs", 0)}
    got = {**{k: meas[k] for k in ("weights", "gradients", "optimizer", "activations")},
           "peak_allocated": meas["peak_live"]}
    return [{"case": case.name, "row": row, "predicted_bytes": pred[row],
             "measured_bytes": got[row], "rel_error": _rel(pred[row], got[row]),
             "tolerance": tol, "ok": abs(_rel(pred[row], got[row])) <= tol}
            for row, tol in TOLERANCE.items()]


def row_verdict(entry: dict, row: str) -> tuple[bool, str]:
    """One stored entry's row re-predicted: within its bar, and the line that says so."""
    rec = next(r for r in compare(case_from_dict(entry["spec"]), entry["measured"])
               if r["row"] == row)
    return rec["ok"], (f"{entry['case']} {row}: measured {rec['measured_bytes']:,} predicted "
                       f"{rec['predicted_bytes']:,} ({100 * rec['rel_error']:+.2f}%, bar "
                       f"{100 * rec['tolerance']:g}%)")


FAKE_VS_REAL = ("weights", "gradients", "optimizer", "activations", "base_live", "peak_live")


def fake_vs_real(entry: dict) -> list[dict]:
    """A gloo entry's every rank against the same case under fake mode (rank 0 standing for
    all): real − fake bytes per row; the harness's claim is 0 everywhere."""
    fakes = entry.get("fakes") or [entry["fake"]]  # one per pp rank (meshes are pp-major)
    per_pp = len(entry["ranks"]) // len(fakes)
    return [{"case": entry["case"], "rank": r["rank"], "row": row,
             "fake_bytes": fakes[r["rank"] // per_pp][row], "real_bytes": r[row],
             "diff_bytes": r[row] - fakes[r["rank"] // per_pp][row]}
            for r in entry["ranks"] for row in FAKE_VS_REAL]


def rescore(doc: dict) -> list[dict]:
    out = []
    for entry in doc["measurements"]:
        out += compare(case_from_dict(entry["spec"]), entry["measured"])
    return out
