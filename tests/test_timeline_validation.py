"""The predicted timeline against a real training step, event by event (CPU, tiny models).

An allocation tracker (memledger.validation.tracker, a TorchDispatchMode following storages)
measures the bytes alive after each decoder layer's forward and backward, each loss, the
optimizer step and zero_grad; the ledger's timeline predicts each of them. Loops covered:
zero_grad to None or not, AdamW foreach / fused / for-loop, HF gradient checkpointing, the
model's fp32 loss or a chunked (checkpointed) one, dense, MoE (fused 3-D experts) and MLA+MoE."""
from dataclasses import replace

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from memledger.validation.cases import CPU_CASES  # noqa: E402
from memledger.validation.timeline_measure import LOOP_RUNS, compare  # noqa: E402

CASES = {c.name: c for c in CPU_CASES}
RUNS = {r.name: r for r in LOOP_RUNS}
CHECKPOINTED = replace(CASES["llama-tiny bf16"], name="llama-tiny bf16 checkpointing",
                       recompute="full")
GRID = [(CASES["llama-tiny bf16"], RUNS[r]) for r in RUNS] + [
    (CHECKPOINTED, RUNS["set_to_none foreach"]),
    (CASES["mixtral-tiny bf16"], RUNS["set_to_none fused"]),
    (CASES["deepseek-v3-tiny bf16"], RUNS["persistent foreach"]),
    (CASES["qwen3-moe-tiny bf16"], RUNS["set_to_none fused chunked-loss"]),
]


@pytest.mark.parametrize("case,run", GRID, ids=[f"{c.name} | {r.name}" for c, r in GRID])
def test_every_event_within_3_percent_and_the_peak_within_10(case, run):
    c = compare(case, run)
    n_layers = case.config["num_hidden_layers"]
    labels = {k for k, _, _ in c["rows"]}
    assert {f"F0.{i}" for i in range(n_layers)} | {f"B0.{i}" for i in range(n_layers)} | \
        {"loss0", "optimizer-step", "zero-grad"} <= labels
    misses = [(k, round(100 * (p - m) / m, 2)) for k, p, m in c["rows"] if abs(p - m) > 0.03 * m]
    assert not misses
    assert abs(c["peak_predicted"] - c["peak_measured"]) <= 0.10 * c["peak_measured"], c["peak_at"]


def test_set_to_none_frees_every_gradient_and_persistent_keeps_them():
    case = CASES["llama-tiny bf16"]
    on = dict(compare(case, RUNS["set_to_none foreach"])["marks"])
    off = dict(compare(case, RUNS["persistent foreach"])["marks"])
    grads = off["zero-grad"] - on["zero-grad"]
    assert grads == off["F0.0"] - on["F0.0"] > 0  # alive from the start of the step, or not


def test_the_stored_timeline_runs_are_re_predicted_within_the_bars():
    import json
    from pathlib import Path

    from memledger.validation.timeline_report import GRID, rescore_timeline
    doc = json.loads((Path(__file__).parents[1] / "validation" / "timeline-cpu.json").read_text())
    records = rescore_timeline(doc)
    assert len(records) == len(GRID) == 29
    assert all(r["ok"] for r in records), [(r["case"], r["loop"]) for r in records if not r["ok"]]
    assert max(r["worst_mark"] for r in records) < 0.03
    assert max(abs(r["peak_error"]) for r in records) < 0.05  # the aim


def test_muon_state_with_fused_3d_experts_is_what_the_hf_loop_predicts():
    # torch.optim.Muon takes 2-D parameters only: transformers' 3-D expert tensors go to AdamW
    from memledger import ParallelSpec, build_ledger
    from memledger.model.hf_config import from_hf_config
    from memledger.specs.runtime import RuntimeSpec
    from memledger.validation.measure import Stepper, _batches, _forward, build_model
    case = replace(CASES["qwen3-moe-tiny bf16"], optimizer="muon")
    model = build_model(case, "cpu")
    stepper = Stepper(model, case)
    for loss in _forward(model, case, _batches(case, model.config.vocab_size, "cpu")):
        loss.backward()
    stepper.step()
    measured = stepper.state_bytes()

    def predicted(experts):
        led = build_ledger(from_hf_config(case.config), ParallelSpec(schedule="gpipe"),
                           case.train("cpu"), RuntimeSpec(loop="pytorch", muon_experts=experts))
        return led.ranks[0].rows["optimizer"]
    assert abs(predicted("adamw") - measured) <= 64  # the optimizers' scalar step counters
    assert predicted("split") < 0.7 * measured
