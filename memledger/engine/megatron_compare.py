"""Megatron-Core engine runs re-predicted by the ledger, rank by rank and row by row (pure: no
torch).

Each stored measurement keeps its case (`megatron_cases.MegatronCase`); the prediction is
re-derived from the ledger as it is now every time the file is read (`ledger_config`: profile
megatron-local, as the cases run the local layer spec; precision megatron, loop megatron,
zero=1). Bars (issue 27): static rows within 0.5 %, activations within 3 %, peak allocated
within 5 %. The predicted peak is the ledger's
peak_allocated_bytes of the rank plus the token, label and position ids the step keeps alive
(measured), the peak outside gloo's reduce-scatter copy (megatron_core.py). Per-layer
activations (the largest layer's saved tensors) are compared to the ledger's dense- or moe-layer
items ÷ layers. MoE cases compare the mean over their ranks (`routing_mean`): the router's
choice is not balanced rank by rank, the ledger's routing is.
"""
from __future__ import annotations

from dataclasses import asdict

from memledger.engine.compare import _rel
from memledger.engine.megatron_cases import MegatronCase, ledger_config

TOLERANCE = {"weights": 0.005, "gradients": 0.005, "optimizer": 0.005, "activations": 0.03,
             "activations_per_layer": 0.03, "peak_allocated": 0.05}


def case_to_dict(case: MegatronCase) -> dict:
    return asdict(case)


def case_from_dict(d: dict) -> MegatronCase:
    return MegatronCase(**d)


def predict(case: MegatronCase, profile: str | None = None):
    """The case's ledger; `profile`: another activation profile than the local spec's (the
    tests compare it with Transformer Engine's `megatron`)."""
    from dataclasses import replace

    from memledger.ledger import build_ledger
    from memledger.model.hf_config import from_hf_config
    from memledger.specs import ParallelSpec, TrainSpec
    from memledger.specs.runtime import RuntimeSpec
    cfg = ledger_config(case)
    model = from_hf_config(cfg["model"]["hf_config"])
    if case.shared_ffn:  # Megatron's ungated shared expert, which a Mixtral config cannot say
        model = replace(model, moe=replace(model.moe, n_shared=1, shared_ffn=case.shared_ffn))
    train = {**cfg["train"], **({"profile": profile} if profile else {})}
    return build_ledger(model, ParallelSpec(**cfg["parallel"]),
                        TrainSpec(**train), RuntimeSpec(**cfg["runtime"]))


def layer_activation_bytes(rank, n_layers: int, kind: str = "dense") -> int:
    """The ledger's activations of one decoder layer and micro-batch on this rank (its
    dense- or moe-layer items are summed over the stage's layers and the micro-batches it
    holds)."""
    total = sum(it.bytes for it in rank.items
                if it.row == "activations" and it.name.startswith(f"{kind} layers /"))
    return total // (n_layers * max(1, sum(n for _s, n in rank.in_flight)))


def routing_mean(case: MegatronCase, ranks: list[dict]) -> list[dict]:
    """MoE cases: each rank's routed rows are what the router chose (8 experts, random weights:
    not balanced); the ledger predicts balanced routing, which is exactly the mean over the
    expert-parallel group (no token is dropped: the group's rows are ep·T·K in every layer).
    Every rank here sits in one symmetric layout (pp = 1), so the rows activations,
    activations_per_layer and peak_allocated are compared as the mean over the case's ranks."""
    if not case.experts:
        return ranks
    n = len(ranks)
    layers = [sum(col) // n for col in zip(*(r["activations_per_layer"] for r in ranks))]
    mean = {k: sum(r[k] for r in ranks) // n for k in ("activations", "peak_live")}
    return [{**r, **mean, "activations_per_layer": layers} for r in ranks]


def compare(case: MegatronCase, ranks: list[dict], led=None) -> list[dict]:
    led = led or predict(case)
    out = []
    kind = "moe" if case.experts else "dense"
    for meas in routing_mean(case, ranks):
        r = led.ranks[meas.get("pp_rank", 0)]  # the ledger's ranks are pipeline stages
        per_layer = max(meas["activations_per_layer"])
        pred = {"weights": r.rows["weights"], "gradients": r.rows["gradients"],
                "optimizer": r.rows["optimizer"], "activations": r.rows["activations"],
                "activations_per_layer": layer_activation_bytes(r, case.layers // case.pp, kind),
                "peak_allocated": r.peak_allocated_bytes + meas["inputs"]}
        got = {**{k: meas[k] for k in ("weights", "gradients", "optimizer", "activations")},
               "activations_per_layer": per_layer, "peak_allocated": meas["peak_live"]}
        out += [{"case": case.name, "rank": meas["rank"], "row": row,
                 "predicted_bytes": pred[row], "measured_bytes": got[row],
                 "rel_error": _rel(pred[row], got[row]), "tolerance": tol,
                 "ok": abs(_rel(pred[row], got[row])) <= tol}
                for row, tol in TOLERANCE.items()
                # under full recompute a layer keeps nothing of its own (the checkpoint keeps its
                # input, outside the layer's forward): the activations row covers it
                if not (row == "activations_per_layer" and case.recompute == "full")]
        if case.pp > 1:
            held = {str(s): n for s, n in r.in_flight}
            out.append({"case": case.name, "rank": meas["rank"], "row": "held",
                        "predicted_bytes": sum(held.values()), "measured_bytes": meas["held"],
                        "rel_error": _rel(sum(held.values()), meas["held"]), "tolerance": 0.0,
                        "ok": sum(held.values()) == meas["held"]})
    return out


def rescore(doc: dict) -> list[dict]:
    out = []
    for entry in doc["measurements"]:
        out += compare(case_from_dict(entry["spec"]), entry["ranks"])
    return out
