"""Measure torch.distributed.pipelining's receive buffers and peaks over several schedules and
micro-batch counts (gloo CPU processes), into tests/data/engine_pp_buffers.json.

    python benchmarks/engine_pp_buffers.py        # 7 cases, about 2 minutes on 2 cores

tests/test_torch_pipelining_measured.py re-predicts the stored file with the current ledger
(docs/engine-validation.md, item 7). Per-op timelines are dropped to keep the file small.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

CASES = ("pp=2,m=3,schedule=1f1b", "pp=2,m=6,schedule=1f1b", "pp=4,m=4,schedule=1f1b",
         "pp=2,m=2,schedule=gpipe", "pp=4,m=5,schedule=gpipe",
         "pp=2,vpp=2,m=2,schedule=interleaved", "pp=2,vpp=2,m=6,schedule=interleaved")
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "engine_pp_buffers.json"
sys.path.insert(0, str(ROOT))  # this checkout's memledger (spawned ranks inherit it via PYTHONPATH)


def main() -> None:
    import os
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    from memledger.cli.engine_cmd import environment
    from memledger.engine.cases import case_from_text, case_to_dict
    from memledger.engine.workers import run_case
    doc = {"engine": "torch", "scale": "cpu", "environment": environment("cpu"),
           "command": "python benchmarks/engine_pp_buffers.py", "measurements": []}
    for text in CASES:
        case = case_from_text(text)
        ranks = run_case(case, timeout_s=300)
        for r in ranks:
            r.pop("timeline", None)
        doc["measurements"].append({"case": case.name, "spec": case_to_dict(case), "ranks": ranks})
    OUT.write_text(json.dumps(doc, indent=1))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
