"""Small pages against numpy's huge-page hint: the planner sweep in fresh processes, alternated.

    python benchmarks/ab/bench_pages_ab.py [--pairs 4] [--sweeps 4]

Each process loads the compiled pass, then runs the DeepSeek-V3 / 2,048 H100 sweep (plan +
top-20) `--sweeps` times and prints each wall time. "small pages" is the shipped planner
(`memledger/planner/sweep/memhint.py` turns numpy's `madvise(MADV_HUGEPAGE)` hint off while a search
runs); "huge-page hint" is the same with that switch disabled, i.e. numpy's default. The two
kinds alternate so that both see the same drift of a shared machine. Before them, a probe of the
machine: filling a fresh 256 MB array four times in one process, hint on and off.
Where memory comes from changes, never a value: the answers are compared.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import time, numpy as np
from numpy._core.multiarray import _set_madvise_hugepage
out = {}
for hint in (True, False):
    _set_madvise_hugepage(hint)
    ts = []
    for _ in range(4):
        t = time.perf_counter(); a = np.empty(32 * 1024 * 1024); a.fill(1.0)
        ts.append(time.perf_counter() - t); del a
    out[str(hint)] = ts
print(__import__("json").dumps(out))
"""

CHILD = """
import json, sys
sys.path[:0] = [{root!r}, {root!r} + "/benchmarks"]
from bench_planner import CASES, run_case
from memledger.planner.sweep import fused, memhint
if {huge}:
    memhint._set_hint = None  # numpy's default: the hint stays on
fused.kernel()
runs = [run_case(CASES["DeepSeek-V3, 2048 x H100"], {compiled}) for _ in range({sweeps})]
print(json.dumps({{"times": [r["sweep_s"] for r in runs], "answer": repr(runs[-1]["answer"])}}))
"""


def child(huge: bool, sweeps: int, root: Path = ROOT, compiled: bool = True) -> dict:
    """One fresh process running the DeepSeek-V3 sweep `sweeps` times from the tree `root`
    (also `bench_tree_ab.py`'s child)."""
    code = CHILD.format(root=str(root), huge=huge, sweeps=sweeps, compiled=compiled)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--sweeps", type=int, default=4)
    args = ap.parse_args()
    probe = json.loads(subprocess.run([sys.executable, "-c", PROBE], check=True,
                                      capture_output=True, text=True).stdout)
    for hint, ts in probe.items():
        print(f"fill 256 MB, hint {'on ' if hint == 'True' else 'off'}: "
              + " ".join(f"{t:.3f}" for t in ts) + " s")
    runs = {"small pages": [], "huge-page hint": []}
    for _ in range(args.pairs):
        for label in runs:
            runs[label].append(child(label == "huge-page hint", args.sweeps))
    answers = {json.dumps(r["answer"]) for rs in runs.values() for r in rs}
    if len(answers) != 1:
        raise SystemExit(f"the answers differ: {answers}")
    print(f"DeepSeek-V3 / 2,048 H100 sweep, {args.pairs} processes each, {args.sweeps} sweeps "
          "a process (first sweep | all sweeps):")
    for label, rs in runs.items():
        first = [r["times"][0] for r in rs]
        every = [t for r in rs for t in r["times"]]
        print(f"  {label:15s} first {min(first):.3f}–{max(first):.3f} s "
              f"(median {statistics.median(first):.3f}) | all {min(every):.3f}–{max(every):.3f}"
              f" s (median {statistics.median(every):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
