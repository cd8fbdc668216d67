"""This tree's planner sweep against another tree's (an older commit), alternated.

    git worktree add /tmp/base <commit>
    python benchmarks/ab/bench_tree_ab.py --base /tmp/base [--pairs 6] [--sweeps 3] [--numpy]

Each pair runs the DeepSeek-V3 / 2,048 H100 sweep (plan + top-20, `bench_planner.run_case`)
`--sweeps` times in a fresh process from each tree — the compiled pass loaded first, or numpy
alone with `--numpy` — the order flipped every pair, so both see the same drift of a shared
machine. Reports each tree's per-process medians and the median of the per-pair ratios (this
tree / base). The answers are compared: a change that is only faster must give the same one.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench_pages_ab import ROOT, child


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, help="the other tree (a worktree)")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--sweeps", type=int, default=3)
    ap.add_argument("--numpy", action="store_true", help="numpy only (no compiled pass)")
    args = ap.parse_args()
    if args.base is None:  # `make bench` runs every benchmark bare: there is no other tree
        print("bench_tree_ab: no --base tree given, nothing to compare (see its docstring)")
        return 0
    if not (args.base / "memledger" / "planner").is_dir():
        ap.error(f"--base {args.base}: not a memledger tree")
    trees = {"this tree": ROOT, "base": args.base.resolve()}
    med = {k: [] for k in trees}
    answers = set()
    for i in range(args.pairs):
        for label in list(trees)[:: 1 if i % 2 == 0 else -1]:
            r = child(False, args.sweeps, trees[label], not args.numpy)
            med[label].append(statistics.median(r["times"]))
            answers.add(r["answer"])
    if len(answers) != 1:
        raise SystemExit(f"the answers differ: {answers}")
    ratios = [a / b for a, b in zip(med["this tree"], med["base"])]
    print(f"DeepSeek-V3 / 2,048 H100 sweep, {'numpy' if args.numpy else 'compiled pass'}, "
          f"{args.pairs} pairs of processes, median of {args.sweeps} sweeps each:")
    for label, v in med.items():
        print(f"  {label:9s} " + " ".join(f"{t:.3f}" for t in v) + " s")
    print("  ratio     " + " ".join(f"{r:.2f}" for r in ratios)
          + f" (median {statistics.median(ratios):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
