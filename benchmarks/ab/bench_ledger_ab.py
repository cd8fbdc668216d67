"""This tree's cold full ledger against another tree's, in alternated fresh processes.

    python benchmarks/ab/bench_ledger_ab.py --base DIR [--pairs 6]

For each case of `bench_ledger.py`, each process builds the ledger cold (every cache cleared)
50 times and reports the median process CPU time; the trees alternate, the order flipped every
pair, so both see the same drift of a shared machine. Prints each tree's median over the pairs
and the ratio this / base, and the best (least disturbed) of each.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
CHILD = """
import json, sys, time
sys.path.insert(0, {tree!r}); sys.path.insert(0, {tree!r} + '/benchmarks')
import bench_ledger as b
print(json.dumps({{k: b.bench(c, clock=time.process_time) for k, c in b.CASES.items()}}))
"""


def run(tree: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD.format(tree=str(tree))], check=True,
                         capture_output=True, text=True, cwd=tree).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, type=Path)
    ap.add_argument("--pairs", type=int, default=6)
    a = ap.parse_args()
    runs: dict[str, list[dict]] = {"this": [], "base": []}
    for i in range(a.pairs):
        for name in (("this", "base") if i % 2 == 0 else ("base", "this")):
            runs[name].append(run(HERE if name == "this" else a.base.resolve()))
    for case in runs["this"][0]:
        this = statistics.median(r[case] for r in runs["this"])
        base = statistics.median(r[case] for r in runs["base"])
        best = (min(r[case] for r in runs["this"]), min(r[case] for r in runs["base"]))
        print(f"{case}: median this {this:.2f} / base {base:.2f} ms CPU (ratio {this / base:.2f}); "
              f"best {best[0]:.2f} / {best[1]:.2f} (ratio {best[0] / best[1]:.2f})")


if __name__ == "__main__":
    main()
