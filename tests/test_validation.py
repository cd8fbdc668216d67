"""Truth: the ledger against real training steps.

The H200 run (validation/validation-cuda.json: torch 2.11, transformers 5.17, 18 cases) is
re-predicted with the current ledger on every test run, so the model stays honest without a GPU.
The CPU path of `memledger validate` runs for real on a tiny model.
"""
import json
from pathlib import Path

import pytest

from memledger.cli import main
from memledger.validation.report import TOLERANCE, rescore, worst_by_row

ROOT = Path(__file__).resolve().parents[1]
H200 = json.loads((ROOT / "validation" / "validation-cuda.json").read_text())


def test_h200_run_covers_dense_moe_and_mla_models_several_recipes_and_recompute():
    cases = {m["case"] for m in H200["measurements"]}
    assert len(cases) >= 12
    for family in ("llama", "mixtral", "qwen3-moe", "deepseek-v3"):
        assert any(c.startswith(family) for c in cases)
    for feature in ("amp", "mixed16", "muon", "full-recompute", "eager", "m=4", "s8k"):
        assert any(feature in c for c in cases), feature
    assert H200["environment"]["gpu"] == "NVIDIA H200"


@pytest.mark.parametrize("row", list(TOLERANCE))
def test_every_h200_case_is_within_the_accuracy_bar(row):
    records = [r for r in rescore(H200) if r["row"] == row]
    assert len(records) == len(H200["measurements"])
    misses = [(r["case"], round(100 * r["rel_error"], 2)) for r in records if not r["ok"]]
    assert misses == [], f"{row} outside ±{100 * TOLERANCE[row]}%"


def test_static_rows_match_the_h200_to_a_twentieth_of_a_percent():
    worst = worst_by_row(rescore(H200))
    assert max(worst["weights"], worst["gradients"], worst["optimizer"]) < 0.0005


@pytest.mark.torch
def test_validate_on_cpu_runs_a_tiny_model_and_matches(tmp_path, capsys):
    pytest.importorskip("transformers")
    rc = main(["validate", "--device", "cpu", "--cases", "llama-tiny bf16,deepseek-v3-tiny bf16",
               "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "validation-cpu.json").read_text())
    assert doc["environment"]["device"] == "cpu"
    rows = {r["row"] for r in doc["records"]}
    assert rows == {"weights", "gradients", "optimizer", "activations"}  # no allocator peak on CPU
    assert all(abs(r["rel_error"]) < 0.001 for r in doc["records"])


def test_rescore_of_a_bad_file_exits_2(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    assert main(["validate", "--rescore", str(bad)]) == 2
