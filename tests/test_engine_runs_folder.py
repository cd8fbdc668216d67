"""The torch engine's reader of a validation folder takes its own files only: another engine's
stored run (torchtitan, Megatron-Core) is that engine's to re-predict, not a broken torch run."""
import json
import shutil
from pathlib import Path

from memledger.engine.compare import load_runs

ROOT = Path(__file__).resolve().parents[1] / "validation"


def test_other_engines_files_are_left_to_their_sections(tmp_path):
    for name in ("engine-cpu.json", "engine-torchtitan.json", "engine-megatron-core.json"):
        shutil.copy(ROOT / name, tmp_path / name)
    docs, problems = load_runs(tmp_path)
    assert problems == [] and [d["engine"] for d in docs] == ["torch"]


def test_a_broken_torch_run_is_still_named(tmp_path):
    (tmp_path / "engine-cpu.json").write_text(json.dumps({"engine": "torch", "measurements": 1}))
    docs, problems = load_runs(tmp_path)
    assert docs == [] and len(problems) == 1 and problems[0].startswith("engine-cpu.json")
